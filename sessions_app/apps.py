from __future__ import annotations

from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    # Set here, not derived from `name`: the tables (`sessions_app_event`, ...), the
    # migrations and the permissions carry this label, whatever the package's folders are.
    label = "sessions_app"
    verbose_name = "Strand sessions"
    default_auto_field = "django.db.models.BigAutoField"
