"""The request header in force, found by one index lookup.

A session writes a `request/header` only when its settings change, so in a long session the
one in force can lie at the start of the log; each turn reads it. Without an index of their
own, Postgres found the newest one by reading the session's events back from the end.
"""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0009_request_audit_order")]

    operations = [
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(type="request/header"),
                fields=["session", "seq"],
                name="event_session_header",
            ),
        ),
    ]
