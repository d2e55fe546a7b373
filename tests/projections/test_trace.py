from __future__ import annotations

import random

import pytest

from projections.chat import Usage
from projections.records import EventRecord
from projections.trace import TraceSpan, TraceView, TurnWindow, pick_turns, project_trace
from tests.projections.fixtures import SessionLog, text, tool_call, usage


def spans_of(view: TraceView, kind: str) -> list[TraceSpan]:
    return [row.span for row in view.rows if row.span.kind == kind]


def only(view: TraceView, kind: str) -> TraceSpan:
    [span] = spans_of(view, kind)
    return span


def io(pairs: tuple[tuple[str, object], ...]) -> dict[str, object]:
    return dict(pairs)


def tool_turn(log: SessionLog) -> None:
    """A completed turn: prompt, a model call asking for `read` (approved), then an answer."""
    log.turn_start()
    log.step_start()
    log.user("Read a.txt")
    log.request([], token_estimate=42)
    log.assistant(
        [text("Reading."), tool_call("c1", "read", {"path": "a.txt"})],
        stop_reason="toolUse",
        after_ms=400,
        ttft_ms=120,
        usage_=usage(100, 20, 0.001),
    )
    log.approval_asked("ap1", "c1", "read")
    log.approval_decided("ap1", "allowed", after_ms=1500)
    log.tool_call("c1", "read", '{"path": "a.txt"}')
    log.tool_result("c1", "read", "hello", after_ms=30)
    log.step_end()
    log.step_start()
    log.request([], token_estimate=60)
    log.assistant([text("It says hello.")], after_ms=300, ttft_ms=80, usage_=usage(150, 5, 0.002))
    log.step_end()
    log.turn_end()


def completed_log() -> SessionLog:
    log = SessionLog()
    log.created()
    log.header()
    tool_turn(log)
    return log


def test_completed_turn_nests_steps_requests_tools_and_approvals() -> None:
    log = completed_log()

    view = project_trace(log.events)

    assert [(row.depth, row.span.kind) for row in view.rows] == [
        (0, "turn"),
        (1, "step"),
        (2, "input"),
        (2, "request"),
        (2, "tool"),
        (3, "approval"),
        (1, "step"),
        (2, "request"),
    ]
    assert view.turns == (1,)
    assert not view.running
    assert all(row.span.status == "ok" for row in view.rows)
    assert all(row.span.end is not None for row in view.rows)


def test_request_span_has_duration_ttft_tokens_cost_and_manifest() -> None:
    log = completed_log()

    first, second = spans_of(project_trace(log.events), "request")

    assert first.duration_ms == 400
    assert first.ttft_ms == 120
    assert first.usage == Usage(input=100, output=20, total_tokens=120, cost=0.001)
    assert first.name == "gpt-test"
    inputs = io(first.inputs)
    assert inputs["header_seq"] == 1
    assert inputs["token_estimate"] == 42
    assert inputs["provider"] == "openai"
    assert io(first.outputs)["tool_calls"] == ("read",)
    assert io(first.outputs)["model_ms"] == 400
    assert second.ttft_ms == 80


def test_turn_sums_usage_and_tool_span_shows_approval_wait() -> None:
    log = completed_log()
    view = project_trace(log.events)

    turn = only(view, "turn")
    tool = only(view, "tool")
    approval = only(view, "approval")

    assert turn.usage == Usage(input=250, output=25, total_tokens=275, cost=0.003)
    assert view.usage == turn.usage
    assert io(turn.inputs)["prompt"] == "Read a.txt"
    assert approval.duration_ms == 1500
    assert io(approval.outputs) == {"outcome": "allowed", "by": "alice", "wait_ms": 1500}
    # The tool span runs from the approval question to the result.
    assert tool.duration_ms == 1500 + 10 + 30
    assert io(tool.outputs)["run_ms"] == 30
    assert io(tool.outputs)["text"] == "hello"
    assert io(tool.inputs)["arguments"] == '{"path": "a.txt"}'


