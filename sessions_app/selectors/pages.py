"""The windows the session page and the API show: the chat of the end of a path and the
trace of a branch's latest turns, each with what it takes to read further (an older window
of the path, older turns). The page and the API call the same functions with the same
parameters, so they give the same answer.

Every window costs what it shows, not what the session holds: the chat reads the path's
last `limit` entries (and the events of the turns that added them), the trace the events
of its turns. Only the page's explicit "everything" options read more.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from projections.chat import ChatView, project_chat
from projections.records import EntryRecord, EventRecord
from projections.trace import DEFAULT_PAGE_TURNS, TraceSpan, TraceView, pick_turns, project_trace
from sessions_app.models import Session
from sessions_app.selectors.ceilings import whole_read_bytes
from sessions_app.selectors.entries import entry_exists, path_window
from sessions_app.selectors.events import events_of_turns, events_outside_turns
from sessions_app.selectors.subagents import subagent_spans
from sessions_app.selectors.turns import (
    all_turns,
    branch_turns,
    turn_start_seq,
    turns_of_entries,
)

CHAT_ENTRIES = 300  # the chat shows the path's latest entries; all on request


def shown_leaf(session: Session, leaf: str | None) -> str | None:
    """`leaf` (a deep link) when it names an entry of the session, else the current leaf."""
    if leaf and entry_exists(session, leaf):
        return leaf
    return session.leaf_entry_id


# --- chat --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatWindow:
    """The chat of a window of the path to `leaf`: the entries down to `end` (the leaf
    itself, or the last entry of an older window), `above` entries of the path above it."""

    chat: ChatView
    leaf: str | None
    end: str | None
    entries: tuple[EntryRecord, ...]  # the window's path entries, root-most first
    above: int

    @property
    def path_length(self) -> int:
        """The length of the path from the root to `end`."""
        return self.above + len(self.entries)

    @property
    def older_end(self) -> str | None:
        """Where the window above this one ends (its last entry), or None at the root."""
        return self.entries[0].parent_id if self.above and self.entries else None


def chat_window(
    session: Session,
    leaf: str | None,
    *,
    end: str | None = None,
    limit: int | None = None,
    entry: str | None = None,
    everything: bool = False,
) -> ChatWindow:
    """The chat of the last `limit` entries of the path to `end` (default: `leaf`), and of
    no more than `STRAND_API_PAGE_BYTES` of their stored data (the last entry always comes):
    a path of large messages is read a window at a time like any other.

    The page's options: `entry`, a deep link to an earlier entry of the path, opens the chat
    down from it; `everything` shows the whole path. Either stops at the ceiling of a whole
    read (`STRAND_WHOLE_READ_BYTES`), and `older_end` reads on above it."""
    window = path_window(
        session,
        end if end is not None else leaf,
        limit=CHAT_ENTRIES if limit is None else limit,
        entry=entry,
        everything=everything,
        max_bytes=whole_read_bytes() if entry or everything else settings.STRAND_API_PAGE_BYTES,
    )
    path = list(window.entries)
    events = events_of_turns(session.id, turns_of_entries(session, path))
    chat = project_chat(path, window.end, events)
    return ChatWindow(
        chat=chat, leaf=leaf, end=window.end, entries=window.entries, above=window.above
    )


# --- trace -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceWindow:
    """The trace of a page of turns (oldest first); `older` gives the page before it."""

    trace: TraceView | None  # None when the page holds no events
    turns: tuple[int, ...]
    older: int | None
    turn_count: int  # the turns found for the branch (or the session)
    complete: bool  # whether those are all of them (else more lie further up the path)


def trace_window(
    session: Session,
    leaf: str | None,
    *,
    everywhere: bool = False,
    before: int | None = None,
    turns: int = DEFAULT_PAGE_TURNS,
) -> TraceWindow:
    """The latest `turns` turns of the branch to `leaf` (of the whole session with
    `everywhere`), or those before turn `before`."""
    if everywhere:
        numbers, complete = all_turns(session), True
    else:
        numbers, complete = branch_turns(session, leaf, before, page=turns)
    window = pick_turns(numbers, last_n=turns, before_turn=before)
    older = window.older
    if older is None and not complete and window.turns:
        older = window.turns[0]  # more turns lie further up the path
    events = events_of_turns(session.id, window.turns)
    outside = _outside_turns(session, leaf, events, first=older is None, before=before)
    nested = subagent_spans(session, events)
    return TraceWindow(
        trace=project_trace(events, outside=outside, subagents=nested)
        if events or outside
        else None,
        turns=window.turns,
        older=older,
        turn_count=len(numbers),
        complete=complete,
    )


# The trace looks for entries added outside turns among the latest entries of the path shown.
TRACE_OUTSIDE_ENTRIES = 500
_MARK_TYPES = frozenset({"compaction", "context_edit", "usage"})


def _outside_turns(
    session: Session,
    leaf: str | None,
    events: list[EventRecord],
    *,
    first: bool,
    before: int | None,
) -> list[EventRecord]:
    """The entries a trace page draws outside its turns: compactions, context edits, usage
    entries and system messages that no turn added, among the latest TRACE_OUTSIDE_ENTRIES
    entries of the path to `leaf` (on every scope: the branch shown), between the page's
    first turn (from the start when no page is older) and the turn after the page."""
    if leaf is None:
        return []
    window = path_window(
        session, leaf, limit=TRACE_OUTSIDE_ENTRIES, max_bytes=settings.STRAND_API_PAGE_BYTES
    )
    low = -1 if first or not events else events[0].seq
    high = turn_start_seq(session, before) if before is not None else None
    seqs = [
        entry.seq
        for entry in window.entries
        if _is_mark_entry(entry) and entry.seq > low and (high is None or entry.seq < high)
    ]
    return events_outside_turns(session.id, seqs)


def _is_mark_entry(entry: EntryRecord) -> bool:
    if entry.type in _MARK_TYPES:
        return True
    message = entry.data.get("message") if entry.type == "message" else None
    return isinstance(message, dict) and message.get("role") == "system"


def selected_span(
    session: Session, key: str | None, turn: int | None, trace: TraceView | None
) -> TraceSpan | None:
    """The span `key` of the trace shown, or of turn `turn` when it is not shown."""
    if not key:
        return None
    if trace is not None:
        for row in trace.rows:
            if row.span.key == key:
                return row.span
    if turn is None:
        return None
    events = events_of_turns(session.id, [turn])
    nested = subagent_spans(session, events)
    for row in project_trace(events, subagents=nested).rows if events else ():
        if row.span.key == key:
            return row.span
    return None
