"""One websocket frame for an event, however many viewers it goes to.

The live feed hands the same encoded event (one `str`) to every viewer of a session
(`sessions_app.live.listener`); daphne framed it anew for each: encoding it to UTF-8, then
autobahn's checks, its frame header, a join of the bytes and a debug message, together
about a quarter of a process's CPU while it sent one event to 1,000 viewers (by py-spy; the
socket's own `send` took another quarter). A text sent now is framed once, with autobahn's
`prepareMessage`, and the next send of that same object to another open websocket writes
those bytes as they are (as `sendPreparedMessage`). Other texts (each viewer's own), binary
messages, sockets not open and compressed ones go daphne's way.
"""

from __future__ import annotations

import logging
from typing import Any

_UNKNOWN = object()  # an attribute autobahn no longer has: its own way is taken


def install() -> None:
    from daphne.ws_protocol import WebSocketProtocol

    if WebSocketProtocol.serverSend.__module__ == __name__:
        return
    if not hasattr(WebSocketProtocol, "sendPreparedMessage"):
        logging.getLogger(__name__).warning("autobahn changed: each viewer's frame made anew")
        return
    framed_each_time = WebSocketProtocol.serverSend
    last: list[Any] = [None, None]  # the text framed last (held, so `is` is safe), its frame

    def server_send(self: Any, content: Any, binary: bool = False) -> None:
        if (
            binary
            or type(content) is not str
            or self.state != self.STATE_OPEN
            or getattr(self, "_perMessageCompress", _UNKNOWN) is not None
            or getattr(self, "send_queue", _UNKNOWN) is _UNKNOWN
        ):
            framed_each_time(self, content, binary)
            return
        if content is not last[0]:
            last[1] = self.factory.prepareMessage(content.encode("utf8"))
            last[0] = content
        if self.send_queue:  # bytes autobahn holds back go first
            self.sendPreparedMessage(last[1])
        else:  # what `sendPreparedMessage` does, without its per-frame debug message
            self.transport.write(last[1].payloadHybi)

    WebSocketProtocol.serverSend = server_send  # type: ignore[method-assign]
