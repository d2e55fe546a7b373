"""The agent's tools: read_file, list_files, grep and write_file, inside the session's cwd.

Every path is relative to the working directory. Absolute paths, `..` components and
symlinks that resolve outside the directory are refused. A tool never raises into the loop:
each failure is a `ToolOutcome` with `is_error` and an error code. `write_file` needs the
user's approval. Tools run in a worker thread under a per-tool timeout; setting
`STRAND_TOOL_DELAY_MS` makes every tool wait that long first (to see running tools in the
UI, and for tests).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JSON = dict[str, Any]

MAX_READ_BYTES = 256 * 1024
MAX_LIST_ENTRIES = 500
MAX_GREP_MATCHES = 200
MAX_GREP_FILE_BYTES = 1024 * 1024
MAX_WRITE_BYTES = 1024 * 1024
SKIPPED_DIRS = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__", ".strand"})


class ToolFailure(Exception):
    """A refused or failed tool call; `code` goes into the result's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    text: str
    is_error: bool = False
    error_code: str | None = None
    details: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: JSON
    run: Callable[[Workspace, Mapping[str, Any]], ToolOutcome]
    needs_approval: bool = False

    def schema(self) -> JSON:
        """`{name, description, parameters}` as `request/header` and `build_payload` take it."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


# --- the workspace -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workspace:
    root: Path

    @classmethod
    def at(cls, cwd: str) -> Workspace:
        if not cwd:
            raise ToolFailure("NO_WORKSPACE", "this session has no working directory")
        root = Path(cwd)
        if not root.is_absolute():
            root = Path.cwd() / root
        if not root.is_dir():
            raise ToolFailure("NO_WORKSPACE", f"the working directory {cwd} does not exist")
        return cls(root.resolve())

    def resolve(self, relative: Any, *, must_exist: bool = True) -> Path:
        """The real path of `relative` inside the workspace, or a `ToolFailure`."""
        if not isinstance(relative, str) or not relative.strip():
            raise ToolFailure("INVALID_ARGUMENTS", "path must be a non-empty string")
        text = relative.strip()
        if text.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", text):
            raise ToolFailure(
                "OUTSIDE_WORKSPACE",
                f"{text}: absolute paths are refused; give a path relative to the working "
                "directory",
            )
        parts = re.split(r"[\\/]+", text)
        if ".." in parts:
            raise ToolFailure("OUTSIDE_WORKSPACE", f"{text}: '..' is refused in paths")
        candidate = self.root.joinpath(*[p for p in parts if p not in ("", ".")])
        real = Path(os.path.realpath(candidate))
        if real != self.root and self.root not in real.parents:
            raise ToolFailure(
                "OUTSIDE_WORKSPACE", f"{text}: resolves outside the working directory"
            )
        if must_exist and not real.exists():
            raise ToolFailure("NOT_FOUND", f"{text}: no such file or directory")
        return real

    def relative(self, path: Path) -> str:
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    def inside(self, path: Path) -> bool:
        real = Path(os.path.realpath(path))
        return real == self.root or self.root in real.parents


# --- the tools ---------------------------------------------------------------------------


def _read_file(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    path = ws.resolve(args.get("path"))
    if not path.is_file():
        raise ToolFailure("NOT_A_FILE", f"{args.get('path')}: not a regular file")
    size = path.stat().st_size
    with path.open("rb") as handle:
        data = handle.read(MAX_READ_BYTES + 1)
    if b"\x00" in data[:8192]:
        raise ToolFailure("BINARY_FILE", f"{args.get('path')}: a binary file ({size} bytes)")
    text = data[:MAX_READ_BYTES].decode("utf-8", errors="replace")
    lines = text.splitlines(keepends=True)
    offset = int(args.get("offset") or 1)
    limit = args.get("limit")
    chosen = lines[offset - 1 : (offset - 1 + int(limit)) if limit else None]
    body = "".join(chosen)
    notes = []
    if len(data) > MAX_READ_BYTES:
        notes.append(f"[truncated: the file has {size} bytes; the first {MAX_READ_BYTES} are read]")
    if offset > 1 or (limit and offset - 1 + int(limit) < len(lines)):
        notes.append(f"[lines {offset}–{offset + len(chosen) - 1} of {len(lines)}]")
    if notes:
        body = body + ("\n" if body and not body.endswith("\n") else "") + "\n".join(notes)
    return ToolOutcome(body, details={"path": ws.relative(path), "bytes": size})


def _list_files(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    top = ws.resolve(args.get("path") or ".")
    if not top.is_dir():
        raise ToolFailure("NOT_A_DIRECTORY", f"{args.get('path')}: not a directory")
    recursive = bool(args.get("recursive"))
    names: list[str] = []
    truncated = False
    for path in _walk(ws, top, recursive=recursive, files_only=False):
        if len(names) >= MAX_LIST_ENTRIES:
            truncated = True
            break
        names.append(ws.relative(path) + ("/" if path.is_dir() else ""))
    if top != ws.root:
        prefix = ws.relative(top) + "/"
        names = [n[len(prefix) :] if n.startswith(prefix) else n for n in names]
    text = "\n".join(names) if names else "(empty directory)"
    if truncated:
        text += f"\n[truncated at {MAX_LIST_ENTRIES} entries]"
    return ToolOutcome(text, details={"count": len(names)})


def _grep(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ToolFailure("INVALID_ARGUMENTS", "pattern must be a non-empty string")
    flags = re.IGNORECASE if args.get("ignore_case") else 0
    try:
        regex = re.compile(pattern if args.get("regex") else re.escape(pattern), flags)
    except re.error as exc:
        raise ToolFailure("INVALID_ARGUMENTS", f"invalid regular expression: {exc}") from None
    top = ws.resolve(args.get("path") or ".")
    files = [top] if top.is_file() else _walk(ws, top, recursive=True, files_only=True)
    matches: list[str] = []
    for path in files:
        if path.stat().st_size > MAX_GREP_FILE_BYTES:
            continue
        data = path.read_bytes()
        if b"\x00" in data[:8192]:
            continue
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if regex.search(line):
                matches.append(f"{ws.relative(path)}:{number}: {line.strip()[:200]}")
                if len(matches) >= MAX_GREP_MATCHES:
                    matches.append(f"[stopped at {MAX_GREP_MATCHES} matches]")
                    return ToolOutcome("\n".join(matches), details={"matches": len(matches) - 1})
    text = "\n".join(matches) if matches else f"no match for {pattern!r}"
    return ToolOutcome(text, details={"matches": len(matches)})


def _write_file(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolFailure("INVALID_ARGUMENTS", "content must be a string")
    data = content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise ToolFailure(
            "TOO_LARGE", f"content is {len(data)} bytes; the limit is {MAX_WRITE_BYTES}"
        )
    path = ws.resolve(args.get("path"), must_exist=False)
    if path.is_dir():
        raise ToolFailure("NOT_A_FILE", f"{args.get('path')}: is a directory")
    existed = path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not ws.inside(path.parent):  # a symlinked directory created in between
        raise ToolFailure(
            "OUTSIDE_WORKSPACE", f"{args.get('path')}: resolves outside the working directory"
        )
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    verb = "Overwrote" if existed else "Created"
    return ToolOutcome(
        f"{verb} {ws.relative(path)} ({len(data)} bytes)",
        details={"path": ws.relative(path), "bytes": len(data), "created": not existed},
    )


def _walk(ws: Workspace, top: Path, *, recursive: bool, files_only: bool) -> list[Path]:
    """Entries under `top`, sorted, skipping hidden and tool directories and any symlink
    that leads outside the workspace (symlinked directories are not descended into)."""
    found: list[Path] = []
    pending = [top]
    while pending:
        current = pending.pop(0)
        try:
            children = sorted(current.iterdir(), key=lambda p: p.name)
        except OSError:
            continue
        for child in children:
            if child.name in SKIPPED_DIRS or (child.name.startswith(".") and child.is_dir()):
                continue
            if child.is_symlink() and (files_only or not ws.inside(child)):
                continue  # a search reads each file once, under its own name
            is_dir = child.is_dir()
            if not (files_only and is_dir):
                found.append(child)
            if is_dir and recursive and not child.is_symlink():
                pending.append(child)
            if len(found) > MAX_LIST_ENTRIES * 20:
                return found
    return found


def _string(description: str) -> JSON:
    return {"type": "string", "description": description}


READ_FILE = Tool(
    "read_file",
    "Read a text file in the working directory.",
    {
        "type": "object",
        "properties": {
            "path": _string("Path relative to the working directory."),
            "offset": {"type": "integer", "minimum": 1, "description": "First line (1-based)."},
            "limit": {"type": "integer", "minimum": 1, "description": "Number of lines."},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    _read_file,
)
LIST_FILES = Tool(
    "list_files",
    "List the files and directories in a directory of the working directory.",
    {
        "type": "object",
        "properties": {
            "path": _string("Directory relative to the working directory (default '.')."),
            "recursive": {"type": "boolean", "description": "Include subdirectories."},
        },
        "additionalProperties": False,
    },
    _list_files,
)
GREP = Tool(
    "grep",
    "Search the text files of the working directory for a string (or a regular expression "
    "with regex=true); prints path:line: text for each match.",
    {
        "type": "object",
        "properties": {
            "pattern": _string("What to search for."),
            "path": _string("File or directory to search (default '.')."),
            "regex": {"type": "boolean", "description": "Read the pattern as a regex."},
            "ignore_case": {"type": "boolean", "description": "Ignore letter case."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    _grep,
)
WRITE_FILE = Tool(
    "write_file",
    "Create or overwrite a text file in the working directory (the user must approve).",
    {
        "type": "object",
        "properties": {
            "path": _string("Path relative to the working directory."),
            "content": _string("The whole new content of the file."),
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    _write_file,
    needs_approval=True,
)

BUILTIN_TOOLS: dict[str, Tool] = {t.name: t for t in (READ_FILE, LIST_FILES, GREP, WRITE_FILE)}


# --- arguments and running ---------------------------------------------------------------

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def check_arguments(schema: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    """What is wrong with `args` for an object schema (the subset our tools use), or None."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    for name in schema.get("required") or ():
        if name not in args:
            return f"missing required argument {name!r}"
    for name, value in args.items():
        spec = properties.get(name)
        if spec is None:
            if schema.get("additionalProperties") is False:
                return f"unknown argument {name!r}"
            continue
        expected = spec.get("type")
        types = _JSON_TYPES.get(expected) if isinstance(expected, str) else None
        if types is not None:
            wrong_bool = isinstance(value, bool) and expected in ("integer", "number")
            if not isinstance(value, types) or wrong_bool:
                return f"argument {name!r} must be of type {expected}"
        minimum = spec.get("minimum")
        if isinstance(minimum, int | float) and isinstance(value, int | float) and value < minimum:
            return f"argument {name!r} must be at least {minimum}"
    return None


