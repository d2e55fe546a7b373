"""Provider failures as `ProviderError`s with a fault kind, for both SDKs.

The official SDKs raise their own exception classes; under them sit the HTTP client's
(timeouts, broken connections), and a stream can also break in ways no exception names (it
ends early, or a chunk is not JSON). Everything here turns one of those into a
`ProviderError` whose `kind` says what happened, whose `status` and `retry_after_s` come
from the response, and whose message never holds the API key.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

from runtime.providers.base import (
    CONNECTION,
    CUT,
    MALFORMED,
    NOT_A_STREAM,
    STALL,
    ProviderError,
    fault_kind,
    is_context_overflow,
)

# Key-shaped words (OpenAI's sk-…, Anthropic's sk-ant-…, masked forms like sk-proj-****1234)
# that a provider may quote back in an authentication error.
_KEYLIKE = re.compile(r"\b(?:sk|pk|rk|key|api[_-]?key)[-_][A-Za-z0-9_*.\-]{3,}", re.IGNORECASE)
SNIPPET = 300


def redact(text: str, secret: str | None) -> str:
    """`text` without the key, and without anything that looks like a key."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "[redacted]")
    return _KEYLIKE.sub("[redacted]", text)


def retry_after_s(headers: Any) -> float | None:
    """What `Retry-After` (or the `retry-after-ms` both SDKs read) asks to wait, in seconds."""
    if headers is None:
        return None
    try:
        raw_ms = headers.get("retry-after-ms")
        raw = headers.get("retry-after")
    except AttributeError:
        return None
    if raw_ms:
        try:
            return max(float(raw_ms) / 1000, 0.0)
        except ValueError:
            pass
    if not raw:
        return None
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def error_fields(body: Any) -> tuple[str | None, str | None]:
    """(type or code, message) of an error body in either provider's shape."""
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping):
            code = error.get("code") or error.get("type")
            message = error.get("message")
            return (str(code) if code else None), (str(message) if message else None)
        if isinstance(error, str):
            return None, error
    return None, None


def from_sdk_error(exc: Exception, *, secret: str | None, streaming: bool) -> ProviderError:
    """A `ProviderError` for an exception an SDK (or the HTTP client under it) raised.
    `streaming`: the response had started, so a broken connection cut the answer."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"APITimeoutError", "TimeoutException"}:
        return ProviderError(
            redact(f"no data arrived in time ({type(exc).__name__})", secret), kind=STALL
        )
    if names & {"APIConnectionError", "TransportError", "NetworkError", "ProtocolError"}:
        cause = exc.__cause__ or exc.__context__
        detail = str(cause or exc) or type(exc).__name__
        return ProviderError(
            redact(f"{type(cause or exc).__name__}: {detail}", secret),
            kind=CUT if streaming else CONNECTION,
        )
    status = getattr(exc, "status_code", None)
    # Anthropic reports an error event inside a 200 stream with the stream's status.
    if status == 200:
        status = None
    code, body_message = error_fields(getattr(exc, "body", None))
    message = body_message or str(getattr(exc, "message", None) or exc)
    response = getattr(exc, "response", None)
    kind = fault_kind(status, code)
    overflow = is_context_overflow(message, code)
    return ProviderError(
        redact(message, secret),
        status=status,
        overflow=overflow,
        kind=None if overflow else kind,
        retry_after_s=retry_after_s(getattr(response, "headers", None)),
        code=code,
    )


def malformed(exc: Exception, *, secret: str | None) -> ProviderError:
    """A chunk or event that could not be read."""
    if isinstance(exc, json.JSONDecodeError):
        snippet = exc.doc[max(exc.pos - 40, 0) : exc.pos + 40]
        detail = f"invalid JSON in an event ({exc.msg} at {exc.pos}: {snippet!r})"
    else:
        detail = f"an event of an unexpected shape ({type(exc).__name__}: {exc})"
    return ProviderError(redact(detail, secret), kind=MALFORMED)


async def check_event_stream(response: Any, *, secret: str | None) -> None:
    """Refuse a 200 answer that is not an event stream (a proxy that ignores `stream`).
    A response with no content type at all is let through: its end is checked anyway."""
    content_type = str(response.headers.get("content-type") or "")
    if not content_type or "text/event-stream" in content_type.lower():
        return
    try:
        body = (await response.aread()).decode("utf-8", "replace")
    except Exception:  # the body is only for the message
        body = ""
    snippet = " ".join(body.split())[:SNIPPET]
    raise ProviderError(
        redact(f"content type {content_type!r}, body {snippet!r}", secret), kind=NOT_A_STREAM
    )


def classify(
    exc: Exception, sdk_error: type[Exception], *, secret: str | None, streaming: bool
) -> ProviderError:
    """The `ProviderError` for what a provider's request or stream raised. Anything that
    is neither the SDK's, the HTTP client's, a socket's nor a JSON error is a bug of ours
    and is raised again as it is."""
    if isinstance(exc, json.JSONDecodeError):
        return malformed(exc, secret=secret)
    transport = any(cls.__name__ == "TransportError" for cls in type(exc).__mro__)
    if isinstance(exc, sdk_error | OSError) or transport:
        return from_sdk_error(exc, secret=secret, streaming=streaming)
    raise exc