def test_running_turn_has_open_spans() -> None:
    log = SessionLog()
    log.header()
    log.turn_start()
    log.step_start()
    log.user("run")
    log.request([])
    log.assistant([tool_call("c1", "bash", {}), tool_call("c2", "bash", {})], stop_reason="toolUse")
    log.tool_call("c1", "bash", "{}")
    log.approval_asked("ap2", "c2", "bash")

    view = project_trace(log.events)

    assert view.running
    turn = only(view, "turn")
    assert (turn.status, turn.end, turn.duration_ms) == ("running", None, None)
    assert only(view, "step").status == "running"
    assert only(view, "request").status == "ok"
    assert [(t.name, t.status, t.end) for t in spans_of(view, "tool")] == [
        ("bash", "running", None),
        ("bash", "waiting", None),
    ]
    assert only(view, "approval").status == "waiting"


def test_request_without_response_is_running_until_the_turn_ends() -> None:
    log = SessionLog()
    log.header()
    log.turn_start()
    log.step_start()
    log.request([])
    assert only(project_trace(log.events), "request").status == "running"

    log.step_end()
    log.turn_end("error", error="provider unreachable")
    request = only(project_trace(log.events), "request")

    assert request.status == "error"
    assert request.error == "provider unreachable"
    assert request.end == log.events[-2].time  # when the step closed
    assert only(project_trace(log.events), "turn").error == "provider unreachable"


def test_aborted_turn_shows_aborted_stream_and_undispatched_tools() -> None:
    log = SessionLog()
    log.turn_start()
    log.step_start()
    log.user("go")
    log.assistant([text("partial"), tool_call("c1", "read", {})], stop_reason="aborted")
    log.tool_call("c1", "read", "{}")
    log.tool_result("c1", "read", "aborted", is_error=True, error_code="ABORTED_BEFORE_DISPATCH")
    log.step_end()
    log.turn_end("aborted")

    view = project_trace(log.events)

    assert only(view, "turn").status == "aborted"
    request = only(view, "request")
    assert request.status == "aborted"
    assert io(request.inputs) == {"manifest": None}  # a response with no request/sent
    tool = only(view, "tool")
    assert tool.status == "aborted"
    assert tool.error == "ABORTED_BEFORE_DISPATCH"


def interrupted_log() -> SessionLog:
    log = SessionLog()
    log.header()
    log.turn_start()
    log.step_start()
    log.user("build")
    log.request([])
    log.assistant(
        [tool_call("c1", "bash", {"cmd": "make"}), tool_call("c2", "bash", {"cmd": "test"})],
        stop_reason="toolUse",
    )
    log.tool_call("c1", "bash", '{"cmd":"make"}')
    log.wait(60_000)  # the process died; recovery runs a minute later
    log.tool_result("c1", "bash", "unknown", is_error=True, error_code="TOOL_OUTCOME_UNKNOWN")
    log.tool_result("c2", "bash", "not started", is_error=True, error_code="TOOL_NOT_STARTED")
    log.step_end("interrupted")
    log.turn_end("interrupted")
    return log


def test_interrupted_turn_ends_at_its_last_sign_of_life() -> None:
    log = interrupted_log()
    dispatched = next(e for e in log.events if e.type == "tool/call")

    view = project_trace(log.events)

    turn = only(view, "turn")
    assert turn.status == "interrupted"
    assert turn.end == dispatched.time
    assert io(turn.outputs)["closed_by_recovery_at"] == log.events[-1].time
    step = only(view, "step")
    assert (step.status, step.end) == ("interrupted", dispatched.time)
    tools = spans_of(view, "tool")
    assert [(t.status, t.end, t.error) for t in tools] == [
        ("interrupted", None, "TOOL_OUTCOME_UNKNOWN"),
        ("not_started", None, "TOOL_NOT_STARTED"),
    ]
    assert io(tools[0].outputs)["run_ms"] is None
    assert not view.running


