from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from sessions_app.api import api, otlp

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    # OTLP/HTTP's standard path, where an exporter pointed at Strand sends its spans.
    path("v1/traces", otlp.traces, name="otlp-traces"),
    path("", include("sessions_app.web.urls")),
]
