"""`strand_append` version 4 (sql/strand_append_v4.sql): version 3's checks and writes with
less work per call. A batch of one event (the runtime's usual append) is read with plain
expressions and written with single-row INSERTs; the result is one row of OUT parameters;
the owner's storage row is updated in place rather than upserted. The return type changes
(a row, not a set), so version 3 is dropped first, and reinstalled when migrating back."""

from __future__ import annotations

from django.db import migrations

from sessions_app.store.sql import pinned

V3 = pinned(
    "strand_append_v3.sql", "f0c54c62f930dad14a80556656fca2a62fb6fe1c36ff7a46f643b14ade0401ba"
)
V4 = pinned(
    "strand_append_v4.sql", "6b349ecf01dcba91c09a6c90f17cf7dbe5a6ebc6eb0fcc2a8168726b1da7ca41"
)

DROP = (
    "DROP FUNCTION strand_append(uuid, bigint, timestamptz, jsonb, int, bigint, text, "
    "bigint, bigint)"
)


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0017_subagents_origin"),
    ]

    operations = [
        migrations.RunSQL([DROP, V4], [DROP, V3]),
    ]
