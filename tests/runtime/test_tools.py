"""The workspace tools: inside the session's cwd only, no links followed, regular files only,
linear-time patterns, bounded work, failures as results, timeouts."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import tools
from runtime.tools import BUILTIN_TOOLS, Toolbox, ToolOutcome, Workspace, check_arguments


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
        ("list_files", {"path": ".."}),
        ("grep", {"pattern": "TODO", "path": "../outside"}),
        ("write_file", {"path": "../x.txt", "content": "x"}),
        ("write_file", {"path": "/tmp/x.txt", "content": "x"}),
        ("write_file", {"path": "C:/x.txt", "content": "x"}),
    ],
)
def test_paths_that_escape_the_workspace_are_refused(ws, name, args):
    outcome = run(ws, name, **args)
    assert outcome.is_error and outcome.error_code == "OUTSIDE_WORKSPACE", outcome
    assert (ws.parent / "outside" / "secret.txt").read_text() == "TODO secret\n"
    assert not (ws.parent / "x.txt").exists()


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("read_file", {"path": "escape_file"}),
        ("read_file", {"path": "escape_dir/secret.txt"}),
        ("read_file", {"path": "inside_link"}),
        ("list_files", {"path": "escape_dir"}),
        ("grep", {"pattern": "TODO", "path": "escape_dir"}),
        ("grep", {"pattern": "TODO", "path": "escape_file"}),
        ("write_file", {"path": "escape_dir/new.txt", "content": "x"}),
        ("write_file", {"path": "escape_file", "content": "x"}),
        ("write_file", {"path": "inside_link", "content": "x"}),
    ],
)
def test_links_are_never_followed(ws, name, args):
    outcome = run(ws, name, **args)
    assert outcome.is_error and outcome.error_code == "SYMLINK_REFUSED", outcome
    assert "symbolic link" in outcome.text
    assert (ws.parent / "outside" / "secret.txt").read_text() == "TODO secret\n"
    assert not (ws.parent / "outside" / "new.txt").exists()
    assert not (ws.parent / "x.txt").exists()


def test_read_file_reads_text_with_line_ranges(ws):
    assert run(ws, "read_file", path="notes.txt").text == "one\ntwo TODO\nthree\n"
    assert run(ws, "read_file", path="./docs//guide.md").text.startswith("# Guide")
    part = run(ws, "read_file", path="notes.txt", offset=2, limit=1)
    assert part.text == "two TODO\n[lines 2–2 of 3]"
    assert run(ws, "read_file", path="blob.bin").error_code == "BINARY_FILE"
    assert run(ws, "read_file", path="docs").error_code == "NOT_A_FILE"
    assert run(ws, "read_file", path="nope.txt").error_code == "NOT_FOUND"


def test_list_files_skips_tool_directories_and_links(ws):
    listing = run(ws, "list_files").text.splitlines()
    assert listing == ["blob.bin", "docs/", "notes.txt", "[3 links and special files skipped]"]
    assert run(ws, "list_files", path="docs").text == "guide.md"
    assert "docs/guide.md" in run(ws, "list_files", recursive=True).text


def test_grep_searches_text_files_only(ws):
    found = run(ws, "grep", pattern="TODO").text.splitlines()
    assert found == [
        "notes.txt:2: two TODO",
        "docs/guide.md:2: TODO: write it",
        "[3 links and special files skipped]",
    ]
    assert run(ws, "grep", pattern="t[wh]", regex=True, path="notes.txt").text.count("\n") == 1
    assert run(ws, "grep", pattern="todo", ignore_case=True).text.count("TODO") == 2
    assert run(ws, "grep", pattern="absent", path="docs").text == "no match for 'absent'"
    assert run(ws, "grep", pattern="(", regex=True).error_code == "INVALID_PATTERN"
    assert run(ws, "grep", pattern="(", path="notes.txt").text == "no match for '('"


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


# --- links at every position, special files ------------------------------------------------


@pytest.fixture
def deep(tmp_path: Path) -> Path:
    """A workspace with a/b/c.txt, and outside it a tree of the same shape."""
    root = tmp_path / "deep"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "c.txt").write_text("inside TODO\n")
    outside = tmp_path / "elsewhere"
    (outside / "b").mkdir(parents=True)
    (outside / "b" / "c.txt").write_text("outside TODO\n")
    (outside / "c.txt").write_text("outside TODO\n")
    return root


def _link_at(root: Path, position: int) -> None:
    """Replace component `position` of a/b/c.txt with a link to the same shape outside."""
    outside = root.parent / "elsewhere"
    if position == 0:
        os.rename(root / "a", root / "a.real")
        os.symlink(outside, root / "a")  # elsewhere/b/c.txt
    elif position == 1:
        os.rename(root / "a" / "b", root / "a" / "b.real")
        os.symlink(outside / "b", root / "a" / "b")
    else:
        os.rename(root / "a" / "b" / "c.txt", root / "a" / "b" / "c.real")
        os.symlink(outside / "c.txt", root / "a" / "b" / "c.txt")


def _outside_untouched(root: Path) -> None:
    outside = root.parent / "elsewhere"
    assert sorted(p.name for p in outside.rglob("*")) == ["b", "c.txt", "c.txt"]
    assert (outside / "b" / "c.txt").read_text() == "outside TODO\n"
    assert (outside / "c.txt").read_text() == "outside TODO\n"


@pytest.mark.parametrize("position", [0, 1, 2])
def test_a_link_at_any_component_is_refused_by_every_tool(deep, position):
    _link_at(deep, position)
    dirs = ["a", "a/b"][position:]
    calls = [
        ("read_file", {"path": "a/b/c.txt"}),
        ("grep", {"pattern": "TODO", "path": "a/b/c.txt"}),
        ("write_file", {"path": "a/b/c.txt", "content": "overwritten"}),
        ("write_file", {"path": "a/b/new.txt", "content": "created"}),
        *[("list_files", {"path": d}) for d in dirs],
        *[("grep", {"pattern": "TODO", "path": d}) for d in dirs],
    ]
    if position == 2:  # c.txt is the link: the directories themselves are fine
        calls = calls[:3]
    for name, args in calls:
        outcome = run(deep, name, **args)
        assert outcome.error_code == "SYMLINK_REFUSED", (name, args, outcome)
        assert "outside" not in outcome.text
    _outside_untouched(deep)


@pytest.mark.parametrize("position", [0, 1, 2])
def test_walks_pass_over_links_at_any_depth(deep, position):
    _link_at(deep, position)
    found = run(deep, "grep", pattern="TODO")
    assert "outside" not in found.text and "[1 links and special files skipped]" in found.text
    real = [["a.real/", "a.real/b/", "a.real/b/c.txt"], ["a/", "a/b.real/", "a/b.real/c.txt"]]
    real.append(["a/", "a/b/", "a/b/c.real"])
    listing = run(deep, "list_files", recursive=True).text.splitlines()
    assert listing == [*real[position], "[1 links and special files skipped]"]


def test_write_file_does_not_create_through_a_dangling_link(deep):
    target = deep.parent / "elsewhere" / "planted.txt"
    os.symlink(target, deep / "planted.txt")
    os.symlink(deep.parent / "elsewhere" / "newdir", deep / "newdir")
    assert run(deep, "write_file", path="planted.txt", content="x").error_code == (
        "SYMLINK_REFUSED"
    )
    assert run(deep, "write_file", path="newdir/f.txt", content="x").error_code == (
        "SYMLINK_REFUSED"
    )
    assert not target.exists() and not (deep.parent / "elsewhere" / "newdir").exists()
    _outside_untouched(deep)


@pytest.fixture
def fifo(ws: Path) -> Iterator[Path]:
    """A FIFO in the workspace that no one writes to. If a tool ever blocks opening it, a
    writer opens it after a while, so that the test fails instead of hanging."""
    path = ws / "pipe.txt"
    os.mkfifo(path)

    def unblock() -> None:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        time.sleep(0.5)
        os.close(fd)

    timer = threading.Timer(10, unblock)
    timer.start()
    yield path
    timer.cancel()


def test_a_fifo_is_neither_read_nor_written_and_nothing_waits_on_it(ws, fifo):
    outcome = run(ws, "read_file", path="pipe.txt")
    assert outcome.error_code == "NOT_A_FILE" and "FIFO" in outcome.text
    assert run(ws, "grep", pattern="TODO", path="pipe.txt").error_code == "NOT_A_FILE"
    found = run(ws, "grep", pattern="TODO").text.splitlines()
    assert found[:2] == ["notes.txt:2: two TODO", "docs/guide.md:2: TODO: write it"]
    assert found[2] == "[4 links and special files skipped]"
    assert "pipe.txt" not in run(ws, "list_files").text
    written = run(ws, "write_file", path="pipe.txt", content="into the pipe")
    assert written.error_code == "NOT_A_FILE", written
    # With a reader waiting, the FIFO is opened, seen not to be a file, and left unwritten.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        written = run(ws, "write_file", path="pipe.txt", content="into the pipe")
        assert written.error_code == "NOT_A_FILE", written
        assert os.read(reader, 100) == b""  # no writer left, nothing written
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_socket_is_not_read(ws, monkeypatch):
    monkeypatch.chdir(ws)  # a short relative name: socket paths are limited to ~100 bytes
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("sock.txt")
        server.listen()
        outcome = run(ws, "read_file", path="sock.txt")
        assert outcome.error_code == "NOT_A_FILE" and "socket" in outcome.text
        assert "sock.txt" not in run(ws, "grep", pattern="TODO").text
        assert run(ws, "write_file", path="sock.txt", content="x").error_code == "NOT_A_FILE"


def test_a_device_is_not_read_or_written(ws):
    try:
        os.mknod(ws / "zero.txt", 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # like /dev/zero
    except PermissionError:
        pytest.skip("this machine does not let the tests make device nodes")
    outcome = run(ws, "read_file", path="zero.txt")
    assert outcome.error_code == "NOT_A_FILE" and "device" in outcome.text
    assert run(ws, "grep", pattern="TODO", path="zero.txt").error_code == "NOT_A_FILE"
    assert run(ws, "write_file", path="zero.txt", content="x").error_code == "NOT_A_FILE"
    assert "zero.txt" not in run(ws, "list_files").text


# --- patterns ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern", [r"(a+)+$", r"(a|aa)+$", r"(a|a?)+b$", r"(.*a){25}$", r"^(a+)+c", r"(\w+\s?)*$x"]
)
def test_catastrophic_patterns_finish(tmp_path, pattern):
    root = tmp_path / "ws"
    root.mkdir()
    # One 1 MiB line and 1,000 lines of 1,000 a's, none ending as the patterns want.
    (root / "one-line.txt").write_bytes(b"a" * (1024 * 1024 - 2) + b"!\n")
    (root / "many-lines.txt").write_bytes((b"a" * 999 + b"!\n") * 1000)
    outcome = run(root, "grep", pattern=pattern, regex=True)
    assert not outcome.is_error, outcome  # not TOOL_TIMEOUT: it finished
    assert outcome.text == f"no match for {pattern!r}"
    assert outcome.details == {"matches": 0, "files": 2, "bytes": 1024 * 1024 + 1000 * 1001}


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "invalid escape sequence"),
        (r"a(?=b)", "invalid perl operator"),
        (r"a(?!b)", "invalid perl operator"),
        (r"(?<=a)b", "invalid perl operator"),
        (r"(?<!a)b", "invalid perl operator"),
        (r"a\Z", "invalid escape sequence"),
        ("(", "missing )"),
        ("a" * 1001, "the limit is 1000"),
    ],
)
def test_patterns_re2_cannot_run_are_refused_with_the_reason(ws, pattern, reason):
    outcome = run(ws, "grep", pattern=pattern, regex=True)
    assert outcome.error_code == "INVALID_PATTERN", outcome
    assert reason in outcome.text
    if len(pattern) < 100:
        assert "backreferences" in outcome.text and "lookaround" in outcome.text


def test_regular_expressions_work_line_by_line(ws):
    (ws / "code.py").write_text("def f():\n    return 1\n\nclass A:\n    pass\ndef g(): pass")
    found = run(ws, "grep", pattern=r"^def \w+", regex=True, path="code.py").text
    assert found.splitlines() == ["code.py:1: def f():", "code.py:6: def g(): pass"]
    ends = run(ws, "grep", pattern=r"pass$", regex=True, path="code.py").text
    assert ends.splitlines() == ["code.py:5: pass", "code.py:6: def g(): pass"]
    # A match never spans a line break, not even through \s or a negated class.
    assert run(ws, "grep", pattern=r"1\s+class", regex=True).text.startswith("no match")
    assert run(ws, "grep", pattern=r"1[^x]*class", regex=True).text.startswith("no match")
    assert run(ws, "grep", pattern=r"^$", regex=True, path="code.py").text == "code.py:3: "
    assert run(ws, "grep", pattern="CLASS A", ignore_case=True, path="code.py").text == (
        "code.py:4: class A:"
    )
    # Plain text is plain: regex characters match themselves.
    assert run(ws, "grep", pattern="f()", path="code.py").text == "code.py:1: def f():"
    assert run(ws, "grep", pattern=r"f\(\)", path="code.py").text.startswith("no match")
    assert run(ws, "grep", pattern=r"f\(\)", regex=True, path="code.py").text == (
        "code.py:1: def f():"
    )


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet="ab\n", max_size=60),
    needle=st.text(alphabet="ab", min_size=1, max_size=3),
)
def test_grep_numbers_lines_as_a_plain_line_split_does(tmp_path_factory, text, needle):
    root = tmp_path_factory.mktemp("lines")
    (root / "f.txt").write_text(text)
    outcome = tools._grep(Workspace.at(str(root)), {"pattern": needle, "path": "f.txt"})
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    expected = [f"f.txt:{n}: {line}" for n, line in enumerate(lines, 1) if needle in line]
    assert outcome.text.splitlines() == (expected or [f"no match for {needle!r}"])


# --- bounds --------------------------------------------------------------------------------


def test_a_long_line_is_shown_cut_around_the_match(ws):
    (ws / "long.txt").write_text("x" * 50_000 + " NEEDLE " + "y" * 50_000 + "\nshort NEEDLE\n")
    first, second = run(ws, "grep", pattern="NEEDLE", path="long.txt").text.splitlines()
    assert first.startswith("long.txt:1: …") and first.endswith("…")
    assert "NEEDLE" in first and len(first) <= len("long.txt:1: ") + 202
    assert second == "long.txt:2: short NEEDLE"


def test_grep_stops_at_its_bounds_and_says_so(ws, monkeypatch):
    (ws / "many.txt").write_text("hit\n" * 1000)
    found = run(ws, "grep", pattern="hit", path="many.txt").text.splitlines()
    assert len(found) == 201 and found[-1] == "[stopped at 200 matches]"
    (ws / "wide.txt").write_text(("hit " + "w" * 400 + "\n") * 190)
    wide = run(ws, "grep", pattern="hit", path="wide.txt").text
    assert len(wide) <= tools.MAX_GREP_OUTPUT_CHARS + 100
    assert wide.endswith(f"[stopped at {tools.MAX_GREP_OUTPUT_CHARS} characters of output]")
    (ws / "huge.txt").write_bytes(b"hit\n" * (tools.MAX_GREP_FILE_BYTES // 4 + 1))
    assert "[1 files larger than" in run(ws, "grep", pattern="absent").text
    for index in range(5):
        (ws / "docs" / f"f{index}.txt").write_text("TODO\n")
    monkeypatch.setattr(tools, "MAX_GREP_FILES", 3)
    capped = run(ws, "grep", pattern="TODO", path="docs").text.splitlines()
    assert len(capped) == 4 and capped[-1] == "[stopped after 3 files]"
    monkeypatch.setattr(tools, "MAX_GREP_FILES", 1000)
    monkeypatch.setattr(tools, "MAX_GREP_BYTES", 30)
    capped = run(ws, "grep", pattern="TODO", path="docs").text.splitlines()
    assert capped[-1] == "[stopped at the limit of 30 bytes read]"
    monkeypatch.setattr(tools, "MAX_WALK_ENTRIES", 4)
    listing = run(ws, "list_files", path="docs").text.splitlines()
    assert listing[-1] == "[truncated at 4 entries]" and len(listing) == 5


def test_a_tool_past_its_deadline_stops_working(ws):
    late = Workspace.at(str(ws), deadline=time.monotonic() - 1)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("grep", {"pattern": "TODO"}),
        ("list_files", {"recursive": True}),
    ]
    for name, args in calls:
        with pytest.raises(tools.ToolFailure) as failure:
            BUILTIN_TOOLS[name].run(late, args)
        assert failure.value.code == "TOOL_TIMEOUT"
