"""Pi's tools on a workspace: their schemas are Pi 1.6.0's own, `edit` makes several exact
replacements and says what it changed, `ls` and `find` list as Pi does, paths may be
absolute inside the working directory, and a link the sandbox makes leads nowhere."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from runtime import pi_tools, sandbox
from runtime.tools import Toolbox, Workspace, _run_sync

PI16 = Path(__file__).resolve().parents[1] / "fixtures" / "pi" / "v1.6"
NODE = PI16 / "node_modules" / "node" / "bin" / "node"


def call(root: Path, name: str, **args: Any) -> Any:
    return _run_sync(
        pi_tools.PI_TOOLS[name], str(root), args, float("inf"), Workspace.at(str(root)).quota
    )


def test_the_schemas_are_the_fixture_of_pi_160() -> None:
    names = ["read", "write", "edit", "bash", "grep", "find", "ls"]
    assert list(pi_tools.PI_TOOLS) == names
    for name in names:
        tool = pi_tools.PI_TOOLS[name]
        assert tool.schema() == pi_tools.SCHEMAS[name]
    assert {n for n, t in pi_tools.PI_TOOLS.items() if t.needs_approval} == {
        "write",
        "edit",
        "bash",
    }
    edits = pi_tools.SCHEMAS["edit"]["parameters"]["properties"]["edits"]
    assert edits["items"]["required"] == ["oldText", "newText"]


@pytest.mark.skipif(not NODE.exists(), reason="Pi 1.6 is not installed (make pi16-deps)")
def test_the_fixture_is_what_pi_160_itself_says() -> None:
    done = subprocess.run(
        [str(NODE), str(PI16 / "tool_schemas.mjs"), str(PI16)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout) == pi_tools.SCHEMAS


def test_edit_makes_several_replacements_against_the_original(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n")
    done = call(
        tmp_path,
        "edit",
        path="a.py",
        edits=[{"oldText": "two\n", "newText": "TWO\n"}, {"oldText": "nine", "newText": "9"}],
    )
    assert not done.is_error, done.text
    assert done.text == "Successfully replaced 2 block(s) in a.py."
    assert (tmp_path / "a.py").read_text() == (
        "one\nTWO\nthree\nfour\nfive\nsix\nseven\neight\n9\nten\n"
    )
    assert done.details["firstChangedLine"] == 2
    # `-N old`, `+N new`, ` N context`, the numbers right-aligned.
    shown = [" ".join(line.split()) for line in done.details["diff"].splitlines()]
    assert shown[:4] == ["1 one", "- 2 two", "+ 2 TWO", "3 three"]
    assert "- 9 nine" in shown and "+ 9 9" in shown
    patch = done.details["patch"]
    assert patch.startswith("--- a.py\n+++ a.py\n@@ ")
    assert "-two\n+TWO\n" in patch and "-nine\n+9\n" in patch


EDIT_CASES = [
    ("one\ntwo\nthree\n", [{"oldText": "two", "newText": "2"}]),
    (
        "".join(f"line {n}\n" for n in range(1, 40)),
        [
            {"oldText": "line 3\n", "newText": "three\n"},
            {"oldText": "line 30\n", "newText": "thirty\nand more\n"},
        ],
    ),
    ("no newline at the end", [{"oldText": "end", "newText": "finish"}]),
    ("a\nb\nc\nd\n", [{"oldText": "b\nc\n", "newText": ""}]),
    ("".join(f"{n}\n" for n in range(40)), [{"oldText": "20\n", "newText": "twenty\n"}]),
    ("x\ny\n", [{"oldText": "y\n", "newText": "y\nz"}]),
    ("only\n", [{"oldText": "only\n", "newText": ""}]),
]


@pytest.mark.skipif(not NODE.exists(), reason="Pi 1.6 is not installed (make pi16-deps)")
def test_edit_diff_and_patch_are_pis_on_the_same_inputs(tmp_path: Path) -> None:
    script = tmp_path / "diff.mjs"
    base = PI16 / "node_modules/@earendil-works/pi-coding-agent/dist/core/tools/edit-diff.js"
    script.write_text(
        f"const m = await import({json.dumps(str(base))});\n"
        "const cases = JSON.parse(process.argv[2]);\n"
        "console.log(JSON.stringify(cases.map(([text, edits]) => {\n"
        "  const r = m.applyEditsToNormalizedContent(text, edits, 'f.txt');\n"
        "  return m.generateEditDiff('f.txt', r.baseContent, r.newContent, r.replacements);\n"
        "})));\n"
    )
    done = subprocess.run(
        [str(NODE), str(script), json.dumps(EDIT_CASES)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for (text, edits), theirs in zip(EDIT_CASES, json.loads(done.stdout), strict=True):
        (tmp_path / "f.txt").write_text(text)
        ours = call(tmp_path, "edit", path="f.txt", edits=edits)
        assert ours.details == theirs, (text, edits)


@pytest.mark.parametrize(
    ("edits", "code"),
    [
        ([{"oldText": "absent", "newText": "x"}], "EDIT_NOT_FOUND"),
        ([{"oldText": "a", "newText": "x"}], "EDIT_NOT_UNIQUE"),
        ([{"oldText": "ab", "newText": "x"}, {"oldText": "bc", "newText": "y"}], "EDIT_OVERLAP"),
        ([{"oldText": "abc", "newText": "abc"}], "EDIT_NO_CHANGE"),
        ([], "INVALID_ARGUMENTS"),
        ([{"oldText": "", "newText": "x"}], "INVALID_ARGUMENTS"),
    ],
)
def test_an_edit_that_cannot_apply_changes_nothing(
    tmp_path: Path, edits: list[dict[str, str]], code: str
) -> None:
    (tmp_path / "f.txt").write_text("abc a\n")
    done = call(tmp_path, "edit", path="f.txt", edits=edits)
    assert (done.is_error, done.error_code) == (True, code), done.text
    assert (tmp_path / "f.txt").read_text() == "abc a\n"


def test_ls_sorts_like_pi_marks_directories_and_shows_dotfiles(tmp_path: Path) -> None:
    (tmp_path / "B.txt").write_text("")
    (tmp_path / "a.txt").write_text("")
    (tmp_path / ".env").write_text("")
    (tmp_path / "src").mkdir()
    done = call(tmp_path, "ls")
    assert done.text == ".env\na.txt\nB.txt\nsrc/"
    assert call(tmp_path, "ls", path="src").text == "(empty directory)"
    limited = call(tmp_path, "ls", limit=2)
    assert limited.text == ".env\na.txt\n\n[2 entries limit reached. Use limit=4 for more]"
    assert limited.details == {"entryLimitReached": 2}


def test_find_matches_globs_at_any_depth(tmp_path: Path) -> None:
    (tmp_path / "src" / "deep").mkdir(parents=True)
    (tmp_path / "src" / "a.py").write_text("")
    (tmp_path / "src" / "deep" / "b.py").write_text("")
    (tmp_path / "c.txt").write_text("")
    assert call(tmp_path, "find", pattern="*.py").text == "src/a.py\nsrc/deep/b.py"
    assert call(tmp_path, "find", pattern="src/*.py").text == "src/a.py"
    assert call(tmp_path, "find", pattern="**/*.{py,txt}").text.splitlines() == [
        "c.txt",
        "src/a.py",
        "src/deep/b.py",
    ]
    assert call(tmp_path, "find", pattern="*.rs").text == "No files found matching pattern"


def test_paths_may_be_absolute_inside_the_working_directory_only(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("inside\n")
    assert call(tmp_path, "read", path=str(tmp_path / "in.txt")).text == "inside\n"
    outside = call(tmp_path, "read", path="/etc/hostname")
    assert outside.error_code == "OUTSIDE_WORKSPACE"
    wrote = call(tmp_path, "write", path=str(tmp_path / "new.txt"), content="x")
    assert wrote.text == f"Successfully wrote to {tmp_path / 'new.txt'}"
    assert (tmp_path / "new.txt").read_text() == "x"


def test_pis_grep_reads_a_regex_unless_literal(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("a.c\nabc\n")
    assert call(tmp_path, "grep", pattern="a.c").text == "f.txt:1: a.c\nf.txt:2: abc"
    assert call(tmp_path, "grep", pattern="a.c", literal=True).text == "f.txt:1: a.c"
    assert call(tmp_path, "grep", pattern="ABC", ignoreCase=True).text == "f.txt:2: abc"
    assert call(tmp_path, "grep", pattern="nothing").text == "No matches found"


def test_pis_grep_shows_context_lines_and_filters_by_glob(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("one\ntwo\nTODO three\nfour\nfive\n")
    (tmp_path / "src" / "b.txt").write_text("TODO elsewhere\n")
    (tmp_path / "top.py").write_text("x\nTODO top\n")
    found = call(tmp_path, "grep", pattern="TODO", glob="*.py", context=1)
    assert found.text == (
        "top.py-1- x\ntop.py:2: TODO top\nsrc/a.py-2- two\nsrc/a.py:3: TODO three\nsrc/a.py-4- four"
    )
    assert call(tmp_path, "grep", pattern="TODO", glob="src/**/*.txt").text == (
        "src/b.txt:1: TODO elsewhere"
    )
    assert "b.txt" not in call(tmp_path, "grep", pattern="TODO", glob="!*.txt").text
    limited = call(tmp_path, "grep", pattern="TODO", limit=1)
    assert limited.details == {"matchLimitReached": 1}
    assert limited.text.endswith(
        "[1 matches limit reached. Use limit=2 for more, or refine pattern]"
    )


@pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here")
def test_a_link_made_in_the_sandbox_is_not_followed_by_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours\n")
    work = tmp_path / "work"
    work.mkdir()
    made = call(work, "bash", command=f"ln -s {secret} link; ln -s / root; ln -s .. up")
    assert not made.is_error, made.text
    assert (work / "link").is_symlink()
    for path in ("link", "root/etc/hostname", "up/secret.txt"):
        done = call(work, "read", path=path)
        assert done.is_error and done.error_code == "SYMLINK_REFUSED", (path, done.text)
        assert "not yours" not in done.text
    edited = call(work, "edit", path="link", edits=[{"oldText": "not", "newText": "now"}])
    assert edited.error_code == "SYMLINK_REFUSED"
    assert secret.read_text() == "not yours\n"
    assert "link" in call(work, "ls").text  # listed, never followed


def test_without_a_sandbox_bash_is_not_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ["read", "write", "edit", "bash", "grep", "find", "ls"]
    monkeypatch.setattr(sandbox, "available", lambda: False)
    assert "bash" not in Toolbox.for_session(names, "/tmp").tools
    monkeypatch.setattr(sandbox, "available", lambda: True)
    assert "bash" in Toolbox.for_session(names, "/tmp").tools


def test_older_names_keep_their_own_grep() -> None:
    older = Toolbox.for_session(["read_file", "list_files", "grep", "write_file"], "/tmp")
    assert "regex" in older.tools["grep"].parameters["properties"]
    pi = Toolbox.for_session(["read", "grep"], "/tmp")
    assert "literal" in pi.tools["grep"].parameters["properties"]


@pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here")
def test_a_cancelled_bash_call_stops_its_command(tmp_path: Path) -> None:
    marker = f"cancel-{uuid.uuid4().hex}"
    box = Toolbox.for_session(["bash"], str(tmp_path), timeout_s=600)

    async def cancel_soon() -> None:
        task = asyncio.create_task(box.run("bash", {"command": f"sleep 600; : {marker}"}))
        while not _running(marker):
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(cancel_soon(), 60))
    gone = threading.Event()
    for _ in range(200):  # the tool thread kills it right after the cancel
        if not _running(marker):
            gone.set()
            break
        threading.Event().wait(0.05)
    assert gone.is_set()


def _running(marker: str) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False
