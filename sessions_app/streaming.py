"""Response bodies made a chunk at a time, for the exports of every door (a session's
Pi file and HTML page, the audit desk's CSV and JSON lines, a workspace's tar archive).

Under ASGI Django reads a synchronous iterator into memory whole before it sends a byte, so
an export handed to `StreamingHttpResponse` goes through `streamed`: under ASGI an
asynchronous iterator that makes each chunk in the request's own thread (the one that
holds its database connection), else the iterator itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import AnyStr

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest


def streamed(
    chunks: Iterable[AnyStr], request: HttpRequest
) -> Iterator[AnyStr] | AsyncIterator[AnyStr]:
    if isinstance(request, ASGIRequest):
        return _async_chunks(iter(chunks))
    return iter(chunks)


async def _async_chunks(chunks: Iterator[AnyStr]) -> AsyncIterator[AnyStr]:
    step = sync_to_async(lambda: next(chunks, None), thread_sensitive=True)
    try:
        while (chunk := await step()) is not None:
            yield chunk
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            await sync_to_async(close, thread_sensitive=True)()
