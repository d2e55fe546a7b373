"""The append path: the only code that writes events (DESIGN §4).

Invariants, each kept by `append_events` inside one transaction (and by
`append_events_many`, which runs the same database function for several sessions in one
statement):

1. The session row is locked first (`SELECT … FOR UPDATE`); its `last_seq` is the counter.
2. `expected_seq` must equal `last_seq`, or nothing is written and `ConcurrencyError` carries
   the current seq. The unique (session, seq) key backs this up in the database.
3. Seqs are gapless per session, starting at 0: the batch takes `last_seq + 1 …`.
4. Every event is validated against the vocabulary, and its JSON size and nesting depth
   (`STRAND_MAX_JSON_DEPTH`) checked, before any row is written; one bad event refuses the
   whole batch.
5. Entries (the tree) and the current leaf are projected in the same transaction as the events
   that add or move them. An entry's parent defaults to the current leaf, as in Pi; a parent
   that is not an entry written before it is refused. Only the Pi import marks true orphans
   (an entry whose parent id names no entry), and no entry may later take an id an orphan
   names: every parent has a lower seq than its children, so the tree has no cycle, and an
   entry's stored depth is its parent's plus one (0 for a root or an orphan).
6. `last_seq`, the leaf and the list counters are updated before commit, and the batch's bytes
   of JSON are added to the session and to its owner's `StorageUsage`; a batch that would
   take the owner past `STRAND_USER_QUOTA_BYTES` is refused whole (`QuotaExceeded`).
7. Listeners are told with `pg_notify('strand_events', '<session id>:<last seq>')`, issued
   inside the transaction: Postgres delivers it at commit and drops it on rollback. The
   payload never carries event data.
8. No model call, tool run or other slow I/O happens here.
"""

from __future__ import annotations

import json
import math
import secrets
import uuid
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from projections.nesting import nested_past
from projections.otel_ingest import observed_time
from projections.records import EntryRecord, EventRecord
from sessions_app import events as vocab
from sessions_app import redaction
from sessions_app.errors import DomainError

NOTIFY_CHANNEL = "strand_events"


class StoreError(DomainError):
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


class QuotaExceeded(StoreError):
    """A batch that would take its session's owner past the storage quota."""

    code = "quota_exceeded"

    def __init__(self, used: int, batch: int, quota: int) -> None:
        super().__init__(
            f"storage quota exceeded: this owner's sessions hold {used} bytes, the append "
            f"adds {batch} and the quota (STRAND_USER_QUOTA_BYTES) is {quota}; delete "
            "sessions to make room"
        )
        self.used_bytes = used
        self.batch_bytes = batch
        self.quota_bytes = quota


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
    parent_given: bool = False
    orphan: bool = False
    generated_id: bool = False
    json_text: str = ""
    size: int = 0  # bytes of the event's JSON, and of its entry's as the entry table holds it


def append_events(
    session_id: uuid.UUID | str,
    expected_seq: int,
    events: Sequence[NewEvent],
    *,
    quota: bool = True,
) -> AppendResult:
    """Append `events` after `expected_seq`. See the invariants at the top of this module.

    `quota=False` counts the batch's bytes without refusing it past the quota: for the
    runtime's closing of a turn already under way, which must not be left open."""
    if not events:
        raise InvalidEvent("nothing to append: the batch is empty")
    if len(events) > settings.STRAND_MAX_BATCH:
        raise TooLarge(
            f"batch of {len(events)} events exceeds the limit of {settings.STRAND_MAX_BATCH}"
        )
    for attempt in range(3):
        prepared = _prepare(events)
        try:
            last_seq, leaf = _call_append(str(session_id), expected_seq, prepared, quota)
            break
        except _GeneratedIdCollision:
            # One of the 8-hex ids drawn here already names an entry: draw new ones.
            if attempt == 2:
                raise InvalidEvent("could not draw a free entry id") from None
    return AppendResult(
        first_seq=last_seq - len(prepared) + 1,
        last_seq=last_seq,
        leaf_entry_id=leaf,
        entry_ids=tuple(p.entry["id"] for p in prepared if p.entry is not None),
    )


