"""Reads of one session that do not depend on the planner's statistics.

Every read of the event log and the entry tree names one session. The planner's
statistics on `session_id` describe the sessions that existed at the last ANALYZE: a
session that grew since (the active one, or one just imported) is not among them and is
estimated at about one row. With that estimate Postgres walked a 30,000-entry path with a
hash of the whole session at every step, or through the index on `session_id` alone,
filtering every entry of the session for each parent it looked up (seconds, and minutes
for the list of a branch's requests).

So `session_id` keeps no statistics on these tables: without them the planner takes each
session for a sizeable share of the table (a fixed fraction of its rows), never for one
row, and its plans for a session are the same before and after any ANALYZE. Changing the
column to its own type is how Postgres drops statistics already gathered (no rewrite);
the request audit view reads the column, so it is made again around that change.

The single-column indexes on `session_id` go: the (session, seq) and (session, entry_id)
keys serve every read by session, and they were what the planner misused. New indexes
serve the reads that filtered a whole session's events: the events of given turns, the
session's turns and its model requests.
"""

from __future__ import annotations

import importlib

import django.db.models.deletion
from django.db import migrations, models

AUDIT_VIEW: str = importlib.import_module(
    "sessions_app.migrations.0004_tokens_ratelimit_request_audit"
).VIEW

NO_STATISTICS = f"""
ALTER TABLE sessions_app_entry
    ALTER COLUMN session_id TYPE uuid, ALTER COLUMN session_id SET STATISTICS 0;
DROP VIEW strand_request_audit;
ALTER TABLE sessions_app_event
    ALTER COLUMN session_id TYPE uuid, ALTER COLUMN session_id SET STATISTICS 0;
{AUDIT_VIEW};
"""

DEFAULT_STATISTICS = """
ALTER TABLE sessions_app_entry ALTER COLUMN session_id SET STATISTICS -1;
ALTER TABLE sessions_app_event ALTER COLUMN session_id SET STATISTICS -1;
"""


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0005_account_change_notify")]

    operations = [
        migrations.AlterField(
            model_name="entry",
            name="session",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="entries",
                to="sessions_app.session",
            ),
        ),
        migrations.AlterField(
            model_name="event",
            name="session",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="events",
                to="sessions_app.session",
            ),
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(fields=["session", "turn"], name="event_session_turn"),
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(type="turn/start"),
                fields=["session", "turn"],
                name="event_session_turn_start",
            ),
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(type="request/sent"),
                fields=["session", "seq"],
                name="event_session_request",
            ),
        ),
        migrations.RunSQL(NO_STATISTICS, DEFAULT_STATISTICS),
    ]
