"""The agent loop: turns, steps, model requests, tool calls (DESIGN §7).

A `TurnRunner` runs the turns of one session while its process holds the session's turn
lock. It keeps no fact to itself: each one is appended to the log as it happens, with the
seq it expects, so the log alone tells how far a turn got. What it holds in memory (the
last seq, its position in the tree, queued input, approval decisions) is a cache of the
log (`LogCache`), refreshed whenever an append finds that someone else wrote in between.
The runner keeps turns and steps; a step's model request is `ModelRequest`'s, its tool
calls `ToolDispatch`'s, compaction `Compactor`'s.

One turn, as events:

    turn/start, user/message                      (a follow-up: turn/start, inbox/claimed, user/message)
    step/start, [inbox/claimed, user/message]…    (steering input claimed at the step boundary)
    [entry/compaction]                            (when the context outgrew the window)
    [request/header], request/sent
    assistant/message
    [approval/asked, approval/decided]…           (tools that need approval, in model order)
    tool/call…, tool/result…                      (in model order)
    [tool/call, tool/result]…                     (calls past the reply's cap: refused, not run)
    step/end
    … more steps while the model calls tools …
    turn/end

Every tool call in an assistant message gets a `tool/call` and a `tool/result`, whatever
happens (rejection, cancellation, timeout, unknown tool), so the model history never holds
a call without its result. Only crash recovery writes results without a `tool/call`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from projections.records import EventRecord
from runtime.compactor import Compactor
from runtime.config import AgentConfig
from runtime.dispatch import ToolDispatch
from runtime.log_cache import InboxItem, LogCache
from runtime.messages import message_entry, user_message
from runtime.model_request import ModelRequest
from runtime.ports import NewFact, SessionLog
from runtime.providers.base import Provider
from runtime.recovery import closers
from runtime.replay import ReplaySource
from runtime.run import Cancelled, DeltaSink, Notice, NoticeSink, Run, StepResult, TurnEnded
from runtime.subagents import Subagents
from runtime.tools import Toolbox
from runtime.workspace import WorkspaceRecorder

log = logging.getLogger("strand.runtime")


@dataclass(frozen=True, slots=True)
class Opening:
    """How a turn opens: the facts it starts with (`turn/start` with its trigger, then what
    the trigger brings), given the turn's number and the leaf when they are appended; for
    a retry or a replay, the entry the leaf goes back to; for a replay, the header its
    requests go out under."""

    facts: Callable[[int, str | None], list[NewFact]]
    moves: bool = False
    to: str | None = None
    header: Mapping[str, Any] | None = None

    @classmethod
    def message(cls, text: str) -> Opening:
        """`turn/start` and the user's message."""

        def facts(turn: int, _: str | None) -> list[NewFact]:
            return [
                NewFact("turn/start", {"turn": turn, "trigger": "message"}, turn=turn),
                _user_fact(text, turn, None),
            ]

        return cls(facts)

    @classmethod
    def follow_up(cls, item: InboxItem) -> Opening:
        """`turn/start` (trigger follow_up) and the queued message, claimed from the inbox."""

        def facts(turn: int, _: str | None) -> list[NewFact]:
            return [
                NewFact("turn/start", {"turn": turn, "trigger": "follow_up"}, turn=turn),
                NewFact("inbox/claimed", {"inbox_id": item.inbox_id}, turn=turn),
                _user_fact(item.text, turn, None),
            ]

        return cls(facts)

    @classmethod
    def job(cls, item: InboxItem) -> Opening:
        """`turn/start` (trigger job) and a background job's notice, claimed from the inbox
        where the job's end queued it while no turn ran (`runtime.jobs`)."""

        def facts(turn: int, _: str | None) -> list[NewFact]:
            return [
                NewFact("turn/start", {"turn": turn, "trigger": "job"}, turn=turn),
                NewFact("inbox/claimed", {"inbox_id": item.inbox_id}, turn=turn),
                _user_fact(item.text, turn, None),
            ]

        return cls(facts)

    @classmethod
    def retry(cls, failed_entry_id: str, point: str | None) -> Opening:
        """`turn/start` (trigger retry) and the leaf moved back to `point`, where the
        failed reply was asked from; the turn's first request is built from there."""

        def facts(turn: int, leaf: str | None) -> list[NewFact]:
            start = {"turn": turn, "trigger": "retry", "retry_of": failed_entry_id}
            moved = {"from": leaf, "to": point, "reason": "retry"}
            return [
                NewFact("turn/start", start, turn=turn),
                NewFact("leaf/moved", moved, turn=turn),
            ]

        return cls(facts, moves=True, to=point)

    @classmethod
    def replay(
        cls, source: ReplaySource, header: Mapping[str, Any], *, group: int | None, count: int
    ) -> Opening:
        """`turn/start` (trigger replay) and the leaf moved back to the leaf the recorded
        request was built for; the turn's requests go out under `header`. The first replay
        of a group names it (`group` None: this turn)."""

        def facts(turn: int, leaf: str | None) -> list[NewFact]:
            start = {
                "turn": turn,
                "trigger": "replay",
                "replay_of": source.request_seq,
                "replay_group": group if group is not None else turn,
                "replay_count": count,
            }
            moved = {"from": leaf, "to": source.leaf_entry_id, "reason": "replay"}
            return [
                NewFact("turn/start", start, turn=turn),
                NewFact("leaf/moved", moved, turn=turn),
            ]

        return cls(facts, moves=True, to=source.leaf_entry_id, header=header)


