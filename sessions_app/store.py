"""The append path: the only code that writes events (DESIGN §4).

Invariants, each kept by `append_events` inside one transaction:

1. The session row is locked first (`SELECT … FOR UPDATE`); its `last_seq` is the counter.
2. `expected_seq` must equal `last_seq`, or nothing is written and `ConcurrencyError` carries
   the current seq. The unique (session, seq) key backs this up in the database.
3. Seqs are gapless per session, starting at 0: the batch takes `last_seq + 1 …`.
4. Every event is validated against the vocabulary, and its JSON size checked, before any row
   is written; one bad event refuses the whole batch.
5. Entries (the tree) and the current leaf are projected in the same transaction as the events
   that add or move them. An entry's parent defaults to the current leaf, as in Pi; a parent
   that is not an entry of the session is refused (Pi imports may mark true orphans).
6. `last_seq`, the leaf and the list counters are updated before commit.
7. Listeners are told with `pg_notify('strand_events', '<session id>:<last seq>')`, issued
   inside the transaction: Postgres delivers it at commit and drops it on rollback. The
   payload never carries event data.
8. No model call, tool run or other slow I/O happens here.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from projections.records import EntryRecord, EventRecord
from sessions_app import events as vocab

NOTIFY_CHANNEL = "strand_events"


class StoreError(ValueError):
    """A write or read the store refuses; the message says why."""

    code = "invalid"


class SessionNotFound(StoreError):
    code = "not_found"


class ConcurrencyError(StoreError):
    code = "conflict"

    def __init__(self, expected_seq: int, current_seq: int) -> None:
        super().__init__(
            f"expected seq {expected_seq} but the session is at seq {current_seq}; "
            "read the new events and retry"
        )
        self.expected_seq = expected_seq
        self.current_seq = current_seq


class InvalidEvent(StoreError):
    code = "invalid_event"


class TooLarge(StoreError):
    code = "too_large"


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append. `turn` and `step` default to the data's own fields."""

    type: str
    data: Mapping[str, Any] = field(default_factory=dict)
    ignorable: bool = False
    turn: int | None = None
    step: int | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    first_seq: int
    last_seq: int
    leaf_entry_id: str | None
    entry_ids: tuple[str, ...]


@dataclass(slots=True)
class _Prepared:
    event: NewEvent
    data: dict[str, Any]
    entry: dict[str, Any] | None = None
    orphan: bool = False
    json_text: str = ""
    depth: int = 0


def append_events(
    session_id: uuid.UUID | str, expected_seq: int, events: Sequence[NewEvent]
) -> AppendResult:
    """Append `events` after `expected_seq`. See the invariants at the top of this module."""
    if not events:
        raise InvalidEvent("nothing to append: the batch is empty")
    if len(events) > settings.STRAND_MAX_BATCH:
        raise TooLarge(
            f"batch of {len(events)} events exceeds the limit of {settings.STRAND_MAX_BATCH}"
        )
    prepared = [_validate(e) for e in events]
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            "SELECT s.last_seq, s.leaf_entry_id, e.depth FROM sessions_app_session s "
            "LEFT JOIN sessions_app_entry e ON e.session_id = s.id AND e.entry_id = s.leaf_entry_id "
            "WHERE s.id = %s FOR UPDATE OF s",
            [str(session_id)],
        )
        row = cur.fetchone()
        if row is None:
            raise SessionNotFound(f"no session {session_id}")
        last_seq, leaf, leaf_depth = row
        if expected_seq != last_seq:
            raise ConcurrencyError(expected_seq, last_seq)
        now = datetime.now(UTC)
        leaf, counters = _project_entries(cur, str(session_id), prepared, leaf, leaf_depth, now)
        first = last_seq + 1
        _insert(cur, str(session_id), first, prepared, now)
        new_last = first + len(prepared) - 1
        cur.execute(
            "UPDATE sessions_app_session SET last_seq = %s, leaf_entry_id = %s, updated_at = %s, "
            "message_count = message_count + %s, token_count = token_count + %s, "
            "title = COALESCE(%s, title) WHERE id = %s",
            [new_last, leaf, now, counters.messages, counters.tokens, counters.title, str(session_id)],
        )
        cur.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, f"{session_id}:{new_last}"])
    return AppendResult(
        first_seq=first,
        last_seq=new_last,
        leaf_entry_id=leaf,
        entry_ids=tuple(p.entry["id"] for p in prepared if p.entry is not None),
    )


