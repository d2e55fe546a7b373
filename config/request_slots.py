"""At most so many HTTP requests in Django at once in one process; the rest wait their turn,
and no client takes more than its share.

Under ASGI, Django runs each request's synchronous code on a thread of its own, and each
such thread opens a Postgres connection of its own: as many requests at once as a client
sends, as many connections. Three hundred at once from one user (all but a few refused by
the rate limits, a few milliseconds each) took Postgres past its `max_connections` and
every other request of every user was answered 500 meanwhile.

`RequestSlots` lets `STRAND_HTTP_SLOTS` (default 24) requests into Django at once. A request
holds its slot until its answer is sent, and an answer goes out only as fast as its client
reads it (`config.slow_readers`), so one client could hold every slot with downloads it
reads slowly: a client (a bearer token, else a session cookie, else an address) holds at
most `STRAND_HTTP_SLOTS_PER_CLIENT` (default a third of the slots) at once, and a freed slot
goes to the waiting client that holds the fewest, the one served longest ago among equals.
A request that has waited `STRAND_HTTP_SLOT_WAIT_S` (30 s) is answered 503 with
`Retry-After` and a JSON body, having cost nothing but its wait. `/healthz` and websockets
take no slot: they are answered before, or elsewhere. 0 slots turns the limit off.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import deque
from typing import Any

from django.conf import settings

BUSY = json.dumps(
    {
        "error": "busy",
        "detail": "the server is answering as many requests as it takes at once; try again",
    }
).encode()


class RequestSlots:
    def __init__(
        self,
        app: Any,
        slots: int | None = None,
        wait_s: float | None = None,
        per_client: int | None = None,
    ) -> None:
        self.app = app
        self.slots = int(os.environ.get("STRAND_HTTP_SLOTS", "24")) if slots is None else slots
        self.wait_s = (
            float(os.environ.get("STRAND_HTTP_SLOT_WAIT_S", "30")) if wait_s is None else wait_s
        )
        if per_client is None:
            per_client = int(os.environ.get("STRAND_HTTP_SLOTS_PER_CLIENT", "0") or 0)
        self.per_client = per_client if per_client > 0 else max(1, self.slots // 3)
        self._cookie = settings.SESSION_COOKIE_NAME.encode()
        self._busy = 0  # requests in Django
        self._held: dict[bytes, int] = {}  # of them, each client's
        self._waiting: dict[bytes, deque[asyncio.Future[None]]] = {}  # first come first
        # When each client holding or waiting for a slot was last given one (a count).
        self._served: dict[bytes, int] = {}
        self._tick = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        if scope["type"] != "http" or self.slots <= 0:
            return await self.app(scope, receive, send)
        client = client_key(scope, self._cookie)
        if not await self._acquire(client):
            return await _busy(send, self.wait_s)
        try:
            return await self.app(scope, receive, send)
        finally:
            self._release(client)

    async def _acquire(self, client: bytes) -> bool:
        """Whether `client`'s request got a slot within `wait_s`."""
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(client, deque()).append(granted)
        self._dispatch()
        if granted.done():
            return True
        try:
            await asyncio.wait_for(asyncio.shield(granted), self.wait_s)
        except TimeoutError:
            if granted.done():
                return True  # given its slot as the wait ran out
            granted.cancel()
            return False
        except asyncio.CancelledError:  # the client went away while it waited
            if granted.done() and not granted.cancelled():
                self._release(client)
            granted.cancel()
            raise
        return True

    def _release(self, client: bytes) -> None:
        self._busy -= 1
        held = self._held[client] - 1
        if held:
            self._held[client] = held
        else:
            del self._held[client]
            if client not in self._waiting:
                self._served.pop(client, None)
        self._dispatch()

    def _dispatch(self) -> None:
        """Free slots to waiting requests: each time to the client holding the fewest (of
        those under `per_client`), among equals the one served longest ago (or never)."""
        while self._busy < self.slots:
            chosen: bytes | None = None
            rank: tuple[int, int] = (0, 0)
            for client in list(self._waiting):
                queue = self._waiting[client]
                while queue and queue[0].done():  # given up waiting
                    queue.popleft()
                if not queue:
                    del self._waiting[client]
                    if client not in self._held:
                        self._served.pop(client, None)
                    continue
                held = self._held.get(client, 0)
                mine = (held, self._served.get(client, -1))
                if held < self.per_client and (chosen is None or mine < rank):
                    chosen, rank = client, mine
            if chosen is None:
                return
            queue = self._waiting[chosen]
            granted = queue.popleft()
            if not queue:
                del self._waiting[chosen]
            self._busy += 1
            self._held[chosen] = self._held.get(chosen, 0) + 1
            self._tick += 1
            self._served[chosen] = self._tick
            granted.set_result(None)


def client_key(scope: Any, session_cookie: bytes) -> bytes:
    """Who a request comes from, as far as the request says before Django reads it: its
    bearer token or its session cookie (whether valid or not, Django decides later), else
    its address."""
    cookie = b""
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            return b"a:" + value
        if name == b"cookie":
            cookie = value
    if cookie:
        for part in cookie.split(b";"):
            key, _, value = part.strip().partition(b"=")
            if key == session_cookie and value:
                return b"s:" + value
    client = scope.get("client") or ("", 0)
    return b"c:" + str(client[0]).encode()


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
