"""Events of a session: a page after a seq, the events of given turns, the latest event of
some types, and the whole log as a stream of pages (for exports and commands)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.db import connection

from projections.otel_ingest import observed_time
from projections.records import EventRecord
from projections.trace import MARK_EVENTS
from sessions_app import events as vocab
from sessions_app import redaction, store

LOG_PAGE = 5000  # events read at a time when the whole log is streamed

SessionId = uuid.UUID | str

_COLUMNS = "seq, type, schema_version, time, data, entry_id, turn, step, ignorable"


def events_after(
    session_id: SessionId, after_seq: int = -1, limit: int = 1000, *, max_bytes: int | None = None
) -> list[EventRecord]:
    """Events with seq > `after_seq`, oldest first, at most `limit` (and, with `max_bytes`,
    at most that many bytes of data but never none: see `store.events_after`)."""
    return store.events_after(session_id, after_seq, limit, max_bytes=max_bytes)


def events_of_turns(session_id: SessionId, turns: Iterable[int]) -> list[EventRecord]:
    """Every event of the given turns, in seq order."""
    turns = list(turns)
    return store.events_of_turns(session_id, turns) if turns else []


def event_at(session_id: SessionId, seq: int) -> EventRecord | None:
    found = store.events_after(session_id, seq - 1, 1)
    return found[0] if found and found[0].seq == seq else None


def latest_event(
    session_id: SessionId,
    types: Sequence[str],
    *,
    before_seq: int | None = None,
    after_seq: int | None = None,
    turn: int | None = None,
) -> EventRecord | None:
    """The newest event of one of `types` (before `before_seq`, after `after_seq`, of
    `turn` when given)."""
    sql = f"SELECT {_COLUMNS} FROM sessions_app_event WHERE session_id = %s AND type = ANY(%s)"
    params: list[Any] = [str(session_id), list(types)]
    if before_seq is not None:
        sql += " AND seq < %s"
        params.append(before_seq)
    if after_seq is not None:
        sql += " AND seq > %s"
        params.append(after_seq)
    if turn is not None:
        sql += " AND turn = %s"
        params.append(turn)
    with connection.cursor() as cur:
        cur.execute(sql + " ORDER BY seq DESC LIMIT 1", params)
        found = records(cur.fetchall())
    return found[0] if found else None


def log_stream(
    session_id: SessionId, *, after_seq: int = -1, page: int = LOG_PAGE
) -> Iterator[EventRecord]:
    """Every event after `after_seq`, oldest first, read a page at a time: the whole log
    with the memory of one page (exports and commands; never a page's or the API's view)."""
    while True:
        found = store.events_after(session_id, after_seq, page)
        yield from found
        if len(found) < page:
            return
        after_seq = found[-1].seq


# The events `projections.trace_windows` folds: those of turns, and the entries outside
# turns that `trace.is_mark` draws (its types, and Pi 1.6's system messages).
_TRACE_EVENTS = (
    "(turn IS NOT NULL OR type = ANY(%s) OR (type = 'entry/message' "
    "AND data->'entry'->'message'->>'role' = 'system'))"
)


def trace_log_stream(
    session_id: SessionId, *, last_seq: int, page: int = LOG_PAGE
) -> Iterator[EventRecord]:
    """The events a whole trace folds, oldest first: every event of a turn and the marks
    outside turns, the rest of the log left in the database. An imported Pi file's log is
    its entries, none in a turn, so its trace reads only its few compactions. Read a range
    of `page` seqs at a time up to `last_seq` (bounded on both sides, as `events_after`
    reads), then what was appended since."""
    after = -1
    while True:
        sql = f"SELECT {_COLUMNS} FROM sessions_app_event WHERE session_id = %s AND seq > %s"
        params: list[Any] = [str(session_id), after]
        upto = after + page
        if upto < last_seq:
            sql += " AND seq <= %s"
            params.append(upto)
        with connection.cursor() as cur:
            cur.execute(f"{sql} AND {_TRACE_EVENTS} ORDER BY seq", [*params, list(MARK_EVENTS)])
            yield from records(cur.fetchall())
        if upto >= last_seq:
            return
        after = upto


def records(rows: Iterable[tuple[Any, ...]]) -> list[EventRecord]:
    """Rows of `_COLUMNS` as records upcast to their current schema (unknown ignorable
    events dropped), as the store reads them."""
    out = []
    for seq, type_, version, time, data, entry_id, turn, step, ignorable in rows:
        loaded = vocab.load_event(type_, version, store.decode_json(data), ignorable=ignorable)
        if loaded is not None:
            loaded = redaction.event_data(type_, loaded)
            time = observed_time(loaded) or time  # as `store` reads it
            out.append(EventRecord(seq, type_, version, time, loaded, entry_id, turn, step))
    return out


def events_outside_turns(session_id: SessionId, seqs: Iterable[int]) -> list[EventRecord]:
    """The events at `seqs` that no turn wrote, in seq order."""
    wanted = list(seqs)
    if not wanted:
        return []
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {_COLUMNS} FROM sessions_app_event "
            "WHERE session_id = %s AND seq = ANY(%s) AND turn IS NULL ORDER BY seq",
            [str(session_id), wanted],
        )
        return records(cur.fetchall())
