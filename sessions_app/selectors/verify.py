"""Rebuild every stored projection of a session from its event log and compare.

The entry table, the session's leaf, `last_seq` and counters are written by the append path
in the same transaction as the events; this module folds the log again, independently, and
names the first place where the two disagree. Request manifests are checked too: each
`request/sent` hash must equal the hash of the payload rebuilt from the stored facts.
Workspace snapshots too: every content a snapshot names must be in its owner's blob store
with that hash; and once a snapshot has recorded the session's folder, the folder must hold
the workspace of the entry it shows (a folder changed by hand since the last snapshot has
drifted from its facts until the next turn records the change; what a dead process's tools
changed is recorded by the recovery that closes its turn).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from django.db import connection

from projections.context import EMPTY_CONTEXT, SessionContext
from projections.records import EntryRecord, EventRecord
from projections.request import RequestNotFound, check_request
from projections.workspace import SNAPSHOT, fold_workspace
from runtime.errors import AgentError
from runtime.workspace import scan
from sessions_app import store, workspaces
from sessions_app.models import Session
from sessions_app.selectors import request_context
from sessions_app.selectors.context import LeafFacts, window_context
from sessions_app.selectors.workspace import folder_shows, path_snapshots

Integrity = Literal["match", "mismatch", "unrebuildable"]


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
    return (
        _check_workspace(session, events)
        or _check_folder(session, events)
        or _check_requests(session, events, expected)
    )


def _check_workspace(session: Session, events: list[EventRecord]) -> str | None:
    """The first snapshot naming a content its owner's store lacks (or holds under another
    hash), or None."""
    named: dict[str, int] = {}
    for event in events:
        if event.type != SNAPSHOT:
            continue
        for state in [
            *event.data.get("files", {}).values(),
            *(event.data.get("manifest") or {}).values(),
        ]:
            named.setdefault(str(state["sha256"]), event.seq)
    if not named:
        return None
    with connection.cursor() as cur:
        cur.execute(
            "SELECT sha256, encode(sha256(content), 'hex') = sha256 FROM sessions_app_workspaceblob "
            "WHERE owner_id = %s AND sha256 = ANY(%s)",
            [session.owner_id, sorted(named)],
        )
        held = dict(cur.fetchall())
    for sha, seq in sorted(named.items(), key=lambda item: item[1]):
        if sha not in held:
            return f"workspace/snapshot at seq {seq} names content {sha[:12]}… that is not stored"
        if not held[sha]:
            return f"workspace/snapshot at seq {seq}: content {sha[:12]}… does not match its hash"
    return None


def _check_folder(session: Session, events: list[EventRecord]) -> str | None:
    """How the session's folder differs from the workspace of the entry it shows, or None
    (also for a session without a folder, or whose folder no snapshot has recorded yet:
    its first turn records what is there). Files are hashed only where their size, time or
    mode differ from the facts, as a turn's scan does."""
    if not session.cwd or not Path(session.cwd).is_dir():
        return None
    if not any(event.type == SNAPSHOT for event in events):
        return None
    shown, _ = folder_shows(session.id)
    path, snapshots = path_snapshots(session.id, shown)
    manifest = fold_workspace(path, snapshots)
    quota = workspaces.run_limits(session.owner, session.cwd).workspace
    try:
        found = scan(Path(session.cwd), manifest, dataclasses.replace(quota, max_bytes=0))
    except AgentError as exc:
        return f"the session's folder cannot be compared with its facts: {exc}"
    if found.empty:
        return None
    first = sorted([*found.files, *found.deleted])[0]
    return (
        f"the session's folder has drifted from the workspace of entry {shown!r}: "
        f"{len(found.files)} file(s) changed or added, {len(found.deleted)} gone "
        f"(first {first[:200]!r})"
    )


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


