"""The entry table's large values are kept as they are, uncompressed (`STORAGE EXTERNAL`).

An entry's JSON is stored twice: in the event that added it (the log) and in its entry row
(the tree the views read). Postgres compressed both copies of every value over 2 KB, and
that compression was most of an import's work: 93 MB of tool results took its backend
2.95 s to write as compressed JSONB and 0.85 s as uncompressed JSONB (one COPY of 8,000
entries of 30–60 KB). The log keeps its compressed copy; the tree's copy is read without
being decompressed. The cost is disk: large entries take their full size in the tree.
Rows written before keep the storage they were written with."""

from django.db import migrations

FORWARD = "ALTER TABLE sessions_app_entry ALTER COLUMN data SET STORAGE EXTERNAL"
BACKWARD = "ALTER TABLE sessions_app_entry ALTER COLUMN data SET STORAGE EXTENDED"


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0022_observed_origin")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