def test_steering_input_is_delivered_in_the_next_step() -> None:
    log = SessionLog()
    log.turn_start()
    log.step_start()
    log.user("start")
    log.assistant([tool_call("c1", "read", {})], stop_reason="toolUse")
    log.tool_call("c1", "read", "{}")
    log.inbox_queued("in1", "next_step", "also check b.txt")
    queued_at = log.now
    log.tool_result("c1", "read", "a")
    log.step_end()
    log.step_start()
    log.inbox_claimed("in1")
    log.user("also check b.txt")
    delivered_at = log.now
    log.assistant([text("ok")])
    log.step_end()
    log.turn_end()

    view = project_trace(log.events)

    steer = [s for s in spans_of(view, "input") if s.step == 2]
    assert len(steer) == 1
    assert steer[0].name == "steer"
    assert (steer[0].start, steer[0].end) == (queued_at, delivered_at)
    assert io(steer[0].inputs)["inbox_id"] == "in1"
    assert io(steer[0].outputs)["text"] == "also check b.txt"
    first = [s for s in spans_of(view, "input") if s.step == 1]
    assert first[0].name == "user message"


def test_compaction_inside_a_turn_is_an_instant_span() -> None:
    log = SessionLog()
    log.turn_start()
    log.step_start()
    first = log.user("long")
    log.compaction("summary", first, 9000)
    log.step_end()
    log.turn_end()

    mark = only(project_trace(log.events), "compaction")

    assert mark.duration_ms == 0
    assert io(mark.inputs) == {"tokens_before": 9000}


def test_pi16_entries_inside_a_turn_are_instant_spans_of_their_own_kind() -> None:
    log = SessionLog()
    log.turn_start()
    log.step_start()
    first = log.user("long")
    system = {"role": "system", "content": "", "sections": {"rules": None}, "timestamp": 0}
    log.add_entry(
        "message",
        {"message": {**system, "toolsAdded": [{"name": "grep"}]}},
        event_type="entry/message",
    )
    log.add_entry("context_edit", {"targetId": first, "replacement": {"content": "short"}})
    log.add_entry(
        "usage",
        {"kind": "cache_warm", "provider": "p", "model": "m", "usage": usage(0, 0, 0.015)},
    )
    log.step_end()
    log.turn_end()

    view = project_trace(log.events)

    edit = only(view, "context_edit")
    assert edit.name == "context edit (replace)" and edit.duration_ms == 0
    assert io(edit.inputs) == {"target_id": first}
    assert io(edit.outputs)["replacement"] == "short"
    warm = only(view, "usage")
    assert warm.name == "usage: cache_warm" and warm.usage is not None
    assert warm.usage.cost == 0.015
    # Usage outside the conversation counts in its step's, its turn's and the trace's cost.
    assert only(view, "step").usage.cost == 0.015  # type: ignore[union-attr]
    assert view.spans[0].usage.cost == 0.015 and view.usage.cost == 0.015  # type: ignore[union-attr]
    sys_span = only(view, "system")
    assert io(sys_span.inputs) == {"sections": "rules"}
    assert io(sys_span.outputs)["tools_added"] == "grep"


def test_pi16_entries_outside_turns_are_drawn_as_what_they_are_between_the_turns() -> None:
    log = SessionLog()
    first = log.user("imported")  # no turn: as an imported Pi session holds it
    system = {"role": "system", "content": "", "sections": {"rules": "be brief"}, "timestamp": 0}
    log.add_entry("message", {"message": system}, event_type="entry/message")
    log.add_entry("context_edit", {"targetId": first, "replacement": None})
    log.header()
    tool_turn(log)
    warm = {"kind": "cache_warm", "provider": "p", "model": "m", "usage": usage(5, 0, 0.25)}
    log.add_entry("usage", warm)

    turn_events = [e for e in log.events if e.turn is not None]
    view = project_trace(turn_events, outside=log.events)

    assert [span.kind for span in view.spans] == ["outside", "turn", "outside"]
    before, _, after = view.spans
    assert [child.kind for child in before.children] == ["system", "context_edit"]
    assert before.name == "2 entries outside turns" and before.turn is None
    assert io(before.children[1].inputs) == {"target_id": first}
    assert before.children[1].name == "context edit (omit)"
    assert [child.kind for child in after.children] == ["usage"]
    assert after.usage is not None and after.usage.cost == 0.25
    assert view.usage.cost == pytest.approx(0.25 + 0.001 + 0.002)
    # The user message outside turns is no moment of its own, and nothing is drawn twice.
    assert len({row.span.key for row in view.rows}) == len(view.rows)
    assert project_trace([], outside=log.events).spans[0].kind == "outside"


