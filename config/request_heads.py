"""Request lines and headers over Twisted's limits, answered with a status that says so.

Twisted, under daphne, reads a request's head line by line and keeps at most 16 KiB of it:
a request line (the method and the URL) longer than `HTTPChannel.MAX_LENGTH`, or a head
whose lines add up past `totalHeadersSize`, is not served. As released, Twisted then closes
the connection without a word (a long line) or answers a bare `400 Bad Request` with no
body (a long head), so a browser shows an empty reply and a client cannot tell what it
did wrong.

`answer_long_heads_in_daphne` keeps the limits and changes only the answer: `414 URI Too
Long` for a request line over the limit, `431 Request Header Fields Too Large` for a head
over it, each with a body that names the limit (`{"error": …, "detail": …}` for a request
to /api/, a small plain page otherwise), then the connection is closed, as before. The
head is never read further: the work done for such a request stays bounded by the limit.
"""

from __future__ import annotations

import json
from typing import Any

# A request to the API, told from the start of its request line (`GET /api/…`).
_API_PREFIXES = tuple(
    f"{method} /api/".encode()
    for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
)


def answer(status: int, reason: str, detail: str, *, api: bool) -> bytes:
    """The whole response, status line to body, for a head that is not served."""
    if api:
        code = "uri_too_long" if status == 414 else "headers_too_large"
        body = json.dumps({"error": code, "detail": detail}).encode()
        kind = "application/json"
    else:
        body = (
            f"<!doctype html><title>{reason}</title><h1>{reason}</h1><p>{detail}.</p>\n"
        ).encode()
        kind = "text/html; charset=utf-8"
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        f"Content-Type: {kind}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    return head + body


def answer_long_heads_in_daphne() -> None:
    """Twisted's HTTP channel answers 414 and 431 with a body instead of closing in silence
    (see above). Without Twisted (another server), nothing to do."""
    try:
        from twisted.web.http import HTTPChannel
    except ImportError:
        return
    if getattr(HTTPChannel, "_strand_long_heads", False):
        return
    line_received = HTTPChannel.lineReceived

    def refuse(channel: Any, status: int, reason: str, detail: str, api: bool) -> None:
        channel._strand_refused_head = True
        channel.transport.write(answer(status, reason, detail, api=api))
        channel.loseConnection()
        # What the client still sends on this connection is dropped unread.
        channel.dataReceived = channel.lineReceived = lambda *args: None

    def lineLengthExceeded(self: Any, line: bytes) -> None:  # noqa: N802 (Twisted's name)
        if getattr(self, "_strand_refused_head", False):
            return
        first = getattr(self, "_HTTPChannel__first_line", 0)
        api = (
            bytes(line[:16]).startswith(_API_PREFIXES)
            if first
            else bool(getattr(self, "_path", b"").startswith(b"/api/"))
        )
        if first:
            refuse(
                self,
                414,
                "URI Too Long",
                f"the request line is over {self.MAX_LENGTH} bytes, the most this server "
                "reads (a URL that long is not served)",
                api,
            )
        else:
            refuse(
                self,
                431,
                "Request Header Fields Too Large",
                f"a header line is over {self.MAX_LENGTH} bytes, the most this server reads",
                api,
            )

    def lineReceived(self: Any, line: bytes) -> None:  # noqa: N802
        if getattr(self, "_strand_refused_head", False):
            return
        if self._receivedHeaderSize + len(line) > self.totalHeadersSize:
            if getattr(self, "_HTTPChannel__first_line", 0):
                lineLengthExceeded(self, line)
                return
            api = bytes(getattr(self, "_path", b"") or b"").startswith(b"/api/")
            refuse(
                self,
                431,
                "Request Header Fields Too Large",
                f"the request's headers are over {self.totalHeadersSize} bytes in all, "
                "the most this server reads",
                api,
            )
            return
        line_received(self, line)

    HTTPChannel.lineLengthExceeded = lineLengthExceeded  # type: ignore[method-assign]
    HTTPChannel.lineReceived = lineReceived  # type: ignore[method-assign]
    HTTPChannel._strand_long_heads = True  # type: ignore[attr-defined]
