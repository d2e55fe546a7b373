"""A `task` call's child inside its parent's trace (projections/subagent_trace.py)."""

from __future__ import annotations

from projections.subagent_trace import children_started, graft_children
from projections.trace import project_trace
from tests.projections.fixtures import SessionLog, text, tool_call


def _task_turn(log: SessionLog, call_id: str, child: str | None) -> None:
    log.turn_start()
    log.step_start()
    log.user("delegate: read a.txt")
    log.request([], token_estimate=10)
    log.assistant([tool_call(call_id, "task", {"prompt": "read a.txt"})], stop_reason="toolUse")
    log.tool_call(call_id, "task", '{"prompt": "read a.txt"}')
    if child is not None:
        log.event("subagent/started", {"call_id": call_id, "child_session": child})
    log.tool_result(call_id, "task", "it says hello")
    log.step_end()
    log.turn_end()


def _child_log() -> SessionLog:
    child = SessionLog()
    child.created()
    child.header()
    child.turn_start()
    child.step_start()
    child.user("read a.txt")
    child.request([], token_estimate=5)
    child.assistant([tool_call("k1", "read", {"path": "a.txt"})], stop_reason="toolUse")
    child.tool_call("k1", "read", '{"path": "a.txt"}')
    child.tool_result("k1", "read", "hello")
    child.step_end()
    child.step_start()
    child.request([], token_estimate=8)
    child.assistant([text("it says hello")])
    child.step_end()
    child.turn_end()
    return child


def test_the_childs_turn_hangs_under_its_call_with_keys_of_its_own() -> None:
    parent = SessionLog()
    parent.created()
    parent.header()
    _task_turn(parent, "c1", "child-1")
    child_spans = project_trace(_child_log().events).spans
    started = children_started(parent.events)
    assert started == {"c1": "child-1"}

    view = project_trace(parent.events, subagents={"c1": ("child-1", child_spans)})
    [task] = [r.span for r in view.rows if r.span.kind == "tool" and r.span.name == "task"]
    assert ("child_session", "child-1") in task.outputs
    [nested_turn] = [c for c in task.children if c.kind == "turn"]
    assert nested_turn.key == "subagent-c1-turn-1" and nested_turn.turn == task.turn
    keys = [r.span.key for r in view.rows]
    assert len(keys) == len(set(keys)), "a nested key met one of the parent's"
    depths = {r.span.key: r.depth for r in view.rows}
    task_depth = depths[task.key]
    assert depths["subagent-c1-turn-1"] == task_depth + 1
    assert any(k.startswith("subagent-c1-tool-k1") for k in keys)
    # The same trace without the child: nothing grafted, the call as it was.
    alone = project_trace(parent.events)
    assert len(alone.rows) == len(view.rows) - len(project_trace(_child_log().events).rows)


def test_a_call_with_no_child_given_is_left_alone() -> None:
    parent = SessionLog()
    parent.created()
    parent.header()
    _task_turn(parent, "c1", None)
    spans = project_trace(parent.events).spans
    assert graft_children(spans, {"other": ("x", ())}) == spans
    assert children_started(parent.events) == {}