# --- validation (before any SQL) ---------------------------------------------------------


def _validate(event: NewEvent) -> _Prepared:
    if not isinstance(event.type, str) or not event.type:
        raise InvalidEvent("event type must be a non-empty string")
    try:
        model = vocab.validate_event(event.type, event.data, ignorable=event.ignorable)
    except vocab.EventError as exc:
        raise InvalidEvent(str(exc)) from None
    data = dict(event.data)
    prepared = _Prepared(event=event, data=data)
    if isinstance(model, vocab.EntryEvent):
        prepared.entry = dict(model.entry)
        prepared.orphan = model.orphan
    _encode(prepared)  # early size and JSON check; re-encoded once the entry is complete
    return prepared


def _encode(prepared: _Prepared) -> None:
    try:
        text = json.dumps(prepared.data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"{prepared.event.type}: data is not JSON: {exc}") from None
    if "\\u0000" in text:
        raise InvalidEvent(f"{prepared.event.type}: data contains a NUL character (\\u0000)")
    size = len(text.encode("utf-8"))
    if size > settings.STRAND_MAX_EVENT_BYTES:
        raise TooLarge(
            f"{prepared.event.type}: event data is {size} bytes of JSON, "
            f"over the limit of {settings.STRAND_MAX_EVENT_BYTES}"
        )
    prepared.json_text = text


# --- the entry projection ----------------------------------------------------------------


@dataclass(slots=True)
class _Counters:
    messages: int = 0
    tokens: int = 0
    title: str | None = None


def _project_entries(
    cur: Any,
    session_id: str,
    prepared: list[_Prepared],
    leaf: str | None,
    leaf_depth: int | None,
    now: datetime,
) -> tuple[str | None, _Counters]:
    """Complete every entry (id, parentId, timestamp), check parents, move the leaf."""
    known = _known_entries(cur, session_id, prepared)
    depth_of: dict[str, int] = {k: v for k, v in known.items()}
    if leaf is not None and leaf_depth is not None:
        depth_of[leaf] = leaf_depth
    counters = _Counters()
    timestamp = _iso(now)
    for p in prepared:
        if p.entry is not None:
            leaf = _complete_entry(p, leaf, depth_of, timestamp)
            _count(p.entry, counters)
            p.data["entry"] = p.entry
            _encode(p)
        elif p.event.type == "leaf/moved":
            leaf = _move_leaf(p, leaf, depth_of)
        elif p.event.type == "session/renamed":
            counters.title = str(p.data["title"])
    return leaf, counters


def _known_entries(cur: Any, session_id: str, prepared: list[_Prepared]) -> dict[str, int]:
    """Depths of the existing entries this batch refers to (parents, leaf targets, new ids)."""
    wanted: set[str] = set()
    for p in prepared:
        if p.entry is not None:
            for key in ("id", "parentId"):
                if isinstance(p.entry.get(key), str):
                    wanted.add(p.entry[key])
        elif p.event.type == "leaf/moved" and isinstance(p.data.get("to"), str):
            wanted.add(p.data["to"])
    if not wanted:
        return {}
    cur.execute(
        "SELECT entry_id, depth FROM sessions_app_entry "
        "WHERE session_id = %s AND entry_id = ANY(%s)",
        [session_id, list(wanted)],
    )
    return dict(cur.fetchall())


