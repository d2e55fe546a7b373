"""A GIN index for searching the text of user and assistant messages."""

from __future__ import annotations

from django.db import migrations

from sessions_app.search import message_text_vector

INDEX = (
    "CREATE INDEX IF NOT EXISTS entry_message_text_search ON sessions_app_entry "
    f"USING gin (({message_text_vector()})) "
    "WHERE type = 'message' AND data->'message'->>'role' IN ('user', 'assistant');"
)


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0004_tokens_ratelimit_request_audit")]

    operations = [
        migrations.RunSQL(INDEX, "DROP INDEX IF EXISTS entry_message_text_search;"),
    ]
