"""A session as one self-contained HTML file: the branch tree and the three views, with
inline CSS, script and data, so it opens anywhere with no network.

Every entry is in the file once, as a line of the Pi session file in a data block (`<script
type="application/x-ndjson">`, which browsers never run); the file's own script draws the
chat of whichever branch the reader picks from those lines, as Pi's export does, and offers
the same lines as the Pi file to download. The tree's rows (laid out by the tree
projection) and the details of the trace's spans are compact JSON the script draws from;
the trace's turns (with the entries added outside turns) are the markup of the page's trace
template, written by a serializer (`export_trace`), and the context view of the current
branch's latest request is rendered by the page's own template. All data blocks have `<`,
`>` and `&` escaped, so no text of a session can end a block or become markup.

The file grows linearly with the session whatever the shape of its tree, and goes out as a
stream of chunks (a slice of rows, turns, spans or lines at a time), never as one string.
The server's memory is that of a window, not of the session: the log is read a page at a
time through the selectors (the entries once: the tree's records are cut from them as the
Pi file's lines are written away), the trace is folded a window of whole turns at a time
(`projections.trace_windows`), and what has to wait for totals computed after it (the
turns, drawn newest first under the session's totals, the tree's rows and the spans'
details) waits in a temporary file, on disk. One part grows with the number of entries,
though not with their size: the tree, laid out whole from records of a few hundred bytes
an entry (`projections.tree.tree_entry`; about 1.5 KB an entry while it is laid out).
"""

from __future__ import annotations

import io
import itertools
import tempfile
from collections.abc import AsyncIterator, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import orjson
from django.contrib.staticfiles import finders
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import slugify

from projections.chat import Usage
from projections.records import EntryRecord
from projections.trace import TraceSpan
from projections.trace_blocks import trace_blocks
from projections.trace_windows import project_trace_windows
from projections.tree_rows import TreeLayout, TreeRows
from sessions_app import selectors
from sessions_app.models import Session
from sessions_app.services import pi_io
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
from sessions_app.web.export_trace import turns_html
from sessions_app.web.page_query import PageQuery

ITEMS_PER_CHUNK = 1000  # tree rows, spans or Pi file lines written at a time
CHUNK_CHARS = 256 * 1024  # or fewer Pi file lines, once they come to this much text
TURNS_PER_CHUNK = 200  # trace turns rendered at a time
# Read a page of the log at a time: entries (whole Pi entries, a few KB each), and the
# events the trace folds a range of this many seqs at a time.
ENTRIES_PER_READ = 500
EVENTS_PER_READ = 1000
# The trace is folded this many turns (or events, then the rest of a turn) at a time.
TRACE_WINDOW_TURNS = 200
TRACE_WINDOW_EVENTS = 5000
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
    """The export file, in chunks of text (UTF-8 when written).

    Memory is bounded by a window, not by the session: the entries are read a page at a
    time, twice (the tree is laid out from a few hundred bytes an entry, then the Pi file's
    lines go out); the trace is folded a window of turns at a time, oldest first, and each
    window's rendered turns and span data go to a temporary file, to be written newest
    first once the totals above them are known."""
    leaf = session.leaf_entry_id
    base = {"session": session, "q": PageQuery(), "export": True, "can_write": False}
    with tempfile.TemporaryFile() as file:
        pi_lines = _Spilled(file)
        tree = _read_entries(session, pi_lines).layout(leaf)
        trace = _spill_trace(session, base, file)
        context = {
            **base,
            # The context view of the current leaf's latest request.
            **selectors.context_window(session, leaf).as_template_context(),
            "is_owner": True,
            "state": None,
            "tree": _TreeCounts(
                tree.leaf_id, range(tree.nodes), range(tree.roots), rows=range(tree.nodes)
            ),
            "tree_rows": (),  # the file's script draws them from the tree data
            "current_leaf": leaf,
            "view": "chat",
            "turn_count": trace.turns,
            "trace_blocks": trace.blocks,
            "trace_usage": trace.usage,
            "older": None,
            "leaf": leaf,
            "tool_facts": {"errorCodes": trace.error_codes, "approvals": trace.approvals},
            "css": _static_text(STYLES),
            "script": _static_text(SCRIPTS).replace("</", "<\\/"),
            "exported_at": timezone.now(),
            "filename": (slugify(session.title)[:60] or "session") + f"-{str(session.id)[:8]}",
            **{f"{name.replace('-', '_')}_slot": _marker(name) for name in _SLOTS},
        }
        parts = _split(render_to_string(PAGE_TEMPLATE, context))
        del context
        yield parts[0]
        yield from trace.turn_html.newest_first()
        yield parts[1]
        yield from _tree_data(tree)
        yield parts[2]
        yield "["
        for index, chunk in enumerate(trace.span_data.newest_first()):
            yield chunk if index == 0 else "," + chunk
        yield "]"
        yield parts[3]
        yield from pi_lines.in_order()
        yield parts[4]


