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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from projections.context import build_session_context, to_provider_messages
from projections.payload import PayloadError, build_payload, payload_sha256
from projections.records import EventRecord
from projections.tokens import estimate_tokens
from runtime.compactor import Compactor
from runtime.config import AgentConfig
from runtime.dispatch import ToolDispatch
from runtime.faults import describe_fault, fault_record
from runtime.header import render_header, same_header
from runtime.log_cache import InboxItem, LogCache
from runtime.messages import (
    assistant_message,
    message_entry,
    user_message,
)
from runtime.ports import NewFact, SessionLog
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
)
from runtime.recovery import closers
from runtime.replay import ReplaySource
from runtime.run import Cancelled, Delta, DeltaSink, Notice, NoticeSink, Run, TurnEnded
from runtime.tools import Toolbox

log = logging.getLogger("strand.runtime")


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
        self.config = config
        self.provider = provider
        self.toolbox = toolbox
        self.run = run
        self.on_delta = on_delta
        self.on_notice = on_notice
        self.cache = LogCache(log, session_id)
        self.compactor = Compactor(self.cache, config, provider)
        self.tools = ToolDispatch(
            self.cache,
            config,
            toolbox,
            run,
            auto_approve=auto_approve,
            approval_timeout_s=approval_timeout_s,
            notice=self._notice,
        )
        self.overflow_retried = False
        self._open_step: int | None = None
        self.turn_start_seq = 0
        # A replay's turn: the header its requests are sent under (see `runtime.replay`),
        # written with reason "replay" before its first request whatever the header in force.
        self.replay_header: Mapping[str, Any] | None = None
        self.replay_header_written = False

    @property
    def takes_input(self) -> bool:
        """Whether the turn takes steering input and compacts on its own: a replay does
        neither, so that its context is the recorded request's."""
        return self.replay_header is None

    # --- turns ---------------------------------------------------------------------------

    async def start_turn(self, text: str) -> int:
        """Write `turn/start` and the user's message; the turn's number."""
        turn = self.cache.last_turn + 1
        started = await self.cache.append(
            [
                NewFact("turn/start", {"turn": turn, "trigger": "message"}, turn=turn),
                _user_fact(text, turn, None),
            ]
        )
        assert started is not None
        self.turn_start_seq = started.first_seq
        self.cache.last_turn = turn
        self.cache.follow_leaf = False
        return turn

    async def start_retry_turn(self, failed_entry_id: str, point: str | None) -> int:
        """Write `turn/start` (trigger retry) and move the leaf back to `point`, where the
        failed reply was asked from; the turn's first request is built from there."""
        turn = self.cache.last_turn + 1

        def facts(_: int) -> list[NewFact]:
            start = {"turn": turn, "trigger": "retry", "retry_of": failed_entry_id}
            moved = {"from": self.cache.leaf, "to": point, "reason": "retry"}
            return [
                NewFact("turn/start", start, turn=turn),
                NewFact("leaf/moved", moved, turn=turn),
            ]

        started = await self.cache.append(facts)
        assert started is not None
        self.cache.leaf = point
        self.turn_start_seq = started.first_seq
        self.cache.last_turn = turn
        self.cache.follow_leaf = False
        return turn

    async def start_replay_turn(
        self, source: ReplaySource, header: Mapping[str, Any], *, group: int | None, count: int
    ) -> int:
        """Write `turn/start` (trigger replay) and move the leaf back to the leaf the
        recorded request was built for; the turn's requests go out under `header`. The
        first replay of a group names it (`group` None: this turn)."""
        turn = self.cache.last_turn + 1
        self.replay_header = dict(header)

        def facts(_: int) -> list[NewFact]:
            start = {
                "turn": turn,
                "trigger": "replay",
                "replay_of": source.request_seq,
                "replay_group": group if group is not None else turn,
                "replay_count": count,
            }
            moved = {"from": self.cache.leaf, "to": source.leaf_entry_id, "reason": "replay"}
            return [
                NewFact("turn/start", start, turn=turn),
                NewFact("leaf/moved", moved, turn=turn),
            ]

        started = await self.cache.append(facts)
        assert started is not None
        self.cache.leaf = source.leaf_entry_id
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
            turn = self.cache.last_turn + 1
            started = await self.cache.append(
                [
                    NewFact("turn/start", {"turn": turn, "trigger": "follow_up"}, turn=turn),
                    NewFact("inbox/claimed", {"inbox_id": follow_up.inbox_id}, turn=turn),
                    _user_fact(follow_up.text, turn, None),
                ]
            )
            assert started is not None
            self.turn_start_seq = started.first_seq
            self.cache.last_turn = turn

    def _next_follow_up(self) -> InboxItem | None:
        items = [i for i in self.cache.pending.values() if i.target == "next_turn"]
        return min(items, key=lambda i: i.seq) if items else None

    async def _run_turn(self, turn: int) -> TurnEnded:
        self.overflow_retried = False
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
        self._open_step = None
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
            # everything queued, an error drops the steering for this turn.
            for item in sorted(self.cache.pending.values(), key=lambda i: i.seq):
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

    async def _step(self, turn: int, step: int) -> _StepResult:
        if self.run.cancelled:
            return _StepResult("aborted")
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
        self._open_step = step
        try:
            if self.config.auto_compact and self.takes_input:
                await self.run.guarded(self.compactor.auto_compact(turn, step))
            result = await self._request_and_tools(turn, step)
        except Cancelled:
            result = _StepResult("aborted")
        # A step that failed on an oversized context and was compacted for a retry ends
        # with reason error; the retry is the next step.
        reason = {"continue": "completed", "done": "completed", "retry": "error"}.get(
            result.kind, result.kind
        )
        await self.cache.append([_step_end(turn, step, reason)])
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
                await self.run.guarded(asyncio.sleep(wait))
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
            finished = await self.tools.dispatch(turn, step, calls)
            if not finished:
                return _StepResult(
                    "approval_timeout" if self.tools.approval_timed_out else "aborted"
                )
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
            and await self.compactor.compactable()
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
            if await self.run.guarded(self.compactor.compact(turn, step, force=True)):
                return _StepResult("retry")
            message = describe_fault(
                error,
                self.config,
                attempts=attempts,
                note="Compacting did not make room: compact or go back to an earlier entry.",
            )
        return _StepResult("error", message)

    async def _context(self) -> Any:
        if self.cache.leaf is None:
            return build_session_context([], None)
        window = await self.log.context_window(self.sid, self.cache.leaf)
        return build_session_context(window, self.cache.leaf)

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
        elif self.cache.header is None:
            reason = "initial"
        elif not same_header(self.cache.header, header):
            reason = "change"
        elif self.cache.resume_header:
            reason = "resume"
        sent: dict[str, Any] = {
            "leaf_entry_id": self.cache.leaf,
            "payload_sha256": payload_sha256(payload),
            "token_estimate": sum(estimate_tokens(m) for m in context_messages),
            "attempt": attempt,
            "previous_fault": dict(previous) if previous is not None else None,
        }

        def batch(after_seq: int) -> list[NewFact]:
            if reason is None:
                return [
                    NewFact(
                        "request/sent", {"header_seq": self.cache.header_seq, **sent}, turn, step
                    )
                ]
            return [
                NewFact("request/header", {"reason": reason, **header}, turn, step),
                NewFact("request/sent", {"header_seq": after_seq + 1, **sent}, turn, step),
            ]

        written = await self.cache.append(batch)
        assert written is not None
        if reason is not None:
            self.cache.header, self.cache.header_seq = header, written.first_seq
            self.cache.resume_header = False
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
            await self.run.guarded(consume())
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
        await self.cache.append([NewFact("assistant/message", data, turn, step)])

    # --- helpers -------------------------------------------------------------------------

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


def _ended(ended: TurnEnded | None) -> TurnEnded:
    assert ended is not None  # only a completed turn can be held open by steering input
    return ended