def append_events_many(
    appends: Sequence[tuple[uuid.UUID | str, int, Sequence[NewEvent]]],
) -> list[AppendResult]:
    """Append to several sessions in one statement (one round trip): each (session, expected
    seq, events) is checked and written as `append_events` would, in the order given (a
    session may come again, after its earlier batch). One refused batch refuses them all,
    raising what `append_events` would raise for it (a stale seq names the first batch's
    expected seq). For a writer of many sessions at once: the OpenTelemetry ingest appends
    each conversation of a body."""
    if not appends:
        return []
    prepared_all = []
    for _, _, events in appends:
        if not events:
            raise InvalidEvent("nothing to append: the batch is empty")
        if len(events) > settings.STRAND_MAX_BATCH:
            raise TooLarge(
                f"batch of {len(events)} events exceeds the limit of {settings.STRAND_MAX_BATCH}"
            )
        prepared_all.append(_prepare(events))
    # The batches go as one JSON array (their texts joined, not re-encoded or quoted as
    # array elements); the other arguments as one array each.
    columns: list[list[Any]] = [[] for _ in range(6)]
    batches = []
    for (session_id, expected_seq, _), prepared in zip(appends, prepared_all, strict=True):
        params = _arguments(str(session_id), expected_seq, prepared, True)
        for column, value in zip(columns, params[:2] + params[4:8], strict=True):
            column.append(value)
        batches.append(params[3])
        now, quota = params[2], params[8]
    sql = (
        "SELECT r.new_last_seq, r.new_leaf FROM unnest(%s::uuid[], %s::bigint[], %s::int[], "
        "%s::bigint[], %s::text[], %s::bigint[]) WITH ORDINALITY "
        "AS a(session_id, expected, messages, tokens, title, bytes, n) "
        "CROSS JOIN LATERAL strand_append(a.session_id, a.expected, %s::timestamptz, "
        "(%s::jsonb) -> (a.n::int - 1), a.messages, a.tokens, a.title, a.bytes, %s::bigint) "
        "AS r ORDER BY a.n"
    )
    every = [p for prepared in prepared_all for p in prepared]
    try:
        scope = transaction.atomic() if connection.in_atomic_block else nullcontext()
        connection.ensure_connection()
        with scope, connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cur:
            cur.execute(sql, [*columns, now, "[" + ",".join(batches) + "]", quota])
            rows = cur.fetchall()
    except DatabaseError as exc:
        error = _translate(exc, appends[0][1], every)
        if isinstance(error, _GeneratedIdCollision):  # rare: the caller may send them again
            raise InvalidEvent("could not draw a free entry id") from None
        raise error from None
    return [
        AppendResult(
            first_seq=int(last_seq) - len(prepared) + 1,
            last_seq=int(last_seq),
            leaf_entry_id=leaf,
            entry_ids=tuple(p.entry["id"] for p in prepared if p.entry is not None),
        )
        for (last_seq, leaf), prepared in zip(rows, prepared_all, strict=True)
    ]


class _GeneratedIdCollision(Exception):
    pass


# SQLSTATEs raised by strand_append (sql/strand_append_v4.sql, installed by migration 0017).
_CONFLICT, _NO_SESSION, _OVER_QUOTA = "SA001", "SA002", "SA007"
_REFUSED = {"SA003", "SA004", "SA005", "SA006"}


