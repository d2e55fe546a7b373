"""How many websockets a process takes on at once, and how it turns the rest away.

A handshake costs a process a few milliseconds of its one core (the HTTP upgrade, the
session and user reads, the access check, the catch-up read and its frames). When more
viewers arrive at once than the process can take on within a few seconds, the ones that
would wait longest are refused at once, and cleanly: the socket is accepted and closed with
`CLOSE_TRY_LATER` (4503, "service unavailable, try again later"; daphne lets an application
close only with 1000 or 3000–4999, so not the standard 1013), which the client answers by
retrying after a random, growing delay (see `static/js/strand.js`), resuming from the last
seq it has. Without this, an overloaded process leaves every socket waiting until daphne
drops it at its handshake timeout, and the clients, all retrying together, repeat the storm.

- `STRAND_WS_MAX_CONNECTING` (default 500): sockets between their handshake and their
  `ready` at once in one process; one more is refused with 4503. A refusal is not free (a
  whole handshake), so the limit is what a process gets through well inside daphne's
  handshake timeout (30 s, `deploy/daphne.py`) rather than what it could hold: 5–6 ms of CPU
  per socket on this 2-core machine, ~30 ms when other work keeps it at a load of 10 (a
  1,000-viewer storm per process then took ~31 s and ran into that timeout). Measured at a
  load of 6–10 with a 1,000-viewer storm: a limit of 200 cost 1,500–2,900 refusals, 7.7–18.8 s
  of the process's CPU and the last `ready` after 21–74 s; 1,000 cost no refusal, 6.1–8.9 s
  and 15–26 s.
- `STRAND_WS_MAX_HANDSHAKE_WAIT_S` (default 10): when the oldest socket still in its
  handshake (admitted, not yet accepted) has waited this long, the process is behind, and
  new sockets are refused until it has caught up; this follows how busy the machine is,
  which a fixed count cannot.
- `STRAND_WS_MAX_SOCKETS` (default 10,000): open sockets in one process; one more is
  refused with 4503 (behind a balancer, the retry usually lands on another process).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Any

CLOSE_TRY_LATER = 4503
SCOPE_KEY = "strand.admission"


def max_connecting() -> int:
    return int(os.environ.get("STRAND_WS_MAX_CONNECTING", "500"))


def max_handshake_wait() -> float:
    return float(os.environ.get("STRAND_WS_MAX_HANDSHAKE_WAIT_S", "10"))


def max_sockets() -> int:
    return int(os.environ.get("STRAND_WS_MAX_SOCKETS", "10000"))


@dataclass
class _Counts:
    connecting: int = 0
    open: int = 0
    refused: int = 0
    # Sockets in their handshake, in the order they were admitted: ticket → when.
    handshaking: dict[int, float] = field(default_factory=dict)

    def oldest_handshake_s(self) -> float:
        for since in self.handshaking.values():
            return time.monotonic() - since
        return 0.0

    def full(self) -> bool:
        return (
            self.connecting >= max_connecting()
            or self.open >= max_sockets()
            or self.oldest_handshake_s() >= max_handshake_wait()
        )


counts = _Counts()
_numbers = itertools.count()


class Ticket:
    """One admitted socket: in its handshake until `accepted()`, connecting until `ready()`,
    open until `close()`."""

    def __init__(self) -> None:
        self.number = next(_numbers)
        self.connecting = True
        self.closed = False
        counts.handshaking[self.number] = time.monotonic()
        counts.connecting += 1
        counts.open += 1

    def accepted(self) -> None:
        counts.handshaking.pop(self.number, None)

    def ready(self) -> None:
        self.accepted()
        if self.connecting:
            self.connecting = False
            counts.connecting -= 1

    def close(self) -> None:
        self.ready()
        if not self.closed:
            self.closed = True
            counts.open -= 1


def _ticket(scope: Any) -> Ticket | None:
    ticket = scope.get(SCOPE_KEY)
    return ticket if isinstance(ticket, Ticket) else None


def accepted(scope: Any) -> None:
    """The socket of `scope` has been accepted: its handshake is over."""
    if (ticket := _ticket(scope)) is not None:
        ticket.accepted()


def ready(scope: Any) -> None:
    """The socket of `scope` has caught up: it no longer counts as connecting."""
    if (ticket := _ticket(scope)) is not None:
        ticket.ready()


class Admission:
    """ASGI middleware for websockets: admits a socket or refuses it with 4503."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        if scope.get("type") != "websocket":
            return await self.app(scope, receive, send)
        if counts.full():
            counts.refused += 1
            return await _refuse(receive, send)
        ticket = Ticket()
        try:
            return await self.app({**scope, SCOPE_KEY: ticket}, receive, send)
        finally:
            ticket.close()


async def _refuse(receive: Any, send: Any) -> None:
    # Accepted, then closed with a code: a handshake refused before it completes reaches a
    # browser as a bare 1006, which says nothing about waiting.
    message = await receive()
    if message.get("type") != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    # One turn of the loop before the close: daphne completes the handshake on a later turn,
    # and a close sent before that drops the connection without its 101 reply (about half of
    # 500 refusals at once, measured).
    await asyncio.sleep(0)
    await send({"type": "websocket.close", "code": CLOSE_TRY_LATER})
    while (await receive()).get("type") != "websocket.disconnect":
        pass