def two_turn_log() -> SessionLog:
    log = SessionLog()
    log.created()
    log.header()
    tool_turn(log)
    log.event("leaf/moved", {"from": log.leaf, "to": log.leaf, "reason": "navigate"})
    tool_turn(log)
    return log


def test_window_of_one_turn_takes_only_that_turns_events() -> None:
    log = two_turn_log()
    second_turn = [e for e in log.events if e.turn == 2]

    view = project_trace(second_turn)

    assert view.turns == (2,)
    assert view.start == second_turn[0].time
    assert view.first_seq == second_turn[0].seq
    # Its header is outside the window: the request still shows the model it answered with.
    assert spans_of(view, "request")[0].name == "gpt-test"
    assert io(spans_of(view, "request")[0].inputs).get("provider") is None


def test_events_between_turns_are_ignored() -> None:
    log = two_turn_log()

    assert project_trace(log.events).turns == (1, 2)
    between = [e for e in log.events if e.turn is None]
    assert project_trace(between).spans == ()


def test_window_starting_inside_a_turn_shows_the_rest_of_it() -> None:
    log = completed_log()
    tail = [e for e in log.events if e.turn == 1][5:]

    view = project_trace(tail)

    turn = only(view, "turn")
    assert turn.start == tail[0].time
    assert turn.status == "ok"


def test_rows_are_offsets_from_the_window_start() -> None:
    log = completed_log()

    view = project_trace(log.events)

    assert view.rows[0].offset_ms == 0
    assert all(row.offset_ms >= 0 for row in view.rows)
    request = next(row for row in view.rows if row.span.kind == "request")
    assert view.start is not None
    assert request.offset_ms == round((request.span.start - view.start).total_seconds() * 1000)


def test_event_order_does_not_change_the_trace() -> None:
    log = two_turn_log()
    shuffled: list[EventRecord] = list(log.events)
    random.Random(7).shuffle(shuffled)

    assert project_trace(shuffled) == project_trace(log.events)


def test_pick_turns_pages_from_the_latest() -> None:
    turns = range(1, 46)

    assert pick_turns(turns, last_n=20) == TurnWindow(tuple(range(26, 46)), older=26)
    assert pick_turns(turns, last_n=20, before_turn=26) == TurnWindow(tuple(range(6, 26)), older=6)
    assert pick_turns(turns, last_n=20, before_turn=6) == TurnWindow((1, 2, 3, 4, 5), older=None)
    assert pick_turns([], last_n=20) == TurnWindow((), older=None)
    assert pick_turns([3, 1, 2, 2], last_n=5) == TurnWindow((1, 2, 3), older=None)


def test_rejected_call_shows_the_decision_on_tool_and_approval() -> None:
    log = SessionLog()
    log.turn_start()
    log.step_start()
    log.assistant([tool_call("c1", "rm", {"path": "/"})], stop_reason="toolUse")
    log.approval_asked("ap1", "c1", "rm")
    log.approval_decided("ap1", "rejected", after_ms=2000)
    log.tool_result("c1", "rm", "The user rejected this call.", is_error=True)

    view = project_trace(log.events)

    assert only(view, "approval").status == "rejected"
    tool = only(view, "tool")
    assert tool.status == "rejected"
    assert io(tool.inputs)["arguments"] == '{"path":"/"}'  # from the request: never dispatched
    assert io(tool.outputs)["run_ms"] is None


