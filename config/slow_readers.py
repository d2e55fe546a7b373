"""A response body goes out as fast as its client reads it, not faster.

daphne writes each piece of a response into Twisted's transport and returns at once, so an
export to a client that reads nothing was kept whole in the server's memory: four such
downloads of a 24 MB page took daphne from 128 to 279 MB, and the memory stayed taken after
they went. `answer_slow_readers_in_daphne` makes the application's `send` of a body piece
wait while the transport holds more than its buffer (64 KiB) unsent, through Twisted's own
producer interface (the channel pauses and resumes the request's producer): an export
streams as the client reads, a piece at a time, and its next piece is not even made until
then.

A client that stops reading altogether would then keep its request (its slot, its thread,
its Postgres connection) forever; after `STRAND_HTTP_SEND_STALL_S` (default 60) seconds
with nothing drained, its connection is closed and the application's next `send` ends the
response.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

logger = logging.getLogger(__name__)


@implementer(IPushProducer)
class _Drained:
    """Registered on a request while its body streams: Twisted pauses it when the
    transport's buffer is full and resumes it when the buffer has gone out; the request's
    end (its last piece sent, or its connection lost) lets any waiting send go."""

    def __init__(self) -> None:
        self.writable = asyncio.Event()
        self.writable.set()

    def pauseProducing(self) -> None:  # noqa: N802 - Twisted's names
        self.writable.clear()

    def resumeProducing(self) -> None:  # noqa: N802
        self.writable.set()

    def stopProducing(self) -> None:  # noqa: N802 - the connection is going
        self.writable.set()

    def ended(self, result: Any) -> None:
        self.writable.set()  # and the connection's loss is not an error to log


def answer_slow_readers_in_daphne() -> None:
    from daphne.server import Server

    handle_reply = Server.handle_reply
    stall_s = float(os.environ.get("STRAND_HTTP_SEND_STALL_S", "60"))

    async def handle_reply_as_read(self: Any, protocol: Any, message: Any) -> None:
        body = message.get("type") == "http.response.body"
        drained: _Drained | None = getattr(protocol, "_strand_drained", None)
        if body and not message.get("more_body", False) and drained is not None:
            # The last piece: the request lets go of its producer before it finishes.
            protocol._strand_drained = None
            if not protocol.finished and protocol.channel is not None:
                protocol.unregisterProducer()
        await handle_reply(self, protocol, message)
        if not body or not message.get("more_body", False):
            return
        if drained is None:
            drained = _register(protocol)
            if drained is None:
                return
        if drained.writable.is_set():
            return
        try:
            await asyncio.wait_for(drained.writable.wait(), stall_s)
        except TimeoutError:
            logger.warning("closing a connection that read nothing for %s s", stall_s)
            transport = getattr(protocol.channel, "transport", None)
            if transport is not None:
                transport.abortConnection()

    Server.handle_reply = handle_reply_as_read  # type: ignore[method-assign]


def _register(protocol: Any) -> _Drained | None:
    """A producer for `protocol`'s body, paused at once if the transport is already full;
    None for a request that is done or holds a producer of its own."""
    channel = getattr(protocol, "channel", None)
    if protocol.finished or channel is None or getattr(protocol, "producer", None) is not None:
        return None
    drained = _Drained()
    try:
        protocol.registerProducer(drained, True)
    except (RuntimeError, ValueError):
        return None
    protocol._strand_drained = drained
    protocol.notifyFinish().addBoth(drained.ended)
    if getattr(channel, "_waitingForTransport", False):
        drained.pauseProducing()
    return drained
