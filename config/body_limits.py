"""Request bodies refused at the door: on `Content-Length` before a byte of the body is read,
and a streamed (chunked) body cut off at the limit, per route.

Who may send how much is decided from the request line and the headers alone, because that
is all there is before the body:

- Sign-in (`/accounts/login/`, the admin's) and every request that carries no credential
  get `STRAND_MAX_ANONYMOUS_BODY_BYTES` (8 KiB: a sign-in form is a few hundred bytes).
- A request with a credential gets its route's limit: the Pi import (`/sessions/import`,
  `/api/sessions/import`) `STRAND_MAX_IMPORT_BYTES` plus room for the multipart framing,
  an upload into a workspace (`POST /api/sessions/<id>/files`,
  `/sessions/<id>/workspace/upload`) `STRAND_MAX_UPLOAD_BYTES` plus that room, OTLP trace
  export (`POST /v1/traces`, with a bearer token) `STRAND_MAX_OTLP_BYTES` as sent,
  everything else `STRAND_MAX_BODY_BYTES` (the API's JSON, the pages' forms).

A credential is the session cookie, or for the API an `Authorization: Bearer` header; it
is not checked here. Whether it is valid is only known once Django has read the session
or the token from the database, and the door has no database: it runs in daphne's network
thread, between two reads of a socket. So a made-up cookie buys the route's limit (a few
MB; the import's limit on the import alone), never more, and Django then refuses the
request; without one, nothing can make the server hold more than the anonymous limit.
Django's own `DATA_UPLOAD_MAX_MEMORY_SIZE` is set to `STRAND_MAX_BODY_BYTES` as a second
line for what a view reads into memory (settings.py).

Two doors use the one rule (`limit_for`):

- `BodyLimits`, an ASGI middleware around the HTTP application: it refuses on
  `Content-Length` before the application runs and cuts off a body streamed past the limit,
  whatever server runs it. It is the door for servers that hand the body over as it
  arrives (uvicorn, hypercorn).
- daphne does not: Twisted, under it, reads a whole body (into memory, or a temporary file
  past 100 KB; forms are parsed in memory besides) before daphne calls the application at
  all. `refuse_early_in_daphne` puts the same rule into daphne's request object, where the
  headers end and where each piece of the body arrives, so that daphne answers 413 as soon
  as the headers (or the piece that passes the limit) are in, and keeps nothing after.
  A body it takes costs about one piece of it in memory: Twisted's parsing of forms into
  `request.args` (several copies of a multipart body, read by no one) is turned off, and
  daphne's queue for the application reads a body kept in a temporary file from that file
  as the application asks for it, instead of holding all of its pieces at once.

The answer is 413 with `{"error": "too_large", "detail": …}` under /api/ (the API's error
shape) and a small plain page elsewhere, and the connection closes after it.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from django.conf import settings

SIGN_IN = ("/accounts/login/", "/admin/login/")
IMPORTS = ("/sessions/import", "/api/sessions/import")
UPLOADS = re.compile(
    r"^/(api/sessions/[0-9a-fA-F-]{32,36}/files|sessions/[0-9a-fA-F-]{32,36}/workspace/upload)/?$"
)
OTLP_TRACES = "/v1/traces"
MULTIPART_ROOM = 64 * 1024  # a file's multipart framing and the form's other fields
# How long a connection that was answered 413 is read on (and what it sends dropped), so
# that the client gets the answer before the connection closes; then it is cut.
LINGER_S = 5.0


@dataclass(frozen=True, slots=True)
class Limit:
    """The most bytes of body a request may send, and how it is refused."""

    size: int
    api: bool
    sender: str  # who may send that much, for the refusal's message

    def detail(self) -> str:
        return f"the request body is over {self.size} bytes, the most {self.sender} may send"

    def refusal(self) -> tuple[list[tuple[bytes, bytes]], bytes]:
        """The 413's headers and body."""
        if self.api:
            body = json.dumps({"error": "too_large", "detail": self.detail()}).encode()
            kind = b"application/json"
        else:
            text = f"Request body too large: {self.detail()}."
            body = (
                "<!doctype html><title>Request body too large</title>"
                f"<h1>Request body too large</h1><p>{text}</p>\n"
            ).encode()
            kind = b"text/html; charset=utf-8"
        headers = [
            (b"content-type", kind),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            (b"cache-control", b"no-store"),
        ]
        return headers, body


