"""The diff of two workspaces: right (it patches one side into the other), and bounded on
the worst shapes (a 1 MiB line, 10,000 changed files, binary, CRLF, no last newline)."""

from __future__ import annotations

import hashlib
import re

from hypothesis import given
from hypothesis import strategies as st

from projections.workspace import WorkspaceFile
from projections.workspace_diff import (
    NO_NEWLINE,
    DiffLimits,
    DiffLine,
    diff_plan,
    diff_workspaces,
    unified_lines,
    workspace_diff,
)


def blob(content: bytes, mode: int = 0o644) -> tuple[WorkspaceFile, bytes]:
    return WorkspaceFile(hashlib.sha256(content).hexdigest(), len(content), mode), content


def workspaces(
    before: dict[str, bytes], after: dict[str, bytes]
) -> tuple[dict[str, WorkspaceFile], dict[str, WorkspaceFile], dict[str, bytes]]:
    contents: dict[str, bytes] = {}
    sides: list[dict[str, WorkspaceFile]] = []
    for files in (before, after):
        side = {}
        for path, content in files.items():
            state, data = blob(content)
            side[path] = state
            contents[state.sha256] = data
        sides.append(side)
    return sides[0], sides[1], contents


def patched(a: list[str], lines: list[DiffLine]) -> list[str]:
    """`a` with the hunks of `lines` applied, checking every context and removed line."""
    out: list[str] = []
    position = 0
    for line in lines:
        if line.kind == "@":
            match = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", line.text)
            assert match
            start = int(match[1]) - 1 if match[2] != "0" else int(match[1])
            out += [x.removesuffix("\n") for x in a[position:start]]
            position = start
        elif line.kind in " -":
            assert a[position].removesuffix("\n") == line.text
            if line.kind == " ":
                out.append(line.text)
            position += 1
        elif line.kind == "+":
            out.append(line.text)
    return out + [x.removesuffix("\n") for x in a[position:]]


lines_of = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "d\n", "x\n"]), max_size=40)


@given(a=lines_of, b=lines_of, match_lines=st.sampled_from([2, 10, 5000]))
def test_a_diff_patches_the_old_lines_into_the_new(
    a: list[str], b: list[str], match_lines: int
) -> None:
    lines, added, removed = unified_lines(a, b, match_lines)
    assert patched(a, lines) == [x.removesuffix("\n") for x in b]
    assert added == sum(1 for line in lines if line.kind == "+")
    assert removed == sum(1 for line in lines if line.kind == "-")


def test_the_same_lines_have_no_hunk() -> None:
    assert unified_lines(["a\n", "b\n"], ["a\n", "b\n"]) == ([], 0, 0)


def test_one_changed_line_is_a_hunk_with_three_lines_of_context() -> None:
    a = [f"{n}\n" for n in range(10)]
    b = [*a[:5], "five\n", *a[6:]]
    lines, added, removed = unified_lines(a, b)
    assert (added, removed) == (1, 1)
    assert [(line.kind, line.text) for line in lines] == [
        ("@", "@@ -3,7 +3,7 @@"),
        (" ", "2"),
        (" ", "3"),
        (" ", "4"),
        ("-", "5"),
        ("+", "five"),
        (" ", "6"),
        (" ", "7"),
        (" ", "8"),
    ]


def test_new_and_deleted_files_diff_against_nothing() -> None:
    before, after, contents = workspaces({"old.txt": b"gone\n"}, {"new.txt": b"one\ntwo\n"})
    diff = workspace_diff(before, after, contents)
    assert (diff.added, diff.removed, diff.changed) == (1, 1, 0)
    new, old = diff.files
    assert (new.path, new.status, new.added, new.removed) == ("new.txt", "added", 2, 0)
    assert new.lines[0].text == "@@ -0,0 +1,2 @@"
    assert (old.path, old.status, old.added, old.removed) == ("old.txt", "removed", 0, 1)
    assert old.size_after is None and old.size_before == 5


def test_a_last_line_without_newline_is_noted() -> None:
    before, after, contents = workspaces({"f": b"a\nb"}, {"f": b"a\nb\n"})
    (diff,) = workspace_diff(before, after, contents).files
    assert [(line.kind, line.text) for line in diff.lines[1:]] == [
        (" ", "a"),
        ("-", "b"),
        ("\\", NO_NEWLINE),
        ("+", "b"),
    ]


def test_crlf_lines_differ_from_lf_lines_and_show_their_carriage_return() -> None:
    before, after, contents = workspaces({"f": b"one\r\ntwo\r\n"}, {"f": b"one\ntwo\r\n"})
    (diff,) = workspace_diff(before, after, contents).files
    assert (diff.added, diff.removed) == (1, 1)
    assert [line.text for line in diff.lines if line.kind in "+-"] == ["one␍", "one"]
    assert " two␍" in [line.kind + line.text for line in diff.lines]


def test_binary_files_are_shown_by_their_sizes() -> None:
    before, after, contents = workspaces(
        {"img.png": b"\x89PNG\x00\x01", "nul.txt": b"a\n"},
        {"img.png": b"\x89PNG\x00\x02\x03", "nul.txt": b"a\x00\n"},
    )
    image, nul = workspace_diff(before, after, contents).files
    assert image.binary and (image.size_before, image.size_after) == (6, 7)
    assert image.lines == () and image.added is None
    assert nul.binary


