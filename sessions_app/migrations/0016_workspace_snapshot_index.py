from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0014_share_links"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(("type", "workspace/snapshot")),
                fields=["session", "seq"],
                name="event_snapshot_seq",
            ),
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(("data__full", True), ("type", "workspace/snapshot")),
                fields=["session", "seq"],
                name="event_checkpoint_seq",
            ),
        ),
    ]
