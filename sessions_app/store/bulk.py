"""Many entries appended at once with COPY: the Pi import's write path.

`append_events` sends each batch through `strand_append`, whose per-entry work (a loop in
PL/pgSQL, the batch's JSON taken apart again) sets the pace of a large import. `BulkAppend`
writes the same rows with `COPY … FROM STDIN` inside the caller's transaction, and keeps
the store's invariants itself (their numbers are those of the store's list):

1. The session row is locked first, and then its owner's storage row, as every writer
   does; both stay locked until the caller's transaction ends.
2. `expected_seq` must equal `last_seq` (else `ConcurrencyError`, nothing written).
3. Seqs follow `last_seq` without a gap.
4. Every event is validated against the vocabulary (`events.validate_event`), its JSON
   size (`STRAND_MAX_EVENT_BYTES`) and nesting depth (`STRAND_MAX_JSON_DEPTH`) checked,
   and NUL characters and lone surrogates refused, before its row is sent; the first
   refused event raises, and the caller's transaction then writes nothing.
5. Only entry events are taken (one entry each, with its id). An entry's parent is an
   entry written before it (in this bulk or already stored) or the current leaf when it
   names none; an orphan's parent names no entry of the session, now or later (an entry
   that takes the id an orphan names is refused, here and afterwards by `strand_append`,
   which reads the stored orphans). Depth and the path facts (nearest compaction,
   thinking-level change and model entry) are worked out as `strand_append` does.
6. `last_seq`, the leaf, the counters and the stored bytes of the session and of its owner
   are written by `finish`; a running total past `STRAND_USER_QUOTA_BYTES` refuses the
   bulk as soon as it is passed (`QuotaExceeded`).
7. `finish` issues the one `pg_notify`, delivered at commit.

Used as a context manager (`with BulkAppend(...) as bulk:`, inside the transaction), it
sends each full batch by COPY on a thread of its own while the caller's thread checks and
encodes the next one, so Postgres's work and Python's overlap; a batch's refusal (an id the
session already holds) is raised by the `add` or `finish` that follows it. Leaving the
block waits for the batch in flight (or cancels one not begun), so nothing is sent once the
caller's transaction has ended. Without the block, each batch is sent where it is made.

The event data must come from parsed JSON (as a Pi file's lines do): it is encoded with
orjson, which would write a NaN as null where the JSON parser has already refused one.
Memory: a buffer of rows (`ROWS_PER_COPY`, at most about `BYTES_PER_COPY`), and a few
numbers for each entry id written (its depth and path facts, the strings shared with the
ids), never the entries themselves.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import orjson
import psycopg
from django.conf import settings
from django.db import DatabaseError, connection

from sessions_app import store
from sessions_app.store import (
    AppendResult,
    ConcurrencyError,
    InvalidEvent,
    NewEvent,
    QuotaExceeded,
    SessionNotFound,
    TooLarge,
)

ROWS_PER_COPY = 2000  # events (and their entries) sent in one pair of COPY statements
BYTES_PER_COPY = 8 * 1024 * 1024  # or fewer, once their rows come to this much

_EVENT_COPY = (
    "COPY sessions_app_event (session_id, seq, type, schema_version, time, data, entry_id, "
    "turn, step, ignorable) FROM STDIN"
)
_ENTRY_COPY = (
    "COPY sessions_app_entry (session_id, entry_id, parent_id, type, data, timestamp, seq, "
    "depth, path_compaction, path_thinking, path_model) FROM STDIN"
)

# (depth, nearest compaction, thinking-level change and model entry on the path)
_Facts = tuple[int, str | None, str | None, str | None]


@dataclass(frozen=True)
class _Batch:
    events: bytes  # COPY text rows of sessions_app_event
    entries: bytes  # and of sessions_app_entry
    ids: list[str]  # the entries' ids
    check_orphans: bool  # whether stored orphans may wait for one of these ids


@dataclass
class _Totals:
    events: int = 0
    messages: int = 0
    tokens: int = 0
    bytes: int = 0


class BulkAppend:
    """Entry events appended to one session by COPY, inside the caller's transaction.

    `add` each event in order, then `finish` once; an exception from either leaves the
    transaction to be rolled back by its caller (`transaction.atomic`)."""

    def __init__(self, session_id: uuid.UUID | str, expected_seq: int, *, quota: bool = True):
        if not connection.in_atomic_block:
            raise RuntimeError("BulkAppend runs inside the caller's transaction.atomic()")
        self.session_id = str(session_id)
        self.quota = settings.STRAND_USER_QUOTA_BYTES if quota else None
        self.now = datetime.now(UTC)
        self._now_text = self.now.isoformat()
        self.totals = _Totals()
        self._facts: dict[str, _Facts] = {}
        self._orphan_parents: set[str] = set()
        self._events: list[bytes] = []
        self._entries: list[bytes] = []
        self._batch_ids: list[str] = []
        self._queued = 0  # bytes of the rows queued
        self._sender: ThreadPoolExecutor | None = None  # while used as a context manager
        self._in_flight: Future[None] | None = None
        connection.ensure_connection()
        self._conn: psycopg.Connection[Any] = connection.connection
        with self._cursor() as cur:
            cur.execute(
                "SELECT s.last_seq, s.owner_id, s.leaf_entry_id, e.depth, e.path_compaction, "
                "e.path_thinking, e.path_model FROM sessions_app_session s "
                "LEFT JOIN sessions_app_entry e ON e.session_id = s.id "
                "AND e.entry_id = s.leaf_entry_id WHERE s.id = %s FOR UPDATE OF s",
                [self.session_id],
            )
            row = cur.fetchone()
            if row is None:
                raise SessionNotFound(f"no session {self.session_id}")
            last_seq, owner_id, leaf, depth, pc, pt, pm = row
            if last_seq != expected_seq:
                raise ConcurrencyError(expected_seq, int(last_seq))
            cur.execute(
                "INSERT INTO sessions_app_storageusage AS u (owner_id, stored_bytes) "
                "VALUES (%s, 0) ON CONFLICT (owner_id) DO UPDATE "
                "SET stored_bytes = u.stored_bytes RETURNING u.stored_bytes",
                [owner_id],
            )
            used = cur.fetchone()
            cur.execute(
                "SELECT EXISTS (SELECT 1 FROM sessions_app_entry WHERE session_id = %s)",
                [self.session_id],
            )
            had = cur.fetchone()
        self.owner_id = int(owner_id)
        self.used_before = int(used[0]) if used else 0
        self.first_seq = int(last_seq) + 1
        self.seq = int(last_seq)
        self.leaf: str | None = leaf
        self._leaf_facts: _Facts = (-1, None, None, None) if leaf is None else (depth, pc, pt, pm)
        self._had_entries = bool(had and had[0])
        self.entry_ids: list[str] = []

    def _cursor(self) -> psycopg.Cursor[Any]:
        return psycopg.Cursor(self._conn)

    def __enter__(self) -> Self:
        self._sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strand-copy")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        sender, self._sender = self._sender, None
        if sender is None:
            return
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None and not in_flight.cancel():
            in_flight.exception()  # wait for it; its refusal, if any, no longer matters
        sender.shutdown(wait=True)

    # --- one event ------------------------------------------------------------------

    def add(self, event: NewEvent) -> str:
        """Check `event` and queue its rows; returns its entry's id. Raises the StoreError
        `append_events` would raise for it (as the event's own fault: no row is sent for it)."""
        prepared = store._validate(event)
        entry = prepared.entry
        if entry is None:
            raise InvalidEvent(f"{event.type}: only entry events are appended in bulk")
        if prepared.generated_id:
            raise InvalidEvent(f"{event.type}: an entry appended in bulk names its id")
        entry_id: str = entry["id"]
        if entry_id in self._facts:
            raise InvalidEvent(f"entry id {entry_id!r} appears twice")
        if entry_id in self._orphan_parents:
            raise InvalidEvent(
                f"entry {entry_id!r} would close a parent cycle: an entry of this session "
                "names it as its parent"
            )
        if not prepared.parent_given:
            entry["parentId"] = self.leaf
        parent: str | None = entry["parentId"]
        facts = self._place(entry_id, parent, orphan=prepared.orphan)
        kind = store.path_kind(entry)
        depth, pc, pt, pm = facts
        if kind == "compaction":
            pc = entry_id
        elif kind == "thinking":
            pt = entry_id
        elif kind == "model":
            pm = entry_id
        facts = (depth, pc, pt, pm)
        entry_json, event_json = _encode(prepared)
        size = len(event_json) + len(entry_json)
        self._check_quota(size)
        # Accepted: from here nothing of this event can be refused.
        self.seq += 1
        self._facts[entry_id] = facts
        if prepared.orphan and parent is not None:
            self._orphan_parents.add(parent)
        self.leaf, self._leaf_facts = entry_id, facts
        self.entry_ids.append(entry_id)
        counters = store._Counters()
        store._count(entry, counters)
        self.totals.events += 1
        self.totals.messages += counters.messages
        self.totals.tokens += counters.tokens
        self.totals.bytes += size
        self._queue(prepared, entry_json, event_json, parent, facts)
        self._queued += size
        if len(self._events) >= ROWS_PER_COPY or self._queued >= BYTES_PER_COPY:
            self.flush()
        return entry_id

    def _place(self, entry_id: str, parent: str | None, *, orphan: bool) -> _Facts:
        """The depth and inherited path facts of a new entry below `parent`."""
        if orphan and (
            parent is not None
            and (parent == entry_id or parent in self._facts or self._stored(parent) is not None)
        ):
            raise InvalidEvent(
                f"orphan entry {entry_id!r} names {parent!r} as its parent, which is an "
                "entry: it would close a parent cycle"
            )
        if parent is None or orphan:
            return (0, None, None, None)
        if parent == self.leaf and self.leaf is not None:
            depth, pc, pt, pm = self._leaf_facts
            return (depth + 1, pc, pt, pm)
        found = self._facts.get(parent) or self._stored(parent)
        if found is None:
            raise InvalidEvent(
                f"parent {parent!r} of entry {entry_id!r} is not an entry of this session"
            )
        depth, pc, pt, pm = found
        return (depth + 1, pc, pt, pm)

    def _stored(self, entry_id: str) -> _Facts | None:
        """An entry stored before this bulk began (none when the session had none)."""
        if not self._had_entries:
            return None
        with self._cursor() as cur:
            cur.execute(
                "SELECT depth, path_compaction, path_thinking, path_model FROM sessions_app_entry "
                "WHERE session_id = %s AND entry_id = %s AND seq < %s",
                [self.session_id, entry_id, self.first_seq],
            )
            row = cur.fetchone()
        return None if row is None else (int(row[0]), row[1], row[2], row[3])

    def _check_quota(self, size: int) -> None:
        if self.quota and self.used_before + self.totals.bytes + size > self.quota:
            raise QuotaExceeded(self.used_before, self.totals.bytes + size, self.quota)

    def _queue(
        self,
        prepared: Any,
        entry_json: bytes,
        event_json: bytes,
        parent: str | None,
        facts: _Facts,
    ) -> None:
        event: NewEvent = prepared.event
        entry: dict[str, Any] = prepared.entry
        seq = str(self.seq).encode()
        entry_id = _text(entry["id"])
        self._events.append(
            b"\t".join(
                (
                    self.session_id.encode(),
                    seq,
                    _text(event.type),
                    str(store._version(event.type)).encode(),
                    self._now_text.encode(),
                    _json_field(event_json),
                    entry_id,
                    _number(store._turn_or_step(prepared, "turn")),
                    _number(store._turn_or_step(prepared, "step")),
                    b"t" if event.ignorable else b"f",
                )
            )
        )
        depth, pc, pt, pm = facts
        self._entries.append(
            b"\t".join(
                (
                    self.session_id.encode(),
                    entry_id,
                    _text(parent),
                    _text(entry["type"]),
                    _json_field(entry_json),
                    _text(entry.get("timestamp") or ""),
                    seq,
                    str(depth).encode(),
                    _text(pc),
                    _text(pt),
                    _text(pm),
                )
            )
        )
        self._batch_ids.append(entry["id"])

    # --- sending ----------------------------------------------------------------------

    def flush(self) -> None:
        """Send the queued rows (two COPY statements): on the sender's thread when there is
        one (after the batch before has gone), else here."""
        if not self._events:
            return
        batch = _Batch(
            events=b"\n".join(self._events) + b"\n",
            entries=b"\n".join(self._entries) + b"\n",
            ids=self._batch_ids,
            check_orphans=self._had_entries,
        )
        self._events, self._entries, self._batch_ids = [], [], []
        self._queued = 0
        self._wait_in_flight()
        if self._sender is None:
            self._raising_refusals(self._send, batch)
        else:
            self._in_flight = self._sender.submit(self._send, batch)

    def _wait_in_flight(self) -> None:
        """Wait for the batch being sent, and raise its refusal."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            self._raising_refusals(in_flight.result)

    @staticmethod
    def _raising_refusals(send: Any, *args: Any) -> None:
        # psycopg's errors as Django's, and a clash of entry ids as the store's refusal.
        try:
            with connection.wrap_database_errors:
                send(*args)
        except DatabaseError as exc:
            raise _translate(exc) from None

    def _send(self, batch: _Batch) -> None:
        with self._cursor() as cur:
            if batch.check_orphans:
                self._refuse_stored_orphan_clash(cur, batch.ids)
            with cur.copy(_EVENT_COPY) as copy:
                copy.write(batch.events)
            with cur.copy(_ENTRY_COPY) as copy:
                copy.write(batch.entries)

    def _refuse_stored_orphan_clash(self, cur: psycopg.Cursor[Any], ids: list[str]) -> None:
        # A stored orphan (depth 0 with a parent id) waits for an entry its parent id names.
        cur.execute(
            "SELECT parent_id FROM sessions_app_entry WHERE session_id = %s AND depth = 0 "
            "AND seq < %s AND parent_id = ANY(%s) LIMIT 1",
            [self.session_id, self.first_seq, ids],
        )
        row = cur.fetchone()
        if row is not None:
            raise InvalidEvent(
                f"entry {row[0]!r} would close a parent cycle: an entry of this session "
                "names it as its parent"
            )

    def finish(self) -> AppendResult:
        """Send what is queued and bring the session's row and counters up to date."""
        self.flush()
        self._wait_in_flight()
        if self.totals.events:
            with self._cursor() as cur:
                cur.execute(
                    "UPDATE sessions_app_storageusage SET stored_bytes = stored_bytes + %s "
                    "WHERE owner_id = %s",
                    [self.totals.bytes, self.owner_id],
                )
                cur.execute(
                    "UPDATE sessions_app_session SET last_seq = %s, leaf_entry_id = %s, "
                    "updated_at = %s, message_count = message_count + %s, "
                    "token_count = token_count + %s, stored_bytes = stored_bytes + %s "
                    "WHERE id = %s",
                    [
                        self.seq,
                        self.leaf,
                        self.now,
                        self.totals.messages,
                        self.totals.tokens,
                        self.totals.bytes,
                        self.session_id,
                    ],
                )
                cur.execute(
                    "SELECT pg_notify(%s, %s)",
                    [store.NOTIFY_CHANNEL, f"{self.session_id}:{self.seq}"],
                )
        return AppendResult(
            first_seq=self.first_seq,
            last_seq=self.seq,
            leaf_entry_id=self.leaf,
            entry_ids=tuple(self.entry_ids),
        )


def bulk_append(
    session_id: uuid.UUID | str, expected_seq: int, events: Sequence[NewEvent]
) -> AppendResult:
    """Append entry events by COPY in the caller's transaction (see `BulkAppend`)."""
    with BulkAppend(session_id, expected_seq) as bulk:
        for event in events:
            bulk.add(event)
        return bulk.finish()


# --- encoding ------------------------------------------------------------------------


def _encode(prepared: Any) -> tuple[bytes, bytes]:
    """(the entry's JSON, the event's JSON) as UTF-8, checked as `store._encode` checks."""
    event_type = prepared.event.type
    try:
        entry_json = orjson.dumps(prepared.entry)
        rest = {k: v for k, v in prepared.data.items() if k != "entry"}
        tail = orjson.dumps(rest)[1:] if rest else b"}"
    except (TypeError, orjson.JSONEncodeError):
        # What orjson cannot write (a lone surrogate, an integer past 64 bits, a key that is
        # not a string) goes the store's way, which refuses or writes it as append_events does.
        store._encode(prepared)
        entry_json = store._dumps(prepared.entry).encode()
        return entry_json, prepared.json_text.encode()
    event_json = b'{"entry":' + entry_json + (b"," + tail if rest else tail)
    if b"\\u0000" in event_json:
        raise InvalidEvent(f"{event_type}: data contains a NUL character (\\u0000)")
    if len(event_json) > settings.STRAND_MAX_EVENT_BYTES:
        raise TooLarge(
            f"{event_type}: event data is {len(event_json)} bytes of JSON, "
            f"over the limit of {settings.STRAND_MAX_EVENT_BYTES}"
        )
    limit = settings.STRAND_MAX_JSON_DEPTH
    if _openings(entry_json) > limit or (rest and _openings(tail) > limit):
        # Enough brackets to nest too deep: measured exactly, and named, as the store does.
        store._check_depth(prepared)
    return entry_json, event_json


def _openings(text: bytes) -> int:
    """The brackets that open objects and arrays in a JSON text, or more (those in its
    strings too): never less than its depth, so a text with at most `limit` of them cannot
    nest past `limit`."""
    return text.count(b"{") + text.count(b"[")


def _json_field(value: bytes) -> bytes:
    # COPY's text format reads a backslash as an escape; JSON from orjson holds no raw tab,
    # newline or carriage return (it escapes them), so backslashes are all there is to double.
    return value.replace(b"\\", b"\\\\")


def _text(value: str | None) -> bytes:
    if value is None:
        return b"\\N"
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        value = (
            value.replace("\\", "\\\\")
            .replace("\t", "\\t")
            .replace("\n", "\\n")
            .replace("\r", "\\r")
        )
    return value.encode()


def _number(value: int | None) -> bytes:
    return b"\\N" if value is None else str(value).encode()


def _translate(exc: DatabaseError) -> Exception:
    cause = exc.__cause__
    state = getattr(cause, "sqlstate", None)
    diag = getattr(cause, "diag", None)
    if state == "23505" and "entry_session_id" in str(getattr(diag, "constraint_name", "")):
        message = (getattr(diag, "message_detail", None) or str(exc)).strip()
        return InvalidEvent(f"an entry id already exists in the session ({message})")
    return exc
