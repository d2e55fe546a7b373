"""Twisted writes to a plain TCP socket at once when nothing waits before the bytes.

Twisted (daphne's network layer) never writes to a socket when asked: it keeps the bytes,
asks the event loop to watch the socket for room, writes on the next turn of the loop and
stops watching again. For one event to 1,000 viewers that was 2,000 changes to the loop's
watch list (epoll calls and selector bookkeeping: 35% of the process's CPU while it sent),
and no viewer got a byte before the frame had been handed to the last one. Here a write on
a plain TCP connection with nothing already waiting goes to the socket at once, as
asyncio's own transports do; what the socket does not take (a slow reader), a write behind
others, a TLS connection and a failing socket all take Twisted's buffered way, which keeps
the order of the bytes and reports the failure as before.
"""

from __future__ import annotations

import logging
from typing import Any


def install() -> None:
    from twisted.internet import abstract, tcp

    if tcp.Connection.write.__module__ == __name__:
        return
    # Twisted's own bookkeeping, read below; a release without it keeps its buffered way.
    probe = abstract.FileDescriptor()
    needed = ("dataBuffer", "_tempDataBuffer", "offset", "_writeDisconnected", "disconnecting")
    if not all(hasattr(probe, name) for name in needed) or not hasattr(tcp.Connection, "TLS"):
        logging.getLogger(__name__).warning("Twisted changed: socket writes stay buffered")
        return
    buffered_write = tcp.Connection.write

    def write(self: Any, data: bytes) -> None:
        if (
            type(data) is bytes
            and data
            and self.connected
            and not self.TLS
            and not self.disconnecting
            and not self._writeDisconnected
            and not self._tempDataBuffer
            and self.offset == len(self.dataBuffer)
        ):
            sent = self.writeSomeData(data)
            if isinstance(sent, int) and sent > 0:
                if sent == len(data):
                    return
                data = data[sent:]
        buffered_write(self, data)

    tcp.Connection.write = write  # type: ignore[method-assign]