def _check_requests(
    session: Session, events: list[EventRecord], rows: dict[str, _Row]
) -> str | None:
    sent = [e for e in events if e.type == "request/sent"]
    if not sent:
        return None
    by_seq = {e.seq: e for e in events}
    # The entries were just found equal to the log's fold: each request's kept window is
    # read from that fold in memory, where reading it from the table again would cost a
    # few queries and the decoding of the whole window for every request.
    folded = _FoldedEntries(rows)
    for event in sent:
        try:
            check = check_request(by_seq, event.seq, _request_context(session, event, folded))
        except (RequestNotFound, LookupError, TypeError, ValueError) as exc:
            # Facts that do not hold together (a header_seq naming no header, a manifest of
            # the wrong shape) are a difference to report, not a crash.
            return f"request/sent at seq {event.seq}: cannot rebuild the payload ({exc})"
        if not check.matches:
            reason = f" ({check.error})" if check.error else ""
            return (
                f"request/sent at seq {event.seq}: the stored hash {check.recorded_sha256} does "
                f"not match the rebuilt payload's {check.payload_sha256}{reason}"
            )
    return None


def request_checks(session: Session) -> Iterator[tuple[int, Integrity, str]]:
    """Each model request of `session`, by seq: (seq, "match" | "mismatch" |
    "unrebuildable", detail), its payload rebuilt from the kept window that the log, folded
    once, gives its leaf (as `verify_session` does), and checked against its hash.

    What `selectors.audit.request_check` finds of each, without its queries per request:
    the session's log is read and folded once, and held only while its requests are."""
    events = _all_events(session)
    by_seq = {e.seq: e for e in events}
    folded = _FoldedEntries(_fold(events)[0])
    for sent in events:
        if sent.type != "request/sent":
            continue
        # The request and the header it names alone, as the audit's check reads them.
        manifest = {sent.seq: sent}
        header_seq = sent.data.get("header_seq")
        if type(header_seq) is int and header_seq in by_seq:  # not a bool
            manifest[header_seq] = by_seq[header_seq]
        try:
            check = check_request(manifest, sent.seq, _request_context(session, sent, folded))
        except (RequestNotFound, LookupError, TypeError, ValueError) as exc:
            yield sent.seq, "unrebuildable", str(exc)
            continue
        if check.payload_sha256 is None:
            yield sent.seq, "unrebuildable", check.error or "no payload"
        elif check.matches:
            yield sent.seq, "match", ""
        else:
            recorded = check.recorded_sha256 or "(none)"
            yield sent.seq, "mismatch", f"recorded {recorded}, rebuilt {check.payload_sha256}"


def _request_context(session: Session, sent: EventRecord, folded: _FoldedEntries) -> SessionContext:
    """`selectors.request_context`, with the kept window read from the fold."""
    leaf = sent.data.get("leaf_entry_id")
    if not isinstance(leaf, str):
        return EMPTY_CONTEXT
    facts = folded.facts(leaf)
    if facts is None:
        return request_context(session, sent)  # Pi's fallback for a leaf that names no entry
    return window_context(folded, facts)


class _FoldedEntries:
    """The entries folded from the log, read as the entry table is read for a kept window
    (`selectors.context.EntryReader`): the same path walk as `store.PATH_CTE`."""

    def __init__(self, rows: dict[str, _Row]) -> None:
        self.rows = rows
        self.records: dict[str, EntryRecord] = {}

    def facts(self, entry_id: str) -> LeafFacts | None:
        row = self.rows.get(entry_id)
        if row is None:
            return None
        return LeafFacts(entry_id, row.path_compaction, row.path_thinking, row.path_model)

    def entries(self, ids: list[str]) -> list[EntryRecord]:
        found = [self._record(i) for i in set(ids) if i in self.rows]
        return sorted(found, key=lambda e: e.seq)

    def depth(self, entry_id: str) -> int | None:
        row = self.rows.get(entry_id)
        return row.depth if row is not None else None

    def path(self, leaf_id: str, min_depth: int) -> list[EntryRecord]:
        row = self.rows.get(leaf_id)
        if row is None:
            return []
        path = [self._record(leaf_id)]
        while row.parent_id is not None:
            above = self.rows.get(row.parent_id)
            if above is None or not min_depth <= above.depth < row.depth:
                break
            path.append(self._record(row.parent_id))
            row = above
        path.reverse()
        return path

    def _record(self, entry_id: str) -> EntryRecord:
        record = self.records.get(entry_id)
        if record is None:
            row = self.rows[entry_id]
            record = EntryRecord(
                entry_id, row.parent_id, row.type, row.timestamp, row.data, row.seq
            )
            self.records[entry_id] = record
        return record
