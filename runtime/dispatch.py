"""Tool dispatch with approvals: one step's tool calls, from the model's reply to their
results (DESIGN §7).

The calls are prepared in model order (an unknown tool, arguments that are not valid, a
rejection or a timed-out approval decide a result without running), then the runnable ones
run together and their results are written in model order. Every call gets a `tool/call`
and a `tool/result`, whatever happens, so the model history never holds a call without its
result; calls past the cap on one reply's tool calls are answered without being run.

While a command runs, its output goes to live viewers as deltas of kind `tool_output`
(block: the call id), like a reply's text: never stored (the result is the fact), and
bounded: pieces go out at most every `OUTPUT_DELTA_INTERVAL_S`, each at most
`OUTPUT_DELTA_MAX_CHARS`, and at most `OUTPUT_LIVE_MAX_CHARS` of one command in all.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runtime.config import AgentConfig
from runtime.log_cache import LogCache
from runtime.messages import message_entry, tool_result_message
from runtime.ports import NewFact
from runtime.providers.base import ToolCallRequest
from runtime.run import Delta, DeltaSink, Run
from runtime.subagents import TASK, Subagents, TaskCall
from runtime.tools import CallSite, Toolbox, ToolOutcome, check_arguments
from runtime.workspace import WorkspaceRecorder

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

# A running command's output to live viewers (see the module doc).
OUTPUT_DELTA_INTERVAL_S = 0.1
OUTPUT_DELTA_MAX_CHARS = 8 * 1024
OUTPUT_LIVE_MAX_CHARS = 256 * 1024
OUTPUT_LIVE_ENDS = "\n[… the live output stops here; the result keeps its head and tail]\n"
# The tools whose output streams while they run.
STREAMING_TOOLS = frozenset({"bash"})
# How long a cancelled step waits for its running calls to stop by themselves (a command
# is killed within a tenth of a second and returns the output it wrote) before it gives
# them up.
CANCEL_GRACE_S = 2.0


class LiveOutput:
    """One running command's output on its way to the viewers. `write` is called on the
    tool's thread with each piece read (and `b""` when nothing came for a while); pieces
    are gathered and handed to `sink` on the agent's loop, at most one every
    `OUTPUT_DELTA_INTERVAL_S`. Past `OUTPUT_DELTA_MAX_CHARS` waiting, the older part of
    what waits is left out (a viewer sees the latest output); past `OUTPUT_LIVE_MAX_CHARS`
    sent, one last note goes out and nothing more."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sink: DeltaSink,
        session_id: str,
        turn: int,
        step: int,
        call_id: str,
    ) -> None:
        self.loop, self.sink = loop, sink
        self.session_id, self.turn, self.step, self.call_id = session_id, turn, step, call_id
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pending = ""
        self.sent = 0
        self.pieces = 0
        self.last = 0.0
        self.ended = False
        self.lock = threading.Lock()

    def write(self, data: bytes) -> None:
        with self.lock:
            if self.ended:
                return
            if data:
                self.pending += self.decoder.decode(data).replace("\x00", "\\0")
                if len(self.pending) > OUTPUT_DELTA_MAX_CHARS:
                    self.pending = "[…]\n" + self.pending[-OUTPUT_DELTA_MAX_CHARS:]
            now = time.monotonic()
            if self.pending and now - self.last >= OUTPUT_DELTA_INTERVAL_S:
                self.last = now
                self._send_locked(threadsafe=True)

    def close(self) -> None:
        """Send what waits (called on the loop once the tool is done)."""
        with self.lock:
            if not self.ended:
                self.pending += self.decoder.decode(b"", final=True)
                if self.pending:
                    self._send_locked(threadsafe=False)
            self.ended = True

    def closed(self, _: object) -> None:
        self.close()

    def _send_locked(self, *, threadsafe: bool) -> None:
        text, self.pending = self.pending, ""
        room = OUTPUT_LIVE_MAX_CHARS - self.sent
        if len(text) >= room:
            text = text[:room] + OUTPUT_LIVE_ENDS
            self.ended = True
        self.sent += len(text)
        self.pieces += 1
        delta = Delta(self.session_id, self.turn, self.step, "tool_output", self.call_id, text)
        if not threadsafe:
            self._hand(delta)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is watching
            self.loop.call_soon_threadsafe(self._hand, delta)

    def _hand(self, delta: Delta) -> None:
        with contextlib.suppress(Exception):  # a viewer's trouble must not stop the command
            self.sink(delta)


@dataclass
class _Plan:
    """One tool call of a step on its way to a result."""

    call: ToolCallRequest
    outcome: ToolOutcome | None = None  # decided without running (rejected, invalid…)
    runnable: bool = False


