"""The projector a server process (or `manage.py project`) runs: one per database.

It takes `LOCK_KEY` on its own thread's connection (session level: held until that
connection closes, so a killed process gives it up at once), projects what is pending, and
waits to be woken by a commit notification (`sessions_app.listen`) or by the poll. A
process that does not get the lock tries again at each poll: it takes over when the
working projector's process goes away.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

from django.db import connection

from sessions_app import listen, pg
from sessions_app.store import NOTIFY_CHANNEL

log = logging.getLogger("strand.projectors")

POLL_S = float(os.environ.get("STRAND_PROJECTOR_POLL_S", "1.0"))


_held_on: list[object] = []  # the connection the lock was taken on, while it lives


def try_lock() -> bool:
    """Take `LOCK_KEY` on this thread's connection, unless another connection holds it.
    The lock lives as long as the connection: a new connection must take it again."""
    from sessions_app.projectors.runner import LOCK_KEY

    connection.ensure_connection()
    raw = connection.connection
    if _held_on and _held_on[0] is raw:
        return True
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s)", [LOCK_KEY])
        row = cur.fetchone()
    if row and row[0]:
        _held_on[:] = [raw]
        return True
    return False


class ProjectorLoop:
    """Projects on a thread of its own until stopped."""

    channels: Sequence[str] = (NOTIFY_CHANNEL,)

    def __init__(self) -> None:
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._main, name="strand-projector", daemon=True)

    # -- the listener's subscriber ----------------------------------------------------------

    def on_listening(self) -> None:
        self._wake.set()

    def on_lost(self) -> None:
        pass

    def on_notify(self, channel: str, payload: str) -> None:
        self._wake.set()

    # -- the loop ---------------------------------------------------------------------------

    def start(self) -> None:
        listen.subscribe(self)
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        listen.unsubscribe(self)

    def _main(self) -> None:
        from sessions_app.projectors.runner import project_pending

        while not self._stop.is_set():
            self._wake.clear()
            try:
                if pg.with_connection(try_lock):
                    pg.with_connection(project_pending)
            except Exception:
                log.exception("the projector failed; it tries again")
                connection.close()
            self._wake.wait(POLL_S)
        connection.close()


_loop: ProjectorLoop | None = None


def start_in_process() -> None:
    """Start this process's projector (once); `STRAND_PROJECTOR=0` leaves it off."""
    global _loop
    if os.environ.get("STRAND_PROJECTOR", "1") == "0" or _loop is not None:
        return
    _loop = ProjectorLoop()
    _loop.start()
