from __future__ import annotations

from collections.abc import Sequence

from projections.compare import common_ancestor_depth, compare_branches
from projections.context import index_by_id, path_to_root
from projections.records import EntryRecord, EventRecord
from tests.projections.fixtures import SessionLog, text, tool_call, usage


def path(log: SessionLog, leaf: str) -> list[EntryRecord]:
    return path_to_root(index_by_id(log.entries), leaf)


def turn_events(log: SessionLog, branch: Sequence[EntryRecord]) -> list[EventRecord]:
    """Every event of the turns that wrote `branch`, as the selector reads them."""
    seqs = {entry.seq for entry in branch}
    turns = {e.turn for e in log.events if e.seq in seqs and e.turn is not None}
    return [e for e in log.events if e.turn in turns]


def below(log: SessionLog, leaf: str, ancestor_depth: int) -> list[EntryRecord]:
    return path(log, leaf)[ancestor_depth + 1 :]


def two_attempts() -> tuple[SessionLog, dict[str, str]]:
    """A question answered twice: A calls a tool that fails, B answers directly."""
    log = SessionLog()
    ids: dict[str, str] = {}
    log.turn_start()
    ids["u1"] = log.user("fix the bug")
    ids["a1"] = log.assistant([text("looking")], usage_=usage(100, 10, 0.01))
    log.turn_end()
    log.turn_start()
    ids["u2"] = log.user("try again")
    ids["a2"] = log.assistant([tool_call("c1", "read", {"path": "x"})], usage_=usage(200, 20, 0.02))
    ids["r2"] = log.tool_result("c1", "read", "no such file", is_error=True)
    ids["a2b"] = log.assistant([text("gave up")], usage_=usage(300, 30, 0.03))
    log.turn_end()
    log.navigate(ids["a1"])
    log.turn_start()
    ids["u3"] = log.user("try again, differently")
    ids["a3"] = log.assistant([text("fixed")], usage_=usage(150, 15, 0.015))
    log.turn_end("interrupted")
    return log, ids


def test_common_ancestor_is_the_last_shared_entry() -> None:
    log, ids = two_attempts()

    view = compare_branches(path(log, ids["a2b"]), path(log, ids["a3"]))

    assert view.ancestor is not None and view.ancestor.entry_id == ids["a1"]
    assert view.leaf_a == ids["a2b"] and view.leaf_b == ids["a3"]
    assert [(r.a and r.a.kind, r.b and r.b.kind) for r in view.rows] == [
        ("user", "user"),
        ("assistant", "assistant"),
        ("toolResult", None),
        ("assistant", None),
    ]
    assert view.rows[1].a is not None and view.rows[1].a.tool_calls == ("read",)
    assert view.rows[2].a is not None and view.rows[2].a.is_error
    assert view.rows[2].a.tool_name == "read"
    assert view.total_rows == 4 and view.more is None


def test_totals_count_each_branch_below_the_divergence() -> None:
    log, ids = two_attempts()
    depth = common_ancestor_depth(path(log, ids["a2b"]), path(log, ids["a3"]))

    view = compare_branches(
        path(log, ids["a2b"]),
        path(log, ids["a3"]),
        events_a=turn_events(log, below(log, ids["a2b"], depth)),
        events_b=turn_events(log, below(log, ids["a3"], depth)),
    )

    a, b = view.totals_a, view.totals_b
    assert (a.entries, a.tokens, a.responses, a.tool_calls, a.tool_errors) == (4, 550, 2, 1, 1)
    assert round(a.cost, 6) == 0.05
    assert (b.entries, b.tokens, b.responses, b.tool_calls, b.tool_errors) == (2, 165, 1, 0, 0)
    assert a.interrupted_turns == 0 and b.interrupted_turns == 1
    assert a.wall_time_ms > 0


def test_context_diff_names_what_each_leaf_would_send() -> None:
    log, ids = two_attempts()

    diff = compare_branches(path(log, ids["a2b"]), path(log, ids["a3"])).context

    assert (diff.messages_a, diff.messages_b, diff.shared) == (6, 4, 2)
    kinds = sorted(c.kind for c in diff.changes)
    assert kinds == ["changed", "changed", "removed", "removed"]
    assert diff.token_delta < 0 and diff.tokens_a > diff.tokens_b
    assert diff.more_changes == 0


def test_divergence_at_the_root() -> None:
    log = SessionLog()
    first = log.user("one")
    log.navigate(None)
    second = log.user("two")

    view = compare_branches(path(log, first), path(log, second))

    assert view.ancestor is None
    assert [(r.a and r.a.text, r.b and r.b.text) for r in view.rows] == [("one", "two")]
    assert view.context.shared == 0


