"""The trace: turns → steps → model requests → tool calls, as timed spans.

A span starts and ends at event times. A span whose end has not been written is open
(`end is None`): still running, or cut by a crash (status `interrupted`). Each span carries
`inputs` and `outputs` (key, value pairs) for a detail panel.

Windowing. `project_trace` folds only the events it is given; the caller chooses which
turns to show and passes **every event of those turns**: the events whose `turn` column is
one of the chosen turn numbers (that is, from each turn's `turn/start` through its
`turn/end`, or through the end of the log for a turn still running). `pick_turns` chooses
the turn numbers for a page (the latest N, or the N before a given turn). Events outside
any turn (between turns) are not part of a turn and are ignored when passed in `events`.
A window that starts inside a turn (its `turn/start` missing) still shows the turn from
its first event on.

Entries added outside any turn that change what later requests hold or cost — compactions
and Pi 1.6's context edits, usage entries and system messages, as an imported Pi session
holds them — are passed apart, as `outside`: each run of them between two turns is drawn
as a top-level span of kind `outside`, whose children are those entries as what they are.

Such a span starts and ends when its event was recorded, so the timeline keeps the log's
order; when the entry's own `timestamp` (the moment Pi wrote it, for an import) is a second
or more away from that, the span's first input is `entry_timestamp`, that moment, and the
`outside` span's first input is `entry_timestamps`, the first and last of its entries'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from projections.chat import (
    ABORTED_CODES,
    NOT_STARTED,
    OUTCOME_UNKNOWN,
    Usage,
    content_text,
    tool_calls_of,
)
from projections.faults import fault_view
from projections.otel_ingest import observed_pairs, with_late_agent
from projections.payload import arguments_json
from projections.records import EventRecord
from projections.subagent_trace import graft_children

DEFAULT_PAGE_TURNS = 20

Pairs = tuple[tuple[str, Any], ...]

# turn/end reason → span status
_TURN_STATUS = {
    "completed": "ok",
    "aborted": "aborted",
    "error": "error",
    "max_tokens": "max_tokens",
    "interrupted": "interrupted",
    "approval_timeout": "approval_timeout",
}
# assistant stopReason → request span status
_STOP_STATUS = {"error": "error", "aborted": "aborted", "length": "max_tokens"}
# approval/decided outcome → approval span status
_APPROVAL_STATUS = {"allowed": "ok", "rejected": "rejected", "cancelled": "cancelled"}
# Written by crash recovery, not by a live process: they do not show the turn was alive.
_RECOVERY_CODES = frozenset({OUTCOME_UNKNOWN, NOT_STARTED})


@dataclass(frozen=True, slots=True)
class TraceSpan:
    """One bar of the timeline.

    `kind`: turn, step, request, tool, approval, input, compaction, job (a background
    job, under the turn that started it, running on past its end), and for Pi 1.6's
    entries context_edit, usage, system; `outside` holds such entries added outside any
    turn (its `turn` is None, as theirs). `status`: ok, running,
    error, aborted, max_tokens, interrupted, waiting (for approval), pending (requested,
    not dispatched), not_started, rejected, cancelled. `key` is stable across reloads.
    """

    kind: str
    key: str
    name: str
    status: str
    start: datetime
    end: datetime | None
    start_seq: int
    end_seq: int | None
    turn: int | None
    step: int | None
    usage: Usage | None = None
    ttft_ms: int | None = None
    error: str | None = None
    inputs: Pairs = ()
    outputs: Pairs = ()
    children: tuple[TraceSpan, ...] = ()

    @property
    def duration_ms(self) -> int | None:
        return None if self.end is None else _ms(self.start, self.end)

    @property
    def is_open(self) -> bool:
        return self.end is None


@dataclass(frozen=True, slots=True)
class TraceRow:
    """A span placed for drawing: `offset_ms` from the window start, nesting `depth`."""

    span: TraceSpan
    depth: int
    offset_ms: int
    duration_ms: int | None


@dataclass(frozen=True, slots=True)
class TraceView:
    spans: tuple[TraceSpan, ...]  # turn spans, oldest first
    rows: tuple[TraceRow, ...]  # every span depth first, ready to draw
    turns: tuple[int, ...]
    start: datetime | None  # the earliest span start
    end: datetime | None  # the latest event time in the window
    first_seq: int | None
    last_seq: int | None
    usage: Usage  # summed over the requests of the window
    running: bool  # some turn in the window has not ended


@dataclass(frozen=True, slots=True)
class TurnWindow:
    """The turns of one trace page, oldest first. `older` is the `before_turn` that
    gives the previous page (None when there is none)."""

    turns: tuple[int, ...]
    older: int | None


def pick_turns(
    turns: Iterable[int], *, last_n: int = DEFAULT_PAGE_TURNS, before_turn: int | None = None
) -> TurnWindow:
    """The latest `last_n` turns, or the latest `last_n` before `before_turn`."""
    numbers = sorted({turn for turn in turns if before_turn is None or turn < before_turn})
    chosen = tuple(numbers[-last_n:]) if last_n > 0 else ()
    has_older = len(numbers) > len(chosen)
    return TurnWindow(turns=chosen, older=chosen[0] if chosen and has_older else None)


# --- builders (mutable while folding, frozen at the end) ---------------------------------


@dataclass
class _Approval:
    approval_id: str
    asked: EventRecord
    decided: EventRecord | None = None


@dataclass
class _Tool:
    call_id: str
    name: str = ""
    requested: EventRecord | None = None  # the assistant/message that asked for it
    arguments: Any = None
    dispatched: EventRecord | None = None  # tool/call
    result: EventRecord | None = None  # tool/result
    approvals: list[_Approval] = field(default_factory=list)


@dataclass
class _Request:
    sent: EventRecord | None  # request/sent (None for a response with no manifest)
    response: EventRecord | None = None  # assistant/message


@dataclass
class _Input:
    message: EventRecord  # user/message
    queued: EventRecord | None = None
    claimed: EventRecord | None = None


@dataclass
class _Step:
    number: int
    start: EventRecord
    end: EventRecord | None = None
    requests: list[_Request] = field(default_factory=list)
    tools: dict[str, _Tool] = field(default_factory=dict)
    inputs: list[_Input] = field(default_factory=list)
    marks: list[EventRecord] = field(default_factory=list)  # compactions
    claims: list[EventRecord] = field(default_factory=list)  # unpaired inbox/claimed
    events: list[EventRecord] = field(default_factory=list)


@dataclass
class _Turn:
    number: int
    start: EventRecord
    started: bool  # its turn/start is in the window
    end: EventRecord | None = None
    steps: dict[int, _Step] = field(default_factory=dict)
    inputs: list[_Input] = field(default_factory=list)
    marks: list[EventRecord] = field(default_factory=list)
    claims: list[EventRecord] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    # In an observed session, the agent span that came after the turn was closed.
    observed: EventRecord | None = None

    @property
    def ended(self) -> Mapping[str, Any] | None:
        """Its `turn/end` data, as a late agent span amends it (None while it runs)."""
        if self.end is None:
            return None
        return with_late_agent(self.end.data, self.observed.data if self.observed else None)

    @property
    def reason(self) -> str | None:
        return None if self.ended is None else str(self.ended.get("reason"))

    @property
    def error(self) -> str | None:
        error = self.ended.get("error") if self.ended is not None else None
        return str(error) if error else None


@dataclass
class _Job:
    """A background job: its `job/started` and, once it ended, its `job/ended`."""

    started: EventRecord | None = None
    ended: EventRecord | None = None


@dataclass
class _Fold:
    turns: dict[int, _Turn] = field(default_factory=dict)
    headers: dict[int, Mapping[str, Any]] = field(default_factory=dict)  # seq → data
    queued: dict[str, EventRecord] = field(default_factory=dict)  # inbox id → inbox/queued
    approvals: dict[str, _Approval] = field(default_factory=dict)
    open_turn: int | None = None
    open_step: dict[int, int] = field(default_factory=dict)  # turn → open step number
    jobs: dict[str, _Job] = field(default_factory=dict)  # job id → its facts


def project_trace(
    events: Sequence[EventRecord],
    *,
    outside: Sequence[EventRecord] = (),
    subagents: Mapping[str, tuple[str, Sequence[TraceSpan]]] | None = None,
) -> TraceView:
    """The trace of the turns whose events are given, and of the entries `outside` any
    turn (see the module doc; other events among `outside` are ignored). `subagents`
    (call id → (child session, its spans)) hangs a `task` call's child under the call
    (`projections.subagent_trace`)."""
    ordered = sorted(events, key=lambda event: event.seq)
    fold = _Fold()
    for event in ordered:
        _apply(fold, event)
    turn_spans = [_turn_span(turn, fold) for _, turn in sorted(fold.turns.items())]
    turn_spans = list(graft_children(turn_spans, subagents or {}))
    marks = sorted((e for e in outside if is_mark(e) and e.turn is None), key=lambda e: e.seq)
    spans = _with_outside(turn_spans, marks)
    rows = _rows(spans)
    starts = [row.span.start for row in rows]
    times = [event.time for turn in fold.turns.values() for event in turn.events]
    times += [event.time for event in marks]
    times += [e.time for job in fold.jobs.values() for e in (job.started, job.ended) if e]
    seqs = [event.seq for event in (*ordered, *marks)]
    return TraceView(
        spans=spans,
        rows=rows,
        turns=tuple(sorted(fold.turns)),
        start=min(starts) if starts else None,
        end=max(times) if times else None,
        first_seq=min(seqs) if seqs else None,
        last_seq=max(seqs) if seqs else None,
        usage=sum((span.usage or Usage() for span in spans), Usage()),
        running=any(turn.end is None for turn in fold.turns.values()),
    )


def _with_outside(turns: list[TraceSpan], marks: list[EventRecord]) -> tuple[TraceSpan, ...]:
    """The turn spans with each run of `marks` between two of them as an `outside` span."""
    spans: list[TraceSpan] = []
    run: list[EventRecord] = []
    pending = iter(marks)
    mark = next(pending, None)
    for turn in [*turns, None]:
        while mark is not None and (turn is None or mark.seq < turn.start_seq):
            run.append(mark)
            mark = next(pending, None)
        if run:
            spans.append(_outside_span(run))
            run = []
        if turn is not None:
            spans.append(turn)
    return tuple(spans)


def _outside_span(run: list[EventRecord]) -> TraceSpan:
    children = tuple(_mark_span(event, None, None) for event in run)
    first, last = run[0], run[-1]
    usages = [child.usage for child in children if child.usage is not None]
    written = [moment for event in run if (moment := _entry_time(event)) is not None]
    inputs: Pairs = ()
    if written:
        span = _stamp(min(written)) + ("" if len(written) == 1 else " – " + _stamp(max(written)))
        inputs = (("entry_timestamps", span),)
    return TraceSpan(
        kind="outside",
        key=f"outside-{first.seq}",
        name=f"{len(run)} entr{'y' if len(run) == 1 else 'ies'} outside turns",
        status="ok",
        start=first.time,
        end=max(first.time, last.time),
        start_seq=first.seq,
        end_seq=last.seq,
        turn=None,
        step=None,
        usage=sum(usages, Usage()) if usages else None,
        inputs=inputs,
        outputs=(("entries", len(run)),),
        children=children,
    )


# --- folding -----------------------------------------------------------------------------


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _apply(fold: _Fold, event: EventRecord) -> None:
    if event.type in _JOB_TYPES:
        # A job outlives its turn: drawn under the turn that started it, from its start to
        # its end (both facts carry that turn), never as part of a step.
        job = fold.jobs.setdefault(str(event.data.get("job_id")), _Job())
        if event.type == "job/started":
            job.started = event
        else:
            job.ended = event
        return
    if event.type == "request/header":
        fold.headers[event.seq] = event.data
    elif event.type == "inbox/queued":
        fold.queued[str(event.data.get("inbox_id"))] = event
    turn = _turn_of(fold, event)
    if turn is None:
        return  # between turns: not part of the trace
    turn.events.append(event)
    if event.type == "turn/end":
        turn.end = event
        fold.open_turn = None
        return
    if event.type == "turn/observed":
        turn.observed = event
        return
    if event.type == "step/start":
        number = _int_or_none(event.data.get("step", event.step)) or 0
        turn.steps[number] = _Step(number, event, events=[event])
        fold.open_step[turn.number] = number
        return
    step = _step_of(fold, turn, event)
    if step is not None:
        step.events.append(event)
    if event.type == "step/end":
        if step is not None:
            step.end = event
        fold.open_step.pop(turn.number, None)
        return
    _apply_in_step(fold, turn, step, event)


def _turn_of(fold: _Fold, event: EventRecord) -> _Turn | None:
    if event.type == "turn/start":
        number = _int_or_none(event.data.get("turn", event.turn))
        if number is None:
            return None
        fold.turns[number] = _Turn(number, event, started=True)
        fold.open_turn = number
        return fold.turns[number]
    number = event.turn if event.turn is not None else fold.open_turn
    if number is None:
        return None
    if number not in fold.turns:
        # The window starts inside this turn: show it from its first event on.
        fold.turns[number] = _Turn(number, event, started=False)
    return fold.turns[number]


def _step_of(fold: _Fold, turn: _Turn, event: EventRecord) -> _Step | None:
    number = event.step if event.step is not None else fold.open_step.get(turn.number)
    if number is None:
        return None
    if number not in turn.steps:
        turn.steps[number] = _Step(number, event)
    return turn.steps[number]


def _apply_in_step(fold: _Fold, turn: _Turn, step: _Step | None, event: EventRecord) -> None:
    data = event.data
    if event.type == "request/sent" and step is not None:
        step.requests.append(_Request(event))
    elif event.type == "assistant/message" and step is not None:
        _attach_response(step, event)
    elif event.type == "tool/call" and step is not None:
        tool = _tool(step, str(data.get("call_id")))
        tool.dispatched = event
        tool.name = str(data.get("tool") or tool.name)
    elif event.type == "tool/result" and step is not None:
        message = _message(event)
        tool = _tool(step, str(message.get("toolCallId")))
        tool.result = event
        tool.name = tool.name or str(message.get("toolName") or "")
    elif event.type == "approval/asked" and step is not None:
        approval = _Approval(str(data.get("approval_id")), event)
        fold.approvals[approval.approval_id] = approval
        tool = _tool(step, str(data.get("call_id")))
        tool.approvals.append(approval)
        tool.name = tool.name or str(data.get("tool") or "")
    elif event.type == "approval/decided":
        found = fold.approvals.get(str(data.get("approval_id")))
        if found is not None:
            found.decided = event
    elif event.type == "inbox/claimed":
        (step.claims if step is not None else turn.claims).append(event)
    elif event.type == "user/message":
        _attach_input(fold, turn, step, event)
    elif is_mark(event):
        (step.marks if step is not None else turn.marks).append(event)


# Entries that happen at a moment of a turn without taking time: compactions, and Pi 1.6's
# context edits, usage outside the conversation and system messages.
MARK_EVENTS: Final = frozenset({"entry/compaction", "entry/context_edit", "entry/usage"})


def is_mark(event: EventRecord) -> bool:
    """Whether the event adds an entry the trace draws as a moment of its own."""
    return event.type in MARK_EVENTS or _is_system_message(event)


def _is_system_message(event: EventRecord) -> bool:
    return event.type == "entry/message" and _message(event).get("role") == "system"


def _message(event: EventRecord) -> Mapping[str, Any]:
    entry = event.data.get("entry")
    message = entry.get("message") if isinstance(entry, Mapping) else None
    return message if isinstance(message, Mapping) else {}


def _tool(step: _Step, call_id: str) -> _Tool:
    if call_id not in step.tools:
        step.tools[call_id] = _Tool(call_id)
    return step.tools[call_id]


def _attach_response(step: _Step, event: EventRecord) -> None:
    waiting = [request for request in step.requests if request.response is None]
    if waiting:
        waiting[-1].response = event
    else:
        step.requests.append(_Request(sent=None, response=event))
    for call in tool_calls_of(_message(event)):
        tool = _tool(step, str(call.get("id")))
        tool.requested = event
        tool.arguments = call.get("arguments")
        tool.name = tool.name or str(call.get("name") or "")


def _attach_input(fold: _Fold, turn: _Turn, step: _Step | None, event: EventRecord) -> None:
    # Input claimed at this boundary is written as user messages right after the claim.
    claims = step.claims if step is not None else turn.claims
    claim = claims.pop(0) if claims else None
    queued = fold.queued.get(str(claim.data.get("inbox_id"))) if claim is not None else None
    item = _Input(event, queued=queued, claimed=claim)
    (step.inputs if step is not None else turn.inputs).append(item)


# --- spans -------------------------------------------------------------------------------


def _ms(start: datetime, end: datetime) -> int:
    return round((end - start).total_seconds() * 1000)


def _by_start(spans: Iterable[TraceSpan]) -> tuple[TraceSpan, ...]:
    return tuple(sorted(spans, key=lambda span: (span.start_seq, span.key)))


def _is_recovery_result(event: EventRecord) -> bool:
    return event.type == "tool/result" and event.data.get("error_code") in _RECOVERY_CODES


def _last_alive(events: Sequence[EventRecord], fallback: EventRecord) -> EventRecord:
    """The last event that a live process wrote: crash recovery's closers (synthetic
    results, step/end, turn/end) are written later, by another process."""
    for event in reversed(events):
        if event.type in ("turn/end", "step/end") or _is_recovery_result(event):
            continue
        return event
    return fallback


def _step_cut(step: _Step) -> bool:
    """Whether a step of an interrupted turn was running when its process died."""
    if step.end is None or step.end.data.get("reason") == "interrupted":
        return True
    if any(_is_recovery_result(event) for event in step.events):
        return True
    return any(request.response is None for request in step.requests)


def _turn_span(turn: _Turn, fold: _Fold) -> TraceSpan:
    children = [_step_span(step, turn, fold) for _, step in sorted(turn.steps.items())]
    children += [_input_span(item, turn.number, None) for item in turn.inputs]
    children += [_mark_span(mark, turn.number, None) for mark in turn.marks]
    children += [
        _job_span(job_id, job, turn.number)
        for job_id, job in fold.jobs.items()
        if job.started is not None and job.started.turn == turn.number
    ]
    status = _TURN_STATUS.get(turn.reason or "", "running" if turn.end is None else "error")
    end = turn.end
    if status == "interrupted":
        end = _last_alive(turn.events, turn.start)
    elif end is not None and turn.observed is not None and turn.observed.time > end.time:
        end = turn.observed  # the agent span ended after the last span it holds
    usage = _sum_usage(children)
    prompt = next((item.message for item in turn.inputs), None)
    if prompt is None and turn.steps:
        first_step = turn.steps[min(turn.steps)]
        prompt = first_step.inputs[0].message if first_step.inputs else None
    outputs: list[tuple[str, Any]] = [("reason", turn.reason)]
    if turn.end is not None and turn.error:
        outputs.append(("error", turn.error))
    if status == "interrupted" and turn.end is not None:
        outputs.append(("closed_by_recovery_at", turn.end.time))
    outputs += [("steps", len(turn.steps)), ("usage", usage)]
    if turn.end is not None:
        outputs += observed_pairs(turn.end.data)
    if turn.observed is not None:
        outputs += observed_pairs(turn.observed.data)
    return TraceSpan(
        kind="turn",
        key=f"turn-{turn.number}",
        name=f"Turn {turn.number}",
        status=status,
        start=turn.start.time,
        end=end.time if end is not None else None,
        start_seq=turn.start.seq,
        end_seq=turn.end.seq if turn.end is not None else None,
        turn=turn.number,
        step=None,
        usage=usage,
        error=turn.error if status == "error" and turn.end else None,
        inputs=(
            ("turn", turn.number),
            ("trigger", turn.start.data.get("trigger") if turn.started else None),
            ("prompt", content_text(_message(prompt).get("content")) if prompt else None),
        ),
        outputs=tuple(outputs),
        children=_by_start(children),
    )


_JOB_TYPES = frozenset({"job/started", "job/ended"})
# job/ended reason → span status (an `exited` job is ok or error by its exit code).
_JOB_STATUS = {"killed": "aborted", "timeout": "error", "output": "error", "lost": "interrupted"}


def _job_span(job_id: str, job: _Job, turn: int) -> TraceSpan:
    started, ended = job.started, job.ended
    assert started is not None
    data = started.data
    end = ended.data if ended is not None else {}
    reason = end.get("reason")
    if ended is None:
        status = "running"
    elif reason == "exited":
        status = "ok" if end.get("exit_code") == 0 else "error"
    else:
        status = _JOB_STATUS.get(str(reason), "error")
    outputs: Pairs = ()
    if ended is not None:
        outputs = tuple(
            (key, end.get(key))
            for key in (
                "reason",
                "exit_code",
                "signal",
                "duration_s",
                "output_bytes",
                "truncated",
                "output",
            )
            if end.get(key) is not None
        )
    error = None
    if status in ("error", "interrupted"):
        error = f"{reason}" if reason != "exited" else f"exit code {end.get('exit_code')}"
    command = str(data.get("command") or "")
    return TraceSpan(
        kind="job",
        key=f"job-{job_id}",
        name=f"job {job_id}: {command[:80]}",
        status=status,
        start=started.time,
        end=ended.time if ended is not None else None,
        start_seq=started.seq,
        end_seq=ended.seq if ended is not None else None,
        turn=turn,
        step=started.step,
        error=error,
        inputs=(
            ("job_id", job_id),
            ("command", command),
            ("call_id", data.get("call_id")),
            ("wall_s", data.get("wall_s")),
        ),
        outputs=outputs,
    )


def _sum_usage(spans: Iterable[TraceSpan]) -> Usage:
    total = Usage()
    for span in spans:
        # Steps already sum their requests and usage entries; a turn sums its steps and the
        # usage entries outside them.
        if span.kind in ("request", "step", "usage") and span.usage is not None:
            total = total + span.usage
    return total


def _step_span(step: _Step, turn: _Turn, fold: _Fold) -> TraceSpan:
    closed_by = step.end or turn.end
    requests = [
        _request_span(
            request,
            step,
            turn,
            fold,
            later=index < len(step.requests) - 1,
            fault=_fault_after(step.requests, index),
        )
        for index, request in enumerate(step.requests)
    ]
    children = [
        *requests,
        *(_tool_span(tool, step, turn) for tool in step.tools.values()),
        *(_input_span(item, turn.number, step.number) for item in step.inputs),
        *(_mark_span(mark, turn.number, step.number) for mark in step.marks),
    ]
    if turn.reason == "interrupted" and _step_cut(step):
        status, end = "interrupted", _last_alive(step.events, step.start).time
    elif closed_by is None:
        status, end = "running", None
    else:
        status, end = _step_status(step, turn), closed_by.time
    failed = _failed_reply(step)
    outputs: list[tuple[str, Any]] = [("reason", step.end.data.get("reason") if step.end else None)]
    if failed is not None:
        message = _message(failed)
        fault = fault_view(failed.data.get("fault"), message.get("errorMessage"))
        sent = sum(1 for request in step.requests if request.sent is not None)
        outputs += [
            ("fault", fault.kind),
            ("fault_title", fault.label),
            ("attempts", fault.attempts or sent or 1),
            ("failed_entry_id", failed.entry_id),
        ]
    return TraceSpan(
        kind="step",
        key=f"step-{turn.number}-{step.number}",
        name=f"Step {step.number}",
        status=status,
        start=step.start.time,
        end=end,
        start_seq=step.start.seq,
        end_seq=closed_by.seq if closed_by is not None else None,
        turn=turn.number,
        step=step.number,
        usage=_sum_usage(children),
        error=_error_message(failed),
        inputs=(("turn", turn.number), ("step", step.number)),
        outputs=tuple(outputs),
        children=_by_start(children),
    )


def _error_message(reply: EventRecord | None) -> str | None:
    message = _message(reply).get("errorMessage") if reply is not None else None
    return str(message) if message else None


def _failed_reply(step: _Step) -> EventRecord | None:
    """The step's reply that failed (stopReason error), if its last request's did."""
    for request in reversed(step.requests):
        if request.response is not None:
            failed = _message(request.response).get("stopReason") == "error"
            return request.response if failed else None
    return None


def _fault_after(requests: Sequence[_Request], index: int) -> Mapping[str, Any] | None:
    """The fault that ended request `index`, as the next attempt's manifest records it."""
    if index + 1 >= len(requests):
        return None
    following = requests[index + 1].sent
    fault = following.data.get("previous_fault") if following is not None else None
    return fault if isinstance(fault, Mapping) else None