@dataclass
class Toolbox:
    """The tools a session may use, bound to its working directory."""

    cwd: str
    tools: dict[str, Tool] = field(default_factory=dict)
    timeout_s: float = 30.0

    @classmethod
    def for_session(cls, names: Sequence[str], cwd: str, timeout_s: float = 30.0) -> Toolbox:
        chosen = {n: BUILTIN_TOOLS[n] for n in names if n in BUILTIN_TOOLS}
        return cls(cwd=cwd, tools=chosen, timeout_s=timeout_s)

    def schemas(self) -> list[JSON]:
        return [tool.schema() for tool in self.tools.values()]

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    async def run(self, name: str, args: Mapping[str, Any]) -> ToolOutcome:
        """Run a tool with its timeout; never raises (except when cancelled)."""
        tool = self.tools.get(name)
        if tool is None:
            return ToolOutcome(f"there is no tool named {name!r}", True, "UNKNOWN_TOOL")
        delay = float(os.environ.get("STRAND_TOOL_DELAY_MS") or 0) / 1000
        try:
            async with asyncio.timeout(self.timeout_s):
                if delay > 0:
                    await asyncio.sleep(delay)
                return await asyncio.to_thread(_run_sync, tool, self.cwd, args)
        except TimeoutError:
            return ToolOutcome(
                f"{name} did not finish within {self.timeout_s:g} s and was stopped",
                True,
                "TOOL_TIMEOUT",
            )


def _run_sync(tool: Tool, cwd: str, args: Mapping[str, Any]) -> ToolOutcome:
    try:
        return tool.run(Workspace.at(cwd), args)
    except ToolFailure as exc:
        return ToolOutcome(str(exc), True, exc.code)
    except OSError as exc:
        return ToolOutcome(f"{tool.name} failed: {exc.strerror or exc}", True, "TOOL_ERROR")
    except Exception as exc:  # a tool bug must not crash the turn
        return ToolOutcome(f"{tool.name} failed: {type(exc).__name__}: {exc}", True, "TOOL_ERROR")
