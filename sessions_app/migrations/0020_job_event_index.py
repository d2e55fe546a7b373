from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0019_tree_entry_children_seq"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(("type__in", ["job/started", "job/ended"])),
                fields=["session", "seq"],
                name="event_job_seq",
            ),
        ),
    ]
