from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import projections
from projections.records import EntryRecord
from projections.tree import TreeView, project_tree
from tests.projections.fixtures import SessionLog, text, tool_call


def entry(
    entry_id: str,
    parent: str | None,
    seq: int,
    *,
    timestamp: str = "2026-01-01T00:00:00.000Z",
    type_: str = "message",
    **fields: Any,
) -> EntryRecord:
    data: dict[str, Any] = {"type": type_, "id": entry_id, "parentId": parent}
    data["timestamp"] = timestamp
    if type_ == "message":
        data["message"] = fields.pop("message", {"role": "user", "content": entry_id})
    data.update(fields)
    return EntryRecord(entry_id, parent, type_, timestamp, data, seq)


def branched_session() -> tuple[SessionLog, dict[str, str]]:
    log = SessionLog()
    ids: dict[str, str] = {}
    ids["u1"] = log.user("hello\nsecond line")
    ids["a1"] = log.assistant([text("hi there")])
    ids["u2"] = log.user("try A")
    ids["a2"] = log.assistant([text("A done")])
    log.navigate(ids["a1"])
    ids["u3"] = log.user("try B")
    ids["a3"] = log.assistant([text("B done")])
    log.navigate(ids["u3"])
    ids["a4"] = log.assistant([text("B again")])
    log.navigate(ids["a1"])
    ids["u5"] = log.user("try C")
    return log, ids


def test_tree_draws_like_pis_tree_with_the_active_branch_first() -> None:
    log, ids = branched_session()

    view = project_tree(log.entries, ids["a3"])

    assert [row.prefix + row.node.text for row in view.rows] == [
        "hello",
        "hi there",
        "├─ try B",
        "│  ├─ B done",
        "│  └─ B again",
        "├─ try A",
        "│     A done",
        "└─ try C",
    ]
    assert [row.row for row in view.rows] == list(range(8))
    assert view.active_path == (ids["u1"], ids["a1"], ids["u3"], ids["a3"])


def test_rows_give_their_indent_and_connector_in_constant_size() -> None:
    log, ids = branched_session()

    view = project_tree(log.entries, ids["a3"])

    # What the doors draw from: the same layout as the prefixes above, as a number and one
    # mark, so that a row's size does not grow with its depth.
    assert [(row.node.text, row.display_indent, row.connector) for row in view.rows] == [
        ("hello", 0, ""),
        ("hi there", 0, ""),
        ("try B", 1, "├─"),
        ("B done", 2, "├─"),
        ("B again", 2, "└─"),
        ("try A", 1, "├─"),
        ("A done", 2, ""),
        ("try C", 1, "└─"),
    ]


def test_nodes_know_children_counts_leaves_and_active_path() -> None:
    log, ids = branched_session()

    view = project_tree(log.entries, ids["a3"])
    nodes = view.nodes

    assert view.roots == (ids["u1"],)
    assert nodes[ids["a1"]].children == (ids["u2"], ids["u3"], ids["u5"])  # oldest first
    assert nodes[ids["u1"]].descendants == 7
    assert nodes[ids["u1"]].messages_below == 7
    assert nodes[ids["u3"]].descendants == 2
    assert nodes[ids["a1"]].depth == 1 and nodes[ids["a3"]].depth == 3
    assert {n.id for n in nodes.values() if n.is_leaf} == {ids[k] for k in ("a2", "a3", "a4", "u5")}
    assert nodes[ids["a3"]].is_current_leaf and not nodes[ids["a4"]].is_current_leaf
    assert nodes[ids["u3"]].on_active_path and not nodes[ids["u2"]].on_active_path
    # Clicking a node goes to the newest leaf below it, following the newest child.
    assert nodes[ids["a1"]].newest_leaf_id == ids["u5"]
    assert nodes[ids["u3"]].newest_leaf_id == ids["a4"]


def test_children_sort_by_timestamp_then_file_order() -> None:
    entries = [
        entry("r", None, 0),
        entry("late", "r", 1, timestamp="2026-01-01T00:00:09Z"),
        entry("tie1", "r", 2, timestamp="2026-01-01T00:00:01Z"),
        entry("early", "r", 3, timestamp="2026-01-01T00:00:00.500+00:00"),
        entry("tie2", "r", 4, timestamp="2026-01-01T00:00:01.000Z"),
    ]

    view = project_tree(entries, "late")

    assert view.nodes["r"].children == ("early", "tie1", "tie2", "late")


