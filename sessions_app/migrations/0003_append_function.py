"""`strand_append`: the append transaction as one server-side function.

`sessions_app.store.append_events` validates and encodes a batch in Python, then calls this
function once: one round trip for the lock, the expected-seq check, the events, the entry
projection, the leaf, the counters and the notification. Errors carry their own SQLSTATEs
(class SA) so that the store can turn each into a precise message. Version 1, with short
keys for the batch's fields; 0008 installs version 2.
"""

from __future__ import annotations

from django.db import migrations

from sessions_app.store.sql import pinned

# The function's text is in sessions_app/store/sql/, pinned to what this migration installed.
FUNCTION = pinned(
    "strand_append_v1.sql", "4bcd745bcb29512a3d6855865ef3c4b500699e23fabfa4185c892bda4fcd9f0a"
)


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0002_append_only_guard")]

    operations = [
        migrations.RunSQL(
            FUNCTION,
            "DROP FUNCTION IF EXISTS strand_append(uuid, bigint, timestamptz, jsonb, int, bigint, text);",
        )
    ]