def _step_status(step: _Step, turn: _Turn) -> str:
    if step.end is None:
        return _TURN_STATUS.get(turn.reason or "", "error")
    reason = str(step.end.data.get("reason") or "completed")
    return "ok" if reason == "completed" else _TURN_STATUS.get(reason, reason)


def _request_span(
    request: _Request,
    step: _Step,
    turn: _Turn,
    fold: _Fold,
    *,
    later: bool,
    fault: Mapping[str, Any] | None = None,
) -> TraceSpan:
    """One attempt at a model request. An attempt that a retry followed ends where its
    fault says it ended (its duration is recorded on the next attempt's manifest)."""
    sent, response = request.sent, request.response
    first = sent or response
    assert first is not None  # a request is made from one or the other
    header_seq = _int_or_none(sent.data.get("header_seq")) if sent is not None else None
    header = fold.headers.get(header_seq) if header_seq is not None else None
    message = _message(response) if response is not None else {}
    status, end, error = _request_outcome(request, step, turn, later=later)
    retried: Pairs = ()
    if fault is not None and response is None:
        duration = _int_or_none(fault.get("duration_ms")) or 0
        status, end = "error", first.time + timedelta(milliseconds=duration)
        error = str(fault.get("message") or fault.get("kind") or "failed; tried again")
        retried = tuple(
            (key, fault.get(key))
            for key in ("kind", "status", "retry_after_ms", "received_chars", "waited_ms")
        )
    elif response is not None and isinstance(response.data.get("fault"), Mapping):
        recorded = response.data["fault"]
        retried = (("kind", recorded.get("kind")), ("status", recorded.get("status")))
    timing = response.data.get("timing") if response is not None else None
    timing = timing if isinstance(timing, Mapping) else {}
    model = message.get("model") or (header or {}).get("model")
    return TraceSpan(
        kind="request",
        key=f"request-{first.seq}",
        name=str(model or "model request"),
        status=status,
        start=first.time,
        end=end,
        start_seq=first.seq,
        end_seq=response.seq if response is not None else None,
        turn=turn.number,
        step=step.number,
        usage=Usage.from_message(message),
        ttft_ms=_int_or_none(timing.get("ttft_ms")),
        error=error,
        inputs=_request_inputs(sent, header),
        outputs=_request_outputs(response, message, timing) + retried,
    )


