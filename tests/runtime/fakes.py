"""An in-memory `SessionLog`: the store's rules (expected seq, entry parents, the leaf, the
turn lock) without a database, so that loop logic can be tested fast."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from projections.records import EntryRecord, EventRecord
from runtime.ports import (
    JOB_COMMAND_SHOWN,
    Appended,
    JobFact,
    NewFact,
    SeqConflict,
    SessionHead,
    SessionSetup,
)
from sessions_app import events as vocab


@dataclass
class _Session:
    preset: dict[str, Any]
    cwd: str
    events: list[EventRecord] = field(default_factory=list)
    entries: dict[str, EntryRecord] = field(default_factory=dict)
    leaf: str | None = None
    locked: bool = False
    blobs: dict[str, bytes] = field(default_factory=dict)


class FakeLock:
    def __init__(self, session: _Session) -> None:
        self._session = session

    async def release(self) -> None:
        self._session.locked = False


class FakePlace:
    """A turn place: the fake sets no cap."""

    async def release(self) -> None:
        return None


class FakeJobLock:
    """A background job's lock, held until released."""

    def __init__(self, held: set[tuple[str, str]], key: tuple[str, str]) -> None:
        self._held, self._key = held, key

    async def release(self) -> None:
        self._held.discard(self._key)


class FakeLog:
    def __init__(self) -> None:
        self.sessions: dict[str, _Session] = {}
        self.job_locks: set[tuple[str, str]] = set()
        self._changed = asyncio.Event()

    def create(self, preset: Mapping[str, Any], cwd: str = "") -> str:
        sid = str(uuid.uuid4())
        self.sessions[sid] = _Session(dict(preset), cwd)
        self._store(sid, [NewFact("session/created", {"preset": dict(preset), "cwd": cwd})])
        return sid

    # --- the protocol ------------------------------------------------------------------

    async def append(
        self, session_id: str, expected_seq: int, facts: Sequence[NewFact]
    ) -> Appended:
        session = self.sessions[session_id]
        if expected_seq != len(session.events) - 1:
            raise SeqConflict(len(session.events) - 1)
        return self._store(session_id, facts)

    def _store(self, session_id: str, facts: Sequence[NewFact]) -> Appended:
        session = self.sessions[session_id]
        first = len(session.events)
        ids: list[str] = []
        for fact in facts:
            model = vocab.validate_event(fact.type, dict(fact.data))
            data = dict(fact.data)
            entry_id = None
            if isinstance(model, vocab.EntryEvent):
                entry = dict(data["entry"])
                entry_id = entry.get("id") or secrets.token_hex(4)
                parent = entry.get("parentId", session.leaf)
                assert parent is None or parent in session.entries, parent
                entry = {
                    "type": entry["type"],
                    "id": entry_id,
                    "parentId": parent,
                    "timestamp": datetime.now(UTC).isoformat(),
                    **{
                        k: v
                        for k, v in entry.items()
                        if k not in ("type", "id", "parentId", "timestamp")
                    },
                }
                data["entry"] = entry
                seq = len(session.events)
                session.entries[entry_id] = EntryRecord(
                    entry_id, parent, entry["type"], entry["timestamp"], entry, seq
                )
                session.leaf = entry_id
                ids.append(entry_id)
            elif fact.type == "leaf/moved":
                assert data["to"] is None or data["to"] in session.entries
                data["from"] = session.leaf
                session.leaf = data["to"]
            turn = fact.turn if fact.turn is not None else data.get("turn")
            step = fact.step if fact.step is not None else data.get("step")
            session.events.append(
                EventRecord(
                    len(session.events), fact.type, 1, datetime.now(UTC), data, entry_id, turn, step
                )
            )
        self._changed.set()
        self._changed = asyncio.Event()
        return Appended(first, len(session.events) - 1, tuple(ids))

    async def head(self, session_id: str) -> SessionHead:
        session = self.sessions[session_id]
        return SessionHead(len(session.events) - 1, session.leaf)

    async def setup(self, session_id: str) -> SessionSetup:
        session = self.sessions[session_id]
        return SessionSetup(session.preset, session.cwd)

    async def events_after(
        self, session_id: str, after_seq: int, limit: int = 1000
    ) -> list[EventRecord]:
        return self.sessions[session_id].events[after_seq + 1 : after_seq + 1 + limit]

    async def last_event(
        self, session_id: str, types: Sequence[str], before_seq: int | None = None
    ) -> EventRecord | None:
        for event in reversed(self.sessions[session_id].events):
            if event.type in types and (before_seq is None or event.seq < before_seq):
                return event
        return None

    async def events_of_types(
        self, session_id: str, types: Sequence[str], after_seq: int = -1
    ) -> list[EventRecord]:
        return [
            e for e in self.sessions[session_id].events if e.type in types and e.seq > after_seq
        ]

    async def path(self, session_id: str, leaf_id: str) -> list[EntryRecord]:
        entries = self.sessions[session_id].entries
        path = []
        current = entries.get(leaf_id)
        while current is not None:
            path.append(current)
            current = entries.get(current.parent_id) if current.parent_id else None
        return path[::-1]

    async def workspace_snapshots(
        self, session_id: str, entry_id: str | None, also: Sequence[str] = ()
    ) -> tuple[list[str], list[EventRecord]]:
        path = [] if entry_id is None else await self.path(session_id, entry_id)
        events = await self.events_of_types(session_id, ("workspace/snapshot",))
        return [e.id for e in path], events

    async def context_window(self, session_id: str, leaf_id: str) -> list[EntryRecord]:
        return await self.path(session_id, leaf_id)

    async def entry(self, session_id: str, entry_id: str) -> EntryRecord | None:
        return self.sessions[session_id].entries.get(entry_id)

    async def try_lock(self, session_id: str) -> FakeLock | None:
        session = self.sessions[session_id]
        if session.locked:
            return None
        session.locked = True
        return FakeLock(session)

    async def admit_turn(self, session_id: str) -> FakePlace:
        return FakePlace()

    async def admit_job(self, session_id: str, job_id: str) -> FakeJobLock:
        lock = await self.try_job_lock(session_id, job_id)
        assert lock is not None
        return lock

    async def job_facts(self, session_id: str) -> list[JobFact]:
        events = await self.events_of_types(session_id, ("job/started", "job/ended"))
        return [
            JobFact(
                e.seq,
                e.type,
                str(e.data.get("job_id")),
                e.turn,
                str(e.data.get("command") or "")[:JOB_COMMAND_SHOWN],
                e.data.get("reason"),
                e.data.get("exit_code"),
                e.data.get("signal"),
            )
            for e in events
        ]

    async def job_ended(self, session_id: str, job_id: str) -> EventRecord | None:
        for e in await self.events_of_types(session_id, ("job/ended",)):
            if e.data.get("job_id") == job_id:
                return e
        return None

    async def try_job_lock(self, session_id: str, job_id: str) -> FakeJobLock | None:
        key = (session_id, job_id)
        if key in self.job_locks:
            return None
        self.job_locks.add(key)
        return FakeJobLock(self.job_locks, key)

    async def wait_for_events(self, session_id: str, after_seq: int, timeout: float) -> None:
        if len(self.sessions[session_id].events) - 1 > after_seq:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    async def put_blobs(self, session_id: str, blobs: Mapping[str, bytes]) -> None:
        for sha, content in blobs.items():
            assert hashlib.sha256(content).hexdigest() == sha
            self.sessions[session_id].blobs.setdefault(sha, bytes(content))

    async def get_blobs(self, session_id: str, shas: Sequence[str]) -> dict[str, bytes]:
        held = self.sessions[session_id].blobs
        return {sha: held[sha] for sha in shas if sha in held}

    # --- helpers for tests -------------------------------------------------------------

    def types(self, session_id: str, after_seq: int = 0) -> list[str]:
        return [e.type for e in self.sessions[session_id].events if e.seq > after_seq]

    def events(self, session_id: str) -> list[EventRecord]:
        return list(self.sessions[session_id].events)

    def entries(self, session_id: str) -> list[EntryRecord]:
        return list(self.sessions[session_id].entries.values())
