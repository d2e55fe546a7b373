"""ASGI entry point: HTTP through Django, websockets through Channels."""

from __future__ import annotations

import gc
import logging
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi = get_asgi_application()

from typing import Any  # noqa: E402

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from config.health import HealthCheck  # noqa: E402
from config.startup import RunOnceAtStart, recover_open_turns  # noqa: E402
from sessions_app.live.admission import Admission  # noqa: E402
from sessions_app.live.middleware import SocketAuthMiddlewareStack  # noqa: E402
from sessions_app.live.routing import websocket_urlpatterns  # noqa: E402

router = ProtocolTypeRouter(
    {
        "http": HealthCheck(ASGIStaticFilesHandler(django_asgi)),
        "websocket": AllowedHostsOriginValidator(
            Admission(SocketAuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)

# The first connection a process serves starts crash recovery (STRAND_RECOVER_AT_START=0
# turns it off, as the test suite does for the servers it runs in-process).
application = RunOnceAtStart(router, recover_open_turns)


def _plain_websocket_log_arguments() -> None:
    """autobahn (daphne's websocket layer) colours the arguments of its debug messages
    before it knows whether anything logs them: for every frame it sends, `hltype` and
    `hlval` styled a function name and two values, 15% of a process's CPU while it sent
    events to 1,000 viewers, for messages daphne discards. Plain values instead: the same
    messages, uncoloured, for whoever turns debug logging on."""
    from autobahn.websocket import protocol

    if hasattr(protocol, "hltype") and hasattr(protocol, "hlval"):
        protocol.hltype = lambda obj: getattr(obj, "__qualname__", "")
        protocol.hlval = lambda value, color="white", bold=True: value


def _eager_socket_writes() -> None:
    """Twisted (daphne's network layer) never writes to a socket when asked: it keeps the
    bytes, asks the event loop to watch the socket for room, writes on the next turn of the
    loop and stops watching again. For one event to 1,000 viewers that was 2,000 changes to
    the loop's watch list (epoll calls and selector bookkeeping: 35% of the process's CPU
    while it sent), and no viewer got a byte before the frame had been handed to the last
    one. Here a write on a plain TCP connection with nothing already waiting goes to the
    socket at once, as asyncio's own transports do; what the socket does not take (a slow
    reader), a write behind others, a TLS connection and a failing socket all take Twisted's
    buffered way, which keeps the order of the bytes and reports the failure as before."""
    from twisted.internet import abstract, tcp

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


_UNKNOWN = object()  # an attribute autobahn no longer has: its own way is taken


def _framed_once_for_all_viewers() -> None:
    """The live feed hands the same encoded event (one `str`) to every viewer of a session
    (`sessions_app.live.listener`); daphne framed it anew for each: encoding it to UTF-8, then
    autobahn's checks, its frame header, a join of the bytes and a debug message, together
    about a quarter of a process's CPU while it sent one event to 1,000 viewers (by py-spy;
    the socket's own `send` took another quarter). A text sent now is framed once, with
    autobahn's `prepareMessage`, and the next send of that same object to another open
    websocket writes those bytes as they are (as `sendPreparedMessage`). Other texts (each
    viewer's own), binary messages, sockets not open and compressed ones go daphne's way."""
    from daphne.ws_protocol import WebSocketProtocol

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


def _tune_garbage_collection() -> None:
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


_plain_websocket_log_arguments()
_eager_socket_writes()
_framed_once_for_all_viewers()
_tune_garbage_collection()