def _request_outcome(
    request: _Request, step: _Step, turn: _Turn, *, later: bool
) -> tuple[str, datetime | None, str | None]:
    response = request.response
    if response is not None:
        message = _message(response)
        status = _STOP_STATUS.get(str(message.get("stopReason")), "ok")
        error = message.get("errorMessage") if status == "error" else None
        return status, response.time, str(error) if error else None
    if later:
        return "error", None, "no response recorded; the step sent another request"
    if turn.reason == "interrupted":
        return "interrupted", None, None
    closed_by = step.end or turn.end
    if closed_by is None:
        return "running", None, None
    reason = turn.reason or "error"
    error = turn.end.data.get("error") if turn.end is not None else None
    return _TURN_STATUS.get(reason, "error"), closed_by.time, str(error) if error else None


def _request_inputs(sent: EventRecord | None, header: Mapping[str, Any] | None) -> Pairs:
    if sent is None:
        return (("manifest", None),)
    data = sent.data
    pairs: list[tuple[str, Any]] = [
        ("request_seq", sent.seq),
        ("attempt", _int_or_none(data.get("attempt")) or 1),
        ("header_seq", data.get("header_seq")),
        ("leaf_entry_id", data.get("leaf_entry_id")),
        ("token_estimate", data.get("token_estimate")),
        ("payload_sha256", data.get("payload_sha256")),
    ]
    if header is not None:
        pairs += [("provider", header.get("provider")), ("model", header.get("model"))]
    return (*pairs, *observed_pairs(data))