def limit_for(method: str, path: str, headers: Iterable[tuple[bytes, bytes]]) -> Limit:
    """The limit of a request, from its path (percent-decoded, as Django routes it) and
    its headers (lower-case names)."""
    # OTLP's door answers in JSON as the API does, and takes the API's bearer tokens.
    api = path.startswith("/api/") or path == OTLP_TRACES
    anonymous = int(settings.STRAND_MAX_ANONYMOUS_BODY_BYTES)
    if path in SIGN_IN:
        return Limit(anonymous, api, "a sign-in")
    if not _carries_credential(headers, api=api):
        return Limit(anonymous, api, "a request without a sign-in or an API token")
    if path.rstrip("/") in IMPORTS:
        return Limit(
            int(settings.STRAND_MAX_IMPORT_BYTES) + MULTIPART_ROOM, api, "a Pi file upload"
        )
    if path == OTLP_TRACES:
        return Limit(int(settings.STRAND_MAX_OTLP_BYTES), api, "an OTLP trace export")
    if method == "POST" and UPLOADS.match(path):
        return Limit(
            int(settings.STRAND_MAX_UPLOAD_BYTES) + MULTIPART_ROOM, api, "an upload of files"
        )
    return Limit(int(settings.STRAND_MAX_BODY_BYTES), api, "a request")


def _carries_credential(headers: Iterable[tuple[bytes, bytes]], *, api: bool) -> bool:
    cookie_name = settings.SESSION_COOKIE_NAME.encode()
    for name, value in headers:
        if name == b"cookie":
            for part in value.split(b";"):
                key, _, token = part.strip().partition(b"=")
                if key == cookie_name and token:
                    return True
        elif name == b"authorization" and api:
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                return True
    return False