# --- the runner --------------------------------------------------------------------------


class TurnRunner:
    def __init__(
        self,
        log: SessionLog,
        session_id: str,
        config: AgentConfig,
        provider: Provider,
        toolbox: Toolbox,
        run: Run,
        *,
        auto_approve: bool = False,
        on_delta: DeltaSink | None = None,
        on_notice: NoticeSink | None = None,
        approval_timeout_s: float | None = None,
        subagents: Subagents | None = None,
    ) -> None:
        self.log = log
        self.sid = session_id
        self.config = config
        self.run = run
        self.on_notice = on_notice
        self.cache = LogCache(log, session_id)
        self.files = WorkspaceRecorder(log, session_id, config.cwd, config.limits.workspace)
        self.compactor = Compactor(self.cache, config, provider)
        self.request = ModelRequest(
            self.cache, config, provider, toolbox, run, self.compactor, on_delta
        )
        self.tools = ToolDispatch(
            self.cache,
            config,
            toolbox,
            run,
            auto_approve=auto_approve,
            approval_timeout_s=approval_timeout_s,
            notice=self._notice,
            files=self.files,
            on_delta=on_delta,
            subagents=subagents,
        )
        self.turn_start_seq = 0

    @property
    def takes_input(self) -> bool:
        """Whether the turn takes steering input and compacts on its own: a replay does
        neither, so that its context is the recorded request's."""
        return self.request.replay_header is None

    # --- turns ---------------------------------------------------------------------------

    async def start(self, opening: Opening) -> int:
        """Write the facts that open the next turn and take the turn's place in the tree
        (a retry or a replay asks from where the recorded request was asked); the turn's
        number."""
        turn = self.cache.last_turn + 1
        if opening.header is not None:
            self.request.replay_header = dict(opening.header)
        # The folder brought to the files of the entry the turn starts from (changes made by
        # hand recorded first), in the same append as the facts that open the turn.
        files = await self.files.before_turn(opening.to if opening.moves else self.cache.leaf)

        def facts(_: int) -> list[NewFact]:
            opened = opening.facts(turn, self.cache.leaf)
            at = len(opened) if opening.moves else 1  # after the leaf moves, or turn/start
            return [*opened[:at], *files.facts, *opened[at:]]

        started = await self.cache.append(facts)
        assert started is not None
        await self.files.settle(files)
        if opening.moves:
            self.cache.leaf = opening.to
        self.turn_start_seq = started.first_seq
        self.cache.last_turn = turn
        self.cache.follow_leaf = False
        return turn

    async def run_one_turn(self, turn: int) -> TurnEnded:
        """Run `turn` (already started) alone: a replay's turn runs no follow-ups."""
        self.run.current_turn = turn
        self._notice("turn_started", turn, f"turn {turn} started")
        ended = await self._run_turn(turn)
        self.run.ended.append(ended)
        self._notice("turn_ended", turn, f"turn {turn} ended: {ended.reason}", reason=ended.reason)
        return ended

    async def run_turns(self, first_turn: int) -> list[TurnEnded]:
        """Run `first_turn` (already started), then each queued follow-up in turn."""
        turn = first_turn
        while True:
            ended = await self.run_one_turn(turn)
            follow_up = self._next_follow_up() if ended.reason != "aborted" else None
            if follow_up is None:
                return self.run.ended
            opening = Opening.job if follow_up.job_id else Opening.follow_up
            turn = await self.start(opening(follow_up))

    def _next_follow_up(self) -> InboxItem | None:
        items = [i for i in self.cache.pending.values() if i.target == "next_turn"]
        return min(items, key=lambda i: i.seq) if items else None

    async def _run_turn(self, turn: int) -> TurnEnded:
        self.request.overflow_retried = False
        self.tools.approval_timed_out = False
        step = 0
        try:
            while True:
                step += 1
                if step > self.config.max_steps:
                    limit = f"stopped after {self.config.max_steps} steps"
                    return _ended(await self._end_turn(turn, "error", limit))
                result = await self._step(turn, step)
                if result.kind in ("continue", "retry"):
                    continue
                if result.kind == "done":
                    ended = await self._end_turn(turn, "completed", None)
                    if ended is None:
                        continue  # steering input came in: one more step
                    return ended
                reason = {
                    "max_tokens": "max_tokens",
                    "aborted": "aborted",
                    "approval_timeout": "approval_timeout",
                }.get(result.kind, "error")
                return _ended(await self._end_turn(turn, reason, result.error))
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:  # a bug or a failing store: close the turn if we still can
            message = f"{type(exc).__name__}: {exc}"
            log.exception("session %s: turn %s failed", self.sid, turn)
            await self._close_after_failure(turn, message)
            return TurnEnded(turn, "error", message)

    async def _close_after_failure(self, turn: int, message: str) -> None:
        """End a turn that failed unexpectedly the way recovery would, but as an error:
        every tool call still gets a result, so the history stays well-formed."""
        await self.cache.sync()
        events: list[EventRecord] = []
        after = self.turn_start_seq - 1
        while page := await self.log.events_after(self.sid, after):
            events.extend(page)
            after = page[-1].seq
        facts = []
        for fact in closers(turn, events).facts:
            if fact.type == "step/end":
                fact = _step_end(turn, int(fact.data["step"]), "error")
            elif fact.type == "turn/end":
                fact = NewFact(
                    "turn/end", {"turn": turn, "reason": "error", "error": message}, turn=turn
                )
            facts.append(fact)
        await self.cache.append(facts)

    async def _end_turn(self, turn: int, reason: str, error: str | None) -> TurnEnded | None:
        """Write `turn/end`. A completed turn with steering input waiting does not end:
        None tells the caller to run another step."""

        def steering_waiting() -> bool:
            return (
                reason == "completed"
                and self.takes_input
                and any(i.target == "next_step" for i in self.cache.pending.values())
            )

        if steering_waiting():
            return None

        def closing(_: int) -> list[NewFact]:
            facts = []
            # Input meant for a turn that stopped early is dropped: cancelling drops
            # everything queued, an error drops the steering for this turn. A background
            # job's notice is not the user's to drop: the next turn's first step takes it.
            for item in sorted(self.cache.pending.values(), key=lambda i: i.seq):
                if item.job_id is not None:
                    continue
                if reason == "aborted" or (reason != "completed" and item.target == "next_step"):
                    facts.append(
                        NewFact(
                            "inbox/claimed",
                            {"inbox_id": item.inbox_id, "outcome": "discarded"},
                            turn=turn,
                        )
                    )
            data: dict[str, Any] = {"turn": turn, "reason": reason}
            if error:
                data["error"] = error
            facts.append(NewFact("turn/end", data, turn=turn))
            return facts

        written = await self.cache.append(closing, unless=steering_waiting)
        if written is None:
            return None
        return TurnEnded(turn, reason, error)

    # --- steps ---------------------------------------------------------------------------

    async def _step(self, turn: int, step: int) -> StepResult:
        if self.run.cancelled:
            return StepResult("aborted")
        claims = sorted(
            (
                i
                for i in self.cache.pending.values()
                if i.target == "next_step" and self.takes_input
            ),
            key=lambda i: i.seq,
        )
        facts = [NewFact("step/start", {"turn": turn, "step": step}, turn=turn, step=step)]
        for item in claims:
            facts.append(
                NewFact("inbox/claimed", {"inbox_id": item.inbox_id}, turn=turn, step=step)
            )
            facts.append(_user_fact(item.text, turn, step))
        await self.cache.append(facts)
        try:
            if self.config.auto_compact and self.takes_input:
                await self.run.guarded(self.compactor.auto_compact(turn, step))
            result = await self._request_and_tools(turn, step)
        except Cancelled:
            result = StepResult("aborted")
        # A step that failed on an oversized context and was compacted for a retry ends
        # with reason error; the retry is the next step.
        reason = {"continue": "completed", "done": "completed", "retry": "error"}.get(
            result.kind, result.kind
        )
        await self.cache.append([_step_end(turn, step, reason)])
        return result

    async def _request_and_tools(self, turn: int, step: int) -> StepResult:
        answer = await self.request.ask(turn, step)
        if isinstance(answer, StepResult):
            return answer  # aborted, failed, or compacted after an overflow for a retry
        calls, stop = answer.calls, answer.stop
        if calls:
            finished = await self.tools.dispatch(turn, step, calls)
            if not finished:
                return StepResult(
                    "approval_timeout" if self.tools.approval_timed_out else "aborted"
                )
        if stop == "length":
            return StepResult("max_tokens")
        return StepResult("continue" if calls else "done")

    # --- helpers -------------------------------------------------------------------------

    def _notice(self, kind: str, turn: int, text: str, **data: Any) -> None:
        if self.on_notice is None:
            return
        try:
            self.on_notice(Notice(self.sid, kind, turn, text, data))
        except Exception:
            log.exception("session %s: a notice listener failed", self.sid)


def _user_fact(text: str, turn: int, step: int | None) -> NewFact:
    return NewFact("user/message", {"entry": message_entry(user_message(text))}, turn, step)


def _step_end(turn: int, step: int, reason: str) -> NewFact:
    return NewFact("step/end", {"turn": turn, "step": step, "reason": reason}, turn, step)


def _ended(ended: TurnEnded | None) -> TurnEnded:
    assert ended is not None  # only a completed turn can be held open by steering input
    return ended