def _request_outputs(
    response: EventRecord | None, message: Mapping[str, Any], timing: Mapping[str, Any]
) -> Pairs:
    if response is None:
        return ()
    calls = tool_calls_of(message)
    return (
        ("entry_id", response.entry_id),
        ("provider", message.get("provider")),
        ("model", message.get("model")),
        ("stop_reason", message.get("stopReason")),
        ("text", content_text(message.get("content"), "\n\n")),
        ("tool_calls", tuple(str(call.get("name") or "") for call in calls)),
        ("model_ms", _int_or_none(timing.get("duration_ms"))),
    )


def _tool_span(tool: _Tool, step: _Step, turn: _Turn) -> TraceSpan:
    firsts = [tool.dispatched, tool.result, *(a.asked for a in tool.approvals)]
    known = [event for event in firsts if event is not None]
    first = min(known, key=lambda event: event.seq) if known else tool.requested
    assert first is not None  # a tool is made from one of these events
    status, end, error_code = _tool_outcome(tool, turn)
    result = _message(tool.result) if tool.result is not None else {}
    return TraceSpan(
        kind="tool",
        key=f"tool-{tool.call_id}",
        name=tool.name or "tool",
        status=status,
        start=first.time,
        end=end,
        start_seq=first.seq,
        end_seq=tool.result.seq if tool.result is not None and end is not None else None,
        turn=turn.number,
        step=step.number,
        error=error_code or (content_text(result.get("content")) if status == "error" else None),
        inputs=(
            ("call_id", tool.call_id),
            ("tool", tool.name),
            ("arguments", _raw_arguments(tool)),
            ("requested_seq", tool.requested.seq if tool.requested else None),
            ("dispatched_seq", tool.dispatched.seq if tool.dispatched else None),
            *(observed_pairs(tool.dispatched.data) if tool.dispatched else ()),
        ),
        outputs=(
            ("result_entry_id", tool.result.entry_id if tool.result else None),
            ("is_error", bool(result.get("isError")) if tool.result else None),
            ("error_code", error_code),
            ("text", content_text(result.get("content")) if tool.result else None),
            ("run_ms", _run_ms(tool)),
            *_sandbox_pairs(result.get("details")),
        ),
        children=tuple(_approval_span(a, tool, turn, step) for a in tool.approvals),
    )


