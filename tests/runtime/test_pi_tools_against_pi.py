"""Strand's read, ls and find against Pi 1.6.0's own tools, run by Node on the same folder
with the same arguments: the same text and the same notices (read's truncation by lines
and by bytes, a first line past the byte limit, a range the caller limited; ls's sorting,
directory marks and limit; find's globs, paths and limit).

Pi's find runs `fd` by default, and Debian 12's fd (8.6) is older than the options Pi
passes it; so Pi's find runs here through its own `operations.glob` hook, on Node's
`fs.globSync`, with fd's rule that a pattern without `/` matches a name at any depth. What
is compared there is Pi's own listing, relativizing, limit and notices."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runtime import pi_tools
from runtime.tools import Workspace, _run_sync

PI16 = Path(__file__).resolve().parents[1] / "fixtures" / "pi" / "v1.6"
NODE = PI16 / "node_modules" / "node" / "bin" / "node"
TOOLS = PI16 / "node_modules/@earendil-works/pi-coding-agent/dist/core/tools"

pytestmark = pytest.mark.skipif(
    not NODE.exists(), reason="Pi 1.6 is not installed (make pi16-deps)"
)

RUN_PI = """
const [tools, cwd, calls] = [process.argv[2], process.argv[3], JSON.parse(process.argv[4])];
const make = {
  read: (await import(tools + "/read.js")).createReadToolDefinition,
  ls: (await import(tools + "/ls.js")).createLsToolDefinition,
  find: (await import(tools + "/find.js")).createFindToolDefinition,
};
const fs = await import("node:fs");
const path = await import("node:path");
const findOps = {
  exists: async (p) => fs.existsSync(p),
  glob: async (pattern, root, { limit }) =>
    fs.globSync(pattern.includes("/") ? pattern : "**/" + pattern, { cwd: root })
      .sort()
      .slice(0, limit)
      .map((p) => path.join(root, p)),
};
const out = [];
for (const [name, args] of calls) {
  try {
    const r = await make[name](cwd, name === "find" ? { operations: findOps } : {}).execute("call", args, undefined, undefined, { cwd });
    out.push({ text: r.content.map((c) => c.text).join(""), details: r.details ?? null });
  } catch (e) {
    out.push({ error: String(e.message) });
  }
}
console.log(JSON.stringify(out));
"""


def pi_results(tmp_path: Path, root: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    script = tmp_path / "run_pi.mjs"
    script.write_text(RUN_PI)
    env = {**os.environ, "PI_OFFLINE": "1"}  # Pi never downloads a tool here
    done = subprocess.run(
        [str(NODE), str(script), str(TOOLS), str(root), json.dumps(calls)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    )
    return list(json.loads(done.stdout))


def ours(root: Path, name: str, args: dict[str, Any]) -> Any:
    return _run_sync(
        pi_tools.PI_TOOLS[name], str(root), args, float("inf"), Workspace.at(str(root)).quota
    )


def test_read_cuts_and_notes_as_pi_does(tmp_path: Path) -> None:
    root = tmp_path / "w"
    root.mkdir()
    (root / "short.txt").write_text("one\ntwo\nthree\n")
    (root / "no_newline.txt").write_text("one\ntwo")
    (root / "many.txt").write_text("".join(f"line {i}\n" for i in range(1, 3001)))
    (root / "wide.txt").write_text("".join("é" * 300 + f" {i}\n" for i in range(400)))
    (root / "huge_line.txt").write_text("x" * 60_000 + "\nafter\n")
    (root / "empty.txt").write_text("")
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read", {"path": "short.txt"}),
        ("read", {"path": "no_newline.txt"}),
        ("read", {"path": "short.txt", "offset": 2}),
        ("read", {"path": "short.txt", "limit": 1}),
        ("read", {"path": "short.txt", "offset": 2, "limit": 1}),
        ("read", {"path": "many.txt"}),
        ("read", {"path": "many.txt", "offset": 2500}),
        ("read", {"path": "many.txt", "offset": 10, "limit": 5}),
        ("read", {"path": "wide.txt"}),
        ("read", {"path": "wide.txt", "offset": 390}),
        ("read", {"path": "huge_line.txt"}),
        ("read", {"path": "huge_line.txt", "offset": 2}),
        ("read", {"path": "empty.txt"}),
        ("read", {"path": "short.txt", "offset": 10}),
    ]
    for (name, args), theirs in zip(calls, pi_results(tmp_path, root, calls), strict=True):
        mine = ours(root, name, args)
        if "error" in theirs:
            assert mine.is_error and mine.text == theirs["error"], args
            continue
        assert mine.text == theirs["text"], args
        if theirs["details"] is None:
            assert mine.details is None, args
            continue
        cut, pis = mine.details["truncation"], theirs["details"]["truncation"]
        for key in ("truncated", "truncatedBy", "outputLines", "outputBytes"):
            assert cut[key] == pis[key], (args, key)
        assert cut["firstLineExceedsLimit"] == pis["firstLineExceedsLimit"], args


def test_ls_lists_as_pi_does(tmp_path: Path) -> None:
    root = tmp_path / "w"
    (root / "sub" / "deeper").mkdir(parents=True)
    for name in ("b.txt", "A.txt", ".hidden", "a.md", "Z", "sub/x.py"):
        (root / name).write_text("x")
    (root / "Zdir").mkdir()
    calls: list[tuple[str, dict[str, Any]]] = [
        ("ls", {}),
        ("ls", {"path": "sub"}),
        ("ls", {"path": "sub/deeper"}),
        ("ls", {"limit": 3}),
    ]
    for (name, args), theirs in zip(calls, pi_results(tmp_path, root, calls), strict=True):
        mine = ours(root, name, args)
        assert mine.text == theirs["text"], args
        assert (mine.details or None) == theirs["details"], args


def test_find_finds_as_pi_does(tmp_path: Path) -> None:
    root = tmp_path / "w"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "docs").mkdir()
    for name in ("top.py", "src/a.py", "src/pkg/b.py", "src/pkg/c.ts", "docs/readme.md"):
        (root / name).write_text("x")
    calls: list[tuple[str, dict[str, Any]]] = [
        ("find", {"pattern": "*.py"}),
        ("find", {"pattern": "src/**/*.py"}),
        ("find", {"pattern": "*.{py,ts}", "path": "src"}),
        ("find", {"pattern": "*.md"}),
        ("find", {"pattern": "*.rs"}),
        ("find", {"pattern": "*.py", "limit": 2}),
    ]
    for (name, args), theirs in zip(calls, pi_results(tmp_path, root, calls), strict=True):
        mine = ours(root, name, args)
        if args.get("limit"):
            # Which two of three come first is each walk's own order; the notice is the one
            # Pi writes after fd (its `operations.glob` path words it shorter).
            assert mine.details == theirs["details"], args
            assert len(mine.text.split("\n\n")[0].split("\n")) == 2
            assert mine.text.endswith(
                "[2 results limit reached. Use limit=4 for more, or refine pattern]"
            )
            continue
        assert sorted(mine.text.split("\n")) == sorted(theirs["text"].split("\n")), args
        assert (mine.details or None) == theirs["details"], args
