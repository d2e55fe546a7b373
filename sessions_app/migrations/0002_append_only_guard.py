"""The database itself refuses UPDATE and DELETE on events and entries.

The one exception is `session_delete`, which sets the transaction-local setting
`strand.deleting_session` to the id of the session it deletes; rows of that session, and only
those, may then be deleted inside that transaction. UPDATE is never allowed.
"""

from __future__ import annotations

from django.db import migrations

GUARD = """
CREATE OR REPLACE FUNCTION strand_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE'
       AND OLD.session_id::text = current_setting('strand.deleting_session', true) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'strand: % on % is refused: the session log is append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;
"""

TABLES = ("sessions_app_event", "sessions_app_entry")


def _create(table: str) -> str:
    return (
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        "FOR EACH ROW EXECUTE FUNCTION strand_append_only();"
    )


def _drop(table: str) -> str:
    return f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};"


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0001_initial")]

    operations = [
        migrations.RunSQL(GUARD, "DROP FUNCTION IF EXISTS strand_append_only() CASCADE;"),
        *[migrations.RunSQL(_create(t), _drop(t)) for t in TABLES],
    ]