def _call_append(
    session_id: str, expected_seq: int, prepared: list[_Prepared], quota: bool
) -> tuple[int, str | None]:
    params = _arguments(session_id, expected_seq, prepared, quota)
    sql = (
        "SELECT * FROM strand_append(%s::uuid, %s::bigint, %s, %s::jsonb, %s::int, "
        "%s::bigint, %s::text, %s::bigint, %s::bigint)"
    )
    try:
        # Inside a caller's transaction (an import, a fork) a savepoint keeps a refused batch
        # from spoiling it; on its own, the one statement is its own transaction.
        scope = transaction.atomic() if connection.in_atomic_block else nullcontext()
        connection.ensure_connection()
        # psycopg's own cursor binds parameters on the server (Django's binds them in the
        # client, which costs more than the whole statement for a large batch), and the
        # statement is prepared once per connection (Django turns psycopg's own preparing
        # off): each call then skips parsing and planning it.
        with scope, connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cur:
            cur.execute(sql, params, prepare=True)
            row = cur.fetchone()
    except DatabaseError as exc:
        raise _translate(exc, expected_seq, prepared) from None
    assert row is not None  # the function always returns one row
    return int(row[0]), row[1]


def _translate(exc: DatabaseError, expected_seq: int, prepared: list[_Prepared]) -> Exception:
    cause = exc.__cause__
    state = getattr(cause, "sqlstate", None)
    diag = getattr(cause, "diag", None)
    message = (getattr(diag, "message_primary", None) or str(exc)).strip()
    if state == _CONFLICT:
        return ConcurrencyError(expected_seq, int(message))
    if state == _NO_SESSION:
        return SessionNotFound(message)
    if state == _OVER_QUOTA:
        used, batch, limit = (int(part) for part in message.split(":"))
        return QuotaExceeded(used, batch, limit)
    if state in _REFUSED:
        return InvalidEvent(message)
    if state == "23505" and "entry_session_id" in str(getattr(diag, "constraint_name", "")):
        if any(p.generated_id for p in prepared):
            return _GeneratedIdCollision()
        return InvalidEvent(f"an entry id of this batch already exists in the session ({message})")
    return exc


def _arguments(
    session_id: str, expected_seq: int, prepared: list[_Prepared], quota: bool
) -> list[Any]:
    counters = _Counters()
    for p in prepared:
        if p.entry is not None:
            _count(p.entry, counters)
        elif p.event.type == "session/renamed":
            counters.title = str(p.data["title"])
    return [
        session_id,
        expected_seq,
        datetime.now(UTC),
        "[" + ",".join(_batch_item(p) for p in prepared) + "]",
        counters.messages,
        counters.tokens,
        counters.title,
        sum(p.size for p in prepared),
        settings.STRAND_USER_QUOTA_BYTES if quota and settings.STRAND_USER_QUOTA_BYTES else None,
    ]


def _batch_item(p: _Prepared) -> str:
    """One event as strand_append reads it (its keys are listed in
    sql/strand_append_v4.sql); the data's JSON text is embedded, not re-encoded."""
    entry = p.entry
    moved = p.event.type == "leaf/moved"
    head = {
        "type": p.event.type,
        "schema_version": _version(p.event.type),
        "turn": _turn_or_step(p, "turn"),
        "step": _turn_or_step(p, "step"),
        "ignorable": p.event.ignorable,
        "entry_id": entry["id"] if entry is not None else None,
        "parent_given": p.parent_given,
        "parent_id": entry["parentId"] if entry is not None else None,
        "orphan": p.orphan,
        "path_kind": path_kind(entry) if entry is not None else None,
        "leaf_move": moved,
        "move_to": p.data.get("to") if moved else None,
    }
    return _strict_dumps(head)[:-1] + ',"data":' + p.json_text + "}"


def path_kind(entry: Mapping[str, Any]) -> str | None:
    """What an entry sets for the entries below it, as Pi's settings pass reads it."""
    kind = entry.get("type")
    if kind == "compaction":
        return "compaction"
    if kind == "thinking_level_change":
        return "thinking"
    if kind == "model_change":
        return "model"
    message = entry.get("message")
    if kind == "message" and isinstance(message, dict) and message.get("role") == "assistant":
        return "model"
    return None


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --- validation (before any SQL) ---------------------------------------------------------


def check_event(event: NewEvent) -> None:
    """Raise the StoreError that `append_events` would raise for this event on its own
    (validation, encoding, size), writing nothing: a writer of many events can then say
    which of its inputs is wrong."""
    _encode(_validate(event))


