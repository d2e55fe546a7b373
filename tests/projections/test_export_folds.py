"""The folds the HTML export makes a window at a time give what the whole folds give: the
trace a window of turns at a time (`trace_windows`), the tree from cut records
(`tree.tree_entry`); and the trace's windows are folded as the log is read, not after."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from projections.chat import Usage, tool_facts
from projections.records import EventRecord
from projections.trace import project_trace
from projections.trace_blocks import trace_blocks
from projections.trace_windows import project_trace_windows
from projections.tree import project_tree, tree_entry
from tests.projections.fixtures import SessionLog, text, tool_call, usage


def busy_log(turns: int, log: SessionLog | None = None) -> SessionLog:
    """`turns` turns (after what `log` holds); the request header is written once, in the
    first; each turn has an approved tool call, and queues a follow-up that the next turn
    claims."""
    if log is None:
        log = SessionLog()
        log.created()
    for number in range(turns):
        log.turn_start()
        if number == 0:
            log.header()
        if number > 0:
            log.inbox_claimed(f"in{number - 1}")
            log.user(f"follow-up {number - 1}")
        log.step_start()
        log.user(f"question {number}")
        log.request([], token_estimate=42)
        log.assistant(
            [text(f"Reading {number}."), tool_call(f"c{number}", "read", {"path": "a"})],
            stop_reason="toolUse",
            usage_=usage(100 + number, 20, 0.001 * (number + 1)),
        )
        log.approval_asked(f"ap{number}", f"c{number}", "read")
        log.approval_decided(f"ap{number}", "allowed" if number % 2 else "rejected")
        log.tool_call(f"c{number}", "read", '{"path": "a"}')
        log.tool_result(f"c{number}", "read", "x" * 300, is_error=number % 3 == 0)
        log.inbox_queued(f"in{number}", "next_turn", f"follow-up {number}")
        log.step_end()
        log.turn_end()
    return log


def placed(blocks: Any) -> list[tuple[Any, ...]]:
    """What a drawn block shows (a row's offset is from its own window's start)."""
    return [
        (
            block.turn,
            block.duration_ms,
            [(b.row.span, b.depth, b.left, b.width) for b in block.bars],
        )
        for block in blocks
    ]


def test_the_trace_by_windows_draws_what_the_whole_trace_draws() -> None:
    log = busy_log(7)
    events = [event for event in log.events if event.turn is not None]
    whole = project_trace(events)

    chunks = list(project_trace_windows(iter(events), window_turns=2, window_events=10**6))

    assert [chunk.view.turns for chunk in chunks] == [(1, 2), (3, 4), (5, 6), (7,)]
    drawn = [block for chunk in reversed(chunks) for block in trace_blocks(chunk.view)]
    assert placed(drawn) == placed(trace_blocks(whole))
    # The header of turn 1 and the follow-ups queued a turn earlier were carried over.
    requests = [b.row.span for b in drawn[0].bars if b.row.span.kind == "request"]
    assert dict(requests[0].inputs)["model"] == "gpt-test"
    inputs = [b.row.span.name for b in drawn[0].bars if b.row.span.kind == "input"]
    assert "follow-up" in inputs
    total = Usage()
    for chunk in chunks:
        for span in chunk.view.spans:
            total = total + (span.usage or Usage())
    assert total == whole.usage


def test_the_tool_facts_by_windows_are_those_of_the_whole_log() -> None:
    log = busy_log(5)
    events = [event for event in log.events if event.turn is not None]
    codes: dict[str, str] = {}
    approvals: dict[str, str] = {}
    for chunk in project_trace_windows(events, window_turns=1, window_events=10**6):
        codes.update(chunk.error_codes)
        approvals.update(chunk.approvals)

    assert (codes, approvals) == tool_facts(events)
    assert set(approvals.values()) == {"allowed", "rejected"}


def test_a_window_is_folded_before_the_events_after_it_are_read() -> None:
    log = busy_log(30)
    events = [event for event in log.events if event.turn is not None]
    read = 0

    def reading() -> Iterator[EventRecord]:
        nonlocal read
        for event in events:
            read += 1
            yield event

    position = {event.seq: index + 1 for index, event in enumerate(events)}
    per_turn = len(events) // 30
    folded = 0
    windows = 0
    for chunk in project_trace_windows(reading(), window_turns=100, window_events=40):
        assert chunk.view.last_seq is not None
        through = position[chunk.view.last_seq]
        # Handed out once the next turn began: one event read past the window, no more;
        # a window holds 40 events and the rest of the turn it had begun.
        assert read - through <= 1
        assert through - folded <= 40 + per_turn
        folded = through
        windows += 1
    assert folded == len(events) and windows >= 8


def test_the_tree_of_cut_records_is_the_tree_of_the_entries() -> None:
    log = busy_log(4)
    fork = log.entries[3].id
    log.leaf = fork
    log.user("another branch " + "long " * 50)
    log.label(fork, "here")
    log.session_info("a name")
    entries = log.entries

    cut = [tree_entry(entry) for entry in entries]

    assert project_tree(cut, log.leaf) == project_tree(entries, log.leaf)
    assert all(len(entry.data) <= 2 for entry in cut)


def test_the_trace_by_windows_draws_the_entries_outside_turns_where_the_whole_trace_does() -> None:
    log = SessionLog()
    log.created()
    first = log.user("imported")  # no turn: as an imported Pi session holds it
    system = {"role": "system", "content": "", "sections": {"rules": "be brief"}, "timestamp": 0}
    log.add_entry("message", {"message": system}, event_type="entry/message")
    log.add_entry("context_edit", {"targetId": first, "replacement": None})
    busy_log(5, log)
    warm = {"kind": "cache_warm", "provider": "p", "model": "m", "usage": usage(5, 0, 0.25)}
    for _ in range(4):
        log.add_entry("usage", warm)
    events = [event for event in log.events if event.turn is not None]
    whole = project_trace(events, outside=log.events)

    chunks = list(project_trace_windows(iter(log.events), window_turns=2, window_events=10**6))

    drawn = [block for chunk in reversed(chunks) for block in trace_blocks(chunk.view)]
    assert placed(drawn) == placed(trace_blocks(whole))
    assert [block.turn.kind for block in drawn] == ["outside", *["turn"] * 5, "outside"]
    total = sum((span.usage or Usage() for c in chunks for span in c.view.spans), Usage())
    assert total == whole.usage and total.cost > 1.0  # the usage entries are counted

    # Entries outside turns count towards a window's events, so a run of them is cut too.
    chunks = list(project_trace_windows(iter(log.events), window_turns=2, window_events=3))
    assert max(len(chunk.view.rows) for chunk in chunks if not chunk.view.turns) <= 4
    kinds = [row.span.kind for c in chunks for row in c.view.rows if row.depth == 1]
    assert kinds.count("usage") == 4 and kinds.count("context_edit") == 1
