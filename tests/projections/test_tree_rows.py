"""The export's tree rows against `project_tree`'s layout: the same rows, in the same
order, with the same values, for any tree (forks, several roots, orphans, self parents,
parent cycles, timestamp ties and unreadable times, labels, any leaf)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.records import EntryRecord
from projections.tree import project_tree
from projections.tree_rows import TreeLayout, TreeRowData, TreeRows
from tests.projections.test_tree import branched_session, entry


def rows_of_project_tree(entries: list[EntryRecord], leaf: str | None) -> list[list[Any]]:
    """`project_tree`'s rows as the export wrote them from it."""
    view = project_tree(entries, leaf)
    connectors = {"": 0, "├─": 1, "└─": 2}
    return [
        [
            row.node.id,
            row.node.depth,
            row.display_indent,
            connectors[row.connector],
            row.node.type,
            row.node.role,
            row.node.text,
            row.node.label,
            row.node.newest_leaf_id,
            len(row.node.children),
            row.node.descendants,
            int(row.node.on_active_path),
            int(row.node.id == leaf),
        ]
        for row in view.rows
    ]


def tree_rows(entries: list[EntryRecord], leaf: str | None) -> tuple[TreeLayout, list[TreeRowData]]:
    tree = TreeRows()
    for one in sorted(entries, key=lambda e: e.seq):
        tree.add(one)
    layout = tree.layout(leaf)
    return layout, list(layout.rows)


def assert_same_tree(entries: list[EntryRecord], leaf: str | None) -> None:
    view = project_tree(entries, leaf)
    layout, rows = tree_rows(entries, leaf)
    assert [list(row) for row in rows] == rows_of_project_tree(entries, leaf)
    assert (layout.leaf_id, layout.nodes, layout.roots) == (
        view.leaf_id,
        len(view.nodes),
        len(view.roots),
    )


@pytest.mark.parametrize("leaf", ["u1", "a2", "a3", "a4", "u5", None, "unknown"])
def test_a_branched_session_gives_project_tree_s_rows(leaf: str | None) -> None:
    log, ids = branched_session()

    assert_same_tree(log.entries, ids.get(leaf or "", leaf))


def test_entries_out_of_seq_order_are_refused() -> None:
    tree = TreeRows()
    tree.add(entry("b", None, 2))

    with pytest.raises(ValueError):
        tree.add(entry("a", None, 1))


@st.composite
def any_trees(draw: st.DrawFn) -> tuple[list[EntryRecord], str | None]:
    """Parents anywhere in the file (so cycles), missing or the entry itself; few distinct
    times (so ties) and some unreadable ones; labels set and cleared; roles of all kinds."""
    count = draw(st.integers(min_value=0, max_value=40))
    names = [f"e{i}" for i in range(count)]
    entries: list[EntryRecord] = []
    for i, entry_id in enumerate(names):
        parent = draw(st.one_of(st.none(), st.just("missing"), st.sampled_from(names)))
        second = draw(st.integers(min_value=0, max_value=4))
        timestamp = draw(st.sampled_from([f"2026-01-01T00:00:0{second}Z", "not a time"]))
        kind = draw(st.sampled_from(["message", "label", "compaction", "branch_summary"]))
        fields: dict[str, Any] = {}
        if kind == "label":
            label = draw(st.sampled_from(["keep", "", None]))
            fields = {"targetId": draw(st.sampled_from([*names, "x"])), "label": label}
        elif kind == "message":
            role = draw(st.sampled_from(["user", "assistant", "toolResult", "system", 7]))
            fields = {"message": {"role": role, "content": f"text of {entry_id}"}}
        else:
            fields = {"summary": f"summary\nof {entry_id}", "tokensBefore": i}
        entries.append(entry(entry_id, parent, i * 3, timestamp=timestamp, type_=kind, **fields))
    leaf = draw(st.one_of(st.none(), st.just("unknown"), st.sampled_from(names or ["none"])))
    return entries, leaf


@settings(max_examples=400, deadline=None)
@given(any_trees())
def test_any_tree_gives_project_tree_s_rows(tree: tuple[list[EntryRecord], str | None]) -> None:
    entries, leaf = tree

    assert_same_tree(entries, leaf)