def _prepare(events: Sequence[NewEvent]) -> list[_Prepared]:
    """Validate, complete and encode a batch; raises before any SQL runs."""
    prepared = [_validate(e) for e in events]
    for p in prepared:
        _check_depth(p)
    _check_batch_ids(prepared)
    _chain_in_batch(prepared)
    for p in prepared:
        _encode(p)
    return prepared


def _chain_in_batch(prepared: list[_Prepared]) -> None:
    """Give an entry without a parent the leaf the batch itself left, where it is known here
    (an earlier entry or leaf move of the batch). Only the batch's first such entry needs
    the database's current leaf, which `strand_append` fills in."""
    known = False
    leaf: str | None = None
    for p in prepared:
        if p.entry is not None:
            if not p.parent_given and known:
                p.entry["parentId"] = leaf
                p.parent_given = True
            leaf = p.entry["id"]
            known = True
        elif p.event.type == "leaf/moved":
            leaf = p.data.get("to")
            known = True


def _validate(event: NewEvent) -> _Prepared:
    if not isinstance(event.type, str) or not event.type:
        raise InvalidEvent("event type must be a non-empty string")
    try:
        model = vocab.validate_event(event.type, event.data, ignorable=event.ignorable)
    except vocab.EventError as exc:
        raise InvalidEvent(str(exc)) from None
    prepared = _Prepared(event=event, data=dict(event.data))
    if isinstance(model, vocab.EntryEvent):
        _complete_entry(prepared, dict(model.entry), model.orphan)
    return prepared


def _complete_entry(p: _Prepared, entry: dict[str, Any], orphan: bool) -> None:
    """Fill what the writer may leave out: id, timestamp (parentId is filled by the database
    from the current leaf). Pi writes type, id, parentId and timestamp first."""
    p.parent_given = "parentId" in entry
    p.orphan = orphan
    p.generated_id = entry.get("id") is None
    rest = {k: v for k, v in entry.items() if k not in ("type", "id", "parentId", "timestamp")}
    p.entry = {
        "type": entry["type"],
        "id": entry.get("id") or _new_entry_id(),
        "parentId": entry.get("parentId"),
        "timestamp": entry.get("timestamp") or js_iso(datetime.now(UTC)),
        **rest,
    }
    p.data["entry"] = p.entry


def _check_batch_ids(prepared: list[_Prepared]) -> None:
    seen: set[str] = set()
    for p in prepared:
        if p.entry is None:
            continue
        entry_id = p.entry["id"]
        if entry_id in seen:
            raise InvalidEvent(f"entry id {entry_id!r} appears twice in the batch")
        seen.add(entry_id)


def _encode(prepared: _Prepared) -> None:
    try:
        entry_text, text = _json_texts(prepared)
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"{prepared.event.type}: data is not JSON: {exc}") from None
    if "\\u0000" in text:
        raise InvalidEvent(f"{prepared.event.type}: data contains a NUL character (\\u0000)")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:  # Postgres could not be sent it
        raise InvalidEvent(
            f"{prepared.event.type}: data holds a lone surrogate (invalid Unicode)"
        ) from None
    if size > settings.STRAND_MAX_EVENT_BYTES:
        raise TooLarge(
            f"{prepared.event.type}: event data is {size} bytes of JSON, "
            f"over the limit of {settings.STRAND_MAX_EVENT_BYTES}"
        )
    prepared.json_text = text
    # The entry table holds the entry's JSON again (its length is near the event's: the
    # event adds a few keys around it), and the quota counts both copies.
    prepared.size = size + (len(entry_text.encode("utf-8")) if entry_text is not None else 0)


def _json_texts(prepared: _Prepared) -> tuple[str | None, str]:
    """The entry's JSON (None for an event without one) and the event data's, which holds
    the entry's text as it is: the entry is encoded once."""
    if prepared.entry is None:
        return None, _strict_dumps(prepared.data)
    entry_text = _strict_dumps(prepared.entry)
    rest = _strict_dumps({k: v for k, v in prepared.data.items() if k != "entry"})
    return entry_text, '{"entry":' + entry_text + ("}" if rest == "{}" else "," + rest[1:])