def test_entries_outside_turns_give_their_own_timestamps_when_recorded_apart() -> None:
    log = SessionLog()
    log.user("imported")
    warm = {"kind": "cache_warm", "provider": "p", "model": "m", "usage": usage(5, 0, 0.25)}
    log.add_entry("usage", {**warm, "timestamp": "2026-11-21T10:00:07.000Z"})
    log.add_entry("usage", {**warm, "timestamp": "2026-11-21T10:05:00.000Z"})
    log.add_entry("usage", warm)  # written when it was recorded: nothing more to say

    [outside] = project_trace([], outside=log.events).spans

    first, second, third = outside.children
    assert first.inputs[0] == ("entry_timestamp", "2026-11-21 10:00:07 UTC")
    assert second.inputs[0] == ("entry_timestamp", "2026-11-21 10:05:00 UTC")
    assert "entry_timestamp" not in io(third.inputs)
    span = "2026-11-21 10:00:07 UTC – 2026-11-21 10:05:00 UTC"
    assert outside.inputs == (("entry_timestamps", span),)
    # The timeline keeps the log's order: the spans start when their events were recorded.
    assert [child.start_seq for child in outside.children] == sorted(
        child.start_seq for child in outside.children
    )
    assert first.start == log.events[1].time


def test_an_allowed_call_is_running_before_it_is_dispatched() -> None:
    log = SessionLog()
    log.header()
    log.turn_start()
    log.step_start()
    log.user("Run two things")
    log.request([], token_estimate=10)
    log.assistant(
        [tool_call("c1", "bash", {"command": "ls"}), tool_call("c2", "read", {"path": "a"})],
        stop_reason="toolUse",
    )
    log.approval_asked("ap1", "c1", "bash")
    log.approval_decided("ap1", "allowed")
    log.approval_asked("ap2", "c2", "read")

    def statuses() -> dict[str, str]:
        view = project_trace([e for e in log.events if e.turn is not None])
        return {span.name: span.status for span in spans_of(view, "tool")}

    assert statuses() == {"bash": "running", "read": "waiting"}
    log.approval_decided("ap2", "allowed")
    log.tool_call("c1", "bash", '{"command":"ls"}')
    log.tool_call("c2", "read", '{"path":"a"}')
    assert statuses() == {"bash": "running", "read": "running"}


def job_log(ended: dict[str, object] | None) -> SessionLog:
    """Turn 1 starts a background job and ends; the job ends later (when `ended` is given:
    the `job/ended` data), its facts carrying turn 1."""
    log = SessionLog()
    log.created()
    log.header()
    log.turn_start()
    log.step_start()
    log.user("run in background make")
    log.request([], token_estimate=10)
    log.assistant([tool_call("c1", "bash", {"command": "make", "background": True})])
    log.tool_call("c1", "bash", '{"command": "make", "background": true}')
    log.event("job/started", {"job_id": "bash-1", "command": "make", "call_id": "c1"})
    log.tool_result("c1", "bash", "Started background job bash-1: make")
    log.step_end()
    log.turn_end()
    if ended is not None:
        event = log.event("job/ended", {"job_id": "bash-1", **ended}, after_ms=5000)
        log.events[-1] = EventRecord(
            event.seq, event.type, 1, event.time, event.data, None, turn=1, step=None
        )
    return log


@pytest.mark.parametrize(
    ("ended", "status"),
    [
        (None, "running"),
        ({"reason": "exited", "exit_code": 0, "output": "ok\n"}, "ok"),
        ({"reason": "exited", "exit_code": 2, "output": "no rule"}, "error"),
        ({"reason": "killed", "signal": 9}, "aborted"),
        ({"reason": "timeout"}, "error"),
        ({"reason": "lost"}, "interrupted"),
    ],
)
def test_a_job_is_drawn_under_its_turn_from_its_start_to_its_end(
    ended: dict[str, object] | None, status: str
) -> None:
    log = job_log(ended)
    view = project_trace(log.events)
    [turn] = view.spans
    job = only(view, "job")
    assert job in turn.children and job.status == status
    assert job.key == "job-bash-1" and job.name == "job bash-1: make"
    assert io(job.inputs)["command"] == "make" and io(job.inputs)["call_id"] == "c1"
    assert turn.status == "ok" and not view.running  # the job does not hold the turn open
    if ended is None:
        assert job.end is None and job.outputs == ()
    else:
        assert job.end == log.events[-1].time and turn.end is not None and job.end > turn.end
        assert io(job.outputs)["reason"] == ended["reason"]
        assert view.end == job.end
    # No step or tool span holds the job's facts.
    assert "job" not in [s.kind for s in only(view, "step").children]