def test_labels_resolve_last_writer_wins_and_empty_clears() -> None:
    log, ids = branched_session()
    log.label(ids["u2"], "first try")
    log.label(ids["a1"], "checkpoint")
    log.label(ids["u2"], "plan A")
    log.label(ids["a1"], "")
    log.label(ids["u3"], "B")
    log.label(ids["u3"], None)

    view = project_tree(log.entries, log.leaf)

    assert view.labels == {ids["u2"]: "plan A"}
    assert view.nodes[ids["u2"]].label == "plan A"
    assert view.nodes[ids["a1"]].label is None
    assert view.nodes[ids["u3"]].label is None


def test_markers_and_display_texts() -> None:
    log = SessionLog()
    log.model_change("openai", "gpt-x")
    log.thinking_level("high")
    u = log.user([{"type": "image", "data": "AA", "mimeType": "image/png"}])
    log.assistant([tool_call("c1", "read", {}), tool_call("c2", "grep", {})], stop_reason="toolUse")
    log.tool_result("c1", "read", "file body\nmore")
    log.assistant([], stop_reason="error", error_message="overloaded")
    compaction = log.compaction("sum", u, 12345)
    summary = log.branch_summary("went elsewhere\ndetails")
    log.custom_message("note", "hello there", display=True)
    log.session_info("  My session  ")
    log.label(u, "pic")
    log.bash("ls -la", "")

    view = project_tree(log.entries, log.leaf)

    assert [row.node.text for row in view.rows] == [
        "model: openai/gpt-x",
        "thinking: high",
        "[image]",
        "tool: read, grep",
        "result: read file body",
        "error: overloaded",
        "compaction: 12,345 tokens",
        "branch summary: went elsewhere",
        "[note] hello there",
        "name: My session",
        "label: pic",
        "$ ls -la",
    ]
    assert view.nodes[compaction].marker == "compaction"
    assert view.nodes[summary].marker == "branch_summary"
    assert view.session_name == "My session"
    assert view.nodes[u].role == "user"


def test_orphans_self_parents_and_null_parent_summaries_are_roots() -> None:
    entries = [
        entry("a", None, 0),
        entry("b", "a", 1),
        entry("orphan", "missing", 2),
        entry("self", "self", 3),
        entry("summary", None, 4, type_="branch_summary", fromId="root", summary="s"),
        entry("c", "summary", 5),
    ]

    view = project_tree(entries, "c")

    assert view.roots == ("a", "orphan", "self", "summary")
    assert view.active_path == ("summary", "c")
    # With several roots, the one holding the active leaf is drawn first; roots hang from
    # a virtual root and get no connector of their own, their children one indent.
    assert [row.node.id for row in view.rows] == ["summary", "c", "a", "b", "orphan", "self"]
    assert [row.prefix for row in view.rows] == ["", "   ", "", "   ", "", ""]
    assert all(row.multiple_roots for row in view.rows)


def test_parent_cycles_are_broken_so_every_entry_shows_once() -> None:
    entries = [entry("a", None, 0), entry("x", "y", 1), entry("y", "x", 2), entry("z", "y", 3)]

    view = project_tree(entries, "z")

    assert sorted(row.node.id for row in view.rows) == ["a", "x", "y", "z"]
    assert view.roots == ("a", "x")
    assert view.active_path == ("x", "y", "z")


def test_null_leaf_has_no_active_path_and_unknown_leaf_means_the_last_entry() -> None:
    log, ids = branched_session()

    assert project_tree(log.entries, None).active_path == ()
    assert project_tree(log.entries, "nope").leaf_id == ids["u5"]
    assert project_tree([], None).rows == ()


def chain(count: int) -> list[EntryRecord]:
    return [entry(f"n{i}", f"n{i - 1}" if i else None, i) for i in range(count)]


