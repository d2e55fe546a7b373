"""What a `task` call's result holds stays bounded, whatever the child said or changed."""

from __future__ import annotations

import hashlib

from projections.workspace import WorkspaceFile
from projections.workspace_diff import workspace_diff
from runtime.subagents import ANSWER_MAX_CHARS, _clipped
from sessions_app.agent.children import REPORT_DIFF, _diff_text


def test_a_long_answer_keeps_its_head_and_tail() -> None:
    answer = "head " + "x" * 500_000 + " tail"
    kept = _clipped(answer)
    assert len(kept) < ANSWER_MAX_CHARS + 100
    assert kept.startswith("head ") and kept.endswith(" tail")
    assert "characters of the answer left out" in kept
    assert _clipped("short") == "short"


def test_the_diff_of_a_child_that_changed_everything_is_bounded() -> None:
    contents: dict[str, bytes] = {}
    after: dict[str, WorkspaceFile] = {}
    for n in range(2_000):
        body = "".join(f"line {i} of file {n}\n" for i in range(1_000)).encode()
        sha = hashlib.sha256(body).hexdigest()
        contents[sha] = body
        after[f"dir/file-{n:04}.txt"] = WorkspaceFile(sha, len(body))
    diff = workspace_diff({}, after, contents, REPORT_DIFF)
    text = _diff_text(diff)
    assert diff.added == 2_000
    assert len(text) < 2 * REPORT_DIFF.total_bytes
    assert text.count("\n") < REPORT_DIFF.total_lines + 2 * REPORT_DIFF.files + 10
    assert "2000 added" in text and f"[… {2_000 - REPORT_DIFF.files} more files]" in text