def test_only_a_mode_change_is_listed_without_contents() -> None:
    state, data = blob(b"#!/bin/sh\n")
    plan = diff_plan({"run": state}, {"run": WorkspaceFile(state.sha256, state.size, 0o755)})
    assert plan.shas == frozenset()
    (diff,) = diff_workspaces(plan, {}).files
    assert (diff.status, diff.mode_before, diff.mode_after) == ("mode", 0o644, 0o755)
    assert plan.changed == 1


def test_a_one_mebibyte_line_is_shown_cut() -> None:
    limits = DiffLimits()
    before, after, contents = workspaces({"f": b"a" * 2**20}, {"f": b"b" * 2**20})
    (diff,) = workspace_diff(before, after, contents, limits).files
    assert (diff.added, diff.removed) == (1, 1)
    removed = next(line for line in diff.lines if line.kind == "-")
    assert removed.text.startswith("a" * limits.line_chars)
    assert removed.text.endswith(f"… {2**20 - limits.line_chars:,} more characters")
    assert sum(len(line.text) for line in diff.lines) < 2 * limits.line_chars + 200


def test_ten_thousand_changed_files_list_a_bounded_number_and_count_the_rest() -> None:
    limits = DiffLimits()
    before = {f"d/{n:05}.txt": f"{n}\n".encode() for n in range(10_000)}
    after = {path: content + b"more\n" for path, content in before.items()}
    old, new, contents = workspaces(before, after)
    plan = diff_plan(old, new, limits)
    assert len(plan.changes) == limits.files
    assert len(plan.shas) <= 2 * limits.files
    diff = diff_workspaces(plan, contents, limits)
    assert diff.changed == 10_000 and diff.more_files == 10_000 - limits.files
    assert sum(len(f.lines) for f in diff.files) <= limits.total_lines
    assert all((f.added, f.removed) == (1, 0) for f in diff.files)


def test_the_call_cap_stops_the_diff_lines_across_files() -> None:
    limits = DiffLimits(total_lines=25)
    before, after, contents = workspaces({}, {f"{n}": b"a\nb\nc\nd\n" for n in range(10)})
    diff = workspace_diff(before, after, contents, limits)
    assert sum(len(f.lines) for f in diff.files) == 25
    assert [len(f.lines) for f in diff.files[:6]] == [5, 5, 5, 5, 5, 0]
    assert diff.files[-1].hidden_lines == 5 and diff.files[-1].added == 4


def test_a_file_past_the_input_bound_is_not_diffed_nor_read() -> None:
    limits = DiffLimits(file_input_bytes=1000)
    before, after, contents = workspaces({"big": b"x\n" * 600}, {"big": b"y\n" * 600})
    plan = diff_plan(before, after, limits)
    assert plan.shas == frozenset()
    (diff,) = diff_workspaces(plan, {}, limits).files
    assert diff.skipped == "too large" and diff.added is None


def test_files_past_the_content_budget_are_listed_without_a_diff() -> None:
    limits = DiffLimits(input_bytes=30)
    before, after, contents = workspaces(
        {f"{n}": b"012345678%d" % n for n in range(3)},
        {f"{n}": b"abcdefghi%d" % n for n in range(3)},
    )
    plan = diff_plan(before, after, limits)
    diff = diff_workspaces(plan, contents, limits)
    assert [f.skipped for f in diff.files] == ["", "over budget", "over budget"]


def test_a_long_changed_middle_is_one_replaced_block() -> None:
    a = [f"a{n}\n" for n in range(10_000)]
    b = [f"b{n}\n" for n in range(10_000)]
    lines, added, removed = unified_lines(a, b, match_lines=5000)
    assert (added, removed) == (10_000, 10_000)
    assert lines[0].text == "@@ -1,10000 +1,10000 @@"


def test_per_file_caps_leave_a_count_of_hidden_lines() -> None:
    limits = DiffLimits(file_lines=10)
    before, after, contents = workspaces({}, {"f": b"".join(b"%d\n" % n for n in range(100))})
    (diff,) = workspace_diff(before, after, contents, limits).files
    assert len(diff.lines) == 10 and diff.hidden_lines == 101 - 10
    assert diff.added == 100


def test_a_missing_content_is_said_so() -> None:
    before, after, _ = workspaces({}, {"f": b"x\n"})
    (diff,) = workspace_diff(before, after, {}).files
    assert diff.skipped == "missing"


def test_difflib_matches_a_bounded_number_of_lines_per_diff_then_shows_blocks() -> None:
    limits = DiffLimits(match_lines=10, total_match_lines=10)
    old, new = b"1\n2\n3\n4\n", b"1x\n2\n3x\n4\n"
    before, after, contents = workspaces({"a": old, "b": old}, {"a": new, "b": new})
    first, second = workspace_diff(before, after, contents, limits).files
    assert [line.kind for line in first.lines] == ["@", "-", "+", " ", "-", "+", " "]
    assert [line.kind for line in second.lines] == ["@", "-", "-", "-", "+", "+", "+", " "]
    assert (second.added, second.removed) == (3, 3)
