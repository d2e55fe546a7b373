"""Provider faults on demand, for the offline model: every failure a real provider can
produce, without a network, so that a person can see how each is recorded and shown.

Grammar (the last user message, case-insensitive):

    fault KIND [once]

KIND is one of the keys of `FAULTS` (`fault 429`, `fault cut`, `fault stall`…). Without
`once` every attempt fails the same way, and the preset's `max_retries` and backoff decide
how many attempts are made before the reply is recorded as failed. With `once`, only the
first request of its exact payload in this process fails: an automatic retry, or a Retry
from the page, succeeds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime.providers.base import (
    AUTH,
    CONTEXT_LENGTH,
    CUT,
    MALFORMED,
    NOT_A_STREAM,
    OVERLOADED,
    RATE_LIMITED,
    SERVER_ERROR,
    STALL,
    ProviderError,
    StopUpdate,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    UsageUpdate,
)

# The longest the offline model stays silent for `fault stall` (a real provider is given
# the preset's request_timeout_s, ten minutes by default: too long to watch).
STALL_MAX_S = 3.0

_FAULT = re.compile(r"\bfault\s+(?P<kind>[a-z0-9-]+)(?P<once>\s+once\b)?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class FaultCase:
    kind: str  # the fault kind it produces (`runtime.providers.base`)
    status: int | None = None
    message: str = ""
    retry_after_s: float | None = None
    partial: str = ""  # text streamed before it fails


FAULTS: dict[str, FaultCase] = {
    "cut": FaultCase(CUT, message="the stream ended before a finish_reason", partial="Once "),
    "cut-tool": FaultCase(CUT, message="the stream ended inside a tool call"),
    "stall": FaultCase(STALL, partial="Thinking about "),
    "429": FaultCase(RATE_LIMITED, 429, "Rate limit reached for requests"),
    "429-wait": FaultCase(RATE_LIMITED, 429, "Rate limit reached for requests", 1.0),
    "500": FaultCase(SERVER_ERROR, 500, "The server had an error processing your request"),
    "502": FaultCase(SERVER_ERROR, 502, "Bad gateway"),
    "503": FaultCase(SERVER_ERROR, 503, "The service is temporarily unavailable"),
    "529": FaultCase(OVERLOADED, 529, "Overloaded"),
    "malformed": FaultCase(
        MALFORMED,
        message="invalid JSON in an event (Expecting value at 0: '{\"choices\": [')",
        partial="Here ",
    ),
    "not-stream": FaultCase(
        NOT_A_STREAM,
        message="content type 'application/json', body '{\"id\": \"chatcmpl-1\", …}'",
    ),
    "bad-args": FaultCase(""),  # a complete answer whose tool call is not JSON
    "401": FaultCase(AUTH, 401, "Incorrect API key provided"),
    "403": FaultCase(AUTH, 403, "This key may not use this model"),
    "context": FaultCase(CONTEXT_LENGTH, 400, "prompt is too long: 250000 tokens > 200000 maximum"),
}

Pause = Callable[[], Awaitable[None]]


# Payloads that already failed with `once`: process memory, bounded, never a fact.
_FAILED_ONCE: OrderedDict[str, None] = OrderedDict()
FAILED_ONCE_LIMIT = 4096


def first_time(name: str, payload: Mapping[str, Any]) -> bool:
    """Whether fault `name` with `once` has not yet failed this exact payload (and now has)."""
    key = hashlib.sha256(
        json.dumps([name, payload], sort_keys=True, default=str).encode()
    ).hexdigest()
    if key in _FAILED_ONCE:
        return False
    _FAILED_ONCE[key] = None
    while len(_FAILED_ONCE) > FAILED_ONCE_LIMIT:
        _FAILED_ONCE.popitem(last=False)
    return True


def requested_fault(text: str) -> tuple[str, bool] | None:
    """(fault name, once) when `text` asks for a fault the offline model knows."""
    match = _FAULT.search(text)
    if match is None or match["kind"].lower() not in FAULTS:
        return None
    return match["kind"].lower(), bool(match["once"])


async def fault_stream(name: str, *, stall_s: float, pause: Pause) -> AsyncIterator[StreamEvent]:
    """What the offline model streams for fault `name`: what a provider would have sent
    before failing, then the failure (a `ProviderError`)."""
    case = FAULTS[name]
    yield UsageUpdate(input=12, output=0, cache_read=0, cache_write=0)
    for word in case.partial.split(" "):
        if word:
            await pause()
            yield TextDelta("text", word + " ")
    if name in ("cut-tool", "bad-args"):
        await pause()
        yield TextDelta("text", "Reading it now.")
        await pause()
        yield ToolCallDelta("tool-0", call_id="call_fault", name="read", arguments='{"pa')
        if name == "bad-args":
            yield ToolCallDelta("tool-0", arguments='th": notes.txt')
            yield UsageUpdate(output=8)
            yield StopUpdate("toolUse")
            return
    if case.kind == STALL:
        waited = min(stall_s, STALL_MAX_S)
        await asyncio.sleep(waited)
        raise ProviderError(
            f"no data for {waited:g} s (the offline model's stand-in for a stalled stream)",
            kind=STALL,
        )
    raise ProviderError(
        case.message,
        status=case.status,
        kind=case.kind,
        retry_after_s=case.retry_after_s,
        overflow=case.kind == CONTEXT_LENGTH,
    )