def _sandbox_pairs(details: Any) -> Pairs:
    """A command's run in its sandbox (Pi's `bash` here): its exit, how it stopped, and the
    limits it ran under (wall, CPU, memory, processes, file size, output caps)."""
    if not isinstance(details, Mapping) or not isinstance(details.get("limits"), Mapping):
        return ()
    keys = ("exit_code", "signal", "stopped", "wall_time_seconds", "output_bytes", "dropped_bytes")
    return (
        *((key, details.get(key)) for key in keys),
        *((f"limit {key}", value) for key, value in details["limits"].items()),
    )


def _raw_arguments(tool: _Tool) -> str:
    # The raw string the model produced is the fact; the parsed object is a fallback.
    if tool.dispatched is not None and tool.dispatched.data.get("arguments"):
        return str(tool.dispatched.data.get("arguments"))
    return arguments_json(tool.arguments) if tool.requested is not None else ""


def _run_ms(tool: _Tool) -> int | None:
    if tool.dispatched is None or tool.result is None:
        return None
    if tool.result.data.get("error_code") in _RECOVERY_CODES:
        return None
    return _ms(tool.dispatched.time, tool.result.time)


def _tool_outcome(tool: _Tool, turn: _Turn) -> tuple[str, datetime | None, str | None]:
    result = tool.result
    decision = tool.approvals[-1].decided if tool.approvals else None
    outcome = str(decision.data.get("outcome")) if decision is not None else None
    if result is not None:
        code = result.data.get("error_code")
        code = str(code) if code else None
        if code == OUTCOME_UNKNOWN:
            return "interrupted", None, code
        if code == NOT_STARTED:
            return "not_started", None, code
        if code in ABORTED_CODES:
            return "aborted", result.time, code
        if outcome in ("rejected", "cancelled"):
            return outcome, result.time, code
        return ("error" if _message(result).get("isError") else "ok"), result.time, code
    if tool.approvals and decision is None:
        return ("waiting" if turn.end is None else "interrupted"), None, None
    if turn.end is not None:
        return _TURN_STATUS.get(turn.reason or "", "error"), None, None
    # Allowed and not dispatched yet: it starts with the step's other calls once they are.
    started = tool.dispatched is not None or outcome == "allowed"
    return ("running" if started else "pending"), None, None


