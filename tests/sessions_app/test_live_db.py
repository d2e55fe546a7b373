"""The websockets' database threads keep a few connections between reads (instead of a new
Postgres connection per read), and let them go when asked."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.db import connection

from sessions_app.live import db as live_db

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


def _backend_pid() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_reads_one_after_another_and_at_once_share_a_few_kept_connections() -> None:
    try:
        one_by_one = [await live_db.run(_backend_pid) for _ in range(30)]
        at_once = await asyncio.gather(*(live_db.run(_backend_pid) for _ in range(60)))
        used = set(one_by_one) | set(at_once)
        assert len(used) <= live_db.thread_count()
    finally:
        await asyncio.to_thread(live_db.close_connections)
    # Closed: the next read opens a connection of its own.
    try:
        assert await live_db.run(_backend_pid) not in used
    finally:
        await asyncio.to_thread(live_db.close_connections)


async def test_an_error_reaches_the_caller_and_the_thread_serves_on() -> None:
    def fails() -> None:
        raise LookupError("nothing here")

    try:
        with pytest.raises(LookupError, match="nothing here"):
            await live_db.run(fails)
        assert await live_db.run(_backend_pid) > 0
    finally:
        await asyncio.to_thread(live_db.close_connections)


async def test_reads_for_sockets_on_their_way_go_before_new_sockets_first_reads() -> None:
    threads = live_db._Threads(1)
    threads.start()
    gate = threading.Event()
    order: list[str] = []
    blocked = threads.submit(gate.wait, (), live_db.FIRST)
    waiting = [
        threads.submit(order.append, ("new 1",), live_db.NEW),
        threads.submit(order.append, ("new 2",), live_db.NEW),
        threads.submit(order.append, ("on its way",), live_db.FIRST),
    ]
    gate.set()
    await asyncio.wrap_future(blocked)
    for future in waiting:
        await asyncio.wrap_future(future)
    assert order == ["on its way", "new 1", "new 2"]
    await asyncio.to_thread(threads.close_connections)
