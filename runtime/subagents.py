"""Subagents: the `task` tool hands a piece of work to a child session and answers with
what the child said (DESIGN §7, after DeepSeek Harness's child sessions).

A `task` call, once approved like any tool, asks the store for a child session
(`Children.start_child`): owned by the parent's owner, with the prompt, a preset and a tool
set no wider than the parent's, working on a copy of the parent's files as they are at the
call (recorded in the child as a `fork` snapshot), so the child never changes the parent's
files. The parent records which child its call started (`subagent/started`, in the call's
step), the child what it was started for (`subagent/descriptor`, before its first turn).

The child's turn runs in this process like any other turn (its own turn lock and turn
place), and streams: its text goes to the child's viewers and, as the `task` call's live
output, to the parent's. When it ends, the call's result is the child's last answer with
what it changed in its copy of the files (a bounded diff, `Children.child_report`).

Cancelling the parent cancels the child (the call then ends `ABORTED`); a child that runs
past `SubagentLimits.timeout_s` is cancelled and the call ends `SUBAGENT_TIMEOUT`. Caps on
depth and on children per session and per user are the store's to check: a refused child
is an error result (`ChildRefused.code`), nothing started. If the process dies while a
child runs, recovery closes both turns (the child's `interrupted`, the parent's call
`TOOL_OUTCOME_UNKNOWN`), each once, as it closes any turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from runtime.errors import AgentError
from runtime.ports import NewFact
from runtime.run import Delta, DeltaSink, NoticeSink, Run
from runtime.tools import Tool, ToolOutcome, Workspace

if TYPE_CHECKING:
    from runtime.service import Runtime

log = logging.getLogger("strand.runtime")

TASK = "task"

# Error codes of a `task` call's result.
SUBAGENT_REFUSED = "SUBAGENT_REFUSED"
SUBAGENT_TIMEOUT = "SUBAGENT_TIMEOUT"
SUBAGENT_FAILED = "SUBAGENT_FAILED"
ABORTED = "ABORTED"

# The most of a child's answer a result keeps (its head and tail around a note).
ANSWER_MAX_CHARS = 16 * 1024
PROMPT_MAX_CHARS = 32 * 1024
# How long a cancelled child may take to write its ending before the call gives it up.
CHILD_CANCEL_WAIT_S = 5.0


class ChildRefused(AgentError):
    """The store would not start a child (depth, caps, an unknown preset or tool)."""

    def __init__(self, message: str, code: str = SUBAGENT_REFUSED) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class ChildAsk:
    """What a `task` call asks for: a child of `parent_session`, started by `call_id` in
    `turn`, working from the parent's files at `at_entry`."""

    parent_session: str
    call_id: str
    turn: int
    at_entry: str | None
    prompt: str
    preset: str | None = None
    tools: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Child:
    session_id: str
    depth: int
    tools: tuple[str, ...]
    prompt: str


@dataclass(frozen=True, slots=True)
class ChildReport:
    """What a child left: its last answer and a bounded account of what it changed."""

    answer: str
    diff_text: str
    files: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class SubagentLimits:
    timeout_s: float = 600.0


class Children(Protocol):
    """What subagents need from the store, beside the `SessionLog`."""

    async def start_child(self, ask: ChildAsk) -> Child:
        """Create the child session (or `ChildRefused`, nothing written)."""
        ...

    async def child_report(self, child_session: str) -> ChildReport: ...

    def limits(self) -> SubagentLimits: ...


def _not_here(_: Workspace, __: Mapping[str, Any]) -> ToolOutcome:
    return ToolOutcome("task runs through the agent loop, not on a tool thread", True, "TOOL_ERROR")


TASK_TOOL = Tool(
    TASK,
    "Hand a self-contained piece of work to a subagent: a child session that works on a copy "
    "of the files as they are now, with at most this session's tools. Its final answer comes "
    "back as the result, with what it changed in its copy (the user must approve).",
    {
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "What the subagent should do."},
            "tools": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Tools it may use (a subset of yours; default: all of yours).",
            },
            "preset": {"type": "string", "description": "Preset to run it with (default: yours)."},
        },
        "required": ["prompt"],
        "additionalProperties": False,
    },
    _not_here,
    needs_approval=True,
)

SUBAGENT_TOOLS: dict[str, Tool] = {TASK: TASK_TOOL}


@dataclass
class TaskCall:
    """One `task` call of a parent's step, as dispatch hands it over."""

    parent_session: str
    turn: int
    step: int
    call_id: str
    arguments: Mapping[str, Any]
    at_entry: str | None
    parent_run: Run
    record: Callable[[Sequence[NewFact]], Awaitable[Any]]
    on_delta: DeltaSink | None = None
    auto_approve: bool = False