def _approval_span(approval: _Approval, tool: _Tool, turn: _Turn, step: _Step) -> TraceSpan:
    asked, decided = approval.asked, approval.decided
    if decided is not None:
        status = _APPROVAL_STATUS.get(str(decided.data.get("outcome")), "ok")
    else:
        status = "waiting" if turn.end is None else "interrupted"
    return TraceSpan(
        kind="approval",
        key=f"approval-{approval.approval_id}",
        name=f"approval: {tool.name or asked.data.get('tool') or 'tool'}",
        status=status,
        start=asked.time,
        end=decided.time if decided is not None else None,
        start_seq=asked.seq,
        end_seq=decided.seq if decided is not None else None,
        turn=turn.number,
        step=step.number,
        inputs=(
            ("approval_id", approval.approval_id),
            ("call_id", asked.data.get("call_id")),
            ("arguments", asked.data.get("arguments")),
        ),
        outputs=(
            ("outcome", decided.data.get("outcome") if decided else None),
            ("by", decided.data.get("by") if decided else None),
            ("wait_ms", _ms(asked.time, decided.time) if decided else None),
        ),
    )


def _input_span(item: _Input, turn: int, step: int | None) -> TraceSpan:
    """A user message delivered to the turn; steering when it was claimed mid-turn."""
    begin = item.queued or item.claimed or item.message
    target = item.queued.data.get("target") if item.queued else None
    name = {"next_step": "steer", "next_turn": "follow-up"}.get(str(target), "user message")
    return TraceSpan(
        kind="input",
        key=f"input-{item.message.seq}",
        name=name,
        status="ok",
        start=begin.time,
        end=item.message.time,
        start_seq=begin.seq,
        end_seq=item.message.seq,
        turn=turn,
        step=step,
        inputs=(
            ("inbox_id", item.claimed.data.get("inbox_id") if item.claimed else None),
            ("target", target),
            ("queued_seq", item.queued.seq if item.queued else None),
            ("claimed_seq", item.claimed.seq if item.claimed else None),
        ),
        outputs=(
            ("entry_id", item.message.entry_id),
            ("text", content_text(_message(item.message).get("content"))),
        ),
    )


