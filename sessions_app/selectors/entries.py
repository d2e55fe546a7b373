"""Entries of a session: whether one exists, a page in the order they were added, a window
of the path to a leaf, and all of them (for the exports' whole-session folds)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models.expressions import RawSQL

from projections.records import EntryRecord
from sessions_app import redaction, store
from sessions_app.models import Entry, Session

ENTRY_PAGE = 5000  # entries read at a time when all of them are streamed
# or fewer, once their data comes to this much: a page of 5,000 entries of up to
# STRAND_MAX_EVENT_BYTES (1 MiB) each would otherwise be gigabytes in one read.
ENTRY_PAGE_BYTES = 8 * 1024 * 1024
# An entry's data as the text Postgres writes, for `store.decode_json` (orjson) to read:
# the JSON field's own decoding (json) costs several times more.
_DATA_TEXT = RawSQL("sessions_app_entry.data::text", ())
_ENTRY_COLUMNS = "entry_id, parent_id, type, timestamp, data::text, seq"


def entry_exists(session: Session, entry_id: str) -> bool:
    return bool(store.entries_by_id(session.id, [entry_id]))


def entry_records(session: Session) -> list[EntryRecord]:
    """Every entry of the session in file order (a whole read: the exports' folds)."""
    return store.entries_of(session.id)


def entry_stream(session: Session, *, page: int = ENTRY_PAGE) -> Iterator[EntryRecord]:
    """Every entry in file order, read a page at a time (a whole read with the memory of
    one page, at most `page` entries and about `ENTRY_PAGE_BYTES`: the streamed exports).

    Each entry's data is decoded as it is handed out, not a page at a time: an entry then
    lives only while its reader uses it, where a page of decoded entries outlives the
    collector's young generations and brings on full collections (a third of an export's
    time, in a process that holds Django)."""
    after = -1
    while True:
        rows, more = _entry_rows(session, after, page, ENTRY_PAGE_BYTES)
        if not rows:
            return
        for row in rows:
            yield _entry_record(row)
        if not more:
            return
        after = rows[-1][5]


@dataclass(frozen=True, slots=True)
class EntryPage:
    entries: tuple[EntryRecord, ...]
    more: bool  # entries with a higher seq follow


def entry_page(
    session: Session, *, after_seq: int, limit: int, max_bytes: int | None = None
) -> EntryPage:
    """Entries with seq > `after_seq` in the order they were added, at most `limit`; with
    `max_bytes`, they stop before the entry whose data (as JSON text) would take the page
    over that many bytes, but the first always comes (and `more` says the page was cut).

    Read a range of seqs at a time, twice as wide each time (entries take only some of the
    log's seqs): each read is bounded on both sides, so it costs what it finds whatever
    plan Postgres picks, where ORDER BY with LIMIT alone could sort the rest of a long
    session first. The last range is open, for what was appended meanwhile. With a budget
    the sizes are read first, `SIZE_CHUNK` entries at a time, then only the entries kept."""
    if max_bytes is not None:
        return _entry_page_within(session, after_seq, limit, max_bytes)
    rows, more = _entry_rows(session, after_seq, limit)
    return EntryPage(entries=tuple(_entry_record(row) for row in rows), more=more)


def _entry_rows(
    session: Session, after_seq: int, limit: int, max_bytes: int | None = None
) -> tuple[list[tuple[Any, ...]], bool]:
    """`entry_page`'s rows (`_ENTRY_COLUMNS`, data as JSON text), and whether more follow.

    With `max_bytes`, the rows stop once their data (as stored, `pg_column_size`) comes to
    that much: the entry that reaches it is the page's last (the first always comes), and
    more are said to follow (a last read may then find none)."""
    rows: list[tuple[Any, ...]] = []
    used = 0
    start, span = after_seq, 2 * (limit + 1)
    while True:
        stop = start + span
        # Plain SQL: the ORM's rows cost twice the time of reading and decoding them.
        where = "session_id = %s AND seq > %s"
        params: list[Any] = [str(session.id), start]
        if stop < session.last_seq:
            where += " AND seq <= %s"
            params.append(stop)
        want = limit + 1 - len(rows)
        with connection.cursor() as cur:
            if max_bytes is None:
                cur.execute(
                    f"SELECT {_ENTRY_COLUMNS} FROM sessions_app_entry WHERE {where} "
                    "ORDER BY seq LIMIT %s",
                    [*params, want],
                )
                rows += cur.fetchall()
            else:
                # Each row's running total of the range's sizes before it: the rows read
                # stop at the budget, and the data of those past it is never read.
                cur.execute(
                    f"SELECT {_ENTRY_COLUMNS}, before + size FROM ("
                    "SELECT *, pg_column_size(data) AS size, "
                    "sum(pg_column_size(data)) OVER (ORDER BY seq) - pg_column_size(data) "
                    f"AS before FROM sessions_app_entry WHERE {where}"
                    ") q WHERE before < %s ORDER BY seq LIMIT %s",
                    [*params, max_bytes - used, want],
                )
                found = cur.fetchall()
                if found:
                    used += int(found[-1][-1])
                rows += [row[:-1] for row in found]
                if used >= max_bytes:
                    return rows[:limit], True
        if len(rows) > limit or stop >= session.last_seq:
            break
        start, span = stop, span * 2
    return rows[:limit], len(rows) > limit


def _entry_record(row: tuple[Any, ...]) -> EntryRecord:
    entry_id, parent_id, type_, timestamp, data, seq = row
    return EntryRecord(
        entry_id, parent_id, type_, timestamp, redaction.entry_data(store.decode_json(data)), seq
    )


def _entry_page_within(session: Session, after_seq: int, limit: int, max_bytes: int) -> EntryPage:
    sizes: list[tuple[int, int]] = []  # (seq, bytes of data) of the entries that fit, in order
    total, more = 0, False
    start, span = after_seq, 2 * (limit + 1)
    while not more:
        stop = start + span
        found = Entry.objects.filter(session_id=session.id, seq__gt=start)
        if stop < session.last_seq:
            found = found.filter(seq__lte=stop)
        want = min(store.SIZE_CHUNK, limit + 1 - len(sizes))
        chunk = list(
            found.order_by("seq")
            .annotate(size=RawSQL("octet_length(data::text)", ()))
            .values_list("seq", "size")[:want]
        )
        for seq, size in chunk:
            if len(sizes) == limit or (sizes and total + size > max_bytes):
                more = True
                break
            sizes.append((seq, size))
            total += size
        if len(chunk) == want:
            start = chunk[-1][0]  # the range may hold more: read on in it
        elif stop >= session.last_seq:
            break
        else:
            start, span = stop, span * 2
    if not sizes:
        return EntryPage(entries=(), more=False)
    rows = (
        Entry.objects.filter(session_id=session.id, seq__gt=after_seq, seq__lte=sizes[-1][0])
        .order_by("seq")
        .annotate(text=_DATA_TEXT)
        .values_list("entry_id", "parent_id", "type", "timestamp", "text", "seq")
    )
    return EntryPage(entries=tuple(_entry_record(row) for row in rows), more=more)


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
    max_bytes: int | None = None,
) -> PathWindow:
    """The last `limit` entries of the path from the root to `end`. The page's options:
    `entry`, an earlier entry of the path, widens the window up to it; `everything` gives
    the whole path. With `max_bytes` (the API's), the window starts below the entry whose
    data (as JSON text) would take it over that many bytes, but always holds `end`."""
    depth = store.depth_of(session.id, end) if end else None
    start = 0 if everything or depth is None else max(0, depth + 1 - limit)
    if start and entry:
        linked = store.depth_of(session.id, entry)
        if linked is not None and linked < start:
            start = linked
    if end and depth is not None and max_bytes is not None:
        start = _path_start_within(session, end, depth, start, max_bytes)
    path = store.path_to_root(session.id, end, min_depth=start) if end else []
    above = max(depth + 1 - len(path), 0) if depth is not None else 0
    return PathWindow(end=end, entries=tuple(path), above=above)


def _path_start_within(session: Session, end: str, depth: int, start: int, max_bytes: int) -> int:
    """The smallest depth >= `start` from which the path down to `end` holds at most
    `max_bytes` of data (at most `depth`: `end` itself always fits). The sizes are read
    `SIZE_CHUNK` entries of the path at a time, up from `end`."""
    total, leaf, top = 0, end, depth
    with connection.cursor() as cur:
        while top >= start:
            low = max(start, top - store.SIZE_CHUNK + 1)
            cur.execute(
                f"""{store.PATH_CTE}
                SELECT path.depth, path.parent_id, octet_length(e.data::text)
                FROM path CROSS JOIN LATERAL (
                    SELECT data FROM sessions_app_entry
                    WHERE session_id = %(s)s AND id = path.id LIMIT 1
                ) e
                ORDER BY path.depth DESC
                """,
                {"s": str(session.id), "leaf": leaf, "min_depth": low},
            )
            rows = cur.fetchall()
            for at, _parent, size in rows:
                total += size
                if total > max_bytes:
                    return min(at + 1, depth)
            if not rows or rows[-1][1] is None:
                break  # the path ended at a root (or, on the next read, a missing parent)
            leaf, top = rows[-1][1], min(low, rows[-1][0]) - 1
    return start