def _complete_entry(
    p: _Prepared, leaf: str | None, depth_of: dict[str, int], timestamp: str
) -> str:
    assert p.entry is not None
    entry = p.entry
    entry_id = entry.get("id")
    if entry_id is None:
        entry_id = _new_entry_id(depth_of)
    elif entry_id in depth_of:
        raise InvalidEvent(f"{p.event.type}: entry id {entry_id!r} already exists in this session")
    parent = entry["parentId"] if "parentId" in entry else leaf
    if parent is None or p.orphan:
        depth = 0
    elif parent in depth_of:
        depth = depth_of[parent] + 1
    else:
        raise InvalidEvent(
            f"{p.event.type}: parent {parent!r} of entry {entry_id!r} is not an entry of this session"
        )
    # Pi writes type, id, parentId and timestamp first; the entry's own fields follow.
    rest = {k: v for k, v in entry.items() if k not in ("type", "id", "parentId", "timestamp")}
    p.entry = {
        "type": entry["type"],
        "id": entry_id,
        "parentId": parent,
        "timestamp": entry.get("timestamp") or timestamp,
        **rest,
    }
    p.depth = depth
    depth_of[entry_id] = depth
    return str(entry_id)


def _new_entry_id(taken: Mapping[str, int]) -> str:
    # Pi's ids: 8 hex chars, checked for collisions. A collision with an entry that this
    # batch did not mention is caught by the unique (session, entry_id) key.
    while True:
        candidate = secrets.token_hex(4)
        if candidate not in taken:
            return candidate


def _move_leaf(p: _Prepared, leaf: str | None, depth_of: dict[str, int]) -> str | None:
    target = p.data.get("to")
    if target is not None and target not in depth_of:
        raise InvalidEvent(f"leaf/moved: {target!r} is not an entry of this session")
    if "from" in p.data and p.data["from"] != leaf:
        raise InvalidEvent(
            f"leaf/moved: 'from' is {p.data['from']!r} but the current leaf is {leaf!r}"
        )
    p.data["from"] = leaf
    _encode(p)
    return target


def _count(entry: Mapping[str, Any], counters: _Counters) -> None:
    message = entry.get("message")
    if entry.get("type") != "message" or not isinstance(message, dict):
        return
    if message.get("role") in ("user", "assistant"):
        counters.messages += 1
    usage = message.get("usage")
    if message.get("role") == "assistant" and isinstance(usage, dict):
        total = usage.get("totalTokens")
        if not isinstance(total, int):
            total = sum(
                v for k in ("input", "output", "cacheRead", "cacheWrite")
                if isinstance(v := usage.get(k), int)
            )
        counters.tokens += total


def _iso(moment: datetime) -> str:
    """JavaScript's toISOString(): milliseconds and a Z."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


# --- inserts -----------------------------------------------------------------------------


def _insert(
    cur: Any, session_id: str, first: int, prepared: list[_Prepared], now: datetime
) -> None:
    event_rows = []
    entry_rows = []
    for offset, p in enumerate(prepared):
        seq = first + offset
        entry_id = p.entry["id"] if p.entry is not None else None
        event_rows.append(
            (
                session_id,
                seq,
                p.event.type,
                _version(p.event.type),
                now,
                p.json_text,
                entry_id,
                p.event.turn if p.event.turn is not None else _int(p.data.get("turn")),
                p.event.step if p.event.step is not None else _int(p.data.get("step")),
                p.event.ignorable,
            )
        )
        if p.entry is not None:
            entry_rows.append(
                (
                    session_id,
                    entry_id,
                    p.entry["parentId"],
                    p.entry["type"],
                    json.dumps(p.entry, ensure_ascii=False, separators=(",", ":")),
                    p.entry["timestamp"],
                    seq,
                    p.depth,
                )
            )
    _insert_rows(
        cur,
        "sessions_app_event",
        "(session_id, seq, type, schema_version, time, data, entry_id, turn, step, ignorable)",
        "(%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s)",
        event_rows,
    )
    if entry_rows:
        _insert_rows(
            cur,
            "sessions_app_entry",
            "(session_id, entry_id, parent_id, type, data, timestamp, seq, depth)",
            "(%s, %s, %s, %s, %s::jsonb, %s, %s, %s)",
            entry_rows,
        )


def _insert_rows(cur: Any, table: str, columns: str, row_sql: str, rows: list[tuple]) -> None:
    # One multi-row INSERT: a single round trip whatever the batch size.
    values = ", ".join([row_sql] * len(rows))
    params = [value for row in rows for value in row]
    cur.execute(f"INSERT INTO {table} {columns} VALUES {values}", params)


def _version(event_type: str) -> int:
    cls = vocab.EVENT_TYPES.get(event_type)
    return cls.version if cls is not None else 1


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --- reads -------------------------------------------------------------------------------


def events_after(
    session_id: uuid.UUID | str, after_seq: int = -1, limit: int = 1000
) -> list[EventRecord]:
    """Events with seq > after_seq, oldest first, upcast to their current schema."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT seq, type, schema_version, time, data, entry_id, turn, step, ignorable "
            "FROM sessions_app_event WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s",
            [str(session_id), after_seq, limit],
        )
        return _event_records(cur.fetchall())


