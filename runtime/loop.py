"""The agent loop: turns, steps, model requests, tool calls (DESIGN §7).

A `TurnRunner` runs the turns of one session while its process holds the session's turn
lock. It keeps no fact to itself: each one is appended to the log as it happens, with the
seq it expects, so the log alone tells how far a turn got. What it holds in memory (the
last seq, its position in the tree, queued input, approval decisions) is a cache of the
log, refreshed whenever an append finds that someone else wrote in between.

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
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from projections.context import build_session_context, to_provider_messages
from projections.payload import PayloadError, build_payload, payload_sha256
from projections.records import EventRecord
from projections.tokens import estimate_tokens
from runtime.compaction import (
    compaction_entry,
    compaction_summary,
    context_tokens,
    prepare_compaction,
)
from runtime.config import AgentConfig
from runtime.faults import describe_fault, fault_record
from runtime.header import render_header, same_header
from runtime.messages import (
    assistant_message,
    message_entry,
    tool_result_message,
    user_message,
)
from runtime.ports import Appended, NewFact, SeqConflict, SessionLog, TurnLock
from runtime.providers.base import (
    INVALID_TOOL_ARGUMENTS,
    REFUSED,
    Assembler,
    Provider,
    ProviderError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallRequest,
)
from runtime.recovery import closers
from runtime.replay import ReplaySource
from runtime.tools import Toolbox, ToolOutcome, check_arguments
from runtime.workspace import WorkspaceRecorder

T = TypeVar("T")
log = logging.getLogger("strand.runtime")

ABORTED_BEFORE_DISPATCH = "ABORTED_BEFORE_DISPATCH"
ABORTED = "ABORTED"
APPROVAL_REJECTED = "APPROVAL_REJECTED"
# No decision came within the approval timeout: the call is not run and the turn ends
# with reason `approval_timeout` (the approval is decided `cancelled` by "timeout").
APPROVAL_TIMEOUT = "APPROVAL_TIMEOUT"
TOO_MANY_TOOL_CALLS = "TOO_MANY_TOOL_CALLS"
# Calls past the cap answered in one append (a tool/call and a tool/result each).
CAPPED_PER_APPEND = 100

# How long an approval wait sleeps between looks at the log when no notification comes.
APPROVAL_POLL_S = 2.0


# --- what a run shares with the outside --------------------------------------------------


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of a streaming reply; never stored (the final assistant message is)."""

    session_id: str
    turn: int
    step: int
    kind: str  # text, thinking, tool_call; restart: a retry begins, drop what was shown
    block: str  # identifies the content block within the reply
    text: str
    name: str | None = None  # the tool's name, on the first delta of a tool call


@dataclass(frozen=True, slots=True)
class Notice:
    """Something a foreground caller may want to tell its user (the CLI prints these)."""

    session_id: str
    kind: str  # approval_waiting, turn_started, turn_ended
    turn: int
    text: str
    data: Mapping[str, Any] = field(default_factory=dict)


DeltaSink = Callable[[Delta], None]
NoticeSink = Callable[[Notice], None]


@dataclass(frozen=True, slots=True)
class TurnEnded:
    turn: int
    reason: str
    error: str | None = None


class Cancelled(Exception):
    """The run was asked to stop while waiting on something."""


@dataclass
class Run:
    """This process's handle on a session whose turns it is running."""

    session_id: str
    lock: TurnLock
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[list[TurnEnded]] | None = None
    ended: list[TurnEnded] = field(default_factory=list)
    current_turn: int | None = None

    def cancel(self) -> None:
        self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()


@dataclass(frozen=True, slots=True)
class InboxItem:
    inbox_id: str
    target: str  # next_step | next_turn
    text: str
    seq: int


@dataclass
class _Plan:
    """One tool call of a step on its way to a result."""

    call: ToolCallRequest
    outcome: ToolOutcome | None = None  # decided without running (rejected, invalid…)
    runnable: bool = False


