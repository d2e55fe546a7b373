"""Websocket routes."""

from __future__ import annotations

from typing import Any

from django.urls import path

from sessions_app.live.consumers import GuestConsumer, SessionConsumer

websocket_urlpatterns: list[Any] = [
    path("ws/sessions/<uuid:session_id>/", SessionConsumer.as_asgi()),
    # A share link's guest (the token is the credential; `live_access.watch_share`).
    path("ws/sessions/shared/<str:token>/", GuestConsumer.as_asgi()),
]
