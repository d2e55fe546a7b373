"""Sessions recorded from another agent's spans before `Session.origin` told them carry
"observed" too, so the composer stays away from them without a query."""

from django.db import migrations

FORWARD = """
UPDATE sessions_app_session AS s SET origin = 'observed'
  FROM sessions_app_observedconversation AS o
 WHERE o.session_id = s.id AND s.origin = ''
"""


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0021_observed_otlp")]

    operations = [migrations.RunSQL(FORWARD, migrations.RunSQL.noop)]
