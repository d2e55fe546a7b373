"""Response bodies made a chunk at a time, for the exports of every door (a session's
Pi file and HTML page, the audit desk's CSV and JSON lines, a workspace's tar archive).

Under ASGI Django reads a synchronous iterator into memory whole before it sends a byte, so
an export handed to `StreamingHttpResponse` goes through `streamed`: under ASGI an
asynchronous iterator that makes each chunk in the request's own thread (the one that
holds its database connection), else the iterator itself.

Each step from one thread to the other costs about a quarter of a millisecond, so small
chunks (an export's lines) are gathered into pieces of at least `GATHER` characters first:
a Pi file of 24,000 lines took 5.6 s through daphne a line at a time. A body whose chunks
must each go out as soon as they are made (the import's progress lines) asks for none.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import AnyStr

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest

GATHER = 64 * 1024


def streamed(
    chunks: Iterable[AnyStr], request: HttpRequest, *, gather: int | None = None
) -> Iterator[AnyStr] | AsyncIterator[AnyStr]:
    at_least = GATHER if gather is None else gather
    pieces = _gathered(iter(chunks), at_least) if at_least > 0 else iter(chunks)
    if isinstance(request, ASGIRequest):
        return _async_chunks(pieces)
    return pieces


def _gathered(chunks: Iterator[AnyStr], at_least: int) -> Iterator[AnyStr]:
    """`chunks` joined into pieces of at least `at_least` characters (or bytes), the last
    one shorter; `chunks` closed when this is (a server-side cursor behind it is let go)."""
    try:
        pending: list[AnyStr] = []
        size = 0
        for chunk in chunks:
            pending.append(chunk)
            size += len(chunk)
            if size >= at_least:
                yield _joined(pending)
                pending, size = [], 0
        if pending:
            yield _joined(pending)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def _joined(pending: list[AnyStr]) -> AnyStr:
    return pending[0] if len(pending) == 1 else pending[0][:0].join(pending)


async def _async_chunks(chunks: Iterator[AnyStr]) -> AsyncIterator[AnyStr]:
    step = sync_to_async(lambda: next(chunks, None), thread_sensitive=True)
    try:
        while (chunk := await step()) is not None:
            yield chunk
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            await sync_to_async(close, thread_sensitive=True)()
