from django.db import migrations, models


class Migration(migrations.Migration):
    """A parent's children in seq order, so that a window of a wide fan is an index range
    (the (session, parent) index it replaces is this one's prefix)."""

    dependencies = [
        ("sessions_app", "0018_strand_append_v4"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="entry",
            index=models.Index(
                fields=["session", "parent_id", "seq"], name="entry_session_parent_seq"
            ),
        ),
        migrations.RemoveIndex(model_name="entry", name="entry_session_parent"),
    ]
