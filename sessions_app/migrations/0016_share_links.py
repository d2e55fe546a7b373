"""Share links (`sessions_app.services.shares`) and rate counters for callers without an
account, and a trigger that announces a link revoked or deleted to every process.

The trigger sends `NOTIFY strand_accounts, 'share:<id>'` (through migration 0005's
`strand_notify_accounts`, so more than a few hundred rows send one `'*'`) for each link
whose `revoked_at` or `expires_at` changed and for each deleted link: each process's
listener re-checks the guest sockets of those links and closes the ones no longer live
(`sessions_app.live.access`). A trigger covers every writer: the pages, the API, the
admin's action, a session deleted with its links, psql.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

TRIGGERS = """
CREATE OR REPLACE FUNCTION strand_shares_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM strand_notify_accounts(
        'share',
        (SELECT array_agg(b.id::text)
           FROM before_rows b JOIN after_rows a ON a.id = b.id
          WHERE b.revoked_at IS DISTINCT FROM a.revoked_at
             OR b.expires_at IS DISTINCT FROM a.expires_at)
    );
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION strand_shares_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM strand_notify_accounts('share', (SELECT array_agg(id::text) FROM gone));
    RETURN NULL;
END $$;

CREATE TRIGGER strand_shares_updated AFTER UPDATE ON sessions_app_sharelink
REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows FOR EACH STATEMENT
EXECUTE FUNCTION strand_shares_updated();

CREATE TRIGGER strand_shares_deleted AFTER DELETE ON sessions_app_sharelink
REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
EXECUTE FUNCTION strand_shares_deleted();
"""

DROP_TRIGGERS = """
DROP TRIGGER IF EXISTS strand_shares_updated ON sessions_app_sharelink;
DROP TRIGGER IF EXISTS strand_shares_deleted ON sessions_app_sharelink;
DROP FUNCTION IF EXISTS strand_shares_updated();
DROP FUNCTION IF EXISTS strand_shares_deleted();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0012_workspace_blobs"),
        ("sessions_app", "0005_account_change_notify"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="KeyRateCounter",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=100)),
                ("scope", models.CharField(max_length=32)),
                ("window_start", models.DateTimeField()),
                ("count", models.IntegerField(default=0)),
            ],
            options={
                "indexes": [
                    models.Index(fields=["scope", "window_start"], name="keyratecounter_age")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("key", "scope", "window_start"),
                        name="keyratecounter_key_scope_window",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="ShareLink",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("branch", models.CharField(blank=True, default="", max_length=64)),
                ("digest", models.CharField(max_length=64, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("expires_at", models.DateTimeField()),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                ("redact_tool_outputs", models.BooleanField(default=False)),
                ("redact_file_contents", models.BooleanField(default=False)),
                ("redact_system_prompt", models.BooleanField(default=False)),
                ("redact_patterns", models.JSONField(blank=True, default=list)),
                ("view_count", models.BigIntegerField(default=0)),
                (
                    "created_by",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "session",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="share_links",
                        to="sessions_app.session",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-pk"],
                "indexes": [
                    models.Index(fields=["session", "created_at"], name="sharelink_session")
                ],
            },
        ),
        migrations.RunSQL(TRIGGERS, DROP_TRIGGERS),
    ]
