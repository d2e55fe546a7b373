"""The trace of a whole log a window of turns at a time: the spans `project_trace` gives
for every turn of the log, with the memory of one window (the HTML export's fold).

Events are fed in seq order: those with a turn number, and those of the entries added
outside any turn that the trace draws (`trace.is_mark`: compactions, context edits, usage
entries, system messages, of every branch), which go into the fold as its `outside`; the
rest are skipped. They are held until the window is full (WINDOW_TURNS turns or
WINDOW_EVENTS events) and the next turn or entry outside turns begins; then the window is
folded by `project_trace` and handed out, oldest first, with the chat's tool facts of its
events. A window holds whole turns, so a single turn longer than WINDOW_EVENTS is held
whole; a window may hold entries outside turns only (an imported Pi file has no turns).

What a turn reads of the events of earlier turns goes into the next fold as context, cut
to the fields that are read and with no turn number, so that it forms no turn of its own:
the request headers (a request names the header in force, written only when it changed),
the queued input (a follow-up is queued in one turn and claimed at the start of the next)
and, for the tool facts, the approvals asked and not yet decided. A window's `end` is the
latest event time so far (a turn still open is drawn up to it, as in a whole fold).

One difference with a fold of the whole log: an approval decided in a later window than
the one it was asked in is drawn undecided in the trace (a turn decides its own approvals
or closes them as cancelled before it ends).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from projections.chat import tool_facts
from projections.records import EventRecord
from projections.trace import TraceView, is_mark, project_trace

WINDOW_TURNS = 200
WINDOW_EVENTS = 5000


@dataclass(frozen=True, slots=True)
class TraceChunk:
    view: TraceView  # the window's turns, oldest first
    error_codes: dict[str, str]  # the window's share of `chat.tool_facts`
    approvals: dict[str, str]


@dataclass
class _Carried:
    """What later windows read of earlier ones, cut to what they read."""

    headers: dict[int, EventRecord] = field(default_factory=dict)  # seq → request/header
    queued: dict[str, EventRecord] = field(default_factory=dict)  # inbox id → inbox/queued
    asked: dict[str, EventRecord] = field(default_factory=dict)  # approval id → undecided ask
    end: datetime | None = None

    def take(self, window: Iterable[EventRecord]) -> None:
        for event in window:
            data = event.data
            if event.type == "request/header":
                self.headers[event.seq] = _cut(event, ("provider", "model"))
            elif event.type == "inbox/queued":
                self.queued[str(data.get("inbox_id"))] = _cut(event, ("inbox_id", "target"))
            elif event.type == "approval/asked":
                self.asked[str(data.get("approval_id"))] = _cut(event, ("approval_id", "call_id"))
            elif event.type == "approval/decided":
                self.asked.pop(str(data.get("approval_id")), None)


def _cut(event: EventRecord, keys: tuple[str, ...]) -> EventRecord:
    data: Mapping[str, Any] = {key: event.data[key] for key in keys if key in event.data}
    return EventRecord(event.seq, event.type, event.version, event.time, data)


def project_trace_windows(
    events: Iterable[EventRecord],
    *,
    window_turns: int = WINDOW_TURNS,
    window_events: int = WINDOW_EVENTS,
) -> Iterator[TraceChunk]:
    """The trace of `events` (the log in seq order), a window of whole turns at a time."""
    carried = _Carried()
    window: list[EventRecord] = []
    outside: list[EventRecord] = []
    turns: set[int] = set()
    between = True  # the window's latest turn has ended
    for event in events:
        if event.turn is None and not is_mark(event):
            continue
        full = len(turns) >= window_turns or len(window) + len(outside) >= window_events
        # A window ends before a new turn, or before an entry outside turns when no turn
        # of it is still open (a turn cut by a crash never ends: the next one cuts it).
        starts = event.turn not in turns if event.turn is not None else between
        if (window or outside) and full and starts:
            yield _fold(window, outside, carried)
            window, outside, turns, between = [], [], set(), True
        if event.turn is None:
            outside.append(event)
            continue
        window.append(event)
        turns.add(event.turn)
        # A job may end after its turn (and after others), and an observed turn's late
        # agent span come after it: neither opens the turn again.
        if event.type not in ("job/ended", "turn/observed"):
            between = event.type == "turn/end"
    if window or outside:
        yield _fold(window, outside, carried)


def _fold(window: list[EventRecord], outside: list[EventRecord], carried: _Carried) -> TraceChunk:
    # Carried events are older than the window's and have no turn: the fold files the
    # headers and queued input and puts them in no turn.
    context = [*carried.headers.values(), *carried.queued.values()]
    view = project_trace([*context, *window], outside=outside)
    error_codes, approvals = tool_facts([*carried.asked.values(), *window])
    carried.take(window)
    ends = [time for time in (carried.end, view.end) if time is not None]
    carried.end = max(ends) if ends else None
    first = min(event.seq for event in (*window, *outside))
    view = replace(view, end=carried.end, first_seq=first)
    return TraceChunk(view=view, error_codes=error_codes, approvals=approvals)