class ToolDispatch:
    def __init__(
        self,
        cache: LogCache,
        config: AgentConfig,
        toolbox: Toolbox,
        run: Run,
        *,
        auto_approve: bool,
        approval_timeout_s: float | None,
        notice: Callable[..., None],
        files: WorkspaceRecorder,
        on_delta: DeltaSink | None = None,
        subagents: Subagents | None = None,
    ) -> None:
        self.subagents = subagents
        self.cache = cache
        self.config = config
        self.toolbox = toolbox
        self.run = run
        self.auto_approve = auto_approve
        self.approval_timeout_s = approval_timeout_s
        # Set when an approval timed out: the turn ends with reason approval_timeout.
        self.approval_timed_out = False
        self.notice = notice
        self.files = files
        self.on_delta = on_delta

    async def dispatch(self, turn: int, step: int, calls: list[ToolCallRequest]) -> bool:
        """Run the reply's calls up to the cap on one reply's tool calls; those past it are
        answered after them, never asked about nor run, a batch of pairs at a time (however
        many a reply holds, no append passes the store's batch limit). False when the run
        was cancelled."""
        cap = self.config.limits.max_tool_calls_per_reply
        kept, over = (calls[:cap], calls[cap:]) if cap > 0 else (calls, [])
        finished = await self._run_calls(turn, step, kept)
        refused = _over_the_cap(cap, len(calls))
        for start in range(0, len(over), CAPPED_PER_APPEND):
            await self.cache.append(
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
        await self.cache.append(
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
        feeds = self._live_outputs(turn, step, plans)
        stops = {index: threading.Event() for index, p in enumerate(plans) if p.runnable}
        tasks = {
            index: asyncio.ensure_future(
                self._delegated(turn, step, p.call)
                if p.call.name == TASK and self.subagents is not None
                else self.toolbox.run(
                    p.call.name,
                    p.call.arguments,
                    feeds[index].write if index in feeds else None,
                    stops[index],
                    CallSite(p.call.call_id, turn, step),
                )
            )
            for index, p in enumerate(plans)
            if p.runnable
        }
        for index, feed in feeds.items():
            tasks[index].add_done_callback(feed.closed)
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
                # With what the tool changed in the folder, if it may change files.
                result = _result_fact(plan.call, outcome, turn, step)
                ran = plan.call.name if plan.runnable else ""
                await self.cache.append(
                    await self.files.after_tool(ran, plan.call.call_id, result, plan.call.arguments)
                )
                written += 1
        except BaseException:
            for task in tasks.values():
                task.cancel()
            raise
        finally:
            cancel_wait.cancel()
        if written == len(plans):
            return True
        for stop in stops.values():
            stop.set()
        running = [task for task in tasks.values() if not task.done()]
        if running:
            await asyncio.wait(running, timeout=CANCEL_GRACE_S)
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
        await self.cache.append(rest)
        return False

    def _delegated(self, turn: int, step: int, call: ToolCallRequest) -> Any:
        """A `task` call: a child session does the work (`runtime.subagents`), from the
        files as they are at the reply that asked for it."""
        assert self.subagents is not None
        return self.subagents.run_task(
            TaskCall(
                parent_session=self.cache.sid,
                turn=turn,
                step=step,
                call_id=call.call_id,
                arguments=call.arguments,
                at_entry=self.cache.leaf,
                parent_run=self.run,
                record=self.cache.append,
                on_delta=self.on_delta,
                auto_approve=self.auto_approve,
            )
        )

    def _live_outputs(self, turn: int, step: int, plans: list[_Plan]) -> dict[int, LiveOutput]:
        """A live feed for each runnable call whose output streams, when anyone listens."""
        if self.on_delta is None:
            return {}
        loop = asyncio.get_running_loop()
        return {
            index: LiveOutput(loop, self.on_delta, self.cache.sid, turn, step, p.call.call_id)
            for index, p in enumerate(plans)
            if p.runnable and p.call.name in STREAMING_TOOLS
        }

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
            await self.cache.append([asked, NewFact("approval/decided", decided, turn, step)])
            return "allowed"
        await self.cache.append([asked])
        self.notice(
            "approval_waiting",
            turn,
            f"waiting for approval of {call.name} {call.raw_arguments} (approval {approval_id})",
            approval_id=approval_id,
            tool=call.name,
            call_id=call.call_id,
        )
        timeout = self.approval_timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        while approval_id not in self.cache.decisions:
            if self.run.cancelled:
                cancelled = {"approval_id": approval_id, "outcome": "cancelled", "by": "cancel"}
                await self.cache.append(
                    [NewFact("approval/decided", cancelled, turn, step)],
                    unless=lambda: approval_id in self.cache.decisions,
                )
                return "cancelled"
            left = APPROVAL_POLL_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                timed_out = {"approval_id": approval_id, "outcome": "cancelled", "by": "timeout"}
                written = await self.cache.append(
                    [NewFact("approval/decided", timed_out, turn, step)],
                    unless=lambda: approval_id in self.cache.decisions,
                )
                if written is None:
                    break  # the user's decision came in first
                return "timed_out"
            waiting = asyncio.ensure_future(self.cache.wait_for_events(min(left, APPROVAL_POLL_S)))
            cancel_wait = asyncio.ensure_future(self.run.cancel_event.wait())
            try:
                await asyncio.wait({waiting, cancel_wait}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()
                cancel_wait.cancel()
            await self.cache.sync()
        return self.cache.decisions[approval_id] if not self.run.cancelled else "cancelled"

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
        await self.cache.append(facts)


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
