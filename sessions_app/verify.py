"""Rebuild every stored projection of a session from its event log and compare.

The entry table, the session's leaf, `last_seq` and counters are written by the append path
in the same transaction as the events; this module folds the log again, independently, and
names the first place where the two disagree. Request manifests are checked too: each
`request/sent` hash must equal the hash of the payload rebuilt from the stored facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection

from projections.records import EventRecord
from projections.request import RequestNotFound, project_request
from sessions_app import store
from sessions_app.models import Session
from sessions_app.selectors import request_context


@dataclass(frozen=True)
class _Row:
    parent_id: str | None
    type: str
    data: Any
    timestamp: str
    seq: int
    depth: int
    path_compaction: str | None
    path_thinking: str | None
    path_model: str | None


def verify_session(session: Session) -> str | None:
    """The first difference between the stored projections and the log, or None."""
    events = _all_events(session)
    expected, leaf, last_seq, title = _fold(events)
    stored = _stored_entries(session)
    for entry_id, row in expected.items():
        found = stored.get(entry_id)
        if found is None:
            return f"entry {entry_id!r} (seq {row.seq}) is in the log but not in the entry table"
        for name in _Row.__dataclass_fields__:
            want, got = getattr(row, name), getattr(found, name)
            if want != got:
                return f"entry {entry_id!r}: {name} is {got!r} in the table, {want!r} in the log"
    extra = sorted(set(stored) - set(expected))
    if extra:
        return f"entry {extra[0]!r} is in the entry table but no event added it"
    if session.last_seq != last_seq:
        return f"last_seq is {session.last_seq}, the log ends at {last_seq}"
    if session.leaf_entry_id != leaf:
        return f"the current leaf is {session.leaf_entry_id!r}, the log says {leaf!r}"
    if title is not None and session.title != title:
        return f"the title is {session.title!r}, the log says {title!r}"
    return _check_requests(session, events)


def _all_events(session: Session) -> list[EventRecord]:
    records: list[EventRecord] = []
    after = -1
    while True:
        page = store.events_after(session.id, after, 5000)
        records.extend(page)
        if len(page) < 5000:
            return records
        after = page[-1].seq


def _fold(
    events: list[EventRecord],
) -> tuple[dict[str, _Row], str | None, int, str | None]:
    rows: dict[str, _Row] = {}
    leaf: str | None = None
    title: str | None = None
    last_seq = -1
    for event in events:
        last_seq = event.seq
        if event.type == "session/created":
            title = event.data.get("title") or title
        elif event.type == "session/renamed":
            title = event.data["title"]
        elif event.type == "leaf/moved":
            leaf = event.data["to"]
        elif "entry" in event.data and event.entry_id is not None:
            row = _entry_row(event, rows)
            rows[event.entry_id] = row
            leaf = event.entry_id
    # Events that were not loaded (ignorable unknown types) still take seqs.
    return rows, leaf, last_seq, title


def _entry_row(event: EventRecord, rows: dict[str, _Row]) -> _Row:
    entry = event.data["entry"]
    parent = entry.get("parentId")
    above = rows.get(parent) if parent is not None and not event.data.get("orphan") else None
    depth = above.depth + 1 if above is not None else 0
    facts = (
        (above.path_compaction, above.path_thinking, above.path_model)
        if above is not None
        else (None, None, None)
    )
    compaction, thinking, model = facts
    kind = store.path_kind(entry)
    if kind == "compaction":
        compaction = event.entry_id
    elif kind == "thinking":
        thinking = event.entry_id
    elif kind == "model":
        model = event.entry_id
    return _Row(
        parent_id=parent,
        type=entry["type"],
        data=entry,
        timestamp=entry.get("timestamp") or "",
        seq=event.seq,
        depth=depth,
        path_compaction=compaction,
        path_thinking=thinking,
        path_model=model,
    )


def _stored_entries(session: Session) -> dict[str, _Row]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT entry_id, parent_id, type, data, timestamp, seq, depth, path_compaction, "
            "path_thinking, path_model FROM sessions_app_entry WHERE session_id = %s",
            [str(session.id)],
        )
        return {
            row[0]: _Row(row[1], row[2], store.decode_json(row[3]), *row[4:])
            for row in cur.fetchall()
        }


def _check_requests(session: Session, events: list[EventRecord]) -> str | None:
    sent = [e for e in events if e.type == "request/sent"]
    if not sent:
        return None
    by_seq = {e.seq: e for e in events}
    by_turn: dict[int, list[EventRecord]] = {}
    for e in events:
        if e.turn is not None:
            by_turn.setdefault(e.turn, []).append(e)
    for event in sent:
        try:
            context = request_context(session, event)
            view = project_request(
                _request_events(event, by_seq, by_turn, events), (), event.seq, context=context
            )
        except (RequestNotFound, LookupError, TypeError, ValueError) as exc:
            # Facts that do not hold together (a header_seq naming no header, a manifest of
            # the wrong shape) are a difference to report, not a crash.
            return f"request/sent at seq {event.seq}: cannot rebuild the payload ({exc})"
        if not view.matches:
            reason = f" ({view.error})" if view.error else ""
            return (
                f"request/sent at seq {event.seq}: the stored hash {view.recorded_sha256} does "
                f"not match the rebuilt payload's {view.payload_sha256}{reason}"
            )
    return None


def _request_events(
    sent: EventRecord,
    by_seq: dict[int, EventRecord],
    by_turn: dict[int, list[EventRecord]],
    events: list[EventRecord],
) -> list[EventRecord]:
    """What a request's rebuild reads: its turn's events and the header it names (as the
    request view reads them), so that checking every request costs the log once, not once
    per request."""
    if sent.turn is None:
        return events
    related = by_turn[sent.turn]
    header_seq = sent.data.get("header_seq")
    header = by_seq.get(header_seq) if isinstance(header_seq, int) else None
    if header is not None and header.turn != sent.turn:
        return [header, *related]
    return related