def _strict_dumps(value: Any) -> str:
    """Compact JSON of `value`, refusing NaN and the infinities, as `json.dumps` with
    `allow_nan=False` writes it. orjson writes it, a tenth of the time, when `value` holds
    only what both write alike (`_plain`); anything else (a float that is not finite, which
    orjson would write as null, an object, a key that is not a string, an integer past 64
    bits, a lone surrogate) goes the standard library's way, which refuses it or writes it
    as it always has."""
    if _plain(value):
        try:
            return orjson.dumps(value).decode()
        except orjson.JSONEncodeError:
            pass
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


_SCALARS = (str, int, bool, type(None))


def _plain(value: Any) -> bool:
    """Whether `value` is made only of dicts, lists and tuples of strings, integers,
    booleans, None and finite floats (exactly those types, no subclasses)."""
    stack = [value]
    while stack:
        current = stack.pop()
        kind = type(current)
        if kind is dict:
            stack.extend(current.values())
        elif kind is list or kind is tuple:
            stack.extend(current)
        elif kind is float:
            if not math.isfinite(current):
                return False
        elif kind not in _SCALARS:
            return False
    return True


def _check_depth(prepared: _Prepared) -> None:
    """Refuse data nested past `STRAND_MAX_JSON_DEPTH`: an entry counts from the entry
    itself (as in a Pi file), any other event from its data."""
    limit = settings.STRAND_MAX_JSON_DEPTH
    if prepared.entry is not None:
        values: Mapping[str, Any] = prepared.data
        where = next(
            (
                f"{key}.{at}" if not at.startswith("[") else f"{key}{at}"
                for key, value in values.items()
                if (at := nested_past(value, limit)) is not None
            ),
            None,
        )
    else:
        where = nested_past(prepared.data, limit)
    if where is not None:
        raise InvalidEvent(
            f"{prepared.event.type}: data nests deeper than {limit} levels at {where} "
            "(STRAND_MAX_JSON_DEPTH)"
        )


@dataclass(slots=True)
class _Counters:
    messages: int = 0
    tokens: int = 0
    title: str | None = None


def _new_entry_id() -> str:
    # Pi's ids: 8 hex chars. A collision with an existing entry is caught by the unique
    # (session, entry_id) key, and the batch is retried with fresh ids.
    return secrets.token_hex(4)


def _count(entry: Mapping[str, Any], counters: _Counters) -> None:
    message = entry.get("message")
    kind = entry.get("type")
    if kind in ("usage", "compaction", "branch_summary"):
        # Pi 1.6: model work outside the conversation (a usage entry) or that made a
        # summary counts in the session's totals too.
        counters.tokens += usage_tokens(entry.get("usage"))
        return
    if kind != "message" or not isinstance(message, dict):
        return
    if message.get("role") in ("user", "assistant"):
        counters.messages += 1
    # A tool result's usage (Pi 1.6) is the model work the tool did itself.
    if message.get("role") in ("assistant", "toolResult"):
        counters.tokens += usage_tokens(message.get("usage"))


def usage_tokens(usage: object) -> int:
    """The tokens of a Pi usage object: `totalTokens`, or (as Pi falls back in old files)
    the sum of its parts; 0 for anything else."""
    if not isinstance(usage, dict):
        return 0
    total = usage.get("totalTokens")
    if isinstance(total, int):
        return total
    return sum(
        v
        for k in ("input", "output", "cacheRead", "cacheWrite")
        if isinstance(v := usage.get(k), int)
    )


def js_iso(moment: datetime) -> str:
    """JavaScript's toISOString(): milliseconds and a Z."""
    m = moment
    return (
        f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}."
        f"{m.microsecond // 1000:03d}Z"
    )


def _turn_or_step(p: _Prepared, key: str) -> int | None:
    explicit = getattr(p.event, key)
    return explicit if explicit is not None else _int(p.data.get(key))


