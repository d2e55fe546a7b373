"""The numbers one event adds to the usage rollups, and percentiles read back from them.

An event gives `UsageFigure`s: a metric, an optional label and a value. The projector sums
them per owner, day, session, provider and model. A reply (`assistant/message`) gives its
tokens and cost (Pi's `usage`, the cost the audit desk and the session pages show: `usage.cost
.total`), and its time to first token and duration as one count in a latency bucket, so that
percentiles per model can be read from the sums; a tool call counts under its tool, a failed
tool result as an error of its tool; a turn counts under how it ended; a provider fault
(a failed reply's `fault`, or a retried attempt's `previous_fault`) under its kind.

A Pi file's entries count the same way once imported: its replies (`entry/message`, with the
tool calls in their content and the tool results that failed), and Pi 1.6's `usage` entries,
the cost spent outside the context, under their provider and model (and their kind, known
or not, in `usage_entries`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

# Upper bounds (ms) of the latency buckets; a value past the last goes in "inf".
BUCKETS_MS = (
    50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 7500, 10000, 15000, 20000,
    30000, 60000, 120000, 300000,
)  # fmt: skip

TOKEN_METRICS = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cacheRead": "cache_read_tokens",
    "cacheWrite": "cache_write_tokens",
}


@dataclass(frozen=True, slots=True)
class UsageFigure:
    metric: str
    value: Decimal
    label: str = ""
    provider: str = ""
    model: str = ""


def event_figures(event_type: str, data: Mapping[str, Any]) -> list[UsageFigure]:
    return list(_figures(event_type, data))


def _figures(event_type: str, data: Mapping[str, Any]) -> Iterator[UsageFigure]:
    one = Decimal(1)
    if event_type == "assistant/message":
        yield from _reply_figures(data)
    elif event_type == "entry/message":
        # A Pi file's entries, imported: its replies, the tools they call, their failures.
        message = _message(data)
        if message.get("role") == "assistant":
            yield from _reply_figures(data)
            for part in _parts(message):
                if part.get("type") == "toolCall":
                    yield UsageFigure("tool_calls", one, label=_label(part.get("name")))
        elif message.get("role") == "toolResult" and message.get("isError") is True:
            yield UsageFigure("tool_errors", one, label=_label(message.get("toolName")))
    elif event_type == "entry/usage":
        # Pi 1.6's cost outside the context (a cache warm-up, a summary's model call...).
        yield from _usage_entry_figures(data)
    elif event_type == "tool/call":
        yield UsageFigure("tool_calls", one, label=_label(data.get("tool")))
    elif event_type == "tool/result":
        message = _message(data)
        if message.get("isError") is True:
            yield UsageFigure("tool_errors", one, label=_label(message.get("toolName")))
    elif event_type == "turn/end":
        yield UsageFigure("turns", one, label=_label(data.get("reason")))
    elif event_type == "request/sent":
        yield UsageFigure("requests", one)
        fault = data.get("previous_fault")
        if isinstance(fault, Mapping):
            yield UsageFigure("faults", one, label=_label(fault.get("kind")))


def _reply_figures(data: Mapping[str, Any]) -> Iterator[UsageFigure]:
    message = _message(data)
    provider, model = _label(message.get("provider")), _label(message.get("model"))

    def figure(metric: str, value: Decimal, label: str = "") -> UsageFigure:
        return UsageFigure(metric, value, label=label, provider=provider, model=model)

    yield figure("replies", Decimal(1))
    yield from _token_figures(message.get("usage"), provider, model)
    timing = data.get("timing")
    if isinstance(timing, Mapping):
        for key, metric in (("ttft_ms", "ttft_ms"), ("duration_ms", "duration_ms")):
            ms = _number(timing.get(key))
            if ms is not None:
                yield figure(metric, Decimal(1), label=bucket_label(ms))
    fault = data.get("fault")
    if isinstance(fault, Mapping):
        yield figure("faults", Decimal(1), label=_label(fault.get("kind")))
    if message.get("stopReason") == "aborted":
        yield figure("aborted_replies", Decimal(1))


def _token_figures(usage: Any, provider: str, model: str) -> Iterator[UsageFigure]:
    if not isinstance(usage, Mapping):
        return
    parts = {name: _number(usage.get(key)) for key, name in TOKEN_METRICS.items()}
    for name, value in parts.items():
        if value:
            yield UsageFigure(name, value, provider=provider, model=model)
    total = _number(usage.get("totalTokens"))
    if total is None:
        total = sum((v for v in parts.values() if v is not None), Decimal(0))
    if total:
        yield UsageFigure("total_tokens", total, provider=provider, model=model)
    cost = usage.get("cost")
    spent = _number(cost.get("total")) if isinstance(cost, Mapping) else None
    if spent:
        yield UsageFigure("cost", spent, provider=provider, model=model)


def _usage_entry_figures(data: Mapping[str, Any]) -> Iterator[UsageFigure]:
    entry = data.get("entry")
    if not isinstance(entry, Mapping):
        return
    provider, model = _label(entry.get("provider")), _label(entry.get("model"))
    # Any kind, those no version of Pi defines included, counts by its name.
    kind = _label(entry.get("kind"))
    yield UsageFigure("usage_entries", Decimal(1), label=kind, provider=provider, model=model)
    yield from _token_figures(entry.get("usage"), provider, model)


def _parts(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [part for part in content if isinstance(part, Mapping)]


def bucket_label(ms: Decimal | float) -> str:
    index = bisect.bisect_left(BUCKETS_MS, ms)
    return str(BUCKETS_MS[index]) if index < len(BUCKETS_MS) else "inf"


def percentile(buckets: Mapping[str, int], fraction: float) -> float | None:
    """The upper bound (ms) of the bucket the `fraction` percentile falls in; None when
    nothing was counted, inf past the last bucket."""
    counted = sorted(
        ((float("inf") if k == "inf" else float(k), n) for k, n in buckets.items() if n > 0)
    )
    total = sum(n for _, n in counted)
    if not total:
        return None
    rank = fraction * total
    seen = 0
    for bound, n in counted:
        seen += n
        if seen >= rank:
            return bound
    return counted[-1][0]


def merge_buckets(rows: Iterable[tuple[str, int]]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for label, count in rows:
        merged[label] = merged.get(label, 0) + count
    return merged


def _message(data: Mapping[str, Any]) -> Mapping[str, Any]:
    entry = data.get("entry")
    message = entry.get("message") if isinstance(entry, Mapping) else None
    return message if isinstance(message, Mapping) else {}


def _label(value: Any) -> str:
    return value[:128] if isinstance(value, str) else ""


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None
