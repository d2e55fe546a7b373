"""Work a server process does once, when it starts serving.

Daphne speaks no ASGI lifespan, so the first connection of any kind (HTTP or websocket)
starts it, in a thread of its own: the request that triggers it does not wait.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any


class RunOnceAtStart:
    """ASGI middleware that runs `job` once, on the first scope this process serves."""

    def __init__(self, app: Any, job: Callable[[], None]) -> None:
        self.app = app
        self.job = job
        self.enabled = os.environ.get("STRAND_RECOVER_AT_START", "1") != "0"
        self._started = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        if self.enabled and not self._started.is_set():
            self._started.set()
            threading.Thread(target=self._run, name="strand-startup", daemon=True).start()
        return await self.app(scope, receive, send)

    def _run(self) -> None:
        from django.db import connections

        try:
            self.job()
        finally:
            connections.close_all()


def recover_open_turns() -> None:
    """Close the turns that processes which died left open (DESIGN §7)."""
    from sessions_app.agent import agent_startup

    agent_startup()
