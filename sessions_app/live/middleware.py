"""The websocket stack's session and user, read without channels' costs on every frame."""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddleware, get_user
from channels.sessions import CookieMiddleware, InstanceSessionWrapper

from sessions_app.live import db as live_db


class SocketAuthMiddleware(AuthMiddleware):
    """channels' AuthMiddleware, reading the session and its user on the websocket database
    threads (`sessions_app.live.db`) instead of queueing every handshake behind Django's one
    thread-sensitive thread."""

    async def resolve_scope(self, scope: Any) -> None:
        scope["user"]._wrapped = await live_db.run(get_user.func, scope, priority=live_db.NEW)


class SocketSessionMiddleware:
    """channels' SessionMiddleware without its wrapper around `send`. The wrapper saves a
    changed session when an HTTP response starts, which a websocket never sends, yet it
    looked into the session for every frame sent: 9% of the CPU of a connect storm."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        wrapper = InstanceSessionWrapper(scope, send)
        await wrapper.resolve_session()
        return await self.inner(wrapper.scope, receive, send)


def SocketAuthMiddlewareStack(inner: Any) -> Any:  # noqa: N802 (named like channels' stack)
    return CookieMiddleware(SocketSessionMiddleware(SocketAuthMiddleware(inner)))
