"""Page routes."""

from __future__ import annotations

from django.urls import path

from sessions_app import views

urlpatterns = [
    path("", views.home, name="home"),
]