def events_of_turns(session_id: uuid.UUID | str, turns: Iterable[int]) -> list[EventRecord]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT seq, type, schema_version, time, data, entry_id, turn, step, ignorable "
            "FROM sessions_app_event WHERE session_id = %s AND turn = ANY(%s) ORDER BY seq",
            [str(session_id), list(turns)],
        )
        return _event_records(cur.fetchall())


def _event_records(rows: Iterable[tuple]) -> list[EventRecord]:
    records = []
    for seq, type_, version, time, data, entry_id, turn, step, ignorable in rows:
        loaded = vocab.load_event(type_, version, _json(data), ignorable=ignorable)
        if loaded is None:
            continue
        records.append(EventRecord(seq, type_, version, time, loaded, entry_id, turn, step))
    return records


def entries_of(session_id: uuid.UUID | str) -> list[EntryRecord]:
    """Every entry of the session, in the order they were appended (Pi's file order)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT entry_id, parent_id, type, timestamp, data, seq FROM sessions_app_entry "
            "WHERE session_id = %s ORDER BY seq",
            [str(session_id)],
        )
        return [_entry_record(row) for row in cur.fetchall()]


def path_to_root(session_id: uuid.UUID | str, leaf_id: str) -> list[EntryRecord]:
    """Entries from the root to `leaf_id`, following parent ids (empty if the leaf is unknown).

    Stops at a missing parent (an orphan starts its own path) and never loops: the depth
    column strictly decreases along a valid path.
    """
    with connection.cursor() as cur:
        cur.execute(
            """
            WITH RECURSIVE path AS (
                SELECT entry_id, parent_id, type, timestamp, data, seq, depth
                FROM sessions_app_entry WHERE session_id = %(s)s AND entry_id = %(leaf)s
                UNION ALL
                SELECT e.entry_id, e.parent_id, e.type, e.timestamp, e.data, e.seq, e.depth
                FROM sessions_app_entry e JOIN path p
                  ON e.session_id = %(s)s AND e.entry_id = p.parent_id AND e.depth < p.depth
            )
            SELECT entry_id, parent_id, type, timestamp, data, seq FROM path ORDER BY depth
            """,
            {"s": str(session_id), "leaf": leaf_id},
        )
        return [_entry_record(row) for row in cur.fetchall()]


def _entry_record(row: tuple) -> EntryRecord:
    entry_id, parent_id, type_, timestamp, data, seq = row
    return EntryRecord(entry_id, parent_id, type_, timestamp, _json(data), seq)


def _json(value: Any) -> Any:
    # psycopg returns jsonb decoded; a text fallback keeps raw cursors working too.
    return json.loads(value) if isinstance(value, (str, bytes)) else value