def _version(event_type: str) -> int:
    cls = vocab.EVENT_TYPES.get(event_type)
    return cls.version if cls is not None else 1


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --- reads -------------------------------------------------------------------------------


_SEQ_CEILING = 2**63 - 1  # bigint's largest


SIZE_CHUNK = 64  # rows whose sizes are read at a time when a page has a byte budget


def events_after(
    session_id: uuid.UUID | str,
    after_seq: int = -1,
    limit: int = 1000,
    *,
    max_bytes: int | None = None,
) -> list[EventRecord]:
    """Events with seq > after_seq, oldest first, upcast to their current schema.

    With `max_bytes`, the events stop before the one whose data (as JSON text) would take
    the page over that many bytes, but the first always comes: the sizes are read
    `SIZE_CHUNK` events at a time, and only the events kept are then read whole."""
    # Seqs are gapless (invariant 3), so the next `limit` events are exactly those of the
    # range after `after_seq`: bounded on both sides, it reads only them whatever plan
    # Postgres picks (with LIMIT alone it could sort the whole rest of the session first).
    upto = min(after_seq + max(limit, 0), _SEQ_CEILING)
    if max_bytes is not None:
        upto = _events_within(session_id, after_seq, upto, max_bytes)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT seq, type, schema_version, time, data, entry_id, turn, step, ignorable "
            "FROM sessions_app_event WHERE session_id = %s AND seq > %s AND seq <= %s "
            "ORDER BY seq",
            [str(session_id), after_seq, upto],
        )
        return _event_records(cur.fetchall())


def _events_within(session_id: uuid.UUID | str, after_seq: int, upto: int, max_bytes: int) -> int:
    """The last seq of (after_seq, upto] whose events, from the first, hold at most
    `max_bytes` of data (at least the first event's seq)."""
    total, start = 0, after_seq
    with connection.cursor() as cur:
        while start < upto:
            stop = min(start + SIZE_CHUNK, upto)
            cur.execute(
                "SELECT seq, octet_length(data::text) FROM sessions_app_event "
                "WHERE session_id = %s AND seq > %s AND seq <= %s ORDER BY seq",
                [str(session_id), start, stop],
            )
            rows = cur.fetchall()
            for seq, size in rows:
                total += size
                if total > max_bytes:  # stop before this event, unless it is the first
                    return max(int(seq) - 1, after_seq + 1)
            if len(rows) < stop - start:
                break  # the end of the log
            start = stop
    return upto


def events_of_turns(session_id: uuid.UUID | str, turns: Iterable[int]) -> list[EventRecord]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT seq, type, schema_version, time, data, entry_id, turn, step, ignorable "
            "FROM sessions_app_event WHERE session_id = %s AND turn = ANY(%s) ORDER BY seq",
            [str(session_id), list(turns)],
        )
        return _event_records(cur.fetchall())


def events_of_session_turns(
    keys: Iterable[tuple[uuid.UUID | str, int]],
) -> dict[tuple[str, int], list[EventRecord]]:
    """The events of each (session, turn) of `keys`, in seq order: one query for all of
    them, each turn read by the (session, turn) key (`event_session_turn`)."""
    found: dict[tuple[str, int], list[EventRecord]] = {}
    for session_id, turn, record in _events_by_keys("turn", "int", keys):
        found.setdefault((session_id, turn), []).append(record)
    return found


def events_at(keys: Iterable[tuple[uuid.UUID | str, int]]) -> dict[tuple[str, int], EventRecord]:
    """The events at each (session, seq) of `keys` that exists: one query, by the key."""
    return {
        (session_id, seq): record
        for session_id, seq, record in _events_by_keys("seq", "bigint", keys)
    }


