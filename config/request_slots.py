"""At most so many HTTP requests in Django at once in one process; the rest wait their turn.

Under ASGI, Django runs each request's synchronous code on a thread of its own, and each
such thread opens a Postgres connection of its own: as many requests at once as a client
sends, as many connections. Three hundred at once from one user (all but a few refused by
the rate limits, a few milliseconds each) took Postgres past its `max_connections` and
every other request of every user was answered 500 meanwhile.

`RequestSlots` lets `STRAND_HTTP_SLOTS` (default 24) requests into Django at once; the next
wait, first come first served, and one that has waited `STRAND_HTTP_SLOT_WAIT_S` (30 s)
is answered 503 with `Retry-After` and a JSON body, having cost nothing but its wait. A
request holds its slot until its answer is sent (a streamed export to its last byte).
`/healthz` and websockets take no slot: they are answered before, or elsewhere. 0 slots
turns the limit off.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

BUSY = json.dumps(
    {
        "error": "busy",
        "detail": "the server is answering as many requests as it takes at once; try again",
    }
).encode()


class RequestSlots:
    def __init__(self, app: Any, slots: int | None = None, wait_s: float | None = None) -> None:
        self.app = app
        self.slots = int(os.environ.get("STRAND_HTTP_SLOTS", "24")) if slots is None else slots
        self.wait_s = (
            float(os.environ.get("STRAND_HTTP_SLOT_WAIT_S", "30")) if wait_s is None else wait_s
        )
        self._free: asyncio.Semaphore | None = None  # made on the serving loop

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        if scope["type"] != "http" or self.slots <= 0:
            return await self.app(scope, receive, send)
        if self._free is None:
            self._free = asyncio.Semaphore(self.slots)
        free = self._free
        try:
            await asyncio.wait_for(free.acquire(), self.wait_s)
        except TimeoutError:
            return await _busy(send, self.wait_s)
        try:
            return await self.app(scope, receive, send)
        finally:
            free.release()


async def _busy(send: Any, wait_s: float) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"retry-after", str(max(1, round(wait_s / 10))).encode()),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": BUSY})
