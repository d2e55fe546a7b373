from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0016_workspace_snapshot_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="origin",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.AddField(
            model_name="session",
            name="delegation_depth",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        # A parent's children, counted for the cap on children per session.
        migrations.AddIndex(
            model_name="session",
            index=models.Index(
                condition=models.Q(("origin", "subagent")),
                fields=["parent"],
                name="session_subagent_parent",
            ),
        ),
    ]
