"""A session as one self-contained HTML file: the branch tree and the three views, with
inline CSS, script and data, so it opens anywhere with no network.

Every entry is in the file once, as a line of the Pi session file in a data block (`<script
type="application/x-ndjson">`, which browsers never run); the file's own script draws the
chat of whichever branch the reader picks from those lines, as Pi's export does, and offers
the same lines as the Pi file to download. The tree's rows (laid out by the tree
projection) and the details of the trace's spans are compact JSON the script draws from;
the trace's turns and the context view of the current branch's latest request are rendered
by the pages' own templates. All data blocks have `<`, `>` and `&` escaped, so no text of
a session can end a block or become markup.

The file grows linearly with the session whatever the shape of its tree, and goes out as a
stream of chunks (a slice of rows, turns, spans or lines at a time), never as one string;
the folds themselves (tree, trace) hold their records in memory, linear in the session.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from django.contrib.staticfiles import finders
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import slugify

from projections.chat import tool_facts
from projections.records import EntryRecord
from projections.trace import TraceSpan, project_trace
from projections.trace_blocks import trace_blocks
from projections.tree import TreeRow, project_tree
from sessions_app import pi_io, selectors
from sessions_app.models import Session
from sessions_app.page_query import PageQuery
from sessions_app.streaming import streamed
from sessions_app.templatetags.strand import (
    TREE_DRAWN_INDENT,
    clip,
    is_long,
    ms,
    stamp,
    usage_text,
    value_text,
)

ITEMS_PER_CHUNK = 1000  # tree rows, spans or Pi file lines written at a time
TURNS_PER_CHUNK = 200  # trace turns rendered at a time
STYLES = ("css/strand.css", "css/highlight.css")
SCRIPTS = ("js/strand.js", "js/export.js")
PAGE_TEMPLATE = "sessions/export.html"
TURNS = "sessions/session.html#trace-older"

# Markers the page skeleton holds where the long parts go; NUL never occurs in a rendered
# template (the store refuses it in every text), so a marker cannot be forged by content.
_SLOTS = ("turns", "tree-data", "span-data", "pi-lines")  # in the template's order

T = TypeVar("T")


def export_stream(session: Session, request: HttpRequest) -> Iterator[str] | AsyncIterator[str]:
    """The export as a response body, streamed under ASGI too."""
    return streamed(export_html(session), request)


def export_html(session: Session) -> Generator[str, None, None]:
    """The export file, in chunks of text (UTF-8 when written)."""
    entries = selectors.entry_records(session)
    leaf = session.leaf_entry_id
    tree = project_tree(entries, leaf)
    turn_events = [event for event in selectors.log_stream(session.id) if event.turn is not None]
    trace = project_trace(turn_events) if turn_events else None
    error_codes, approvals = tool_facts(turn_events)
    del turn_events
    blocks = trace_blocks(trace)
    base = {"session": session, "q": PageQuery(), "export": True, "can_write": False}
    context = {
        **base,
        # The context view of the current leaf's latest request.
        **selectors.context_window(session, leaf).as_template_context(),
        "is_owner": True,
        "state": None,
        "tree": tree,
        "tree_rows": (),  # the file's script draws them from the tree data
        "current_leaf": leaf,
        "view": "chat",
        "trace": trace,
        "blocks": blocks,
        "older": None,
        "leaf": leaf,
        "tool_facts": {"errorCodes": error_codes, "approvals": approvals},
        "css": _static_text(STYLES),
        "script": _static_text(SCRIPTS).replace("</", "<\\/"),
        "exported_at": timezone.now(),
        "filename": (slugify(session.title)[:60] or "session") + f"-{str(session.id)[:8]}",
        **{f"{name.replace('-', '_')}_slot": _marker(name) for name in _SLOTS},
    }
    parts = _split(render_to_string(PAGE_TEMPLATE, context))
    yield parts[0]
    for some_blocks in _slices(blocks, TURNS_PER_CHUNK):
        yield render_to_string(TURNS, {**base, "older": None, "blocks": some_blocks})
    yield parts[1]
    yield from _json_array(
        (_tree_row(row, leaf) for row in tree.rows),
        head=f'{{"drawnIndent":{TREE_DRAWN_INDENT},"rows":[',
        tail="]}",
    )
    yield parts[2]
    spans = (bar.row.span for block in blocks for bar in block.bars)
    yield from _json_array((_span(span) for span in spans), head="[", tail="]")
    yield parts[3]
    yield from _pi_lines(session, entries)
    yield parts[4]


# --- data for the file's script -------------------------------------------------------------
#
# Rows and spans go out as JSON arrays rather than objects (a row is a few numbers and two
# short texts; key names would double it). export.js reads them by the same positions.


def _tree_row(row: TreeRow, current_leaf: str | None) -> list[Any]:
    """[id, depth, indent, connector (0 none, 1 "├─", 2 "└─"), type, role, text, label,
    newest leaf id, children, descendants, on the active path, the current leaf]"""
    node = row.node
    connector = {"": 0, "├─": 1, "└─": 2}[row.connector]
    return [
        node.id,
        node.depth,
        row.display_indent,
        connector,
        node.type,
        node.role,
        node.text,
        node.label,
        node.newest_leaf_id,
        len(node.children),
        node.descendants,
        int(node.on_active_path),
        int(node.id == current_leaf),
    ]


def _span(span: TraceSpan) -> list[Any]:
    """[key, kind, name, status, start, start seq, duration, time to first token, tokens,
    error, inputs, outputs]; texts as the pages' span details write them, and each input
    or output as [name, text, drawn as a block]."""
    if span.is_open:
        waiting = span.status in ("running", "waiting")
        duration = "still open" if waiting else "never ended"
    else:
        duration = ms(span.duration_ms)
    return [
        span.key,
        span.kind,
        span.name,
        span.status,
        stamp(span.start),
        span.start_seq,
        duration,
        None if span.ttft_ms is None else ms(span.ttft_ms),
        usage_text(span.usage) if span.usage else None,
        span.error,
        [_pair(key, value) for key, value in span.inputs],
        [_pair(key, value) for key, value in span.outputs],
    ]


def _pair(key: str, value: Any) -> list[Any]:
    text = value_text(value)
    return [key, clip(text) if is_long(value) else text, int(is_long(value))]


def _json_array(items: Iterable[Any], *, head: str, tail: str) -> Iterator[str]:
    yield head
    batch: list[str] = []
    first = True
    for item in items:
        text = _inert(json.dumps(item, ensure_ascii=False, separators=(",", ":")))
        batch.append(text if first else "," + text)
        first = False
        if len(batch) >= ITEMS_PER_CHUNK:
            yield "".join(batch)
            batch = []
    yield "".join(batch) + tail


def _marker(name: str) -> SafeString:
    return mark_safe(f"\x00slot:{name}\x00")


def _split(skeleton: str) -> list[str]:
    parts: list[str] = []
    rest = skeleton
    for name in _SLOTS:
        before, found, rest = rest.partition(_marker(name))
        if not found:
            raise RuntimeError(f"the export template has no {name} slot")
        parts.append(before)
    parts.append(rest)
    return parts


def _slices(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _pi_lines(session: Session, entries: Iterable[EntryRecord]) -> Iterator[str]:
    """The Pi file's lines for the data block. `<`, `>` and `&` occur only inside JSON
    strings, where their \\u escapes mean the same, so no line can close the block."""
    lines = pi_io.pi_export_lines(session, entries)
    batch: list[str] = []
    for line in lines:
        batch.append(_inert(line if line.endswith("\n") else line + "\n"))
        if len(batch) >= ITEMS_PER_CHUNK:
            yield "".join(batch)
            batch = []
    if batch:
        yield "".join(batch)


def _inert(line: str) -> str:
    return line.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _static_text(names: tuple[str, ...]) -> str:
    parts: list[str] = []
    for name in names:
        found: Any = finders.find(name)
        if found:
            parts.append(Path(found).read_text(encoding="utf-8"))
    return "\n".join(parts)
