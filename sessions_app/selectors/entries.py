"""Entries of a session: whether one exists, a page in the order they were added, a window
of the path to a leaf, and all of them (for the exports' whole-session folds)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from projections.records import EntryRecord
from sessions_app import store
from sessions_app.models import Entry, Session

ENTRY_PAGE = 5000  # entries read at a time when all of them are streamed


def entry_exists(session: Session, entry_id: str) -> bool:
    return bool(store.entries_by_id(session.id, [entry_id]))


def entry_records(session: Session) -> list[EntryRecord]:
    """Every entry of the session in file order (a whole read: the exports' folds)."""
    return store.entries_of(session.id)


def entry_stream(session: Session, *, page: int = ENTRY_PAGE) -> Iterator[EntryRecord]:
    """Every entry in file order, read a page at a time (a whole read with the memory of
    one page: the streamed exports)."""
    after = -1
    while True:
        found = entry_page(session, after_seq=after, limit=page)
        yield from found.entries
        if not found.more:
            return
        after = found.entries[-1].seq


@dataclass(frozen=True, slots=True)
class EntryPage:
    entries: tuple[EntryRecord, ...]
    more: bool  # entries with a higher seq follow


def entry_page(session: Session, *, after_seq: int, limit: int) -> EntryPage:
    """Entries with seq > `after_seq` in the order they were added, at most `limit`.

    Read a range of seqs at a time, twice as wide each time (entries take only some of the
    log's seqs): each read is bounded on both sides, so it costs what it finds whatever
    plan Postgres picks, where ORDER BY with LIMIT alone could sort the rest of a long
    session first. The last range is open, for what was appended meanwhile."""
    rows: list[tuple[Any, ...]] = []
    start, span = after_seq, 2 * (limit + 1)
    while True:
        stop = start + span
        found = Entry.objects.filter(session_id=session.id, seq__gt=start)
        if stop < session.last_seq:
            found = found.filter(seq__lte=stop)
        rows += found.order_by("seq").values_list(
            "entry_id", "parent_id", "type", "timestamp", "data", "seq"
        )[: limit + 1 - len(rows)]
        if len(rows) > limit or stop >= session.last_seq:
            break
        start, span = stop, span * 2
    entries = tuple(
        EntryRecord(i, p, t, ts, store.decode_json(d), s) for i, p, t, ts, d, s in rows[:limit]
    )
    return EntryPage(entries=entries, more=len(rows) > limit)


@dataclass(frozen=True, slots=True)
class PathWindow:
    """The last entries of the path to `end`, root-most first, and how many lie above."""

    end: str | None
    entries: tuple[EntryRecord, ...]
    above: int

    @property
    def older_end(self) -> str | None:
        """Where the window above this one ends (its last entry), or None at the root."""
        return self.entries[0].parent_id if self.above and self.entries else None


def path_window(
    session: Session,
    end: str | None,
    *,
    limit: int,
    entry: str | None = None,
    everything: bool = False,
) -> PathWindow:
    """The last `limit` entries of the path from the root to `end`. The page's options:
    `entry`, an earlier entry of the path, widens the window up to it; `everything` gives
    the whole path."""
    depth = store.depth_of(session.id, end) if end else None
    start = 0 if everything or depth is None else max(0, depth + 1 - limit)
    if start and entry:
        linked = store.depth_of(session.id, entry)
        if linked is not None and linked < start:
            start = linked
    path = store.path_to_root(session.id, end, min_depth=start) if end else []
    above = max(depth + 1 - len(path), 0) if depth is not None else 0
    return PathWindow(end=end, entries=tuple(path), above=above)