def _events_by_keys(
    column: str, kind: str, keys: Iterable[tuple[uuid.UUID | str, int]]
) -> list[tuple[str, int, EventRecord]]:
    """(session id, key, event) of the events whose (session, `column`) is among `keys`, in
    (session, seq) order: one query, joined on the session so that it names its sessions."""
    pairs = [(str(sid), key) for sid, key in keys]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT e.session_id, r.key, e.seq, e.type, e.schema_version, e.time, e.data, "
            "e.entry_id, e.turn, e.step, e.ignorable "
            f"FROM unnest(%s::uuid[], %s::{kind}[]) AS r(session_id, key) "
            f"JOIN sessions_app_event e ON e.session_id = r.session_id AND e.{column} = r.key "
            "ORDER BY e.session_id, e.seq",
            [[p[0] for p in pairs], [p[1] for p in pairs]],
        )
        rows = cur.fetchall()
    found = []
    for session_id, key, *row in rows:
        record = _event_record(tuple(row))
        if record is not None:
            found.append((str(session_id), int(key), record))
    return found


def _event_records(rows: Iterable[tuple]) -> list[EventRecord]:
    return [record for row in rows if (record := _event_record(row)) is not None]


def _event_record(row: tuple) -> EventRecord | None:
    """One row of the log as the reads give it: loaded at its schema version (None for a
    type this server no longer reads), redacted, and at its span's time when observed."""
    seq, type_, version, time, data, entry_id, turn, step, ignorable = row
    loaded = vocab.load_event(type_, version, decode_json(data), ignorable=ignorable)
    if loaded is None:
        return None
    loaded = redaction.event_data(type_, loaded)
    # A fact recorded from another agent's spans happened at its span's time.
    time = observed_time(loaded) or time
    return EventRecord(seq, type_, version, time, loaded, entry_id, turn, step)


