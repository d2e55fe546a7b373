"""The workspace fold: hand-written trees (branches, deletions, checkpoints, a fork point)
and a property test against a naive fold that walks the tree entry by entry."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.workspace import (
    Snapshot,
    WorkspaceFile,
    apply,
    fold_workspace,
    since_checkpoint,
    workspace_change,
)


def f(content: str, mode: int = 0o644) -> WorkspaceFile:
    return WorkspaceFile(content * 64 if len(content) == 1 else content.ljust(64, "0"), 1, mode)


def snap(
    seq: int,
    at: str | None,
    files: Mapping[str, str] | None = None,
    deleted: tuple[str, ...] = (),
    *,
    full: bool = False,
) -> Snapshot:
    changes = {p: f(c) for p, c in (files or {}).items()}
    return Snapshot(seq, at, "tool", changes, deleted, changes if full else None)


def names(manifest: Mapping[str, WorkspaceFile]) -> dict[str, str]:
    return {path: state.sha256[0] for path, state in manifest.items()}


# The tree:   a ─ b ─ c          (branch 1)
#                 └ d ─ e      (branch 2, from b)
SNAPSHOTS = [
    snap(1, None, {"readme": "r"}),  # at the root: on every path
    snap(3, "a", {"x": "1"}),
    snap(5, "b", {"y": "2"}),
    snap(7, "c", {"x": "3"}, ("y",)),  # branch 1 changes x and deletes y
    snap(9, "d", {"z": "4"}),  # branch 2 adds z
]
PATHS = {"a": ["a"], "b": ["a", "b"], "c": ["a", "b", "c"], "d": ["a", "b", "d"]}


@pytest.mark.parametrize(
    ("leaf", "expected"),
    [
        ("", {"readme": "r"}),
        ("a", {"readme": "r", "x": "1"}),
        ("b", {"readme": "r", "x": "1", "y": "2"}),
        ("c", {"readme": "r", "x": "3"}),
        ("d", {"readme": "r", "x": "1", "y": "2", "z": "4"}),
    ],
)
def test_fold_follows_the_path_not_the_other_branch(leaf: str, expected: dict[str, str]) -> None:
    path = PATHS.get(leaf, [])
    assert names(fold_workspace(path, SNAPSHOTS)) == expected


def test_a_checkpoint_stands_in_for_what_came_before_it() -> None:
    # A full manifest at d says exactly what d holds; what came before it is not read.
    checkpoint = snap(11, "d", {"x": "1", "z": "4", "readme": "r"}, ("y",), full=True)
    later = snap(13, "e", {"w": "5"}, ("x",))
    bogus_before = [snap(0, None, {"junk": "j"})]  # hidden by the checkpoint
    path = ["a", "b", "d", "e"]
    got = fold_workspace(path, [*bogus_before, *SNAPSHOTS, checkpoint, later])
    assert names(got) == {"readme": "r", "z": "4", "w": "5"}
    assert since_checkpoint(path, [*SNAPSHOTS, checkpoint, later]) == 1
    assert since_checkpoint(path, SNAPSHOTS) == 4


def test_a_checkpoint_on_another_branch_is_not_read() -> None:
    elsewhere = snap(11, "c", {"only": "o"}, full=True)
    assert names(fold_workspace(PATHS["d"], [*SNAPSHOTS, elsewhere])) == {
        "readme": "r",
        "x": "1",
        "y": "2",
        "z": "4",
    }


def test_a_fork_starts_from_its_fork_point_manifest() -> None:
    # A forked session copies the path to its fork point (b) and records b's workspace
    # there as one full snapshot; the fork's own work folds on top of it.
    fork_point = fold_workspace(PATHS["b"], SNAPSHOTS)
    forked = [
        Snapshot(2, "b", "fork", dict(fork_point), (), dict(fork_point)),
        snap(4, "f", {"y": "9"}),
    ]
    assert names(fold_workspace(["a", "b", "f"], forked)) == {"readme": "r", "x": "1", "y": "9"}
    assert names(fold_workspace(["a"], forked)) == {}


def test_a_deleted_then_written_path_is_present() -> None:
    snaps = [snap(1, "a", {"p": "1"}), snap(2, "a", deleted=("p",)), snap(3, "a", {"p": "2"})]
    assert names(fold_workspace(["a"], snaps)) == {"p": "2"}


def test_workspace_change_writes_changed_content_or_mode_and_deletes_the_rest() -> None:
    before = {"same": f("1"), "content": f("1"), "mode": f("1"), "gone": f("1")}
    after = {
        "same": WorkspaceFile(f("1").sha256, 1, 0o644, 99),  # only its time differs
        "content": f("2"),
        "mode": f("1", 0o755),
        "new": f("3"),
    }
    change = workspace_change(before, after)
    assert sorted(change.write) == ["content", "mode", "new"]
    assert change.delete == ("gone",)
    assert workspace_change(after, after).empty


# --- property: the fold agrees with a naive walk of the tree ---------------------------

PATH_NAMES = st.sampled_from(["a", "b", "c/d", "c/e", "f"])
CONTENTS = st.sampled_from("0123456789")


@st.composite
def histories(draw: st.DrawFn) -> tuple[dict[str, str | None], list[Snapshot]]:
    count = draw(st.integers(1, 8))
    parents: dict[str, str | None] = {}
    for index in range(count):
        entry = f"e{index}"
        parents[entry] = draw(st.sampled_from([None, *parents]))
    targets = [None, *parents]
    snapshots = []
    for seq in range(draw(st.integers(0, 20))):
        files = draw(st.dictionaries(PATH_NAMES, CONTENTS, max_size=3))
        deleted = tuple(draw(st.lists(PATH_NAMES, max_size=2)))
        snapshots.append(snap(seq, draw(st.sampled_from(targets)), files, deleted))
    return parents, snapshots


def path_to(parents: Mapping[str, str | None], entry: str) -> list[str]:
    path: list[str] = []
    current: str | None = entry
    while current is not None:
        path.append(current)
        current = parents[current]
    return path[::-1]


def naive(parents: Mapping[str, str | None], snaps: list[Snapshot], entry: str) -> dict:
    """Every snapshot recorded on the path, applied one by one in the order recorded."""
    on = set(path_to(parents, entry))
    manifest: dict[str, WorkspaceFile] = {}
    for s in sorted(snaps, key=lambda s: s.seq):
        if s.at is None or s.at in on:
            manifest = apply(manifest, s)
    return manifest


@settings(max_examples=200, deadline=None)
@given(histories(), st.data())
def test_fold_with_checkpoints_agrees_with_the_naive_fold(
    history: tuple[dict[str, str | None], list[Snapshot]], data: st.DataObject
) -> None:
    parents, snapshots = history
    # Turn some snapshots into checkpoints, each holding the naive manifest at its entry
    # as it stood when it was written, as the recorder writes them.
    with_checkpoints: list[Snapshot] = []
    for s in snapshots:
        if s.at is not None and data.draw(st.booleans()):
            done = [t for t in snapshots if t.seq <= s.seq]
            manifest = naive(parents, done, s.at)
            s = Snapshot(s.seq, s.at, s.reason, s.files, s.deleted, manifest)
        with_checkpoints.append(s)
    for entry in parents:
        path = path_to(parents, entry)
        expected = naive(parents, snapshots, entry)
        assert dict(fold_workspace(path, snapshots)) == expected
        assert dict(fold_workspace(path, with_checkpoints)) == expected
