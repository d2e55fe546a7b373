"""Work a server process does once, when it starts serving.

Daphne speaks no ASGI lifespan, so the first connection of any kind (HTTP or websocket)
starts it, in a thread of its own: the request that triggers it does not wait.
"""

from __future__ import annotations

import gc
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
    """Close the turns that processes which died left open (DESIGN §7), then start this
    process's projector (DESIGN §12; one works per database, the others stand by)."""
    from sessions_app.agent import agent_startup
    from sessions_app.projectors.service import start_in_process

    agent_startup()
    start_in_process()


def tune_garbage_collection() -> None:
    """Python's full collections scan every object the process holds; with a thousand
    websockets that took 170–270 ms every ~6 s while events went out to them, each pause
    landing on whichever commit was in flight (p99 delivery at 1,000 viewers: ~250 ms, with
    collections as the slow commits). What is loaded by now (Django, this application) lives
    as long as the process: `gc.freeze()` leaves it out of every collection, and full
    collections come after `STRAND_GC_GEN2_THRESHOLD` (1,000; Python's default is 10)
    collections of the middle generation instead of 10 (with both: p99 ~96 ms, and no pause
    in 20 s of writing). Cyclic garbage (about 110 objects per closed websocket) then waits
    longer to be freed."""
    threshold0, threshold1, _ = gc.get_threshold()
    gc.set_threshold(
        threshold0, threshold1, int(os.environ.get("STRAND_GC_GEN2_THRESHOLD", "1000"))
    )
    gc.collect()
    gc.freeze()
