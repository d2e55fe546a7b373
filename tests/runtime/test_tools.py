"""The workspace tools: inside the session's cwd only, failures as results, timeouts."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from runtime.tools import BUILTIN_TOOLS, Toolbox, ToolOutcome, check_arguments


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "notes.txt").write_text("one\ntwo TODO\nthree\n")
    (root / "docs" / "guide.md").write_text("# Guide\nTODO: write it\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("TODO hidden\n")
    (root / "blob.bin").write_bytes(b"\x00\x01TODO")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TODO secret\n")
    os.symlink(outside, root / "escape_dir")
    os.symlink(outside / "secret.txt", root / "escape_file")
    os.symlink(root / "notes.txt", root / "inside_link")
    return root


def run(ws: Path, name: str, **args: object) -> ToolOutcome:
    toolbox = Toolbox.for_session(list(BUILTIN_TOOLS), str(ws), timeout_s=5)
    return asyncio.run(toolbox.run(name, args))


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("read_file", {"path": "../outside/secret.txt"}),
        ("read_file", {"path": "docs/../../outside/secret.txt"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("read_file", {"path": "~/secret"}),
        ("read_file", {"path": "escape_file"}),
        ("read_file", {"path": "escape_dir/secret.txt"}),
        ("list_files", {"path": "escape_dir"}),
        ("list_files", {"path": ".."}),
        ("grep", {"pattern": "TODO", "path": "escape_dir"}),
        ("write_file", {"path": "../x.txt", "content": "x"}),
        ("write_file", {"path": "escape_dir/new.txt", "content": "x"}),
        ("write_file", {"path": "escape_file", "content": "x"}),
        ("write_file", {"path": "/tmp/x.txt", "content": "x"}),
    ],
)
def test_paths_that_escape_the_workspace_are_refused(ws, name, args):
    outcome = run(ws, name, **args)
    assert outcome.is_error and outcome.error_code == "OUTSIDE_WORKSPACE", outcome
    assert (ws.parent / "outside" / "secret.txt").read_text() == "TODO secret\n"
    assert not (ws.parent / "outside" / "new.txt").exists()
    assert not (ws.parent / "x.txt").exists()


def test_read_file_reads_text_with_line_ranges(ws):
    assert run(ws, "read_file", path="notes.txt").text == "one\ntwo TODO\nthree\n"
    assert run(ws, "read_file", path="./inside_link").text.startswith("one")
    part = run(ws, "read_file", path="notes.txt", offset=2, limit=1)
    assert part.text == "two TODO\n[lines 2–2 of 3]"
    assert run(ws, "read_file", path="blob.bin").error_code == "BINARY_FILE"
    assert run(ws, "read_file", path="docs").error_code == "NOT_A_FILE"
    assert run(ws, "read_file", path="nope.txt").error_code == "NOT_FOUND"


def test_list_files_skips_tool_directories_and_escaping_links(ws):
    listing = run(ws, "list_files").text.splitlines()
    assert listing == ["blob.bin", "docs/", "inside_link", "notes.txt"]
    assert run(ws, "list_files", path="docs").text == "guide.md"
    assert "docs/guide.md" in run(ws, "list_files", recursive=True).text


def test_grep_searches_text_files_only(ws):
    found = run(ws, "grep", pattern="TODO").text.splitlines()
    assert found == ["notes.txt:2: two TODO", "docs/guide.md:2: TODO: write it"]
    assert run(ws, "grep", pattern="t[wh]", regex=True, path="notes.txt").text.count("\n") == 1
    assert run(ws, "grep", pattern="todo", ignore_case=True).text.count("TODO") == 2
    assert run(ws, "grep", pattern="absent").text == "no match for 'absent'"
    assert run(ws, "grep", pattern="(", regex=True).error_code == "INVALID_ARGUMENTS"


def test_write_file_creates_directories_and_reports(ws):
    outcome = run(ws, "write_file", path="new/dir/file.txt", content="hi\n")
    assert not outcome.is_error and outcome.text == "Created new/dir/file.txt (3 bytes)"
    assert (ws / "new" / "dir" / "file.txt").read_text() == "hi\n"
    again = run(ws, "write_file", path="new/dir/file.txt", content="")
    assert again.text.startswith("Overwrote")
    assert BUILTIN_TOOLS["write_file"].needs_approval
    assert not any(t.needs_approval for n, t in BUILTIN_TOOLS.items() if n != "write_file")


def test_a_missing_workspace_and_unknown_tools_are_error_results(tmp_path):
    assert run(tmp_path / "gone", "list_files").error_code == "NO_WORKSPACE"
    toolbox = Toolbox.for_session(["read_file"], str(tmp_path))
    outcome = asyncio.run(toolbox.run("write_file", {"path": "x", "content": "y"}))
    assert outcome.error_code == "UNKNOWN_TOOL"
    assert Toolbox.for_session([], "").schemas() == []


def test_a_slow_tool_times_out(ws, monkeypatch):
    monkeypatch.setenv("STRAND_TOOL_DELAY_MS", "2000")
    toolbox = Toolbox.for_session(["read_file"], str(ws), timeout_s=0.1)
    outcome = asyncio.run(toolbox.run("read_file", {"path": "notes.txt"}))
    assert outcome.error_code == "TOOL_TIMEOUT" and "0.1 s" in outcome.text


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({}, "missing required argument 'path'"),
        ({"path": 3}, "argument 'path' must be of type string"),
        ({"path": "a", "offset": 0}, "argument 'offset' must be at least 1"),
        ({"path": "a", "offset": True}, "argument 'offset' must be of type integer"),
        ({"path": "a", "mode": "x"}, "unknown argument 'mode'"),
        ({"path": "a", "limit": 2}, None),
    ],
)
def test_arguments_are_checked_against_the_json_schema(args, problem):
    assert check_arguments(BUILTIN_TOOLS["read_file"].parameters, args) == problem


def test_tool_schemas_are_json_schema_objects():
    for tool in BUILTIN_TOOLS.values():
        schema = tool.schema()
        assert set(schema) == {"name", "description", "parameters"}
        assert schema["parameters"]["type"] == "object"
        assert schema["parameters"]["additionalProperties"] is False
