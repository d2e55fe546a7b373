"""The per-user storage quota and `strand_append` version 3.

- `Session.stored_bytes` and `StorageUsage` (one row per owner): the bytes of JSON a
  session's events and entries hold, kept by the append path, so the quota
  (`STRAND_USER_QUOTA_BYTES`) is checked against one row instead of a sum over the log.
  Sessions already stored are counted once here, by the length of their JSON as Postgres
  prints it (a little more than the compact JSON the append path measures).
- `strand_append` version 3 (sql/strand_append_v3.sql): a parent that would close a cycle
  is refused, and each append adds its bytes to the session and its owner and refuses a
  batch past the quota. Its arguments change, so version 2 is dropped first (and
  reinstalled when migrating back).
"""

from __future__ import annotations

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from sessions_app.store.sql import pinned

V2 = pinned(
    "strand_append_v2.sql", "b3fcdf15cafccb8dfee4284a2421d0b7e6212b016182322d195c8bc2deee3f23"
)
V3 = pinned(
    "strand_append_v3.sql", "f0c54c62f930dad14a80556656fca2a62fb6fe1c36ff7a46f643b14ade0401ba"
)

DROP_V2 = "DROP FUNCTION strand_append(uuid, bigint, timestamptz, jsonb, int, bigint, text)"
DROP_V3 = (
    "DROP FUNCTION strand_append(uuid, bigint, timestamptz, jsonb, int, bigint, text, "
    "bigint, bigint)"
)

COUNT_STORED = """
UPDATE sessions_app_session s SET stored_bytes =
    coalesce((SELECT sum(octet_length(e.data::text)) FROM sessions_app_event e
              WHERE e.session_id = s.id), 0)
  + coalesce((SELECT sum(octet_length(n.data::text)) FROM sessions_app_entry n
              WHERE n.session_id = s.id), 0);
INSERT INTO sessions_app_storageusage (owner_id, stored_bytes)
SELECT owner_id, sum(stored_bytes) FROM sessions_app_session GROUP BY owner_id;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("sessions_app", "0010_request_header_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="StorageUsage",
            fields=[
                (
                    "owner",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="strand_storage",
                        serialize=False,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                ("stored_bytes", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.AddField(
            model_name="session",
            name="stored_bytes",
            field=models.BigIntegerField(default=0),
        ),
        migrations.RunSQL(COUNT_STORED, migrations.RunSQL.noop),
        migrations.RunSQL([DROP_V2, V3], [DROP_V3, V2]),
    ]