def comb(count: int) -> list[EntryRecord]:
    """A spine whose every node forks: a leaf and the next spine node."""
    entries = [entry("s0", None, 0)]
    for i in range(1, (count + 1) // 2):
        entries.append(entry(f"s{i}", f"s{i - 1}", 2 * i - 1))
        entries.append(entry(f"leaf{i}", f"s{i - 1}", 2 * i))
    return entries


def star(count: int) -> list[EntryRecord]:
    """One root with every other entry as its child."""
    return [entry("r", None, 0), *(entry(f"c{i}", "r", i) for i in range(1, count))]


def test_hundred_thousand_entry_chain_needs_no_recursion() -> None:
    entries = chain(100_000)

    view = project_tree(entries, "n99999")

    assert len(view.rows) == 100_000
    assert view.nodes["n0"].descendants == 99_999
    assert view.nodes["n99999"].depth == 99_999
    assert len(view.active_path) == 100_000
    assert view.rows[-1].prefix == ""


def test_hundred_thousand_entry_comb_keeps_gutters_cheap() -> None:
    # Gutters nest 50,000 deep.
    entries = comb(99_999)

    view = project_tree(entries, "s49999")

    assert len(view.rows) == len(entries)
    assert view.max_indent > 40_000
    assert view.rows[1].prefix == "├─ "
    assert (view.rows[-1].display_indent, view.rows[-1].connector) == (1, "└─")


# --- cost --------------------------------------------------------------------------------
# Counted, not timed: the lines of `projections/` that run and the memory held at the peak
# are the same on any machine under any load. From 1,000 to 8,000 entries linear work grows
# 8 times and quadratic work 64 times, whatever the shape of the tree.

PROJECTIONS = str(Path(projections.__file__).parent)
SHAPES: dict[str, Callable[[int], list[EntryRecord]]] = {"chain": chain, "comb": comb, "star": star}


def lines_run(work: Callable[[], object]) -> int:
    """How many lines of `projections/` run during `work()`."""
    count = 0

    def on_line(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        count += event == "line"
        return on_line

    def on_call(frame: FrameType, event: str, arg: object) -> Any:
        return on_line if frame.f_code.co_filename.startswith(PROJECTIONS) else None

    sys.settrace(on_call)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


def peak_bytes(work: Callable[[], object]) -> int:
    """The most memory allocated at once during `work()`, its result included."""
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("measure", [lines_run, peak_bytes], ids=["lines", "memory"])
def test_the_tree_costs_grow_linearly_with_the_entries(
    shape: str, measure: Callable[[Callable[[], object]], int]
) -> None:
    small, large = SHAPES[shape](1_000), SHAPES[shape](8_000)

    growth = measure(lambda: project_tree(large, large[-1].id)) / measure(
        lambda: project_tree(small, small[-1].id)
    )

    assert growth < 10, f"{growth:.1f} times the cost for 8 times the entries"


# --- properties --------------------------------------------------------------------------


@st.composite
def random_trees(draw: st.DrawFn) -> tuple[list[EntryRecord], str | None]:
    count = draw(st.integers(min_value=0, max_value=60))
    entries: list[EntryRecord] = []
    for i in range(count):
        entry_id = f"e{i}"
        earlier = [e.id for e in entries]
        parent = draw(
            st.one_of(
                st.none(),
                st.just(entry_id),
                st.just("missing"),
                st.sampled_from(earlier) if earlier else st.none(),
            )
        )
        second = draw(st.integers(min_value=0, max_value=5))  # many ties
        kind = draw(st.sampled_from(["message", "label", "compaction", "branch_summary"]))
        fields: dict[str, Any] = {}
        if kind == "label":
            fields = {"targetId": draw(st.sampled_from([*earlier, "x"])), "label": "l"}
        entries.append(
            entry(
                entry_id,
                parent,
                i,
                timestamp=f"2026-01-01T00:00:0{second}Z",
                type_=kind,
                **fields,
            )
        )
    leaf = draw(st.one_of(st.none(), st.sampled_from([e.id for e in entries] or ["none"])))
    shuffled = draw(st.permutations(entries))
    return list(shuffled), leaf


def check_tree(view: TreeView, entries: list[EntryRecord]) -> None:
    ids = [row.node.id for row in view.rows]
    assert sorted(ids) == sorted(e.id for e in entries)  # every node exactly once
    assert set(view.nodes) == set(ids)
    path = view.active_path
    if path:
        assert view.nodes[path[0]].parent_id is None
        assert path[-1] == view.leaf_id
        for parent, child in zip(path, path[1:], strict=False):
            assert view.nodes[child].parent_id == parent
            assert child in view.nodes[parent].children
    assert {n.id for n in view.nodes.values() if n.on_active_path} == set(path)
    roots = [n for n in view.nodes.values() if n.parent_id is None]
    assert sum(n.descendants + 1 for n in roots) == len(entries)


@settings(max_examples=300, deadline=None)
@given(random_trees())
def test_random_trees_never_crash_and_show_every_entry_once(
    tree: tuple[list[EntryRecord], str | None],
) -> None:
    entries, leaf = tree

    view = project_tree(entries, leaf)

    check_tree(view, entries)
    assert view == project_tree(list(reversed(entries)), leaf)