def entries_of(session_id: uuid.UUID | str) -> list[EntryRecord]:
    """Every entry of the session, in the order they were appended (Pi's file order)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT entry_id, parent_id, type, timestamp, data, seq FROM sessions_app_entry "
            "WHERE session_id = %s ORDER BY seq",
            [str(session_id)],
        )
        return [_entry_record(row) for row in cur.fetchall()]


# The path from a leaf up to the root (or to depth %(min_depth)s) as (id, entry_id, parent_id,
# seq, depth) rows, named `path`; parameters %(s)s (session), %(leaf)s and %(min_depth)s.
# It stops at a missing parent (an orphan starts its own path) and never loops: the depth
# column strictly decreases along a valid path. Other reads join what they need to it (the
# entry itself by its `id`, and by its session too: every read of the log names its session,
# so that the tables can be distributed by session, README "Running it for several people").
#
# Each step is one lookup of the parent by the (session, entry_id) key: the LATERAL
# subquery with its LIMIT cannot be turned into a join, so no estimate of the session's
# size can make Postgres hash or scan the session's entries at every step. The cost is
# that of the entries walked, whatever the session's length and its statistics.
PATH_CTE = """
WITH RECURSIVE path AS (
    SELECT id, entry_id, parent_id, seq, depth FROM sessions_app_entry
    WHERE session_id = %(s)s AND entry_id = %(leaf)s
    UNION ALL
    SELECT up.id, up.entry_id, up.parent_id, up.seq, up.depth
    FROM path p CROSS JOIN LATERAL (
        SELECT e.id, e.entry_id, e.parent_id, e.seq, e.depth FROM sessions_app_entry e
        WHERE e.session_id = %(s)s AND e.entry_id = p.parent_id
          AND e.depth < p.depth AND e.depth >= %(min_depth)s
        LIMIT 1
    ) up
)"""


def path_to_root(
    session_id: uuid.UUID | str, leaf_id: str, *, min_depth: int = 0
) -> list[EntryRecord]:
    """Entries from the root (or from depth `min_depth`) down to `leaf_id`, following parent
    ids; empty if the leaf is unknown."""
    with connection.cursor() as cur:
        cur.execute(
            f"""{PATH_CTE}
            SELECT e.entry_id, e.parent_id, e.type, e.timestamp, e.data, e.seq
            FROM path CROSS JOIN LATERAL (
                SELECT * FROM sessions_app_entry
                WHERE session_id = %(s)s AND id = path.id LIMIT 1
            ) e
            ORDER BY path.depth
            """,
            {"s": str(session_id), "leaf": leaf_id, "min_depth": min_depth},
        )
        return [_entry_record(row) for row in cur.fetchall()]


def refresh_statistics() -> None:
    """Re-read the planner's statistics for the columns that reads filter on.

    After a burst of writes (a large import) the tables change faster than autovacuum
    re-reads them. The reads of one session do not need this: `session_id` keeps no
    statistics (migration 0006) and those reads are key lookups and bounded ranges. Reads
    across sessions (the audit by event type) plan better with fresh counts. Limited to
    those columns, and read from a fifth of the sample autovacuum's own ANALYZE takes
    (`default_statistics_target` 20 instead of 100: 6,000 rows of each table), it reads and
    hints a fifth of the pages: at 3.7 million rows in tables the cache does not hold, 2 to
    3 s instead of 10. Autovacuum's next ANALYZE of the table takes the full sample.
    """
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"SET LOCAL default_statistics_target = {REFRESH_STATISTICS_TARGET}")
        cur.execute("ANALYZE sessions_app_entry (entry_id, parent_id)")
        cur.execute("ANALYZE sessions_app_event (type)")


# The statistics target of `refresh_statistics` (Postgres samples 300 rows per unit).
REFRESH_STATISTICS_TARGET = 20


def statistics_outgrown(rows: int) -> bool:
    """Whether `rows` new entries are a tenth or more of the entry table as its statistics
    last counted it (autovacuum re-reads them past that share of changed rows, but later):
    fewer leave the counts near enough, and an ANALYZE of a large table is not free."""
    with connection.cursor() as cur:
        cur.execute("SELECT reltuples FROM pg_class WHERE oid = 'sessions_app_entry'::regclass")
        row = cur.fetchone()
    counted = float(row[0]) if row else -1.0
    return counted < 0 or rows * 10 >= counted


def entries_by_id(session_id: uuid.UUID | str, ids: Iterable[str]) -> list[EntryRecord]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT entry_id, parent_id, type, timestamp, data, seq FROM sessions_app_entry "
            "WHERE session_id = %s AND entry_id = ANY(%s) ORDER BY seq",
            [str(session_id), list(ids)],
        )
        return [_entry_record(row) for row in cur.fetchall()]


def entries_by_keys(
    keys: Iterable[tuple[uuid.UUID | str, str]],
) -> dict[tuple[str, str], EntryRecord]:
    """The entries at each (session, entry id) of `keys` that exists: one query, by the
    key."""
    pairs = [(str(sid), entry_id) for sid, entry_id in keys]
    with connection.cursor() as cur:
        cur.execute(
            "SELECT e.session_id, e.entry_id, e.parent_id, e.type, e.timestamp, e.data, e.seq "
            "FROM unnest(%s::uuid[], %s::text[]) AS r(session_id, entry_id) "
            "JOIN sessions_app_entry e "
            "ON e.session_id = r.session_id AND e.entry_id = r.entry_id",
            [[p[0] for p in pairs], [p[1] for p in pairs]],
        )
        return {(str(row[0]), row[1]): _entry_record(row[1:]) for row in cur.fetchall()}


def depth_of(session_id: uuid.UUID | str, entry_id: str) -> int | None:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT depth FROM sessions_app_entry WHERE session_id = %s AND entry_id = %s",
            [str(session_id), entry_id],
        )
        row = cur.fetchone()
    return int(row[0]) if row else None


def _entry_record(row: tuple) -> EntryRecord:
    entry_id, parent_id, type_, timestamp, data, seq = row
    data = redaction.entry_data(decode_json(data))
    return EntryRecord(entry_id, parent_id, type_, timestamp, data, seq)


def decode_json(value: Any) -> Any:
    """A jsonb value as Python. Django has psycopg hand jsonb over as text, decoded here by
    orjson (several times faster than json: the whole-session reads of the exports spend
    most of their time here); a value already decoded is taken as it is."""
    if not isinstance(value, (str, bytes)):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return json.loads(value)  # raises json's own error, as readers have always had
