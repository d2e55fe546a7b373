"""Account changes are announced to every process (see `sessions_app.live.access`).

Triggers, not application code, so that every writer is covered: the sign-out view, the
admin, `changepassword`, a queryset `update()`, psql.

- Deleted Django sessions: `NOTIFY strand_accounts, 'session:<sha256 hex of the key>'`.
- Users whose password, `is_active`, `is_staff` or `is_superuser` changed, and deleted
  users: `NOTIFY strand_accounts, 'user:<id>'`.
- More than `BULK` rows in one statement: one `'*'` (every socket re-checks) instead of a
  flood of notifications.

Statement-level triggers with transition tables: one call per statement, and the many
updates that change none of those columns (`last_login` at every sign-in) notify nothing.
Postgres delivers a notification at commit and drops it on rollback.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import migrations

CHANNEL = "strand_accounts"
BULK = 200
WATCHED_USER_FIELDS = ("password", "is_active", "is_staff", "is_superuser")

NOTIFY_FUNCTION = f"""
CREATE OR REPLACE FUNCTION strand_notify_accounts(kind text, ids text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    one text;
BEGIN
    IF ids IS NULL OR cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    IF cardinality(ids) > {BULK} THEN
        PERFORM pg_notify('{CHANNEL}', '*');
        RETURN;
    END IF;
    FOREACH one IN ARRAY ids LOOP
        PERFORM pg_notify('{CHANNEL}', kind || ':' || one);
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION strand_sessions_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM strand_notify_accounts(
        'session',
        (SELECT array_agg(encode(sha256(convert_to(session_key, 'UTF8')), 'hex')) FROM ended)
    );
    RETURN NULL;
END $$;
"""


def _user_functions(pk: str, columns: list[str]) -> str:
    changed = " OR ".join(f'b."{c}" IS DISTINCT FROM a."{c}"' for c in columns) or "false"
    return f"""
CREATE OR REPLACE FUNCTION strand_accounts_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM strand_notify_accounts(
        'user',
        (SELECT array_agg(b."{pk}"::text)
           FROM before_rows b JOIN after_rows a ON a."{pk}" = b."{pk}"
          WHERE {changed})
    );
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION strand_accounts_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM strand_notify_accounts('user', (SELECT array_agg("{pk}"::text) FROM gone));
    RETURN NULL;
END $$;
"""


def _tables(apps: Any) -> tuple[Any, str]:
    user = apps.get_model(settings.AUTH_USER_MODEL)
    web_session = apps.get_model("sessions", "Session")
    return user, web_session._meta.db_table


def install(apps: Any, schema_editor: Any) -> None:
    user, session_table = _tables(apps)
    quote = schema_editor.quote_name
    user_table = quote(user._meta.db_table)
    names = {f.name: f.column for f in user._meta.concrete_fields}
    columns = [names[f] for f in WATCHED_USER_FIELDS if f in names]
    schema_editor.execute(NOTIFY_FUNCTION)
    schema_editor.execute(_user_functions(user._meta.pk.column, columns))
    schema_editor.execute(
        f"CREATE TRIGGER strand_sessions_ended AFTER DELETE ON {quote(session_table)} "
        "REFERENCING OLD TABLE AS ended FOR EACH STATEMENT "
        "EXECUTE FUNCTION strand_sessions_ended()"
    )
    schema_editor.execute(
        f"CREATE TRIGGER strand_accounts_updated AFTER UPDATE ON {user_table} "
        "REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows FOR EACH STATEMENT "
        "EXECUTE FUNCTION strand_accounts_updated()"
    )
    schema_editor.execute(
        f"CREATE TRIGGER strand_accounts_deleted AFTER DELETE ON {user_table} "
        "REFERENCING OLD TABLE AS gone FOR EACH STATEMENT "
        "EXECUTE FUNCTION strand_accounts_deleted()"
    )


def uninstall(apps: Any, schema_editor: Any) -> None:
    user, session_table = _tables(apps)
    quote = schema_editor.quote_name
    user_table = quote(user._meta.db_table)
    schema_editor.execute(
        f"DROP TRIGGER IF EXISTS strand_sessions_ended ON {quote(session_table)};"
        f"DROP TRIGGER IF EXISTS strand_accounts_updated ON {user_table};"
        f"DROP TRIGGER IF EXISTS strand_accounts_deleted ON {user_table};"
        "DROP FUNCTION IF EXISTS strand_sessions_ended();"
        "DROP FUNCTION IF EXISTS strand_accounts_updated();"
        "DROP FUNCTION IF EXISTS strand_accounts_deleted();"
        "DROP FUNCTION IF EXISTS strand_notify_accounts(text, text[]);"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0004_tokens_ratelimit_request_audit"),
        ("sessions", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [migrations.RunPython(install, uninstall)]
