"""API tokens, rate limit counters, and the request audit view.

`strand_request_audit` lists the `request/header` and `request/sent` events of every
session with the session's owner, and the provider and model they ran under: a header
carries its own, a manifest takes them from the header it names (`header_seq`). The view
reads the event log; it stores nothing.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

VIEW = r"""
CREATE VIEW strand_request_audit AS
SELECT
    e.id,
    e.session_id,
    s.owner_id,
    e.seq,
    e.type,
    e.time,
    e.turn,
    e.step,
    h.seq AS header_seq,
    COALESCE(h.data ->> 'provider', '') AS provider,
    COALESCE(h.data ->> 'model', '') AS model,
    CASE WHEN jsonb_typeof(e.data -> 'token_estimate') = 'number'
         THEN (e.data ->> 'token_estimate')::numeric::bigint END AS token_estimate
FROM sessions_app_event e
JOIN sessions_app_session s ON s.id = e.session_id
LEFT JOIN sessions_app_event h
  ON h.session_id = e.session_id
 AND h.type = 'request/header'
 AND h.seq = CASE
        WHEN e.type = 'request/header' THEN e.seq
        WHEN jsonb_typeof(e.data -> 'header_seq') = 'number'
        THEN (e.data ->> 'header_seq')::numeric::bigint
     END
WHERE e.type IN ('request/header', 'request/sent')
"""


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0003_append_function"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunSQL(VIEW, reverse_sql="DROP VIEW IF EXISTS strand_request_audit"),
        migrations.CreateModel(
            name="RequestAudit",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("seq", models.BigIntegerField()),
                ("type", models.CharField(max_length=64)),
                ("time", models.DateTimeField()),
                ("turn", models.IntegerField(null=True)),
                ("step", models.IntegerField(null=True)),
                ("header_seq", models.BigIntegerField(null=True)),
                ("provider", models.TextField()),
                ("model", models.TextField()),
                ("token_estimate", models.BigIntegerField(null=True)),
            ],
            options={
                "verbose_name": "model request",
                "verbose_name_plural": "model requests (audit)",
                "db_table": "strand_request_audit",
                "ordering": ["-time", "session", "-seq"],
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="ApiToken",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100)),
                ("prefix", models.CharField(max_length=16)),
                ("digest", models.CharField(max_length=64, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("last_used_at", models.DateTimeField(blank=True, null=True)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="strand_tokens",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
            },
        ),
        migrations.CreateModel(
            name="RateCounter",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("scope", models.CharField(max_length=32)),
                ("window_start", models.DateTimeField()),
                ("count", models.IntegerField(default=0)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("user", "scope", "window_start"),
                        name="ratecounter_user_scope_window",
                    )
                ],
            },
        ),
    ]
