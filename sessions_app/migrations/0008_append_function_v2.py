"""`strand_append` version 2: the batch's fields under readable keys (`schema_version`,
`ignorable`, `entry_id`, `parent_given`, `parent_id`, `orphan`, `path_kind`, `leaf_move`,
`move_to`) instead of v1's `v`, `ign`, `eid`, `pg`, `p`, `o`, `k`, `mv`, `to`. Otherwise the
same function; `sessions_app.store` builds the batch with these keys. Migrating back
reinstalls version 1."""

from __future__ import annotations

from django.db import migrations

from sessions_app.store.sql import pinned

V1 = pinned(
    "strand_append_v1.sql", "4bcd745bcb29512a3d6855865ef3c4b500699e23fabfa4185c892bda4fcd9f0a"
)
V2 = pinned(
    "strand_append_v2.sql", "b3fcdf15cafccb8dfee4284a2421d0b7e6212b016182322d195c8bc2deee3f23"
)


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0007_plural_names")]

    operations = [migrations.RunSQL(V2, V1)]
