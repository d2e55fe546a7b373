"""Reads that views, the API and commands share. Nothing here writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection

from projections.context import (
    EMPTY_CONTEXT,
    UNSET,
    PathSettings,
    SessionContext,
    UnsetType,
    build_context_from_window,
    build_session_context,
)
from projections.records import EntryRecord, EventRecord
from projections.request import RequestNotFound, RequestView, project_request
from projections.tree import TreeRow, TreeView, project_tree
from sessions_app import store
from sessions_app.models import Event, Session


def session_context(session: Session, leaf_id: str | None | UnsetType = UNSET) -> SessionContext:
    """The model context for a leaf of the session (its current leaf when not given).

    Pi's rules for the leaf: None is the empty context; an id that names no entry falls back
    to the session's last entry. Only the kept window is read: the entries from the latest
    compaction's first kept entry (or the compaction) down to the leaf, plus the two entries
    that set the thinking level and the model, which each entry records on append. So the
    cost follows the window, not the length of the session.
    """
    if isinstance(leaf_id, UnsetType):
        leaf_id = session.leaf_entry_id
    if leaf_id is None:
        return EMPTY_CONTEXT
    leaf = _entry_facts(session, leaf_id) or _last_entry_facts(session)
    if leaf is None:
        return EMPTY_CONTEXT
    wanted = [i for i in (leaf.compaction, leaf.thinking, leaf.model) if i is not None]
    found = {e.id: e for e in store.entries_by_id(session.id, wanted)}
    compaction = found.get(leaf.compaction) if leaf.compaction else None
    window = store.path_to_root(session.id, leaf.id, min_depth=_window_top(session, compaction))
    settings = PathSettings(
        thinking=found.get(leaf.thinking) if leaf.thinking else None,
        model=found.get(leaf.model) if leaf.model else None,
        compaction=compaction,
    )
    return build_context_from_window(window, settings)


def _window_top(session: Session, compaction: EntryRecord | None) -> int:
    """The depth the kept window starts at: the first kept entry's, when it is an ancestor
    of the compaction (an entry elsewhere, or a missing one, keeps nothing before it)."""
    if compaction is None:
        return 0
    depth = store.depth_of(session.id, compaction.id)
    first_kept = compaction.data.get("firstKeptEntryId")
    if isinstance(first_kept, str):
        kept_depth = store.depth_of(session.id, first_kept)
        if kept_depth is not None and depth is not None and kept_depth <= depth:
            return kept_depth
    return depth or 0


@dataclass(frozen=True)
class _LeafFacts:
    id: str
    compaction: str | None
    thinking: str | None
    model: str | None


def _entry_facts(session: Session, entry_id: str) -> _LeafFacts | None:
    return _facts(
        session,
        "SELECT entry_id, path_compaction, path_thinking, path_model FROM sessions_app_entry "
        "WHERE session_id = %s AND entry_id = %s",
        [str(session.id), entry_id],
    )


def _last_entry_facts(session: Session) -> _LeafFacts | None:
    return _facts(
        session,
        "SELECT entry_id, path_compaction, path_thinking, path_model FROM sessions_app_entry "
        "WHERE session_id = %s ORDER BY seq DESC LIMIT 1",
        [str(session.id)],
    )


def _facts(session: Session, sql: str, params: list[Any]) -> _LeafFacts | None:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    return _LeafFacts(*row) if row else None


def entry_exists(session: Session, entry_id: str) -> bool:
    return bool(store.entries_by_id(session.id, [entry_id]))


def entry_records(session: Session) -> list[EntryRecord]:
    return store.entries_of(session.id)


@dataclass(frozen=True)
class TreePage:
    """Rows `start` onwards of the tree as it stood at `as_of_seq` with `leaf` current.

    Entries never change and a later one has a higher seq, so the same (`as_of_seq`,
    `leaf`) always lays out the same rows: paging by row number over that snapshot visits
    every node exactly once, however the session grows meanwhile."""

    tree: TreeView
    rows: tuple[TreeRow, ...]
    as_of_seq: int
    leaf: str | None
    next_start: int | None


def tree_page(
    session: Session, *, as_of_seq: int, leaf: str | None, start: int, limit: int
) -> TreePage:
    entries = [e for e in store.entries_of(session.id) if e.seq <= as_of_seq]
    tree = project_tree(entries, leaf)
    end = start + limit
    return TreePage(
        tree=tree,
        rows=tree.rows[start:end],
        as_of_seq=as_of_seq,
        leaf=leaf,
        next_start=end if end < len(tree.rows) else None,
    )


def request_view(session: Session, seq: int) -> RequestView:
    """The exact context of the model request recorded at `seq` (a `request/sent`).

    Reads only what the rebuild needs: that turn's events, the header the request names,
    and the entries that existed when it was sent.
    """
    found = store.events_after(session.id, seq - 1, 1)
    if not found or found[0].seq != seq or found[0].type != "request/sent":
        raise RequestNotFound(f"no model request (request/sent) at seq {seq}")
    sent = found[0]
    events = {sent.seq: sent}
    if sent.turn is not None:
        events.update((e.seq, e) for e in store.events_of_turns(session.id, [sent.turn]))
    header_seq = sent.data.get("header_seq")
    if isinstance(header_seq, int) and header_seq not in events:
        events.update((e.seq, e) for e in store.events_after(session.id, header_seq - 1, 1))
    ordered = sorted(events.values(), key=lambda e: e.seq)
    return project_request(ordered, (), seq, context=request_context(session, sent))


def request_context(session: Session, sent: EventRecord) -> SessionContext:
    """The context a `request/sent` was built from, read from its leaf's kept window."""
    leaf = sent.data.get("leaf_entry_id")
    if not isinstance(leaf, str):
        return EMPTY_CONTEXT
    if not store.entries_by_id(session.id, [leaf]):
        # A leaf that names no entry: Pi's fallback, the last entry before the request.
        before = [e for e in store.entries_of(session.id) if e.seq < sent.seq]
        return build_session_context(before, leaf)
    return session_context(session, leaf)


def turn_numbers(session: Session) -> list[int]:
    """The numbers of the session's turns, oldest first."""
    turns = (
        Event.objects.filter(session=session, type="turn/start", turn__isnull=False)
        .order_by("seq")
        .values_list("turn", flat=True)
    )
    return [t for t in turns if t is not None]