def test_one_branch_an_ancestor_of_the_other() -> None:
    log, ids = two_attempts()

    view = compare_branches(path(log, ids["u2"]), path(log, ids["a2b"]))

    assert view.ancestor is not None and view.ancestor.entry_id == ids["u2"]
    assert [r.a for r in view.rows] == [None, None, None]
    assert [r.b and r.b.kind for r in view.rows] == ["assistant", "toolResult", "assistant"]
    assert [c.kind for c in view.context.changes] == ["added", "added", "added"]
    assert view.context.token_delta > 0


def test_divergence_inside_a_tool_exchange() -> None:
    log = SessionLog()
    log.user("read it")
    call = log.assistant([tool_call("c1", "read", {"path": "x"})])
    ok = log.tool_result("c1", "read", "contents")
    log.navigate(call)
    failed = log.tool_result("c1", "read", "denied", is_error=True)

    view = compare_branches(path(log, ok), path(log, failed))

    assert view.ancestor is not None and view.ancestor.entry_id == call
    row = view.rows[0]
    assert row.a is not None and row.b is not None
    assert (row.a.text, row.a.is_error, row.b.text, row.b.is_error) == (
        "contents",
        False,
        "denied",
        True,
    )
    assert [c.kind for c in view.context.changes] == ["changed"]


def test_compaction_and_branch_summary_show_as_such() -> None:
    log = SessionLog()
    u1 = log.user("start")
    a1 = log.assistant([text("ok")])
    compacted = log.compaction("we talked about start", u1, 1000)
    after = log.user("continue")
    log.navigate(a1)
    summary = log.branch_summary("the other attempt tried X")
    other = log.user("continue here")

    view = compare_branches(path(log, after), path(log, other))

    assert view.ancestor is not None and view.ancestor.entry_id == a1
    first = view.rows[0]
    assert first.a is not None and first.b is not None
    assert (first.a.kind, first.a.entry_id) == ("compaction", compacted)
    assert (first.b.kind, first.b.entry_id) == ("branch_summary", summary)
    assert first.a.text == "we talked about start"
    assert first.b.text == "the other attempt tried X"


def test_rows_are_windowed_with_a_cursor() -> None:
    log = SessionLog()
    root = log.user("root")
    for i in range(7):
        log.user(f"a{i}")
    leaf_a = log.leaf
    log.navigate(root)
    for i in range(3):
        log.user(f"b{i}")
    leaf_b = log.leaf
    assert leaf_a is not None and leaf_b is not None

    first = compare_branches(path(log, leaf_a), path(log, leaf_b), limit=3)
    second = compare_branches(path(log, leaf_a), path(log, leaf_b), limit=3, offset=3)
    last = compare_branches(path(log, leaf_a), path(log, leaf_b), limit=3, offset=6)

    assert [r.index for r in first.rows] == [0, 1, 2] and first.more == 3
    assert [r.a and r.a.text for r in second.rows] == ["a3", "a4", "a5"]
    assert [r.b for r in second.rows] == [None, None, None] and second.more == 6
    assert [r.index for r in last.rows] == [6] and last.more is None
    assert first.total_rows == 7
    # Three messages changed and four removed: the first three changes, four more.
    assert len(first.context.changes) == 3 and first.context.more_changes == 4


def test_divergence_at_a_compaction() -> None:
    log = SessionLog()
    log.user("start")
    log.assistant([text("ok")])
    kept = log.user("kept")
    compacted = log.compaction("we talked about start", kept, 1000)
    one_way = log.user("after, one way")
    log.navigate(compacted)
    other_way = log.user("after, another way")

    view = compare_branches(path(log, one_way), path(log, other_way))

    assert view.ancestor is not None
    assert (view.ancestor.entry_id, view.ancestor.kind) == (compacted, "compaction")
    assert [(r.a and r.a.text, r.b and r.b.text) for r in view.rows] == [
        ("after, one way", "after, another way")
    ]
    # Both next contexts start with the summary and the kept message, then differ.
    assert view.context.shared == 2
    assert [c.kind for c in view.context.changes] == ["changed"]


def test_context_diff_ignores_what_no_request_sends() -> None:
    """Two answers with the same words that came at other times and cost other amounts (a
    replay with the same preset) leave the next contexts the same."""
    log = SessionLog()
    log.turn_start()
    question = log.user("what is here?")
    first = log.assistant([text("a README")], usage_=usage(100, 10, 0.01))
    log.turn_end()
    log.navigate(question)
    log.turn_start()
    second = log.assistant([text("a README")], usage_=usage(80, 10, 0.008))
    log.turn_end()
    third = log.assistant([text("a README and a Makefile")], usage_=usage(80, 12, 0.009))

    same = compare_branches(path(log, first), path(log, second)).context
    other = compare_branches(path(log, first), path(log, third)).context

    assert (same.shared, same.changes) == (same.messages_a, ())
    assert [c.kind for c in other.changes] == ["added"]
