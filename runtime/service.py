"""The runtime's services, over any `SessionLog`: send, cancel, approvals, compaction,
navigation with branch summaries, crash recovery.

`Runtime` keeps only this process's runs (asyncio tasks) in memory; every decision it makes
is read from the log first and written back to it, under the session's turn lock where a
decision needs one turn at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from projections.records import EntryRecord, EventRecord
from projections.turns import TURN_MARKERS, PendingApproval, is_open, pending_approvals
from runtime.compaction import (
    branch_summary,
    compaction_entry,
    compaction_summary,
    entries_left_behind,
    prepare_compaction,
)
from runtime.config import AgentConfig, config_from_preset
from runtime.errors import (
    AgentError,
    ApprovalNotPending,
    NotFound,
    NothingToCompact,
    TurnRunning,
    lock_refusal,
)
from runtime.jobs import JobRegistry
from runtime.log_cache import new_inbox_id
from runtime.loop import Opening, TurnRunner
from runtime.messages import text_of
from runtime.ports import NewFact, SeqConflict, SessionLog, TurnLock
from runtime.providers import Provider, ProviderError, make_provider
from runtime.recovery import closers
from runtime.replay import (
    Replayed,
    ReplayPlan,
    ReplaySource,
    replay_header,
    replay_tool_names,
)
from runtime.run import DeltaSink, NoticeSink, Run, TurnEnded
from runtime.subagents import Children, Subagents
from runtime.tools import Toolbox
from runtime.workspace import WorkspaceRecorder

log = logging.getLogger("strand.runtime")

MODES = ("message", "steer", "follow_up")
_TARGET = {"steer": "next_step", "follow_up": "next_turn"}
RECENT_RUNS = 256
# Most closers recovery appends at once: well under the store's largest batch (a reply may
# ask for more tool calls than that; the calls past the cap are closed in pieces too).
CLOSING_PIECE = 200
# How long a job's end waits for the turn lock to start the turn that reads its notice.
JOB_WAKE_WAIT_S = 30.0


@dataclass(frozen=True, slots=True)
class Sent:
    """What a message did: started turn `turn`, or was queued as `inbox_id`."""

    turn: int | None = None
    inbox_id: str | None = None
    target: str | None = None  # next_step | next_turn, when queued


@dataclass(frozen=True, slots=True)
class Recovery:
    session_id: str
    turn: int | None  # the turn closed, if any
    status: str  # closed, nothing, running (a live process holds the turn lock)
    unknown: int = 0
    not_started: int = 0
    step: int | None = None
    lost_jobs: int = 0  # background jobs whose process died, recorded as lost

    def describe(self) -> str:
        jobs = f"; {self.lost_jobs} background job(s) lost" if self.lost_jobs else ""
        if self.status == "nothing":
            if jobs:
                return f"session {self.session_id}: no open turn{jobs}"
            return f"session {self.session_id}: nothing to recover"
        if self.status == "running":
            return f"session {self.session_id}: a live process is running it; left as it is{jobs}"
        parts = []
        if self.unknown:
            parts.append(f"{self.unknown} tool result(s) TOOL_OUTCOME_UNKNOWN")
        if self.not_started:
            parts.append(f"{self.not_started} tool result(s) TOOL_NOT_STARTED")
        if self.step is not None:
            parts.append(f"step {self.step} ended")
        parts.append("turn/end interrupted")
        return f"session {self.session_id}: closed turn {self.turn} ({', '.join(parts)}){jobs}"


@dataclass(frozen=True, slots=True)
class Compacted:
    entry_id: str
    first_kept_entry_id: str
    tokens_before: int
    summary: str


@dataclass(frozen=True, slots=True)
class Navigated:
    leaf_id: str | None
    editor_text: str | None  # the text of a user message the user went back to, to edit
    summary_entry_id: str | None


ProviderFactory = Callable[[AgentConfig], Provider]
ToolboxFactory = Callable[[AgentConfig], Toolbox]


def default_toolbox(config: AgentConfig) -> Toolbox:
    return Toolbox.for_session(
        config.tools, config.cwd, timeout_s=config.tool_timeout_s, quota=config.limits.workspace
    )


class Runtime:
    def __init__(
        self,
        log: SessionLog,
        *,
        provider_factory: ProviderFactory | None = None,
        toolbox_factory: ToolboxFactory = default_toolbox,
        busy_wait_s: float = 3.0,
        approval_timeout_s: float | None = None,
        children: Children | None = None,
    ) -> None:
        self.log = log
        # `task` calls run child sessions when the store can make them.
        self.subagents = Subagents(self, children) if children is not None else None
        # How long a turn waits for an approval decision before it ends (None: forever).
        self.approval_timeout_s = approval_timeout_s
        self.provider_factory: ProviderFactory = provider_factory or make_provider
        self.toolbox_factory = toolbox_factory
        self.busy_wait_s = busy_wait_s
        self.runs: dict[str, Run] = {}
        # This process's background jobs (`runtime.jobs`).
        self.jobs = JobRegistry(log)
        # The latest run of each session, finished or not, for callers that wait for it.
        self.recent: dict[str, Run] = {}

    # --- sending -------------------------------------------------------------------------

    async def send(
        self,
        session_id: str,
        text: str,
        *,
        mode: str = "message",
        auto_approve: bool = False,
        on_delta: DeltaSink | None = None,
        on_notice: NoticeSink | None = None,
    ) -> Sent:
        """Start a turn with `text`, or queue it for the running turn (steer: its next step;
        follow_up: the turn after it). A plain message while a turn runs is refused."""
        if mode not in MODES:
            raise AgentError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if not text.strip():
            raise AgentError("a message must not be empty")
        config, provider, toolbox = await self._setup(session_id)
        queued = await self._lock_or_queue(session_id, text, mode)
        if isinstance(queued, Sent):
            return queued
        lock = await self._admitted(session_id, queued)

        async def opening() -> Opening:
            return Opening.message(text)

        runners = self._runners(
            session_id, (config, provider, toolbox), auto_approve, on_delta, on_notice
        )
        return Sent(turn=await self._launch(session_id, lock, runners, opening))

    async def retry(
        self,
        session_id: str,
        entry_id: str | None = None,
        *,
        auto_approve: bool = False,
        on_delta: DeltaSink | None = None,
        on_notice: NoticeSink | None = None,
    ) -> Sent:
        """Start a turn that asks again from where a failed reply was asked: the leaf goes
        back to the failed assistant message's parent (`entry_id`, by default the current
        leaf, which must be a reply with stopReason "error") and the model is called from
        there, with no new user message. The failed reply stays in the tree."""
        config, provider, toolbox = await self._setup(session_id)
        lock = await self._admitted(session_id, await self._exclusive(session_id))

        async def opening() -> Opening:
            failed = await self._failed_reply(session_id, entry_id)
            return Opening.retry(failed.id, failed.parent_id)

        runners = self._runners(
            session_id, (config, provider, toolbox), auto_approve, on_delta, on_notice
        )
        return Sent(turn=await self._launch(session_id, lock, runners, opening))

    async def replay(
        self,
        session_id: str,
        source: ReplaySource,
        plans: Sequence[ReplayPlan],
        *,
        on_delta: DeltaSink | None = None,
        on_notice: NoticeSink | None = None,
    ) -> Replayed:
        """Replay the recorded request `source` once per plan, one turn after another
        under the session's turn lock (see `runtime.replay`); each answer is a sibling of
        the original one. Refused while a turn runs. Tools still wait for approval."""
        if not plans:
            raise AgentError("a replay needs at least one preset")
        setup = await self.log.setup(session_id)  # the session may run at all (workspace)
        tools = replay_tool_names(source) if source.run_tools else ()
        prepared: list[tuple[AgentConfig, Provider, Toolbox, dict[str, Any]]] = []
        for plan in plans:
            # The replay offers the recorded request's tools, whatever the preset's are.
            config = config_from_preset(
                {**plan.preset, "tools": list(tools)}, cwd=setup.cwd, limits=setup.limits
            )
            header = replay_header(source, config, plan)
            prepared.append(
                (config, self.provider_factory(config), self.toolbox_factory(config), header)
            )
        lock = await self._admitted(session_id, await self._exclusive(session_id))

        async def opening() -> Opening:
            return Opening.replay(source, prepared[0][3], group=None, count=len(prepared))

        async def drive(run: Run, runner: TurnRunner, first: int) -> list[TurnEnded]:
            await runner.run_one_turn(first)
            for rest in prepared[1:]:
                if run.cancelled:
                    break
                nxt = self._runners(session_id, rest[:3], False, on_delta, on_notice)(run)
                await nxt.cache.load()
                turn = await nxt.start(
                    Opening.replay(source, rest[3], group=first, count=len(prepared))
                )
                await nxt.run_one_turn(turn)
            return run.ended

        runners = self._runners(session_id, prepared[0][:3], False, on_delta, on_notice)
        first = await self._launch(session_id, lock, runners, opening, drive)
        return Replayed(first, tuple(range(first, first + len(prepared))))

    def _runners(
        self,
        session_id: str,
        setup: tuple[AgentConfig, Provider, Toolbox],
        auto_approve: bool,
        on_delta: DeltaSink | None,
        on_notice: NoticeSink | None,
    ) -> Callable[[Run], TurnRunner]:
        """What makes the session's runner for a run, with what it runs with."""
        config, provider, toolbox = setup
        if any(name in toolbox.tools for name in ("bash", "job_output")):

            async def wake() -> None:
                await self._wake_for_job(session_id, auto_approve, on_delta, on_notice)

            limits = config.limits
            toolbox.jobs = self.jobs.bind(
                session_id, config.cwd, limits.jobs, limits.workspace, wake
            )

        def runner(run: Run) -> TurnRunner:
            return TurnRunner(
                self.log,
                session_id,
                config,
                provider,
                toolbox,
                run,
                auto_approve=auto_approve,
                on_delta=on_delta,
                on_notice=on_notice,
                approval_timeout_s=self.approval_timeout_s,
                subagents=self.subagents,
            )

        return runner

    async def _wake_for_job(
        self,
        session_id: str,
        auto_approve: bool,
        on_delta: DeltaSink | None,
        on_notice: NoticeSink | None,
    ) -> None:
        """A job ended while no turn ran: start a turn that claims its notice (the oldest
        input queued for the next turn), as soon as the turn lock is free. A turn that takes
        the lock first takes the notice as its follow-up; then nothing is started."""
        setup = await self._setup(session_id)
        deadline = time.monotonic() + JOB_WAKE_WAIT_S
        while (lock := await self.log.try_lock(session_id)) is None:
            if time.monotonic() > deadline or self.jobs.stopping:
                return
            await asyncio.sleep(0.1)
        lock = await self._admitted(session_id, lock)
        made: list[TurnRunner] = []
        make = self._runners(session_id, setup, auto_approve, on_delta, on_notice)

        def runner(run: Run) -> TurnRunner:
            made.append(make(run))
            return made[-1]

        async def opening() -> Opening:
            item = made[-1]._next_follow_up()
            if item is None:
                raise _NothingQueued()
            return Opening.job(item)

        with contextlib.suppress(_NothingQueued):
            await self._launch(session_id, lock, runner, opening)

    async def _failed_reply(self, session_id: str, entry_id: str | None) -> EntryRecord:
        if entry_id is None:
            entry_id = (await self.log.head(session_id)).leaf_entry_id
            if entry_id is None:
                raise AgentError("nothing to retry: the session is empty")
        entry = await self.log.entry(session_id, entry_id)
        if entry is None:
            raise NotFound(f"no entry {entry_id!r} in this session")
        message = entry.data.get("message") if entry.type == "message" else None
        if (
            not isinstance(message, Mapping)
            or message.get("role") != "assistant"
            or message.get("stopReason") != "error"
        ):
            raise AgentError(
                f"entry {entry_id!r} is not a failed reply: only an assistant message with "
                'stopReason "error" can be retried'
            )
        return entry

    async def _launch(
        self,
        session_id: str,
        lock: TurnLock,
        make_runner: Callable[[Run], TurnRunner],
        opening: Callable[[], Awaitable[Opening]],
        drive: Callable[[Run, TurnRunner, int], Awaitable[list[TurnEnded]]] | None = None,
    ) -> int:
        """Register a run under `lock`, start its first turn (`opening` says how, asked once
        the session is recovered) and run it on in a task of its own (`drive`; by default
        the turn and the follow-ups queued for it); the first turn's number. If the start
        fails, the run is dropped and the lock released."""
        run = Run(session_id, lock)
        # Registered at once, so that a cancel that comes while the turn starts finds it.
        self.runs[session_id] = run
        try:
            await self._recover_locked(session_id)
            runner = make_runner(run)
            await runner.cache.load()
            turn = await runner.start(await opening())
        except BaseException:
            del self.runs[session_id]
            await lock.release()
            raise
        self._remember(run)
        run.current_turn = turn
        work = runner.run_turns(turn) if drive is None else drive(run, runner, turn)
        # A fresh context: the run outlives the request that started it.
        run.task = asyncio.get_running_loop().create_task(
            self._drive_work(run, work), context=contextvars.Context()
        )
        return turn

    async def _admitted(self, session_id: str, lock: TurnLock) -> TurnLock:
        """`lock` together with a place for one more open turn (`SessionLog.admit_turn`);
        when the caps refuse one, the lock is let go and nothing has been written."""
        try:
            place = await self.log.admit_turn(session_id)
        except BaseException:
            await lock.release()
            raise
        return _HeldTogether(lock, place)

    async def _setup(self, session_id: str) -> tuple[AgentConfig, Provider, Toolbox]:
        setup = await self.log.setup(session_id)
        config = config_from_preset(setup.preset, cwd=setup.cwd, limits=setup.limits)
        return config, self.provider_factory(config), self.toolbox_factory(config)

    async def _lock_or_queue(self, session_id: str, text: str, mode: str) -> TurnLock | Sent:
        deadline = time.monotonic() + self.busy_wait_s
        while True:
            lock = await self.log.try_lock(session_id)
            if lock is not None:
                return lock
            if await self._open_turn(session_id) is not None:
                if mode == "message":
                    raise TurnRunning(
                        "a turn is running in this session: send the message as steer or "
                        "follow_up, or cancel the turn first"
                    )
                queued = await self._queue(session_id, text, _TARGET[mode])
                if queued is not None:
                    return queued
                continue
            # The lock holder is finishing a turn, or compacting or navigating.
            if time.monotonic() > deadline:
                raise lock_refusal(turn_open=False)
            await asyncio.sleep(0.05)

    async def _queue(self, session_id: str, text: str, target: str) -> Sent | None:
        """Queue input for the open turn; None when the turn ended meanwhile."""
        while True:
            head = await self.log.head(session_id)
            marker = await self.log.last_event(session_id, TURN_MARKERS)
            if marker is None or not is_open(marker):
                return None
            inbox_id = new_inbox_id()
            fact = NewFact(
                "inbox/queued",
                {"inbox_id": inbox_id, "target": target, "text": text},
                turn=_turn_of(marker),
            )
            try:
                await self.log.append(session_id, head.last_seq, [fact])
            except SeqConflict:
                continue
            return Sent(inbox_id=inbox_id, target=target)

    async def _drive_work(self, run: Run, work: Awaitable[list[TurnEnded]]) -> list[TurnEnded]:
        """Run a run's turns to their end, then let go of the run and its lock."""
        try:
            return await work
        except Exception:
            log.exception("session %s: the run failed", run.session_id)
            raise
        finally:
            if self.runs.get(run.session_id) is run:
                del self.runs[run.session_id]
            try:
                await run.lock.release()
            except Exception:
                log.exception("session %s: releasing the turn lock failed", run.session_id)

    # --- a running turn ------------------------------------------------------------------

    def cancel_local(self, session_id: str) -> bool:
        """Cancel this process's run of the session, if it has one."""
        run = self.runs.get(session_id)
        if run is None:
            return False
        run.cancel()
        return True

    def _remember(self, run: Run) -> None:
        self.recent.pop(run.session_id, None)
        self.recent[run.session_id] = run
        while len(self.recent) > RECENT_RUNS:
            del self.recent[next(iter(self.recent))]

    async def wait(self, session_id: str, timeout: float | None = None) -> list[TurnEnded] | None:
        """Wait for this process's latest run of the session to finish (it may have
        already); its turn endings. None when this process started none."""
        run = self.runs.get(session_id) or self.recent.get(session_id)
        if run is None or run.task is None:
            return None
        await asyncio.wait_for(asyncio.shield(run.task), timeout)
        return list(run.ended)

    async def stop_all(self, timeout: float = 10.0) -> None:
        """Cancel every run of this process, kill its background jobs, and wait for them
        to end."""
        await self.jobs.stop_all(timeout)
        runs = list(self.runs.values())
        for run in runs:
            run.cancel()
        tasks = [run.task for run in runs if run.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    async def decide(
        self, session_id: str, approval_id: str, outcome: str, by: str | None = None
    ) -> None:
        """Record the user's decision on a pending approval (allowed or rejected)."""
        if outcome not in ("allowed", "rejected"):
            raise AgentError(f"outcome must be allowed or rejected, not {outcome!r}")
        while True:
            head = await self.log.head(session_id)
            asked = await self._pending(session_id, head.last_seq)
            match = next((a for a in asked if a.approval_id == approval_id), None)
            if match is None:
                raise ApprovalNotPending(f"approval {approval_id} is not pending in this session")
            data: dict[str, Any] = {"approval_id": approval_id, "outcome": outcome}
            if by:
                data["by"] = by
            fact = NewFact("approval/decided", data, turn=match.turn, step=match.step)
            try:
                await self.log.append(session_id, head.last_seq, [fact])
            except SeqConflict:
                continue
            return

    async def pending_approvals(self, session_id: str) -> list[PendingApproval]:
        head = await self.log.head(session_id)
        return await self._pending(session_id, head.last_seq)

    async def _pending(self, session_id: str, upto: int) -> list[PendingApproval]:
        marker = await self.log.last_event(session_id, TURN_MARKERS, before_seq=upto + 1)
        if marker is None or not is_open(marker):
            return []
        return list(pending_approvals(await self._events_from(session_id, marker.seq, upto)))

    # --- recovery ------------------------------------------------------------------------

    async def recover(self, session_id: str) -> Recovery:
        """Close the session's open turn if the process that ran it is gone, and record
        as lost each of its background jobs whose process is gone."""
        lost = await self.jobs.recover(session_id)
        if session_id in self.runs:
            return Recovery(session_id, None, "running", lost_jobs=lost)
        lock = await self.log.try_lock(session_id)
        if lock is None:
            marker = await self._open_turn(session_id)
            status = "running" if marker is not None else "nothing"
            return Recovery(session_id, None, status, lost_jobs=lost)
        try:
            return replace(await self._recover_locked(session_id), lost_jobs=lost)
        finally:
            await lock.release()

    async def _recover_locked(self, session_id: str) -> Recovery:
        await self.jobs.recover(session_id)
        while True:
            head = await self.log.head(session_id)
            marker = await self.log.last_event(
                session_id, TURN_MARKERS, before_seq=head.last_seq + 1
            )
            if marker is None or not is_open(marker):
                return Recovery(session_id, None, "nothing")
            turn = _turn_of(marker)
            events = await self._events_from(session_id, marker.seq, head.last_seq)
            closing = closers(turn, events)
            facts = closing.facts
            folder = await self._folder_fact(session_id)
            if folder is not None:  # just before `turn/end`, which comes last
                facts = [*facts[:-1], folder, facts[-1]]
            try:
                await self._append_in_pieces(session_id, head.last_seq, facts)
            except SeqConflict:
                continue
            log.info("session %s: closed turn %s left open by a dead process", session_id, turn)
            return Recovery(
                session_id, turn, "closed", closing.unknown, closing.not_started, closing.step
            )

    async def _folder_fact(self, session_id: str) -> NewFact | None:
        """What a dead turn's tools left in the folder that no fact holds (a `recovery`
        snapshot, its contents stored), to close the turn with: the folder and the facts
        then agree again before anything else runs. None when they already do, or when it
        cannot be read now (no folder allowed, past the quota): the next turn's first
        snapshot then records it, as `recovery` too."""
        try:
            setup = await self.log.setup(session_id)
            files = WorkspaceRecorder(self.log, session_id, setup.cwd, setup.limits.workspace)
            return await files.after_recovery()
        except (AgentError, ValueError, OSError) as exc:
            log.warning("session %s: the folder is left to the next turn: %s", session_id, exc)
            return None

    async def _append_in_pieces(
        self, session_id: str, expected_seq: int, facts: Sequence[NewFact]
    ) -> None:
        """Closers in appends of at most CLOSING_PIECE facts: a reply that asked for more
        tool calls than one append takes is closed too. `turn/end` comes last, so a process
        that dies between two pieces leaves the turn open, and the next recovery closes
        what is still unanswered (closers are computed from the log): still exactly once."""
        for start in range(0, len(facts), CLOSING_PIECE):
            appended = await self.log.append(
                session_id, expected_seq, facts[start : start + CLOSING_PIECE]
            )
            expected_seq = appended.last_seq

    async def _open_turn(self, session_id: str) -> EventRecord | None:
        marker = await self.log.last_event(session_id, TURN_MARKERS)
        return marker if is_open(marker) else None

    async def _events_from(self, session_id: str, first: int, last: int) -> list[EventRecord]:
        events: list[EventRecord] = []
        after = first - 1
        while after < last:
            page = await self.log.events_after(session_id, after)
            if not page:
                break
            events.extend(e for e in page if e.seq <= last)
            after = page[-1].seq
        return events

    # --- compaction and navigation -------------------------------------------------------

    async def compact(self, session_id: str, instructions: str | None = None) -> Compacted:
        """Compact the current path now (the user asked)."""
        config, provider, _ = await self._setup(session_id)
        lock = await self._exclusive(session_id)
        try:
            await self._recover_locked(session_id)
            head = await self.log.head(session_id)
            if head.leaf_entry_id is None:
                raise NothingToCompact("nothing to compact: the session is empty")
            window = await self.log.context_window(session_id, head.leaf_entry_id)
            if window and window[-1].type == "compaction":
                raise NothingToCompact("already compacted: nothing was added since")
            prep = prepare_compaction(window, config.keep_recent_tokens)
            if prep is None or not (prep.messages or prep.turn_prefix):
                raise NothingToCompact(
                    "nothing to compact: the whole conversation fits in the kept window "
                    f"({config.keep_recent_tokens} tokens)"
                )
            summary = await _summary_or_error(
                compaction_summary(provider, config, prep, instructions)
            )
            entry = compaction_entry(prep, summary, head.leaf_entry_id)
            result = await self._append_at_head(
                session_id, [NewFact("entry/compaction", {"entry": entry})]
            )
            return Compacted(result[0], prep.first_kept_entry_id, prep.tokens_before, summary)
        finally:
            await lock.release()

    async def navigate(
        self,
        session_id: str,
        entry_id: str | None,
        *,
        summarize: bool = False,
        instructions: str | None = None,
    ) -> Navigated:
        """Move the current leaf as Pi's tree navigation does: to a user message's parent
        (its text comes back for editing), to any other entry itself; with `summarize`,
        a summary of the branch left behind becomes a `branch_summary` entry there."""
        config, provider, _ = await self._setup(session_id)
        lock = await self._exclusive(session_id)
        try:
            await self._recover_locked(session_id)
            head = await self.log.head(session_id)
            new_leaf, editor_text = None, None
            if entry_id is not None:
                target = await self.log.entry(session_id, entry_id)
                if target is None:
                    raise NotFound(f"{entry_id!r} is not an entry of this session")
                new_leaf, editor_text = _landing(target)
            if entry_id == head.leaf_entry_id:
                return Navigated(head.leaf_entry_id, None, None)
            facts = [NewFact("leaf/moved", {"to": new_leaf, "reason": "navigate"})]
            summary_entry = None
            if summarize and head.leaf_entry_id is not None:
                old_path = await self.log.path(session_id, head.leaf_entry_id)
                target_path = await self.log.path(session_id, entry_id) if entry_id else []
                left = entries_left_behind(old_path, target_path)
                if left:
                    text, file_ops = await _summary_or_error(
                        branch_summary(provider, config, left, instructions)
                    )
                    read, modified = file_ops.lists()
                    summary_entry = {
                        "type": "branch_summary",
                        "parentId": new_leaf,
                        # The leaf the summarized path was left from, as Pi 1.6 records
                        # it (0.73.1 wrote the destination here, which 1.6 calls a bug).
                        "fromId": head.leaf_entry_id,
                        "summary": text,
                        "details": {"readFiles": read, "modifiedFiles": modified},
                    }
                    facts.append(NewFact("entry/branch_summary", {"entry": summary_entry}))
            ids = await self._append_at_head(session_id, facts)
            summary_id = ids[0] if summary_entry is not None else None
            return Navigated(summary_id or new_leaf, editor_text, summary_id)
        finally:
            await lock.release()

    async def _exclusive(self, session_id: str) -> TurnLock:
        """The turn lock, for work that must not overlap a turn."""
        deadline = time.monotonic() + self.busy_wait_s
        while True:
            lock = await self.log.try_lock(session_id)
            if lock is not None:
                return lock
            if await self._open_turn(session_id) is not None:
                raise lock_refusal(turn_open=True)
            if time.monotonic() > deadline:
                raise lock_refusal(turn_open=False)
            await asyncio.sleep(0.05)

    async def _append_at_head(self, session_id: str, facts: Sequence[NewFact]) -> tuple[str, ...]:
        while True:
            head = await self.log.head(session_id)
            try:
                result = await self.log.append(session_id, head.last_seq, facts)
            except SeqConflict:
                continue
            return result.entry_ids


class _NothingQueued(Exception):
    """A job's notice was already taken (by a turn that started first)."""


class _HeldTogether:
    """A run's turn lock and its turn place, released together when the run ends."""

    def __init__(self, lock: TurnLock, place: TurnLock) -> None:
        self._lock = lock
        self._place = place

    async def release(self) -> None:
        try:
            await self._lock.release()
        finally:
            await self._place.release()


def _landing(target: EntryRecord) -> tuple[str | None, str | None]:
    """Where the leaf goes when the user picks `target`, and the text to edit, if any."""
    data: Mapping[str, Any] = target.data
    if target.type == "message":
        message = data.get("message")
        if isinstance(message, Mapping) and message.get("role") == "user":
            return target.parent_id, text_of(message.get("content"))
    if target.type == "custom_message":
        return target.parent_id, text_of(data.get("content"))
    return target.id, None


async def _summary_or_error(work: Any) -> Any:
    try:
        return await work
    except ProviderError as exc:
        raise AgentError(f"the summary could not be made: {exc}") from None


def _turn_of(event: EventRecord) -> int:
    value = event.data.get("turn", event.turn)
    return value if isinstance(value, int) else 0
