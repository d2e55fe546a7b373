"""The model context of a leaf built from its kept window alone, from whatever reads the
entries (the entry table, or the log folded again in memory): the entries from the latest
compaction's first kept entry (or the compaction) down to the leaf, plus the two entries
that set the thinking level and the model, which each entry records on append."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from projections.context import PathSettings, SessionContext, build_context_from_window
from projections.records import EntryRecord


@dataclass(frozen=True)
class LeafFacts:
    """An entry and the path facts it records on append: the latest compaction and the
    entries that set the thinking level and the model, on its path."""

    id: str
    compaction: str | None
    thinking: str | None
    model: str | None


class EntryReader(Protocol):
    """What a kept window is read from."""

    def facts(self, entry_id: str) -> LeafFacts | None: ...

    def entries(self, ids: list[str]) -> list[EntryRecord]: ...

    def depth(self, entry_id: str) -> int | None: ...

    def path(self, leaf_id: str, min_depth: int) -> list[EntryRecord]: ...


def window_context(reader: EntryReader, leaf: LeafFacts) -> SessionContext:
    """The context of `leaf` built from its kept window, as `reader` gives it."""
    wanted = [i for i in (leaf.compaction, leaf.thinking, leaf.model) if i is not None]
    found = {e.id: e for e in reader.entries(wanted)}
    compaction = found.get(leaf.compaction) if leaf.compaction else None
    window = reader.path(leaf.id, window_top(reader, compaction))
    settings = PathSettings(
        thinking=found.get(leaf.thinking) if leaf.thinking else None,
        model=found.get(leaf.model) if leaf.model else None,
        compaction=compaction,
    )
    return build_context_from_window(window, settings)


def window_top(reader: EntryReader, compaction: EntryRecord | None) -> int:
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
