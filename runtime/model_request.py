"""One model request of a step, with its retries and faults (DESIGN §7).

The request is built from the context at the run's position and the header in force (a
replay's own, when the turn replays a recorded request), written as `request/header` when
that changed and `request/sent`, and streamed, its pieces handed to live viewers. A fault
that may pass is retried after a backoff, each attempt a request of its own that names the
fault before it; a fault that ends the step is recorded on the reply with what had arrived.
A context too long for the model's window is compacted once and the step retried.
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
from projections.tokens import estimate_tokens
from runtime.compactor import Compactor
from runtime.config import AgentConfig
from runtime.faults import describe_fault, fault_record
from runtime.header import render_header, same_header
from runtime.log_cache import LogCache
from runtime.messages import assistant_message, message_entry
from runtime.ports import NewFact
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
from runtime.run import Cancelled, Delta, DeltaSink, Run, StepResult
from runtime.tools import Toolbox

log = logging.getLogger("strand.runtime")


@dataclass(frozen=True, slots=True)
class Answer:
    """A reply that streamed to its end and is written: the tool calls it asks for and
    why it stopped."""

    calls: list[ToolCallRequest]
    stop: str


class ModelRequest:
    def __init__(
        self,
        cache: LogCache,
        config: AgentConfig,
        provider: Provider,
        toolbox: Toolbox,
        run: Run,
        compactor: Compactor,
        on_delta: DeltaSink | None,
    ) -> None:
        self.cache = cache
        self.config = config
        self.provider = provider
        self.toolbox = toolbox
        self.run = run
        self.compactor = compactor
        self.on_delta = on_delta
        self.overflow_retried = False  # once a turn
        # A replay's turn: the header its requests are sent under (see `runtime.replay`),
        # written with reason "replay" before its first request whatever the header in force.
        self.replay_header: Mapping[str, Any] | None = None
        self.replay_header_written = False

    async def ask(self, turn: int, step: int) -> Answer | StepResult:
        """Send the step's request (again after a fault that may pass, after a wait) and
        write its reply: the calls it asks for and why it stopped, or how the step ends when
        there is no answer to act on."""
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
            return StepResult("error", f"the request cannot be built: {exc}")
        attempt, previous = 1, None
        while True:
            await self._write_request(
                turn, step, header, payload, context.messages, attempt=attempt, previous=previous
            )
            assembler, error, cancelled, timing = await self._stream(turn, step, payload)
            if cancelled:
                await self._write_reply(turn, step, assembler, "aborted", timing, with_calls=False)
                return StepResult("aborted")
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
                return StepResult("aborted")
            previous["waited_ms"] = round((time.monotonic() - began) * 1000)
            attempt += 1
            self._delta(turn, step, None)  # the next attempt's answer starts from nothing
        calls = assembler.tool_calls()
        stop = assembler.stop_reason or "stop"
        if calls and stop != "length":
            stop = "toolUse"
        await self._write_reply(turn, step, assembler, stop, timing, with_calls=True)
        return Answer(calls, stop)

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
    ) -> StepResult:
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
                return StepResult("retry")
            message = describe_fault(
                error,
                self.config,
                attempts=attempts,
                note="Compacting did not make room: compact or go back to an earlier entry.",
            )
        return StepResult("error", message)

    async def _context(self) -> Any:
        if self.cache.leaf is None:
            return build_session_context([], None)
        window = await self.cache.log.context_window(self.cache.sid, self.cache.leaf)
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
            delta = Delta(self.cache.sid, turn, step, "restart", "", "")
        elif isinstance(event, TextDelta):
            delta = Delta(self.cache.sid, turn, step, "text", event.key, event.text)
        elif isinstance(event, ThinkingDelta):
            delta = Delta(self.cache.sid, turn, step, "thinking", event.key, event.text)
        elif isinstance(event, ToolCallDelta):
            delta = Delta(
                self.cache.sid, turn, step, "tool_call", event.key, event.arguments, event.name
            )
        else:
            return
        try:
            self.on_delta(delta)
        except Exception:  # a broken viewer must not break the turn
            log.exception("session %s: a delta listener failed", self.cache.sid)

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
