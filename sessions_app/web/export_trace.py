"""The HTML export's trace turns, written by a serializer rather than the template.

The export draws every turn of a session, and the template of the page's trace
(`sessions/session.html#trace-older`) spends far more time resolving its variables than the
markup takes to write: the turns were most of a long session's export. This writes the
same markup, character for character, for the export's case of that template (`export`
set: links to the span's anchor, nothing selected, no workspace marks, no older link);
`tests/web/test_export_trace.py` holds the two side by side. Every text is escaped as the
template escapes it (`conditional_escape`). A failed step's card is rare and keeps its own
template (`sessions/_fault_card.html`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.template.loader import render_to_string
from django.utils.html import conditional_escape

from projections.trace import TraceSpan
from projections.trace_blocks import TraceBar, TraceBlock
from sessions_app.templatetags.strand import clock, cost, iso, ms, pair, stamp, tokens, usage_text

FAULT_CARD = "sessions/_fault_card.html"


def turns_html(blocks: Iterable[TraceBlock], context: Mapping[str, Any]) -> str:
    """What `render_to_string(TURNS, {**context, "blocks": blocks, "older": None})` gives
    for the export; `context` is the export's (for the fault cards)."""
    parts = ["\n"]
    for block in blocks:
        parts.append(_block(block, context))
    parts.append("\n\n")
    return "".join(parts)


def _e(value: Any) -> str:
    return str(conditional_escape(value))


def _block(block: TraceBlock, context: Mapping[str, Any]) -> str:
    turn = block.turn
    key, status = _e(turn.key), _e(turn.status)
    usage = turn.usage
    extra = ""
    if usage is not None and usage.total_tokens:
        extra += f" · {_e(tokens(usage.total_tokens))} tokens"
    if usage is not None and usage.cost:
        extra += f" · {_e(cost(usage.cost))}"
    error = ""
    if turn.error and not block.failed_step:
        error = f'<p class="notice error small">{_e(turn.error)}</p>'
    bars = "".join(_bar(bar, context) for bar in block.bars if bar.depth > 0)
    return (
        f'\n<section class="turn-block status-{status}" id="{key}">\n'
        '  <header class="turn-head">\n'
        f'    <a class="turn-title" href="#{key}" data-span="{key}">{_e(turn.name)}</a>\n'
        f'    <span class="pill {status}">{status}</span>\n'
        f'    <span class="muted small"><time datetime="{_e(iso(turn.start))}" '
        f'title="{_e(stamp(turn.start))}">{_e(clock(turn.start))}</time> · '
        f"{_e(ms(block.duration_ms))}{extra}</span>\n"
        "  </header>\n"
        f"  {error}\n"
        '  <ol class="spans">\n'
        f"  {bars}\n"
        "  </ol>\n"
        "</section>\n"
    )


def _bar(bar: TraceBar, context: Mapping[str, Any]) -> str:
    span = bar.row.span
    key, kind, status = _e(span.key), _e(span.kind), _e(span.status)
    depth = bar.depth
    fault = ""
    if span.kind == "step" and span.error:
        fault = f'<li class="span-fault depth-{depth}">{_fault(span, context)}</li>'
    title = ""
    if span.usage and span.kind == "request":
        title = f' title="{_e(usage_text(span.usage))}"'
    return (
        f'\n    <li class="span kind-{kind} status-{status} depth-{depth}">\n'
        f'      <a class="span-name" href="#{key}" data-span="{key}" title="{kind} · {status}">\n'
        f'        <span class="kind">{kind}</span> {_e(span.name)}\n'
        "      </a>\n"
        '      <svg class="span-track" viewBox="0 0 100 10" preserveAspectRatio="none" '
        'aria-hidden="true"><rect class="span-bar" '
        f'x="{bar.left:.2f}" width="{bar.width:.2f}" height="10"/></svg>\n'
        f'      <span class="span-dur">{_duration(span)}</span>\n'
        f'      <span class="span-extra"{title}>{_extra(span)}</span>\n'
        "    </li>\n"
        f"    {fault}\n"
        "  "
    )


def _duration(span: TraceSpan) -> str:
    if span.is_open:
        return "…" if span.status in ("running", "waiting") else "—"
    return _e(ms(span.duration_ms))


def _extra(span: TraceSpan) -> str:
    if span.status != "ok" and span.status != "running":
        status = _e(span.status)
        return f'<span class="pill {status}">{status}</span>'
    if span.ttft_ms is not None:
        return f"TTFT {_e(ms(span.ttft_ms))}"
    return ""


def _fault(span: TraceSpan, context: Mapping[str, Any]) -> str:
    return render_to_string(
        FAULT_CARD,
        {
            **context,
            "title": pair(span.outputs, "fault_title"),
            "message": span.error,
            "attempts": pair(span.outputs, "attempts"),
            "kind": pair(span.outputs, "fault"),
            "entry_id": pair(span.outputs, "failed_entry_id"),
            "return_view": "trace",
        },
    )
