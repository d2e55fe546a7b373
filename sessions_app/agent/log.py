"""`runtime.ports.SessionLog` over `sessions_app.store` (the one write) and the selectors
(every read), each call run on the engine's database threads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from projections.chat import NOT_STARTED, OUTCOME_UNKNOWN
from projections.records import EntryRecord, EventRecord
from runtime import NotFound
from runtime.ports import Appended, JobFact, NewFact, SeqConflict, SessionHead, SessionSetup
from sessions_app import presets, store, workspaces
from sessions_app.agent.admission import JobPlace, PlaceHolder, TurnPlace
from sessions_app.agent.children import child_tools_for_turn
from sessions_app.agent.lock import PgTurnLock
from sessions_app.selectors import context, events, workspace
from sessions_app.selectors import runtime as reads
from sessions_app.store import blobs

# What closes work already under way: a turn or step ending, and the synthetic results of
# tool calls that will never run. Past the storage quota these are still written (counted,
# not refused), so a turn the quota stops ends well-formed instead of staying open.
_CLOSING = frozenset({"turn/end", "step/end"})
_CLOSING_RESULTS = frozenset({OUTCOME_UNKNOWN, NOT_STARTED})


def _closing(fact: NewFact) -> bool:
    if fact.type == "tool/result":
        return fact.data.get("error_code") in _CLOSING_RESULTS
    return fact.type in _CLOSING


def _append(session_id: str, expected_seq: int, facts: Sequence[NewFact]) -> Appended:
    batch = [store.NewEvent(f.type, dict(f.data), turn=f.turn, step=f.step) for f in facts]
    try:
        result = store.append_events(
            session_id, expected_seq, batch, quota=not all(_closing(f) for f in facts)
        )
    except store.ConcurrencyError as exc:
        raise SeqConflict(exc.current_seq) from None
    return Appended(result.first_seq, result.last_seq, result.entry_ids)


def _head(session_id: str) -> SessionHead:
    found = reads.session_head(session_id)
    if found is None:
        raise NotFound(f"no session {session_id}")
    return SessionHead(*found)


def _setup(session_id: str) -> SessionSetup:
    """What the session's next turn (or compaction, or summary) runs with, checked now: the
    server's preset of the name the session recorded, and its working directory if that
    still lies in its owner's folders. Otherwise the work is refused with the reason
    (`PresetUnavailable`, `WorkspaceNotAllowed`) before anything is written."""
    session = reads.session_for_turn(session_id)
    if session is None:
        raise NotFound(f"no session {session_id}")
    preset = child_tools_for_turn(session, presets.preset_for_turn(session.preset))
    cwd = workspaces.cwd_for_turn(session.owner, session.cwd)
    return SessionSetup(preset, cwd, workspaces.run_limits(session.owner, cwd))


def _put_blobs(session_id: str, contents: Mapping[str, bytes]) -> None:
    blobs.blobs_put(owner_id=blobs.session_owner_id(session_id), blobs=contents)


def _get_blobs(session_id: str, shas: Sequence[str]) -> dict[str, bytes]:
    return blobs.blobs_get(owner_id=blobs.session_owner_id(session_id), shas=shas)


def _workspace_reads(
    session_id: str, entry_id: str | None, also: Sequence[str]
) -> tuple[list[str], list[EventRecord]]:
    return workspace.workspace_reads(session_id, entry_id, also) or ([], [])


def _last_event(
    session_id: str, types: Sequence[str], before_seq: int | None
) -> EventRecord | None:
    return events.latest_event(session_id, types, before_seq=before_seq)


class LogEngine(PlaceHolder, Protocol):
    """What the log needs of the engine (`sessions_app.agent.engine`, which builds the log
    and so is not imported here): database threads, turn locks and places, wake-ups."""

    def poke(self, session_id: str, seq: int) -> None: ...

    async def wait_for_events(self, session_id: str, after_seq: int, timeout: float) -> None: ...


class PostgresLog:
    """The runtime's store: one engine's database threads, its wake-ups and its lock."""

    def __init__(self, engine: LogEngine) -> None:
        self._engine = engine

    async def append(
        self, session_id: str, expected_seq: int, facts: Sequence[NewFact]
    ) -> Appended:
        result = await self._engine.db(_append, session_id, expected_seq, facts)
        self._engine.poke(session_id, result.last_seq)
        return result

    async def head(self, session_id: str) -> SessionHead:
        return await self._engine.db(_head, session_id)

    async def setup(self, session_id: str) -> SessionSetup:
        return await self._engine.db(_setup, session_id)

    async def events_after(
        self, session_id: str, after_seq: int, limit: int = 1000
    ) -> list[EventRecord]:
        return await self._engine.db(events.events_after, session_id, after_seq, limit)

    async def last_event(
        self, session_id: str, types: Sequence[str], before_seq: int | None = None
    ) -> EventRecord | None:
        return await self._engine.db(_last_event, session_id, types, before_seq)

    async def events_of_types(
        self, session_id: str, types: Sequence[str], after_seq: int = -1
    ) -> list[EventRecord]:
        return await self._engine.db(reads.events_of_types, session_id, types, after_seq)

    async def path(self, session_id: str, leaf_id: str) -> list[EntryRecord]:
        return await self._engine.db(reads.path, session_id, leaf_id)

    async def workspace_snapshots(
        self, session_id: str, entry_id: str | None, also: Sequence[str] = ()
    ) -> tuple[list[str], list[EventRecord]]:
        return await self._engine.db(_workspace_reads, session_id, entry_id, also)

    async def context_window(self, session_id: str, leaf_id: str) -> list[EntryRecord]:
        """The kept window of the leaf's path: entries record their path's latest
        compaction, so the older part of a long path is never read."""
        return await self._engine.db(context.kept_window, session_id, leaf_id)

    async def entry(self, session_id: str, entry_id: str) -> EntryRecord | None:
        return await self._engine.db(reads.entry, session_id, entry_id)

    async def try_lock(self, session_id: str) -> PgTurnLock | None:
        return await self._engine.db(PgTurnLock.try_take, self._engine, session_id)

    async def admit_turn(self, session_id: str) -> TurnPlace:
        return await self._engine.db(TurnPlace.take, self._engine, session_id)

    async def admit_job(self, session_id: str, job_id: str) -> JobPlace:
        return await self._engine.db(JobPlace.take, self._engine, session_id, job_id)

    async def try_job_lock(self, session_id: str, job_id: str) -> PgTurnLock | None:
        return await self._engine.db(PgTurnLock.try_take_job, self._engine, session_id, job_id)

    async def job_facts(self, session_id: str) -> list[JobFact]:
        return await self._engine.db(reads.job_facts, session_id)

    async def job_ended(self, session_id: str, job_id: str) -> EventRecord | None:
        return await self._engine.db(reads.job_ended, session_id, job_id)

    async def wait_for_events(self, session_id: str, after_seq: int, timeout: float) -> None:
        await self._engine.wait_for_events(session_id, after_seq, timeout)

    async def put_blobs(self, session_id: str, blobs: Mapping[str, bytes]) -> None:
        if blobs:
            await self._engine.db(_put_blobs, session_id, blobs)

    async def get_blobs(self, session_id: str, shas: Sequence[str]) -> dict[str, bytes]:
        return await self._engine.db(_get_blobs, session_id, shas) if shas else {}