def declared_length(headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


# --- the ASGI middleware --------------------------------------------------------------------


class BodyLimits:
    """Refuses a body over its route's limit before the application reads it (see above)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        headers = scope.get("headers") or []
        limit = limit_for(scope.get("method", ""), scope.get("path", ""), headers)
        declared = declared_length(headers)
        if declared is not None and declared > limit.size:
            await _answer_413(send, limit)
            return None
        seen = 0
        refused = False

        async def counted_receive() -> Any:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message.get("type") == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit.size:
                    # Answered here; the application is told the client went away, which
                    # Django takes as a request abandoned before it was read.
                    refused = True
                    await _answer_413(send, limit)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Any) -> None:
            if not refused:
                await send(message)

        return await self.app(scope, counted_receive, guarded_send)


async def _answer_413(send: Any, limit: Limit) -> None:
    headers, body = limit.refusal()
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# --- the same rule inside daphne ----------------------------------------------------------------


def refuse_early_in_daphne() -> None:
    """daphne's request object applies `limit_for` where Twisted has the headers
    (`gotLength`) and where each piece of the body arrives (`handleContentChunk`): a body
    over the limit is answered 413 at once, what follows is dropped unread into nothing,
    and the application is never called for it."""
    try:
        from daphne.http_protocol import WebRequest
    except ImportError:  # served by another server: BodyLimits is the door
        return
    if getattr(WebRequest, "_strand_body_limits", False):
        return
    got_length = WebRequest.gotLength
    handle_content_chunk = WebRequest.handleContentChunk
    request_received = WebRequest.requestReceived

    def gotLength(self: Any, length: int | None) -> None:  # noqa: N802 (Twisted's name)
        channel = self.channel
        target = bytes(getattr(channel, "_path", b"") or b"").split(b"?", 1)[0]
        method = bytes(getattr(channel, "_command", b"") or b"").decode("latin-1")
        headers = [
            (name.lower(), value)
            for name, values in self.requestHeaders.getAllRawHeaders()
            for value in values
        ]
        self._strand_limit = limit_for(method, unquote(target.decode("latin-1")), headers)
        self._strand_seen = 0
        self._strand_refused = False
        if length is not None and length > self._strand_limit.size:
            self.content = io.BytesIO()  # never a temporary file for a body not taken
            _turn_away(self)
            return
        got_length(self, length)

    def handleContentChunk(self: Any, data: bytes) -> None:  # noqa: N802
        if getattr(self, "_strand_refused", False):
            return
        limit = getattr(self, "_strand_limit", None)
        if limit is not None:
            self._strand_seen += len(data)
            if self._strand_seen > limit.size:
                _turn_away(self)
                return
        handle_content_chunk(self, data)

    def requestReceived(self: Any, command: bytes, path: bytes, version: bytes) -> None:  # noqa: N802
        if getattr(self, "_strand_refused", False):
            return  # answered already: the application never sees it
        # Twisted would parse a form body into `request.args` (a multipart one in memory,
        # several copies of it), which daphne never reads: Django parses the body itself.
        self._parsePOSTFormSubmission = False
        request_received(self, command, path, version)

    WebRequest.gotLength = gotLength  # type: ignore[method-assign]
    WebRequest.handleContentChunk = handleContentChunk  # type: ignore[method-assign]
    WebRequest.requestReceived = requestReceived  # type: ignore[method-assign]
    WebRequest._strand_body_limits = True  # type: ignore[attr-defined]
    _read_bodies_as_asked()


def _read_bodies_as_asked() -> None:
    """daphne hands a request's body to the application by putting all of its pieces in
    the application's queue at once, the whole body in memory; for a body Twisted kept in
    a temporary file, the queue keeps where each piece lies instead, and reads it from the
    file when the application asks for it (`_BodyFromFile`)."""
    from daphne.server import Server

    create_application = Server.create_application

    def create_and_read_as_asked(self: Any, protocol: Any, scope: dict[str, Any]) -> Any:
        queue = create_application(self, protocol, scope)
        content = getattr(protocol, "content", None)
        if queue is not None and scope.get("type") == "http" and _is_file(content):
            queue.__class__ = _BodyFromFile
            queue.file, queue.offset = content, 0
        return queue

    Server.create_application = create_and_read_as_asked  # type: ignore[method-assign]


def _is_file(content: Any) -> bool:
    try:
        content.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class _Piece:
    offset: int
    size: int
    more_body: bool


class _BodyFromFile(asyncio.Queue[Any]):
    """An application's queue whose body pieces are read from the request's file as they
    are taken: the pieces daphne reads to put here are dropped at once. A file closed
    meanwhile (the client went away) is taken as the client's disconnection."""

    file: Any
    offset: int

    def _put(self, item: Any) -> None:
        if isinstance(item, dict) and item.get("type") == "http.request":
            size = len(item.get("body", b""))
            item = _Piece(self.offset, size, bool(item.get("more_body", False)))
            self.offset += size
        super()._put(item)

    def _get(self) -> Any:
        item = super()._get()
        if not isinstance(item, _Piece):
            return item
        try:
            body = os.pread(self.file.fileno(), item.size, item.offset) if item.size else b""
        except (OSError, ValueError):
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": body, "more_body": item.more_body}


def _turn_away(request: Any) -> None:
    """Answer 413 on the connection of a request whose body is refused and close it: the
    answer goes out now, whatever the client still sends is read and dropped (a client
    that is still sending when the connection closes under it may never see the answer),
    and the connection is cut after `LINGER_S` seconds."""
    from twisted.internet import reactor

    request._strand_refused = True
    request.content = io.BytesIO()
    # Twisted would answer `Expect: 100-continue` after the headers: the answer is given.
    request.requestHeaders.removeHeader(b"Expect")
    channel = request.channel
    transport = getattr(channel, "transport", None)
    if transport is None:
        return
    headers, body = request._strand_limit.refusal()
    head = b"HTTP/1.1 413 Content Too Large\r\n" + b"".join(
        name + b": " + value + b"\r\n" for name, value in headers
    )
    transport.write(head + b"\r\n" + body)
    channel.dataReceived = lambda data: None  # the rest of the body, dropped as it comes
    if hasattr(transport, "loseWriteConnection"):
        transport.loseWriteConnection()  # the answer, then end of stream for the client
    reactor.callLater(LINGER_S, transport.abortConnection)  # type: ignore[attr-defined,arg-type]
