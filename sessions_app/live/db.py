"""The database work of the websockets: a few threads, each keeping its own connection.

A websocket's handshake reads the browser's Django session and its user, checks access, and
then reads the events the viewer has not seen. Run through channels' `database_sync_to_async`,
each of those reads waits its turn on the one thread Django keeps for thread-sensitive code,
and opens and closes a Postgres connection around it (`CONN_MAX_AGE=0`). Under a burst of
viewers connecting at once (a restart, a deploy, a popular session) every handshake queued
behind that one thread, which spent most of its time opening connections (py-spy over a
500-viewer burst: 59% of the thread in `connect()`), and none finished inside daphne's
handshake timeout.

Here those reads run on `STRAND_LIVE_DB_THREADS` threads (default 4). Each keeps its Django
connection between calls and closes it after `IDLE_CLOSE_S` without work, so a process holds
at most that many connections for its websockets however many there are, and an idle
process holds none.

Work is taken in order of `priority`, then of arrival. A new socket's first read (its
sign-in, `NEW`) waits behind the reads of sockets already on their way (the access check,
the catch-up) and of open ones (a commit's events): in a storm, with one queue in arrival
order, every socket's later reads queued behind every other socket's first, and no socket
was ready before nearly all were (500 sockets a process: none ready after 22 s, then 966 of
1,000 at once), which ran their handshakes into the admission's and daphne's time limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import connection, connections

from sessions_app import pg

log = logging.getLogger("strand.live")

T = TypeVar("T")

IDLE_CLOSE_S = 10.0
FIRST = 0  # reads for open sockets and for sockets on their way
NEW = 1  # the first read of a new socket
CLOSE = -1  # close requests go before any work


def thread_count() -> int:
    return max(1, int(os.environ.get("STRAND_LIVE_DB_THREADS", "4")))


@dataclass
class _Job:
    future: Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]


# (priority, arrival, job): the arrival number keeps equal priorities in order and spares
# the queue from ever comparing two jobs.
_Entry = tuple[int, int, "_Job | threading.Barrier"]


@dataclass
class _Threads:
    size: int
    jobs: queue.PriorityQueue[_Entry] = field(default_factory=queue.PriorityQueue)
    threads: list[threading.Thread] = field(default_factory=list)
    arrivals: itertools.count[int] = field(default_factory=itertools.count)

    def start(self) -> None:
        for n in range(self.size):
            thread = threading.Thread(target=self._work, name=f"strand-live-db-{n}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def submit(self, fn: Callable[..., T], args: tuple[Any, ...], priority: int) -> Future[T]:
        future: Future[T] = Future()
        self.jobs.put((priority, next(self.arrivals), _Job(future, fn, args)))
        return future

    def _work(self) -> None:
        while True:
            # With a connection open, wait only so long for work before closing it.
            timeout = IDLE_CLOSE_S if connection.connection is not None else None
            try:
                _, _, job = self.jobs.get(timeout=timeout)
            except queue.Empty:
                connections.close_all()
                continue
            if isinstance(job, threading.Barrier):
                # One close request per thread: the barrier keeps each on its own thread.
                with contextlib.suppress(threading.BrokenBarrierError):
                    job.wait()
                connections.close_all()
                continue
            if not job.future.set_running_or_notify_cancel():
                continue
            try:
                result = pg.with_connection(job.fn, *job.args)
            except BaseException as exc:  # handed to the caller
                job.future.set_exception(exc)
            else:
                job.future.set_result(result)

    def close_connections(self) -> None:
        barrier = threading.Barrier(self.size + 1, timeout=10)
        for _ in range(self.size):
            self.jobs.put((CLOSE, next(self.arrivals), barrier))
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()


_lock = threading.Lock()
_threads: _Threads | None = None


def _pool() -> _Threads:
    global _threads
    with _lock:
        if _threads is None:
            _threads = _Threads(thread_count())
            _threads.start()
        return _threads


async def run(fn: Callable[..., T], *args: Any, priority: int = FIRST) -> T:
    """`fn(*args)` on one of the websocket database threads."""
    return await asyncio.wrap_future(_pool().submit(fn, args, priority))


def close_connections() -> None:
    """Close every thread's connection now (tests, before their database goes away)."""
    threads = _threads
    if threads is not None:
        threads.close_connections()
