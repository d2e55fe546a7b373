"""Websocket routes."""

from __future__ import annotations

from typing import Any

from django.urls import path

from sessions_app.live.consumers import SessionConsumer

websocket_urlpatterns: list[Any] = [
    path("ws/sessions/<uuid:session_id>/", SessionConsumer.as_asgi()),
]