def _mark_span(event: EventRecord, turn: int | None, step: int | None) -> TraceSpan:
    entry = event.data.get("entry")
    entry = entry if isinstance(entry, Mapping) else {}
    kind, name, inputs, outputs, usage = _mark_fields(event, entry)
    written = _entry_time(event)
    if written is not None:
        inputs = (("entry_timestamp", _stamp(written)), *inputs)
    return TraceSpan(
        kind=kind,
        key=f"{kind}-{event.seq}",
        name=name,
        status="ok",
        start=event.time,
        end=event.time,
        start_seq=event.seq,
        end_seq=event.seq,
        turn=turn,
        step=step,
        usage=usage,
        inputs=inputs,
        outputs=outputs,
    )


def _mark_fields(
    event: EventRecord, entry: Mapping[str, Any]
) -> tuple[str, str, Pairs, Pairs, Usage | None]:
    if event.type == "entry/context_edit":
        replacement = entry.get("replacement")
        what = "omit" if replacement is None else "replace"
        content = replacement.get("content") if isinstance(replacement, Mapping) else None
        return (
            "context_edit",
            f"context edit ({what})",
            (("target_id", entry.get("targetId")),),
            (("entry_id", event.entry_id), ("replacement", content_text(content) or None)),
            None,
        )
    if event.type == "entry/usage":
        usage = Usage.from_message(entry)
        return (
            "usage",
            f"usage: {entry.get('kind', '')}",
            (("provider", entry.get("provider")), ("model", entry.get("model"))),
            (("entry_id", event.entry_id),),
            usage,
        )
    if event.type == "entry/message":
        message = _message(event)
        sections = message.get("sections")
        return (
            "system",
            "system message",
            (("sections", ", ".join(sections) if isinstance(sections, Mapping) else None),),
            (
                ("entry_id", event.entry_id),
                ("tools_added", _tool_names(message.get("toolsAdded"))),
                ("tools_removed", _tool_names(message.get("toolsRemoved"))),
            ),
            None,
        )
    return (
        "compaction",
        "compaction",
        (("tokens_before", entry.get("tokensBefore")),),
        (
            ("entry_id", event.entry_id),
            ("first_kept_entry_id", entry.get("firstKeptEntryId")),
            ("summary", entry.get("summary")),
        ),
        None,
    )


def _entry_time(event: EventRecord) -> datetime | None:
    """The entry's own `timestamp`, when it is a second or more from the event's time."""
    entry = event.data.get("entry")
    text = entry.get("timestamp") if isinstance(entry, Mapping) else None
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None or abs(moment - event.time) < timedelta(seconds=1):
        return None
    return moment


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _tool_names(tools: object) -> str | None:
    if not isinstance(tools, list):
        return None
    return ", ".join(str(t.get("name")) for t in tools if isinstance(t, Mapping)) or None


# --- rows --------------------------------------------------------------------------------


def _rows(spans: Sequence[TraceSpan]) -> tuple[TraceRow, ...]:
    placed: list[tuple[TraceSpan, int]] = []
    stack: list[tuple[TraceSpan, int]] = [(span, 0) for span in reversed(spans)]
    while stack:
        span, depth = stack.pop()
        placed.append((span, depth))
        stack.extend((child, depth + 1) for child in reversed(span.children))
    if not placed:
        return ()
    # An input queued during an earlier turn can start before its turn does.
    origin = min(span.start for span, _ in placed)
    return tuple(
        TraceRow(span, depth, _ms(origin, span.start), span.duration_ms) for span, depth in placed
    )
