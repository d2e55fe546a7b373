"""What the runtime needs from the store: a small protocol of its own (DESIGN §9).

`sessions_app.agent` implements it with Postgres; the tests also have an in-memory fake.
Everything the runtime learns it reads through here, and every fact it records goes through
`append`: a process can die at any moment and the next one rebuilds all it needs from the log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from projections.records import EntryRecord, EventRecord
from runtime.config import RunLimits


@dataclass(frozen=True, slots=True)
class NewFact:
    """An event to append: its type and data as in the vocabulary, and its turn and step."""

    type: str
    data: Mapping[str, Any] = field(default_factory=dict)
    turn: int | None = None
    step: int | None = None


@dataclass(frozen=True, slots=True)
class Appended:
    first_seq: int
    last_seq: int
    # Ids of the entries the batch added, in batch order.
    entry_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class JobFact:
    """A `job/started` or `job/ended`, cut to what the job tools and recovery read (no
    output): a session's jobs are read whole, however many ran and wrote."""

    seq: int
    type: str
    job_id: str
    turn: int | None = None
    command: str = ""  # of a start, its first JOB_COMMAND_SHOWN characters
    reason: str | None = None  # of an end
    exit_code: int | None = None
    signal: int | None = None


JOB_COMMAND_SHOWN = 200


@dataclass(frozen=True, slots=True)
class SessionHead:
    last_seq: int
    leaf_entry_id: str | None


@dataclass(frozen=True, slots=True)
class SessionSetup:
    """What a session runs with: its preset (provider, model, prompt, tools…), its cwd, and
    the server's limits on its agent."""

    preset: Mapping[str, Any]
    cwd: str
    limits: RunLimits = RunLimits()


class SeqConflict(Exception):
    """The session moved past the expected seq: read the new events and try again."""

    def __init__(self, current_seq: int) -> None:
        super().__init__(f"the session is at seq {current_seq}")
        self.current_seq = current_seq


class TurnLock(Protocol):
    """The session's turn lock, held until released (or until the holder's process dies)."""

    async def release(self) -> None: ...


class SessionLog(Protocol):
    async def append(
        self, session_id: str, expected_seq: int, facts: Sequence[NewFact]
    ) -> Appended:
        """Append after `expected_seq` in one transaction, or raise `SeqConflict`."""
        ...

    async def head(self, session_id: str) -> SessionHead: ...

    async def setup(self, session_id: str) -> SessionSetup: ...

    async def events_after(
        self, session_id: str, after_seq: int, limit: int = 1000
    ) -> list[EventRecord]: ...

    async def last_event(
        self, session_id: str, types: Sequence[str], before_seq: int | None = None
    ) -> EventRecord | None:
        """The newest event of one of `types` (with seq < `before_seq` when given)."""
        ...

    async def events_of_types(
        self, session_id: str, types: Sequence[str], after_seq: int = -1
    ) -> list[EventRecord]: ...

    async def path(self, session_id: str, leaf_id: str) -> list[EntryRecord]:
        """Root→leaf path (empty for an unknown leaf)."""
        ...

    async def workspace_snapshots(
        self, session_id: str, entry_id: str | None, also: Sequence[str] = ()
    ) -> tuple[list[str], list[EventRecord]]:
        """What the fold at `entry_id` (None: the root) reads: ids of the root→entry path
        (at least those from the entry of its checkpoint down, and up to those of `also`
        that are on it; a store may give all) and
        the `workspace/snapshot` events it needs, oldest first (at least the newest
        checkpoint on the path that holds all before it and the path's snapshots after it;
        a store may give every snapshot). Nothing for an unknown entry."""
        ...

    async def context_window(self, session_id: str, leaf_id: str) -> list[EntryRecord]:
        """The tail of the root→leaf path that a context and a compaction read: from the
        latest compaction's first kept entry (or from that compaction) to the leaf, or the
        whole path when it has no compaction. A store may return the whole path."""
        ...

    async def entry(self, session_id: str, entry_id: str) -> EntryRecord | None: ...

    async def try_lock(self, session_id: str) -> TurnLock | None:
        """Take the session's turn lock, or None when someone holds it."""
        ...

    async def admit_turn(self, session_id: str) -> TurnLock:
        """A place for one more open turn (a run keeps it until it ends), or a refusal
        when the session's owner or this process has as many turns open as allowed."""
        ...

    async def admit_job(self, session_id: str, job_id: str) -> TurnLock:
        """The lock of a background job about to start (held while it runs, dropped with
        this process) and a place for it among its owner's jobs, or a refusal (with its
        reason) when the owner runs as many jobs as allowed."""
        ...

    async def try_job_lock(self, session_id: str, job_id: str) -> TurnLock | None:
        """Take a job's lock, or None while the process running the job holds it."""
        ...

    async def job_facts(self, session_id: str) -> list[JobFact]:
        """The session's `job/started` and `job/ended` events, oldest first, cut."""
        ...

    async def job_ended(self, session_id: str, job_id: str) -> EventRecord | None:
        """The `job/ended` of one job of the session (with its output), if it ended."""
        ...

    async def wait_for_events(self, session_id: str, after_seq: int, timeout: float) -> None:
        """Return when events after `after_seq` may exist, or after `timeout` seconds."""
        ...

    async def put_blobs(self, session_id: str, blobs: Mapping[str, bytes]) -> None:
        """Store workspace file contents (sha256 → bytes) for the session's owner, before
        the `workspace/snapshot` that names them; storing one again changes nothing."""
        ...

    async def get_blobs(self, session_id: str, shas: Sequence[str]) -> dict[str, bytes]:
        """The contents of those of `shas` the session's owner holds."""
        ...
