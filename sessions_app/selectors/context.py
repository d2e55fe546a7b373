"""The model context of a leaf, read from its kept window only."""

from __future__ import annotations

from projections.context import EMPTY_CONTEXT, UNSET, SessionContext, UnsetType
from projections.kept_window import EntryReader, LeafFacts, window_context, window_top
from projections.records import EntryRecord
from sessions_app.models import Session
from sessions_app.selectors import ceilings
from sessions_app.selectors.events import SessionId
from sessions_app.store.windows import StoredEntries, last_entry_facts

__all__ = ["EntryReader", "LeafFacts", "kept_window", "session_context", "window_context"]


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
    leaf = reader.facts(leaf_id) or last_entry_facts(session.id)
    if leaf is None:
        return EMPTY_CONTEXT
    return window_context(reader, leaf)


def kept_window(session_id: SessionId, leaf_id: str) -> list[EntryRecord]:
    """The kept window of the path to `leaf_id` alone (see `session_context`), as the
    runtime's turns and compactions read it; empty when no entry has that id."""
    reader = _StoredEntries(session_id)
    leaf = reader.facts(leaf_id)
    if leaf is None:
        return []
    found = reader.entries([leaf.compaction]) if leaf.compaction else []
    compaction = found[0] if found else None
    return reader.path(leaf.id, window_top(reader, compaction))


class _StoredEntries(StoredEntries):
    """The stored kept window, refused past a ceiling when one is given."""

    def __init__(self, session_id: SessionId, *, max_bytes: int | None = None) -> None:
        super().__init__(session_id)
        self.max_bytes = max_bytes

    def path(self, leaf_id: str, min_depth: int) -> list[EntryRecord]:
        if self.max_bytes is not None and ceilings.path_over(
            self.session_id, leaf_id, min_depth=min_depth, max_bytes=self.max_bytes
        ):
            raise ceilings.context_too_large(self.session_id, leaf_id)
        return super().path(leaf_id, min_depth)
