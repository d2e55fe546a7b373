"""The model context of a leaf, read from its kept window only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from django.db import connection

from projections.context import (
    EMPTY_CONTEXT,
    UNSET,
    PathSettings,
    SessionContext,
    UnsetType,
    build_context_from_window,
)
from projections.records import EntryRecord
from sessions_app import store
from sessions_app.models import Session
from sessions_app.selectors import ceilings
from sessions_app.selectors.events import SessionId


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
    # A door's read: a window past the ceiling is refused before it is read (the runtime's
    # turns read theirs through `kept_window`, without one).
    reader = _StoredEntries(session.id, max_bytes=ceilings.whole_read_bytes())
    leaf = reader.facts(leaf_id) or _last_entry_facts(session.id)
    if leaf is None:
        return EMPTY_CONTEXT
    return window_context(reader, leaf)


class EntryReader(Protocol):
    """What a kept window is read from: the stored entries, or (`verify`) the entries
    folded again from the log in memory."""

    def facts(self, entry_id: str) -> LeafFacts | None: ...

    def entries(self, ids: list[str]) -> list[EntryRecord]: ...

    def depth(self, entry_id: str) -> int | None: ...

    def path(self, leaf_id: str, min_depth: int) -> list[EntryRecord]: ...


def window_context(reader: EntryReader, leaf: LeafFacts) -> SessionContext:
    """The context of `leaf` built from its kept window, as `reader` gives it."""
    wanted = [i for i in (leaf.compaction, leaf.thinking, leaf.model) if i is not None]
    found = {e.id: e for e in reader.entries(wanted)}
    compaction = found.get(leaf.compaction) if leaf.compaction else None
    window = reader.path(leaf.id, _window_top(reader, compaction))
    settings = PathSettings(
        thinking=found.get(leaf.thinking) if leaf.thinking else None,
        model=found.get(leaf.model) if leaf.model else None,
        compaction=compaction,
    )
    return build_context_from_window(window, settings)


def kept_window(session_id: SessionId, leaf_id: str) -> list[EntryRecord]:
    """The kept window of the path to `leaf_id` alone (see `session_context`), as the
    runtime's turns and compactions read it; empty when no entry has that id."""
    reader = _StoredEntries(session_id)
    leaf = reader.facts(leaf_id)
    if leaf is None:
        return []
    found = reader.entries([leaf.compaction]) if leaf.compaction else []
    compaction = found[0] if found else None
    return reader.path(leaf.id, _window_top(reader, compaction))


def _window_top(reader: EntryReader, compaction: EntryRecord | None) -> int:
    """The depth the kept window starts at: the first kept entry's, when it is an ancestor
    of the compaction (an entry elsewhere, or a missing one, keeps nothing before it)."""
    if compaction is None:
        return 0
    depth = reader.depth(compaction.id)
    first_kept = compaction.data.get("firstKeptEntryId")
    if isinstance(first_kept, str):
        kept_depth = reader.depth(first_kept)
        if kept_depth is not None and depth is not None and kept_depth <= depth:
            return kept_depth
    return depth or 0


@dataclass(frozen=True)
class LeafFacts:
    """An entry and the path facts it records on append: the latest compaction and the
    entries that set the thinking level and the model, on its path."""

    id: str
    compaction: str | None
    thinking: str | None
    model: str | None


class _StoredEntries:
    """The kept window read from the entry table: a key lookup per fact and one bounded
    walk of the path."""

    def __init__(self, session_id: SessionId, *, max_bytes: int | None = None) -> None:
        self.session_id = session_id
        self.max_bytes = max_bytes

    def facts(self, entry_id: str) -> LeafFacts | None:
        return _facts(
            "SELECT entry_id, path_compaction, path_thinking, path_model "
            "FROM sessions_app_entry WHERE session_id = %s AND entry_id = %s",
            [str(self.session_id), entry_id],
        )

    def entries(self, ids: list[str]) -> list[EntryRecord]:
        return store.entries_by_id(self.session_id, ids)

    def depth(self, entry_id: str) -> int | None:
        return store.depth_of(self.session_id, entry_id)

    def path(self, leaf_id: str, min_depth: int) -> list[EntryRecord]:
        if self.max_bytes is not None and ceilings.path_over(
            self.session_id, leaf_id, min_depth=min_depth, max_bytes=self.max_bytes
        ):
            raise ceilings.context_too_large(self.session_id, leaf_id)
        return store.path_to_root(self.session_id, leaf_id, min_depth=min_depth)


def _last_entry_facts(session_id: SessionId) -> LeafFacts | None:
    return _facts(
        "SELECT entry_id, path_compaction, path_thinking, path_model FROM sessions_app_entry "
        "WHERE session_id = %s ORDER BY seq DESC LIMIT 1",
        [str(session_id)],
    )


def _facts(sql: str, params: list[Any]) -> LeafFacts | None:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    return LeafFacts(*row) if row else None
