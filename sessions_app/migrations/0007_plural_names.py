"""Proper plural and singular names in the admin: entries, API tokens."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0006_session_reads"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="apitoken",
            options={"ordering": ["-created_at"], "verbose_name": "API token"},
        ),
        migrations.AlterModelOptions(
            name="entry",
            options={"ordering": ["session", "seq"], "verbose_name_plural": "entries"},
        ),
    ]