# --- the trace, folded a window at a time ------------------------------------------------


class _Spilled:
    """Texts written to a temporary file and read back one at a time, in the order they
    were written or newest first."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.places: list[tuple[int, int]] = []  # (offset, length) of each text

    def write(self, text: str) -> None:
        if not text:
            return
        data = text.encode()
        self.file.seek(0, io.SEEK_END)
        self.places.append((self.file.tell(), len(data)))
        self.file.write(data)

    def newest_first(self) -> Iterator[str]:
        return self._read(reversed(self.places))

    def in_order(self) -> Iterator[str]:
        return self._read(iter(self.places))

    def _read(self, places: Iterator[tuple[int, int]]) -> Iterator[str]:
        for offset, length in places:
            self.file.seek(offset)
            yield self.file.read(length).decode()


@dataclass(frozen=True, slots=True)
class _TreeCounts:
    """What the page's tree partial reads of the tree (counts as ranges: `|length`)."""

    leaf_id: str | None
    nodes: range
    roots: range
    rows: range


def _read_entries(session: Session, pi_lines: _Spilled) -> TreeRows:
    """One read of the entries: the Pi file's lines written to `pi_lines`, and what the
    tree reads of each entry kept (`TreeRows`), a few numbers and short texts an entry."""
    tree = TreeRows()

    def entries() -> Iterator[EntryRecord]:
        for entry in selectors.entry_stream(session, page=ENTRIES_PER_READ):
            tree.add(entry)
            yield entry

    for chunk in _pi_lines(session, entries()):
        pi_lines.write(chunk)
    return tree


@dataclass
class _SpilledTrace:
    turn_html: _Spilled
    span_data: _Spilled
    turns: int = 0
    blocks: int = 0  # the turns and the runs of entries outside turns drawn
    usage: Usage | None = None  # None: nothing drawn
    error_codes: dict[str, str] = field(default_factory=dict)
    approvals: dict[str, str] = field(default_factory=dict)


def _spill_trace(session: Session, base: dict[str, Any], file: IO[bytes]) -> _SpilledTrace:
    """Every turn and run of entries outside turns, oldest window first: its blocks
    rendered and its spans' details as JSON written to `file`, the totals kept."""
    trace = _SpilledTrace(turn_html=_Spilled(file), span_data=_Spilled(file))
    events = selectors.trace_log_stream(session.id, last_seq=session.last_seq, page=EVENTS_PER_READ)
    windows = project_trace_windows(
        events, window_turns=TRACE_WINDOW_TURNS, window_events=TRACE_WINDOW_EVENTS
    )
    for chunk in windows:
        blocks = trace_blocks(chunk.view)  # newest first, within the window
        trace.blocks += len(blocks)
        trace.turns += sum(1 for block in blocks if block.turn.kind == "turn")
        for turn in chunk.view.spans:  # summed oldest first, as a whole trace sums them
            trace.usage = (trace.usage or Usage()) + (turn.usage or Usage())
        trace.error_codes.update(chunk.error_codes)
        trace.approvals.update(chunk.approvals)
        html = [turns_html(some, base) for some in _slices(blocks, TURNS_PER_CHUNK)]
        trace.turn_html.write("".join(html))
        spans = (_span(bar.row.span) for block in blocks for bar in block.bars)
        trace.span_data.write(",".join(_json_text(span) for span in spans))
    return trace


# --- data for the file's script -------------------------------------------------------------
#
# Rows and spans go out as JSON arrays rather than objects (a row is a few numbers and two
# short texts; key names would double it). export.js reads them by the same positions.


def _tree_data(tree: TreeLayout) -> Iterator[str]:
    """The tree's rows (`projections.tree_rows.TreeRowData`) as the tree data's JSON, made
    and written a slice of rows at a time."""
    yield f'{{"drawnIndent":{TREE_DRAWN_INDENT},"rows":['
    first = True
    while batch := list(itertools.islice(tree.rows, ITEMS_PER_CHUNK)):
        text = _inert(orjson.dumps(batch).decode()[1:-1])  # the rows, without the brackets
        yield text if first else "," + text
        first = False
    yield "]}"


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


def _json_text(item: Any) -> str:
    return _inert(orjson.dumps(item).decode())


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
    size = 0
    for line in lines:
        batch.append(_inert(line if line.endswith("\n") else line + "\n"))
        size += len(batch[-1])
        if len(batch) >= ITEMS_PER_CHUNK or size >= CHUNK_CHARS:
            yield "".join(batch)
            batch, size = [], 0
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