class Subagents:
    """Runs `task` calls: starts each child, drives its turn, reports what it did."""

    def __init__(self, runtime: Runtime, children: Children) -> None:
        self.runtime = runtime
        self.children = children

    async def run_task(self, call: TaskCall) -> ToolOutcome:
        """The call's result; never raises (but when the call itself is cancelled)."""
        try:
            return await self._run_task(call)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:  # a failing store or a bug must not end the parent's turn
            log.exception("session %s: task call %s failed", call.parent_session, call.call_id)
            return ToolOutcome(f"task failed: {type(exc).__name__}: {exc}", True, SUBAGENT_FAILED)

    async def _run_task(self, call: TaskCall) -> ToolOutcome:
        ask = _ask_of(call)
        if isinstance(ask, ToolOutcome):
            return ask
        try:
            child = await self.children.start_child(ask)
        except ChildRefused as exc:
            return ToolOutcome(f"task: {exc}", True, exc.code)
        started = {
            "call_id": call.call_id,
            "child_session": child.session_id,
            "prompt": child.prompt,
            "tools": list(child.tools),
            "delegation_depth": child.depth,
        }
        await call.record([NewFact("subagent/started", started, call.turn, call.step)])
        try:
            await self.runtime.send(
                child.session_id,
                child.prompt,
                auto_approve=call.auto_approve,
                on_delta=_relay(call),
                on_notice=_pinger(call),
            )
        except AgentError as exc:  # the caps on open turns, a preset gone…
            text = f"task: the child session {child.session_id} could not start: {exc}"
            return ToolOutcome(text, True, SUBAGENT_REFUSED, _details(child, None))
        return await self._await_child(call, child)

    async def _await_child(self, call: TaskCall, child: Child) -> ToolOutcome:
        run = self.runtime.runs.get(child.session_id) or self.runtime.recent.get(child.session_id)
        task = run.task if run is not None else None
        if run is None or task is None:
            return await self._report(child, None)
        timeout = self.children.limits().timeout_s
        parent_cancel = asyncio.ensure_future(call.parent_run.cancel_event.wait())
        try:
            done, _ = await asyncio.wait(
                {task, parent_cancel}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            parent_cancel.cancel()
            if not task.done():
                run.cancel()  # the parent was cancelled, timed out, or this call was
                await asyncio.wait({task}, timeout=CHILD_CANCEL_WAIT_S)
        if task not in done:
            if call.parent_run.cancelled:
                text = (
                    f"task: cancelled with its parent; the child session {child.session_id} "
                    "was cancelled too"
                )
                return ToolOutcome(text, True, ABORTED, _details(child, "aborted"))
            text = (
                f"task: the child session {child.session_id} ran past {timeout:g} s and was "
                "cancelled"
            )
            return ToolOutcome(text, True, SUBAGENT_TIMEOUT, _details(child, "aborted"))
        ended = run.ended[-1].reason if run.ended else None
        return await self._report(child, ended)

    async def _report(self, child: Child, ended: str | None) -> ToolOutcome:
        report = await self.children.child_report(child.session_id)
        answer = _clipped(report.answer.strip() or "(the subagent gave no answer)")
        parts = [answer]
        if report.diff_text:
            parts.append(report.diff_text)
        details = {**_details(child, ended), "files": list(report.files)}
        if ended == "completed":
            return ToolOutcome("\n\n".join(parts), False, None, details)
        head = f"task: the child session's turn ended {ended or 'without a turn'}"
        return ToolOutcome("\n\n".join([head, *parts]), True, SUBAGENT_FAILED, details)


def _ask_of(call: TaskCall) -> ChildAsk | ToolOutcome:
    args = call.arguments
    prompt = args.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return ToolOutcome("task: prompt must be a non-empty string", True, "INVALID_ARGUMENTS")
    if len(prompt) > PROMPT_MAX_CHARS:
        return ToolOutcome(
            f"task: the prompt is longer than {PROMPT_MAX_CHARS} characters",
            True,
            "INVALID_ARGUMENTS",
        )
    tools = args.get("tools")
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)
    ):
        return ToolOutcome("task: tools must be a list of tool names", True, "INVALID_ARGUMENTS")
    preset = args.get("preset")
    return ChildAsk(
        parent_session=call.parent_session,
        call_id=call.call_id,
        turn=call.turn,
        at_entry=call.at_entry,
        prompt=prompt.strip(),
        preset=preset if isinstance(preset, str) and preset else None,
        tools=tuple(tools) if tools is not None else None,
    )


def _relay(call: TaskCall) -> DeltaSink | None:
    """The child's deltas to its own viewers, and its text, as the `task` call's live
    output (named `task`: the parent's page then also redraws the child's spans), to the
    parent's."""
    sink = call.on_delta
    if sink is None:
        return None

    def relay(delta: Delta) -> None:
        sink(delta)
        if delta.kind in ("text", "tool_output") and delta.text:
            _to_parent(call, sink, delta.text)

    return relay


def _pinger(call: TaskCall) -> NoticeSink | None:
    """What the child's notices (a turn started or ended, an approval waited for) tell the
    parent's viewers: an empty piece of the call's output, so they redraw its spans."""
    sink = call.on_delta
    if sink is None:
        return None
    return lambda _: _to_parent(call, sink, "")


def _to_parent(call: TaskCall, sink: DeltaSink, text: str) -> None:
    delta = Delta(
        call.parent_session, call.turn, call.step, "tool_output", call.call_id, text, name=TASK
    )
    with contextlib.suppress(Exception):
        sink(delta)


def _details(child: Child, ended: str | None) -> dict[str, Any]:
    return {
        "child_session": child.session_id,
        "delegation_depth": child.depth,
        "child_turn_end": ended,
    }


def _clipped(text: str) -> str:
    if len(text) <= ANSWER_MAX_CHARS:
        return text
    half = ANSWER_MAX_CHARS // 2
    left = len(text) - 2 * half
    return f"{text[:half]}\n[… {left} characters of the answer left out …]\n{text[-half:]}"