@dataclass(frozen=True, slots=True)
class _StepResult:
    kind: str  # continue, retry, done, aborted, error, max_tokens
    error: str | None = None


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
    ) -> None:
        self.log = log
        self.sid = session_id
        self.approval_timeout_s = approval_timeout_s
        self.approval_timed_out = False
        self.config = config
        self.provider = provider
        self.toolbox = toolbox
        self.run = run
        self.auto_approve = auto_approve
        self.on_delta = on_delta
        self.on_notice = on_notice
        self.last_seq = -1
        self.leaf: str | None = None
        self.last_turn = 0
        self.pending: dict[str, InboxItem] = {}
        self.decisions: dict[str, str] = {}
        self.header: Mapping[str, Any] | None = None
        self.header_seq: int | None = None
        self.resume_header = False
        self.overflow_retried = False
        self.follow_leaf = True  # until our turn starts, the user may still move the leaf
        self._open_step: int | None = None
        self.turn_start_seq = 0
        # A replay's turn: the header its requests are sent under (see `runtime.replay`),
        # written with reason "replay" before its first request whatever the header in force.
        self.replay_header: Mapping[str, Any] | None = None
        self.replay_header_written = False
        self.files = WorkspaceRecorder(log, session_id, config.cwd, config.limits.workspace)

    @property
    def takes_input(self) -> bool:
        """Whether the turn takes steering input and compacts on its own: a replay does
        neither, so that its context is the recorded request's."""
        return self.replay_header is None

    # --- loading and appending -----------------------------------------------------------

    async def load(self) -> None:
        """Read what the run needs from the log: the head, the last turn, the header in
        force and the input still queued."""
        head = await self.log.head(self.sid)
        self.last_seq, self.leaf = head.last_seq, head.leaf_entry_id
        marker = await self.log.last_event(self.sid, ("turn/start",))
        self.last_turn = _int(marker.data.get("turn")) if marker is not None else 0
        header = await self.log.last_event(self.sid, ("request/header",))
        if header is not None:
            self.header, self.header_seq = header.data, header.seq
            last_end = await self.log.last_event(self.sid, ("turn/end",))
            # The first request after a turn that a dead process left repeats the header,
            # marking where a new process took over.
            self.resume_header = (
                last_end is not None
                and last_end.data.get("reason") == "interrupted"
                and last_end.seq > header.seq
            )
        self.pending = {}
        inbox = await self.log.events_of_types(self.sid, ("inbox/queued", "inbox/claimed"))
        for event in inbox:
            self._fold(event)

    async def sync(self) -> None:
        """Fold what others appended since our last seq (input, decisions)."""
        while True:
            events = await self.log.events_after(self.sid, self.last_seq)
            if not events:
                return
            for event in events:
                self._fold(event)
                self.last_seq = max(self.last_seq, event.seq)

    def _fold(self, event: EventRecord) -> None:
        data = event.data
        if event.type == "inbox/queued":
            item = InboxItem(
                str(data.get("inbox_id")), str(data.get("target")), str(data.get("text")), event.seq
            )
            self.pending[item.inbox_id] = item
        elif event.type == "inbox/claimed":
            self.pending.pop(str(data.get("inbox_id")), None)
        elif event.type == "approval/decided":
            self.decisions[str(data.get("approval_id"))] = str(data.get("outcome"))
        if self.follow_leaf:
            if event.entry_id is not None:
                self.leaf = event.entry_id
            elif event.type == "leaf/moved":
                target = data.get("to")
                self.leaf = target if isinstance(target, str) else None

    async def append(
        self,
        facts: Sequence[NewFact] | Callable[[int], Sequence[NewFact]],
        *,
        unless: Callable[[], bool] | None = None,
    ) -> Appended | None:
        """Append after our last seq; on a conflict, fold the new events and try again
        (unless `unless()` now says the batch is no longer wanted: then None).

        `facts` may be a function of the seq the batch will start after, for facts that
        name seqs of their own batch. The first entry of a batch that names no parent is
        put under our own position in the tree, so that a leaf moved by someone else during
        a turn cannot split an assistant message from its tool results.
        """
        while True:
            batch = facts(self.last_seq) if callable(facts) else facts
            batch = self._anchor(batch)
            try:
                result = await self.log.append(self.sid, self.last_seq, batch)
            except SeqConflict:
                await self.sync()
                if unless is not None and unless():
                    return None
                continue
            self.last_seq = result.last_seq
            if result.entry_ids:
                self.leaf = result.entry_ids[-1]
            for fact in batch:
                if fact.type == "inbox/claimed":
                    self.pending.pop(str(fact.data.get("inbox_id")), None)
            return result

    def _anchor(self, batch: Sequence[NewFact]) -> list[NewFact]:
        out = list(batch)
        for index, fact in enumerate(out):
            entry = fact.data.get("entry")
            if isinstance(entry, Mapping):
                if "parentId" not in entry:
                    anchored = {**entry, "parentId": self.leaf}
                    out[index] = NewFact(
                        fact.type, {**fact.data, "entry": anchored}, fact.turn, fact.step
                    )
                break
        return out

    # --- turns ---------------------------------------------------------------------------

    async def start_turn(self, text: str) -> int:
        """Write `turn/start` and the user's message; the turn's number."""
        turn = self.last_turn + 1
        files = await self.files.before_turn(self.leaf)
        started = await self.append(
            [
                NewFact("turn/start", {"turn": turn, "trigger": "message"}, turn=turn),
                *files.facts,
                _user_fact(text, turn, None),
            ]
        )
        assert started is not None
        await self.files.settle(files)
        self.turn_start_seq = started.first_seq
        self.last_turn = turn
        self.follow_leaf = False
        return turn

    async def start_retry_turn(self, failed_entry_id: str, point: str | None) -> int:
        """Write `turn/start` (trigger retry) and move the leaf back to `point`, where the
        failed reply was asked from; the turn's first request is built from there."""
        turn = self.last_turn + 1
        files = await self.files.before_turn(point)

        def facts(_: int) -> list[NewFact]:
            start = {"turn": turn, "trigger": "retry", "retry_of": failed_entry_id}
            moved = {"from": self.leaf, "to": point, "reason": "retry"}
            return [
                NewFact("turn/start", start, turn=turn),
                NewFact("leaf/moved", moved, turn=turn),
                *files.facts,
            ]

        started = await self.append(facts)
        assert started is not None
        await self.files.settle(files)
        self.leaf = point
        self.turn_start_seq = started.first_seq
        self.last_turn = turn
        self.follow_leaf = False
        return turn

    async def start_replay_turn(
        self, source: ReplaySource, header: Mapping[str, Any], *, group: int | None, count: int
    ) -> int:
        """Write `turn/start` (trigger replay) and move the leaf back to the leaf the
        recorded request was built for; the turn's requests go out under `header`. The
        first replay of a group names it (`group` None: this turn)."""
        turn = self.last_turn + 1
        self.replay_header = dict(header)
        files = await self.files.before_turn(source.leaf_entry_id)

        def facts(_: int) -> list[NewFact]:
            start = {
                "turn": turn,
                "trigger": "replay",
                "replay_of": source.request_seq,
                "replay_group": group if group is not None else turn,
                "replay_count": count,
            }
            moved = {"from": self.leaf, "to": source.leaf_entry_id, "reason": "replay"}
            return [
                NewFact("turn/start", start, turn=turn),
                NewFact("leaf/moved", moved, turn=turn),
                *files.facts,
            ]

        started = await self.append(facts)
        assert started is not None
        await self.files.settle(files)
        self.leaf = source.leaf_entry_id
        self.turn_start_seq = started.first_seq
        self.last_turn = turn
        self.follow_leaf = False
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
            self.run.current_turn = turn
            self._notice("turn_started", turn, f"turn {turn} started")
            ended = await self._run_turn(turn)
            self.run.ended.append(ended)
            self._notice(
                "turn_ended", turn, f"turn {turn} ended: {ended.reason}", reason=ended.reason
            )
            follow_up = self._next_follow_up() if ended.reason != "aborted" else None
            if follow_up is None:
                return self.run.ended
            turn = self.last_turn + 1
            started = await self.append(
                [
                    NewFact("turn/start", {"turn": turn, "trigger": "follow_up"}, turn=turn),
                    NewFact("inbox/claimed", {"inbox_id": follow_up.inbox_id}, turn=turn),
                    _user_fact(follow_up.text, turn, None),
                ]
            )
            assert started is not None
            self.turn_start_seq = started.first_seq
            self.last_turn = turn

    def _next_follow_up(self) -> InboxItem | None:
        items = [i for i in self.pending.values() if i.target == "next_turn"]
        return min(items, key=lambda i: i.seq) if items else None

    async def _run_turn(self, turn: int) -> TurnEnded:
        self.overflow_retried = False
        self.approval_timed_out = False
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
        await self.sync()
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
        self._open_step = None
        await self.append(facts)

    async def _end_turn(self, turn: int, reason: str, error: str | None) -> TurnEnded | None:
        """Write `turn/end`. A completed turn with steering input waiting does not end:
        None tells the caller to run another step."""

        def steering_waiting() -> bool:
            return (
                reason == "completed"
                and self.takes_input
                and any(i.target == "next_step" for i in self.pending.values())
            )

        if steering_waiting():
            return None

        def closing(_: int) -> list[NewFact]:
            facts = []
            # Input meant for a turn that stopped early is dropped: cancelling drops
            # everything queued, an error drops the steering for this turn.
            for item in sorted(self.pending.values(), key=lambda i: i.seq):
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

        written = await self.append(closing, unless=steering_waiting)
        if written is None:
            return None
        return TurnEnded(turn, reason, error)

    # --- steps ---------------------------------------------------------------------------

    async def _step(self, turn: int, step: int) -> _StepResult:
        if self.run.cancelled:
            return _StepResult("aborted")
        claims = sorted(
            (i for i in self.pending.values() if i.target == "next_step" and self.takes_input),
            key=lambda i: i.seq,
        )
        facts = [NewFact("step/start", {"turn": turn, "step": step}, turn=turn, step=step)]
        for item in claims:
            facts.append(
                NewFact("inbox/claimed", {"inbox_id": item.inbox_id}, turn=turn, step=step)
            )
            facts.append(_user_fact(item.text, turn, step))
        await self.append(facts)
        self._open_step = step
        try:
            if self.config.auto_compact and self.takes_input:
                await self._guarded(self._auto_compact(turn, step))
            result = await self._request_and_tools(turn, step)
        except Cancelled:
            result = _StepResult("aborted")
        # A step that failed on an oversized context and was compacted for a retry ends
        # with reason error; the retry is the next step.
        reason = {"continue": "completed", "done": "completed", "retry": "error"}.get(
            result.kind, result.kind
        )
        await self.append([_step_end(turn, step, reason)])
        self._open_step = None
        return result

    async def _request_and_tools(self, turn: int, step: int) -> _StepResult:
        context = await self._context()
        header = self.replay_header or render_header(self.config, self.toolbox.schemas())
        messages = to_provider_messages(context.messages)
        try:
            payload = build_payload(
                provider=header["provider"],
                model=header["model"],
                params=header["params"],
                system_prompt=header["system_prompt"],
                tools=header["tools"],
                messages=messages,
            )
        except PayloadError as exc:
            return _StepResult("error", f"the request cannot be built: {exc}")
        attempt, previous = 1, None
        while True:
            await self._write_request(
                turn, step, header, payload, context.messages, attempt=attempt, previous=previous
            )
            assembler, error, cancelled, timing = await self._stream(turn, step, payload)
            if cancelled:
                await self._write_reply(turn, step, assembler, "aborted", timing, with_calls=False)
                return _StepResult("aborted")
            error = error or _reply_fault(assembler)
            if error is None:
                break
            wait, note = self._retry_wait(error, attempt)
            if wait is None:
                return await self._failed(turn, step, assembler, error, timing, attempt, note)
            message = describe_fault(error, self.config, attempts=attempt)
            previous = {
                **fault_record(
                    error,
                    message=message,
                    attempt=attempt,
                    timing=timing,
                    received_chars=assembler.received_chars,
                ),
                "wait_ms": round(wait * 1000),
            }
            began = time.monotonic()
            try:
                await self._guarded(asyncio.sleep(wait))
            except Cancelled:
                note = "The turn was cancelled while waiting to retry."
                await self._failed(turn, step, assembler, error, timing, attempt, note)
                return _StepResult("aborted")
            previous["waited_ms"] = round((time.monotonic() - began) * 1000)
            attempt += 1
            self._delta(turn, step, None)  # the next attempt's answer starts from nothing
        calls = assembler.tool_calls()
        stop = assembler.stop_reason or "stop"
        if calls and stop != "length":
            stop = "toolUse"
        await self._write_reply(turn, step, assembler, stop, timing, with_calls=True)
        if calls:
            finished = await self._run_tools(turn, step, calls)
            if not finished:
                return _StepResult("approval_timeout" if self.approval_timed_out else "aborted")
        if stop == "length":
            return _StepResult("max_tokens")
        return _StepResult("continue" if calls else "done")

    def _retry_wait(self, error: ProviderError, attempt: int) -> tuple[float | None, str | None]:
        """How long to wait before the next attempt, or None (and why) when there is none."""
        if not error.retryable:
            return None, None
        if attempt > self.config.max_retries:
            return None, None
        backoff = self.config.retry_backoff_s * 2 ** (attempt - 1)
        asked = error.retry_after_s
        if asked is not None and asked > self.config.retry_max_wait_s:
            return None, (
                f"The provider asked to wait {asked:g} s before retrying, longer than "
                f"retry_max_wait_s ({self.config.retry_max_wait_s:g} s) in preset "
                f"{self.config.name!r}, so Strand did not retry."
            )
        return min(max(backoff, asked or 0.0), self.config.retry_max_wait_s), None

    async def _failed(
        self,
        turn: int,
        step: int,
        assembler: Assembler,
        error: ProviderError,
        timing: Mapping[str, int],
        attempts: int,
        note: str | None,
    ) -> _StepResult:
        """Record the failed reply with what had arrived; compact once on an overflow."""
        will_compact = (
            error.overflow
            and not self.overflow_retried
            and note is None
            and await self._compactable()
        )
        if will_compact:
            note = "Strand compacts the conversation and tries once more."
        message = describe_fault(error, self.config, attempts=attempts, note=note)
        fault = fault_record(
            error,
            message=message,
            attempt=attempts,
            timing=dict(timing),
            received_chars=assembler.received_chars,
        )
        fault["attempts"] = attempts
        partial_calls = [
            {"id": c.call_id, "name": c.name, "arguments": c.raw_arguments}
            for c in assembler.tool_calls()
        ]
        if partial_calls:
            # Not in the message (a call without a result would break the history), but
            # kept: what the model had started to ask for.
            fault["tool_calls"] = partial_calls
        await self._write_reply(
            turn, step, assembler, "error", timing, with_calls=False, error=message, fault=fault
        )
        if will_compact:
            self.overflow_retried = True
            if await self._guarded(self._compact(turn, step, force=True)):
                return _StepResult("retry")
            message = describe_fault(
                error,
                self.config,
                attempts=attempts,
                note="Compacting did not make room: compact or go back to an earlier entry.",
            )
        return _StepResult("error", message)

    async def _compactable(self) -> bool:
        """Whether compacting the path at our position would summarize anything."""
        if self.leaf is None:
            return False
        window = await self.log.context_window(self.sid, self.leaf)
        prep = prepare_compaction(window, self.config.keep_recent_tokens)
        return prep is not None and bool(prep.messages or prep.turn_prefix)

    async def _context(self) -> Any:
        if self.leaf is None:
            return build_session_context([], None)
        window = await self.log.context_window(self.sid, self.leaf)
        return build_session_context(window, self.leaf)

    async def _write_request(
        self,
        turn: int,
        step: int,
        header: Mapping[str, Any],
        payload: Mapping[str, Any],
        context_messages: Sequence[Mapping[str, Any]],
        *,
        attempt: int = 1,
        previous: Mapping[str, Any] | None = None,
    ) -> None:
        """Write the request's manifest. A retry is a request of its own: the same payload,
        its attempt number, and the fault that ended the attempt before it."""
        reason = None
        if self.replay_header is not None and not self.replay_header_written:
            reason = "replay"
        elif self.header is None:
            reason = "initial"
        elif not same_header(self.header, header):
            reason = "change"
        elif self.resume_header:
            reason = "resume"
        sent: dict[str, Any] = {
            "leaf_entry_id": self.leaf,
            "payload_sha256": payload_sha256(payload),
            "token_estimate": sum(estimate_tokens(m) for m in context_messages),
            "attempt": attempt,
            "previous_fault": dict(previous) if previous is not None else None,
        }

        def batch(after_seq: int) -> list[NewFact]:
            if reason is None:
                return [
                    NewFact("request/sent", {"header_seq": self.header_seq, **sent}, turn, step)
                ]
            return [
                NewFact("request/header", {"reason": reason, **header}, turn, step),
                NewFact("request/sent", {"header_seq": after_seq + 1, **sent}, turn, step),
            ]

        written = await self.append(batch)
        assert written is not None
        if reason is not None:
            self.header, self.header_seq = header, written.first_seq
            self.resume_header = False
            self.replay_header_written = self.replay_header is not None

    async def _stream(
        self, turn: int, step: int, payload: Mapping[str, Any]
    ) -> tuple[Assembler, ProviderError | None, bool, dict[str, int]]:
        assembler = Assembler()
        started = time.monotonic()
        first: list[float] = []

        async def consume() -> None:
            async for event in self.provider.stream(payload):
                assembler.add(event)
                if isinstance(event, TextDelta | ThinkingDelta | ToolCallDelta):
                    if not first:
                        first.append(time.monotonic())
                    self._delta(turn, step, event)

        error: ProviderError | None = None
        cancelled = False
        try:
            await self._guarded(consume())
        except Cancelled:
            cancelled = True
        except ProviderError as exc:
            error = exc
        except Exception as exc:  # a transport failure the SDK did not wrap
            error = ProviderError(f"{type(exc).__name__}: {exc}")
        finished = time.monotonic()
        timing = {"duration_ms": round((finished - started) * 1000)}
        if first:
            timing["ttft_ms"] = round((first[0] - started) * 1000)
        return assembler, error, cancelled, timing

    def _delta(self, turn: int, step: int, event: StreamEvent | None) -> None:
        """Hand a streamed piece to the live viewers; None says the step's answer starts
        over (a retry), so that they drop what the failed attempt had shown."""
        if self.on_delta is None:
            return
        if event is None:
            delta = Delta(self.sid, turn, step, "restart", "", "")
        elif isinstance(event, TextDelta):
            delta = Delta(self.sid, turn, step, "text", event.key, event.text)
        elif isinstance(event, ThinkingDelta):
            delta = Delta(self.sid, turn, step, "thinking", event.key, event.text)
        elif isinstance(event, ToolCallDelta):
            delta = Delta(self.sid, turn, step, "tool_call", event.key, event.arguments, event.name)
        else:
            return
        try:
            self.on_delta(delta)
        except Exception:  # a broken viewer must not break the turn
            log.exception("session %s: a delta listener failed", self.sid)

    async def _write_reply(
        self,
        turn: int,
        step: int,
        assembler: Assembler,
        stop: str,
        timing: Mapping[str, int],
        *,
        with_calls: bool,
        error: str | None = None,
        fault: Mapping[str, Any] | None = None,
    ) -> None:
        message = assistant_message(
            self.config,
            assembler.content(with_tool_calls=with_calls),
            tokens=assembler.tokens,
            stop_reason=stop,
            error_message=error,
        )
        data: dict[str, Any] = {"entry": message_entry(message), "timing": dict(timing)}
        if fault is not None:
            data["fault"] = dict(fault)
        await self.append([NewFact("assistant/message", data, turn, step)])

    # --- tools ---------------------------------------------------------------------------

    async def _run_tools(self, turn: int, step: int, calls: list[ToolCallRequest]) -> bool:
        """Run the reply's calls up to the cap on one reply's tool calls; those past it are
        answered after them, never asked about nor run, a batch of pairs at a time (however
        many a reply holds, no append passes the store's batch limit). False when the run
        was cancelled."""
        cap = self.config.limits.max_tool_calls_per_reply
        kept, over = (calls[:cap], calls[cap:]) if cap > 0 else (calls, [])
        finished = await self._run_calls(turn, step, kept)
        refused = _over_the_cap(cap, len(calls))
        for start in range(0, len(over), CAPPED_PER_APPEND):
            await self.append(
                [
                    fact
                    for call in over[start : start + CAPPED_PER_APPEND]
                    for fact in (
                        _call_fact(call, turn, step),
                        _result_fact(call, refused, turn, step),
                    )
                ]
            )
        return finished

    async def _run_calls(self, turn: int, step: int, calls: list[ToolCallRequest]) -> bool:
        """Prepare the calls in model order (asking approvals), then run them together and
        record the results in model order. False when the run was cancelled."""
        plans = [_Plan(call) for call in calls]
        for plan in plans:
            if self.run.cancelled or self.approval_timed_out:
                break
            await self._prepare(turn, step, plan)
        if self.run.cancelled or self.approval_timed_out:
            await self._abort_before_dispatch(turn, step, plans)
            return False
        await self.append(
            [
                NewFact(
                    "tool/call",
                    {
                        "call_id": p.call.call_id,
                        "tool": p.call.name,
                        "arguments": p.call.raw_arguments,
                    },
                    turn,
                    step,
                )
                for p in plans
            ]
        )
        tasks = {
            index: asyncio.ensure_future(self.toolbox.run(p.call.name, p.call.arguments))
            for index, p in enumerate(plans)
            if p.runnable
        }
        cancel_wait = asyncio.ensure_future(self.run.cancel_event.wait())
        written = 0
        try:
            while written < len(plans):
                plan = plans[written]
                outcome = plan.outcome
                if plan.runnable:
                    task = tasks[written]
                    if not task.done():
                        await asyncio.wait({task, cancel_wait}, return_when=asyncio.FIRST_COMPLETED)
                    if not task.done():
                        break  # cancelled while this tool ran
                    outcome = task.result()
                assert outcome is not None
                result = _result_fact(plan.call, outcome, turn, step)
                ran = plan.call.name if plan.runnable else ""
                await self.append(await self.files.after_tool(ran, plan.call.call_id, result))
                written += 1
        except BaseException:
            for task in tasks.values():
                task.cancel()
            raise
        finally:
            cancel_wait.cancel()
        if written == len(plans):
            return True
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        rest = []
        for index in range(written, len(plans)):
            plan = plans[index]
            outcome = plan.outcome
            if plan.runnable:
                task = tasks[index]
                if task.cancelled() or task.exception() is not None:
                    outcome = ToolOutcome("cancelled while running", True, ABORTED)
                else:
                    outcome = task.result()
            assert outcome is not None
            rest.append(_result_fact(plan.call, outcome, turn, step))
        await self.append(rest)
        return False

    async def _prepare(self, turn: int, step: int, plan: _Plan) -> None:
        call = plan.call
        tool = self.toolbox.get(call.name)
        if tool is None:
            plan.outcome = ToolOutcome(
                f"there is no tool named {call.name!r}", True, "UNKNOWN_TOOL"
            )
            return
        if not call.arguments_valid:
            plan.outcome = ToolOutcome(
                f"the arguments are not a JSON object: {call.raw_arguments[:200]}",
                True,
                "INVALID_ARGUMENTS",
            )
            return
        problem = check_arguments(tool.parameters, call.arguments)
        if problem is not None:
            plan.outcome = ToolOutcome(f"{call.name}: {problem}", True, "INVALID_ARGUMENTS")
            return
        if tool.needs_approval:
            outcome = await self._approval(turn, step, call)
            if outcome == "rejected":
                plan.outcome = ToolOutcome(
                    f"the user rejected this {call.name} call", True, APPROVAL_REJECTED
                )
                return
            if outcome == "timed_out":
                self.approval_timed_out = True
                plan.outcome = ToolOutcome(
                    f"no decision on this {call.name} call came within "
                    f"{self.approval_timeout_s:g} s: it was not run and the turn ended",
                    True,
                    APPROVAL_TIMEOUT,
                )
                return
            if outcome != "allowed":
                return  # cancelled: the caller aborts the step
        plan.runnable = True

    async def _approval(self, turn: int, step: int, call: ToolCallRequest) -> str:
        approval_id = "ap_" + secrets.token_hex(6)
        asked = NewFact(
            "approval/asked",
            {
                "approval_id": approval_id,
                "tool": call.name,
                "call_id": call.call_id,
                "arguments": call.raw_arguments,
            },
            turn,
            step,
        )
        if self.auto_approve:
            decided = {"approval_id": approval_id, "outcome": "allowed", "by": "auto-approve"}
            await self.append([asked, NewFact("approval/decided", decided, turn, step)])
            return "allowed"
        await self.append([asked])
        self._notice(
            "approval_waiting",
            turn,
            f"waiting for approval of {call.name} {call.raw_arguments} (approval {approval_id})",
            approval_id=approval_id,
            tool=call.name,
            call_id=call.call_id,
        )
        timeout = self.approval_timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        while approval_id not in self.decisions:
            if self.run.cancelled:
                cancelled = {"approval_id": approval_id, "outcome": "cancelled", "by": "cancel"}
                await self.append(
                    [NewFact("approval/decided", cancelled, turn, step)],
                    unless=lambda: approval_id in self.decisions,
                )
                return "cancelled"
            left = APPROVAL_POLL_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                timed_out = {"approval_id": approval_id, "outcome": "cancelled", "by": "timeout"}
                written = await self.append(
                    [NewFact("approval/decided", timed_out, turn, step)],
                    unless=lambda: approval_id in self.decisions,
                )
                if written is None:
                    break  # the user's decision came in first
                return "timed_out"
            waiting = asyncio.ensure_future(
                self.log.wait_for_events(self.sid, self.last_seq, min(left, APPROVAL_POLL_S))
            )
            cancel_wait = asyncio.ensure_future(self.run.cancel_event.wait())
            try:
                await asyncio.wait({waiting, cancel_wait}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()
                cancel_wait.cancel()
            await self.sync()
        return self.decisions[approval_id] if not self.run.cancelled else "cancelled"

    async def _abort_before_dispatch(self, turn: int, step: int, plans: list[_Plan]) -> None:
        facts: list[NewFact] = []
        for plan in plans:
            call = plan.call
            why = "an approval timed out" if self.approval_timed_out else "the turn was cancelled"
            outcome = plan.outcome or ToolOutcome(
                f"{why} before this call started", True, ABORTED_BEFORE_DISPATCH
            )
            facts.append(
                NewFact(
                    "tool/call",
                    {"call_id": call.call_id, "tool": call.name, "arguments": call.raw_arguments},
                    turn,
                    step,
                )
            )
            facts.append(_result_fact(call, outcome, turn, step))
        await self.append(facts)

    # --- compaction ----------------------------------------------------------------------

    async def _auto_compact(self, turn: int, step: int) -> None:
        if self.leaf is None:
            return
        window = await self.log.context_window(self.sid, self.leaf)
        context = build_session_context(window, self.leaf)
        if context_tokens(window, context.messages) > self.config.compaction_threshold:
            await self._compact(turn, step, force=False, window=window)

    async def _compact(
        self, turn: int, step: int, *, force: bool, window: Sequence[Any] | None = None
    ) -> bool:
        """Compact the path at our position; whether a compaction entry was written."""
        if self.leaf is None:
            return False
        if window is None:
            window = await self.log.context_window(self.sid, self.leaf)
        prep = prepare_compaction(window, self.config.keep_recent_tokens)
        if prep is None or not (prep.messages or prep.turn_prefix):
            return False
        try:
            summary = await compaction_summary(self.provider, self.config, prep)
        except ProviderError:
            return False
        entry = compaction_entry(prep, summary, self.leaf)
        await self.append([NewFact("entry/compaction", {"entry": entry}, turn, step)])
        return True

    # --- helpers -------------------------------------------------------------------------

    async def _guarded(self, work: Awaitable[T]) -> T:
        """Await `work` unless the run is cancelled first (then `Cancelled`)."""
        if self.run.cancelled:
            if asyncio.iscoroutine(work):
                work.close()
            raise Cancelled()
        task = asyncio.ensure_future(work)
        cancel_wait = asyncio.ensure_future(self.run.cancel_event.wait())
        try:
            await asyncio.wait({task, cancel_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancel_wait.cancel()
        if task.done():
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise Cancelled()

    def _notice(self, kind: str, turn: int, text: str, **data: Any) -> None:
        if self.on_notice is None:
            return
        try:
            self.on_notice(Notice(self.sid, kind, turn, text, data))
        except Exception:
            log.exception("session %s: a notice listener failed", self.sid)


def _reply_fault(assembler: Assembler) -> ProviderError | None:
    """A fault in an answer that streamed to its end: the model stopped with an error, or
    asked for a tool with arguments that never became a JSON object. An answer cut at the
    token limit is not one (its calls may be cut short; the turn ends max_tokens)."""
    stop = assembler.stop_reason or "stop"
    if stop == "error":
        return ProviderError(
            "the provider ended the reply with an error (for example a content filter)",
            kind=REFUSED,
        )
    if stop == "length":
        return None
    for call in assembler.tool_calls():
        if not call.arguments_valid:
            raw = call.raw_arguments
            shown = raw if len(raw) <= 200 else raw[:199] + "…"
            return ProviderError(
                f"The model called {call.name or 'a tool'} with arguments that are not a "
                f"JSON object: {shown!r}",
                kind=INVALID_TOOL_ARGUMENTS,
            )
    return None


def _user_fact(text: str, turn: int, step: int | None) -> NewFact:
    return NewFact("user/message", {"entry": message_entry(user_message(text))}, turn, step)


def _step_end(turn: int, step: int, reason: str) -> NewFact:
    return NewFact("step/end", {"turn": turn, "step": step, "reason": reason}, turn, step)


def _call_fact(call: ToolCallRequest, turn: int, step: int) -> NewFact:
    data = {"call_id": call.call_id, "tool": call.name, "arguments": call.raw_arguments}
    return NewFact("tool/call", data, turn, step)


def _over_the_cap(cap: int, calls: int) -> ToolOutcome:
    """The result of a call past the cap on one reply's tool calls: not run, not asked."""
    return ToolOutcome(
        f"not run: one reply may make at most {cap} tool calls, and this reply made {calls}; "
        "ask for the rest in a later reply",
        True,
        TOO_MANY_TOOL_CALLS,
    )


def _result_fact(call: ToolCallRequest, outcome: ToolOutcome, turn: int, step: int) -> NewFact:
    message = tool_result_message(
        call.call_id, call.name, outcome.text, is_error=outcome.is_error, details=outcome.details
    )
    data: dict[str, Any] = {"entry": message_entry(message)}
    if outcome.error_code:
        data["error_code"] = outcome.error_code
    return NewFact("tool/result", data, turn, step)


def _ended(ended: TurnEnded | None) -> TurnEnded:
    assert ended is not None  # only a completed turn can be held open by steering input
    return ended


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def new_inbox_id() -> str:
    return "in_" + secrets.token_hex(6)
