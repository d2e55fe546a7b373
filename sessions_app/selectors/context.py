"""The model context of a leaf, read from its kept window only."""

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
)
from projections.records import EntryRecord
from sessions_app import store
from sessions_app.models import Session
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
    leaf = _entry_facts(session.id, leaf_id) or _last_entry_facts(session.id)
    if leaf is None:
        return EMPTY_CONTEXT
    wanted = [i for i in (leaf.compaction, leaf.thinking, leaf.model) if i is not None]
    found = {e.id: e for e in store.entries_by_id(session.id, wanted)}
    compaction = found.get(leaf.compaction) if leaf.compaction else None
    window = store.path_to_root(session.id, leaf.id, min_depth=_window_top(session.id, compaction))
    settings = PathSettings(
        thinking=found.get(leaf.thinking) if leaf.thinking else None,
        model=found.get(leaf.model) if leaf.model else None,
        compaction=compaction,
    )
    return build_context_from_window(window, settings)


def kept_window(session_id: SessionId, leaf_id: str) -> list[EntryRecord]:
    """The kept window of the path to `leaf_id` alone (see `session_context`), as the
    runtime's turns and compactions read it; empty when no entry has that id."""
    leaf = _entry_facts(session_id, leaf_id)
    if leaf is None:
        return []
    found = store.entries_by_id(session_id, [leaf.compaction]) if leaf.compaction else []
    compaction = found[0] if found else None
    return store.path_to_root(session_id, leaf.id, min_depth=_window_top(session_id, compaction))


def _window_top(session_id: SessionId, compaction: EntryRecord | None) -> int:
    """The depth the kept window starts at: the first kept entry's, when it is an ancestor
    of the compaction (an entry elsewhere, or a missing one, keeps nothing before it)."""
    if compaction is None:
        return 0
    depth = store.depth_of(session_id, compaction.id)
    first_kept = compaction.data.get("firstKeptEntryId")
    if isinstance(first_kept, str):
        kept_depth = store.depth_of(session_id, first_kept)
        if kept_depth is not None and depth is not None and kept_depth <= depth:
            return kept_depth
    return depth or 0


@dataclass(frozen=True)
class _LeafFacts:
    id: str
    compaction: str | None
    thinking: str | None
    model: str | None


def _entry_facts(session_id: SessionId, entry_id: str) -> _LeafFacts | None:
    return _facts(
        "SELECT entry_id, path_compaction, path_thinking, path_model FROM sessions_app_entry "
        "WHERE session_id = %s AND entry_id = %s",
        [str(session_id), entry_id],
    )


def _last_entry_facts(session_id: SessionId) -> _LeafFacts | None:
    return _facts(
        "SELECT entry_id, path_compaction, path_thinking, path_model FROM sessions_app_entry "
        "WHERE session_id = %s ORDER BY seq DESC LIMIT 1",
        [str(session_id)],
    )


def _facts(sql: str, params: list[Any]) -> _LeafFacts | None:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    return _LeafFacts(*row) if row else None
