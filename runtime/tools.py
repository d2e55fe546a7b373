"""The agent's tools: read_file, list_files, grep and write_file, inside the session's cwd.

Every path is relative to the working directory; absolute paths and `..` components are
refused. A path is opened one component at a time, each from the descriptor of the directory
before it and never following a symbolic link (`openat` with `O_NOFOLLOW`), so no link, even
one swapped in while a tool runs, leads a tool out of the directory: a link is refused
(`SYMLINK_REFUSED`), and the walks of `list_files` and `grep` pass over links.

Only regular files are read or written. A file is opened non-blocking (opening a FIFO must not
wait for a writer) and checked with `fstat` on the open descriptor; FIFOs, devices and sockets
are refused, or skipped by the walks.

Regular expressions run on RE2: matching is linear in the text, and RE2 releases the GIL while
it matches, so no pattern can hold the process. A pattern RE2 cannot run (backreferences,
lookaround) is refused with `INVALID_PATTERN`. Each tool's work is bounded: bytes read, files
and entries visited, matches, output size and the length of a shown line.

`write_file` writes within the session's workspace quota (`WorkspaceQuota`): the folder it
counts (the working directory, or a folder above it that several sessions share) holds at
most so many bytes in its files and so many files and directories together, and one write
is at most so large and so deep. Writes to one folder take turns (an `flock` on it, which
also holds across processes on one machine), so parallel calls cannot each see room that
only one of them has. A write past a bound is refused with `QUOTA_EXCEEDED` naming it.

A tool never raises into the loop: each failure is a `ToolOutcome` with `is_error` and an error
code. `write_file` needs the user's approval. Tools run on a pool of worker threads of lower
scheduling priority (niced), under a per-tool timeout; the same deadline is checked inside the
walks and between files, so a tool that is timed out also stops working. Setting
`STRAND_TOOL_DELAY_MS` makes every tool wait that long first (to see running tools in the UI,
and for tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import math
import os
import re
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import re2

if TYPE_CHECKING:
    from runtime.jobs import SessionJobs

JSON = dict[str, Any]

MAX_READ_BYTES = 256 * 1024
MAX_LIST_ENTRIES = 500
MAX_WALK_ENTRIES = 10_000  # entries a walk looks at, in all its directories together
MAX_WRITE_BYTES = 1024 * 1024
# A workspace's quota unless the server sets one (`WorkspaceQuota`).
WORKSPACE_MAX_BYTES = 1024 * 1024 * 1024
WORKSPACE_MAX_ENTRIES = 10_000
WRITE_MAX_DEPTH = 32
# Directories below the quota's folder a measurement goes into: each level holds a
# descriptor while its subtree is counted, so this bounds a tool thread's open files.
MAX_MEASURED_DEPTH = 128
MAX_PATTERN_CHARS = 1000
# RE2's memory for one compiled pattern (program and DFA cache); past it RE2 refuses to
# compile, or falls back from its DFA to its (still linear) NFA. The re2 module keeps up to 128
# compiled patterns, so this also bounds that cache.
PATTERN_MAX_MEM = 4 * 1024 * 1024
MAX_GREP_MATCHES = 200
MAX_GREP_FILE_BYTES = 1024 * 1024  # larger files are skipped (and counted)
MAX_GREP_FILES = 5_000
MAX_GREP_BYTES = 32 * 1024 * 1024  # read by one search, all files together
MAX_GREP_OUTPUT_CHARS = 32 * 1024
MAX_GREP_LINE_CHARS = 200
SKIPPED_DIRS = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__", ".strand"})

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_REWRITE_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


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
class CallSite:
    """Where a tool call runs: its id and the turn (and step) of the reply that made it."""

    call_id: str
    turn: int | None = None
    step: int | None = None


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
class WorkspaceQuota:
    """How much the agent's writes may fill. The folder counted, `folder` (the working
    directory when "", else a folder that holds it, which the sessions working anywhere in
    it share), holds at most `max_bytes` in its files and `max_entries` files, directories,
    links and special files together; one write is at most `max_write_bytes`, to a path at
    most `max_depth` components deep. 0 turns a bound off."""

    max_bytes: int = WORKSPACE_MAX_BYTES
    max_entries: int = WORKSPACE_MAX_ENTRIES
    max_write_bytes: int = MAX_WRITE_BYTES
    max_depth: int = WRITE_MAX_DEPTH
    folder: str = ""


@dataclass(frozen=True, slots=True)
class Workspace:
    """The working directory as one tool run sees it, with the run's deadline
    (`time.monotonic()`; tools call `check_time` as they go) and the quota its writes are
    held to (`quota_root`: the folder the quota counts, the root or a folder above it)."""

    root: Path
    deadline: float = math.inf
    quota: WorkspaceQuota = WorkspaceQuota()
    quota_root: Path | None = None
    cancel: threading.Event | None = None  # set when the call is cancelled (bash stops)
    # Handed each piece of a running command's output as it is read (bash streams it).
    output: Callable[[bytes], None] | None = None

    @classmethod
    def at(
        cls,
        cwd: str,
        *,
        deadline: float = math.inf,
        quota: WorkspaceQuota = WorkspaceQuota(),
        cancel: threading.Event | None = None,
        output: Callable[[bytes], None] | None = None,
    ) -> Workspace:
        if not cwd:
            raise ToolFailure("NO_WORKSPACE", "this session has no working directory")
        root = Path(cwd)
        if not root.is_absolute():
            root = Path.cwd() / root
        if not root.is_dir():
            raise ToolFailure("NO_WORKSPACE", f"the working directory {cwd} does not exist")
        root = root.resolve()
        counted = Path(quota.folder).resolve() if quota.folder else root
        if counted != root and counted not in root.parents:
            counted = root  # a folder that does not hold the workspace counts nothing of it
        return cls(root, deadline, quota, counted, cancel, output)

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise ToolFailure("TOOL_TIMEOUT", "the tool ran out of time and was stopped")

    def parts(self, relative: Any) -> tuple[str, ...]:
        """The components of `relative` (empty for the directory itself), or a `ToolFailure`
        for anything that is not a plain relative path."""
        if not isinstance(relative, str) or not relative.strip():
            raise ToolFailure("INVALID_ARGUMENTS", "path must be a non-empty string")
        text = relative.strip()
        if "\x00" in text:
            raise ToolFailure("INVALID_ARGUMENTS", "path must not contain a NUL character")
        if text.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", text):
            raise ToolFailure(
                "OUTSIDE_WORKSPACE",
                f"{text}: absolute paths are refused; give a path relative to the working "
                "directory",
            )
        parts = re.split(r"[\\/]+", text)
        if ".." in parts:
            raise ToolFailure("OUTSIDE_WORKSPACE", f"{text}: '..' is refused in paths")
        return tuple(p for p in parts if p not in ("", "."))

    def open_dir(self, parts: Sequence[str], *, shown: str, create: bool = False) -> int:
        """A descriptor of the directory `parts`, reached one component at a time without
        following links; with `create`, missing directories are made on the way."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for index, name in enumerate(parts):
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise ToolFailure(
                            "NOT_FOUND", f"{shown}: no such file or directory"
                        ) from None
                    # One made meanwhile is opened (and checked) below like any other.
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=fd)
                    try:
                        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        raise _opening_error(
                            fd, name, parts[: index + 1], shown, exc, want_dir=True
                        ) from None
                except OSError as exc:
                    raise _opening_error(
                        fd, name, parts[: index + 1], shown, exc, want_dir=True
                    ) from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_entry(self, parts: Sequence[str], *, shown: str) -> tuple[int, os.stat_result]:
        """A read descriptor of the file or directory `parts` (not following links, not
        waiting on a FIFO) and its `fstat`."""
        if not parts:
            fd = self.open_dir(parts, shown=shown)
            return fd, os.fstat(fd)
        parent = self.open_dir(parts[:-1], shown=shown)
        try:
            try:
                fd = os.open(parts[-1], _READ_FLAGS, dir_fd=parent)
            except OSError as exc:
                raise _opening_error(parent, parts[-1], parts, shown, exc, want_dir=False) from None
        finally:
            os.close(parent)
        try:
            return fd, os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise


def _opening_error(
    dir_fd: int, name: str, parts: Sequence[str], shown: str, exc: OSError, *, want_dir: bool
) -> Exception:
    """Why `name` (the last of `parts`) in `dir_fd` could not be opened: a `ToolFailure` when
    the reason is the caller's (a link, a missing component, the wrong kind of file), else
    `exc` itself."""
    at = "/".join(parts)
    where = shown if at == shown else f"{shown}: {at}"
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return ToolFailure("NOT_FOUND", f"{where}: no such file or directory")
    except OSError:
        return exc
    kind = _kind(info.st_mode)
    if stat.S_ISLNK(info.st_mode):
        return ToolFailure(
            "SYMLINK_REFUSED", f"{where}: is a symbolic link, and tools do not follow links"
        )
    if want_dir and not stat.S_ISDIR(info.st_mode):
        return ToolFailure("NOT_A_DIRECTORY", f"{where}: {kind}, not a directory")
    if not want_dir and not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode):
        return ToolFailure("NOT_A_FILE", f"{where}: {kind}, not a regular file")
    return exc


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


@dataclass
class _Walk:
    """Directories and regular files under `top`, breadth first, each directory's entries
    sorted by name. Hidden and tool directories are left out; links and special files are
    passed over and counted in `skipped`; at most `MAX_WALK_ENTRIES` entries are looked at
    (`truncated` tells). Each item is `(dir_fd, name, parts, is_dir)`; `dir_fd` is open only
    until the next item is asked for."""

    ws: Workspace
    top: tuple[str, ...]
    recursive: bool
    skipped: int = 0
    truncated: bool = False

    def __iter__(self) -> Iterator[tuple[int, str, tuple[str, ...], bool]]:
        pending: deque[tuple[str, ...]] = deque([self.top])
        budget = MAX_WALK_ENTRIES
        while pending:
            parts = pending.popleft()
            self.ws.check_time()
            try:
                fd = self.ws.open_dir(parts, shown="/".join(parts) or ".")
            except (ToolFailure, OSError):
                if parts == self.top:
                    raise
                continue  # replaced or removed since it was listed
            try:
                with os.scandir(fd) as scan:
                    entries = sorted(islice(scan, budget + 1), key=lambda e: e.name)
                for entry in entries:
                    budget -= 1
                    if budget < 0:
                        self.truncated = True
                        return
                    name = entry.name
                    if name in SKIPPED_DIRS:
                        continue
                    if entry.is_symlink():
                        self.skipped += 1
                    elif entry.is_dir(follow_symlinks=False):
                        if name.startswith("."):
                            continue
                        yield fd, name, (*parts, name), True
                        if self.recursive:
                            pending.append((*parts, name))
                    elif entry.is_file(follow_symlinks=False):
                        yield fd, name, (*parts, name), False
                    else:
                        self.skipped += 1
            finally:
                os.close(fd)


def _skipped_note(skipped: int) -> str:
    return f"[{skipped} links and special files skipped]" if skipped else ""


# --- the tools ---------------------------------------------------------------------------


def _read_file(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    shown = str(args.get("path"))
    parts = ws.parts(args.get("path"))
    fd, info = ws.open_entry(parts, shown=shown)
    try:
        if not stat.S_ISREG(info.st_mode):
            raise ToolFailure("NOT_A_FILE", f"{shown}: {_kind(info.st_mode)}, not a regular file")
        data = _read_at_most(fd, MAX_READ_BYTES + 1)
    finally:
        os.close(fd)
    size = info.st_size
    if b"\x00" in data[:8192]:
        raise ToolFailure("BINARY_FILE", f"{shown}: a binary file ({size} bytes)")
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
    return ToolOutcome(body, details={"path": "/".join(parts) or ".", "bytes": size})


def _list_files(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    shown = str(args.get("path") or ".")
    top = ws.parts(shown)
    walk = _Walk(ws, top, recursive=bool(args.get("recursive")))
    names: list[str] = []
    truncated = False
    for _, _, parts, is_dir in walk:
        if len(names) >= MAX_LIST_ENTRIES:
            truncated = True
            break
        names.append("/".join(parts[len(top) :]) + ("/" if is_dir else ""))
    lines = names or ["(empty directory)"]
    if truncated or walk.truncated:
        lines.append(f"[truncated at {len(names)} entries]")
    if walk.skipped:
        lines.append(_skipped_note(walk.skipped))
    return ToolOutcome("\n".join(lines), details={"count": len(names)})


def compile_pattern(pattern: str, *, regex: bool, ignore_case: bool) -> Any:
    """The RE2 pattern of a grep: literal text, or a regular expression in RE2 syntax, where
    `^`/`$` match at line ends and nothing matches a line break (matches stay in one line)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolFailure(
            "INVALID_PATTERN",
            f"the pattern has {len(pattern)} characters; the limit is {MAX_PATTERN_CHARS}",
        )
    options = re2.Options()
    options.max_mem = PATTERN_MAX_MEM
    options.log_errors = False
    options.never_nl = True
    options.never_capture = True  # only the match's span is needed: RE2's DFA finds it
    options.case_sensitive = not ignore_case
    options.literal = not regex
    try:
        return re2.compile(f"(?m){pattern}" if regex else pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", errors="replace")
        raise ToolFailure(
            "INVALID_PATTERN",
            f"cannot use the regular expression {pattern!r}: {reason}. Patterns run on RE2 "
            "(linear time): backreferences (\\1) and lookaround ((?=, (?!, (?<=, (?<!) are "
            "not supported; use \\z for the end of the text.",
        ) from None


def _matching_lines(rx: Any, data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """`(line number, line start, line end, match start)` of each line of `data` with a match;
    one RE2 search per matching line (plus one), counting line breaks as it goes."""
    pos = 0
    number = 1
    counted = 0
    size = len(data)
    while pos <= size:
        found = rx.search(data, pos)
        if found is None:
            return
        at = found.start()
        if at == size and (size == 0 or data.endswith(b"\n")):
            return  # the empty "line" after the last line break is no line
        line_start = data.rfind(b"\n", pos, at) + 1 or pos
        number += data.count(b"\n", counted, line_start)
        counted = line_start
        line_end = data.find(b"\n", at)
        if line_end < 0:
            line_end = size
        yield number, line_start, line_end, at
        pos = line_end + 1


def _shown_line(data: bytes, start: int, end: int, at: int) -> str:
    """The matching line, stripped, at most `MAX_GREP_LINE_CHARS` characters; a longer line
    is cut around the match (… marks a cut)."""
    width = MAX_GREP_LINE_CHARS
    lead = start if end - start <= width else max(start, at - width // 4)
    stop = min(end, lead + width * 4)
    piece = data[lead:stop].decode("utf-8", errors="replace").strip()
    text = piece[:width]
    if lead > start:
        text = "…" + text
    if len(piece) > width or stop < end:
        text += "…"
    return text


@dataclass
class _Search:
    """What one grep has used of its bounds, and why it stopped early (if it did)."""

    files: int = 0
    bytes: int = 0
    large: int = 0
    output: int = 0
    lines: list[str] = field(default_factory=list)
    stopped: str = ""

    def add(self, line: str) -> bool:
        """Keep a match line; False once a bound is reached."""
        if len(self.lines) >= MAX_GREP_MATCHES:
            self.stopped = f"[stopped at {MAX_GREP_MATCHES} matches]"
            return False
        if self.output + len(line) + 1 > MAX_GREP_OUTPUT_CHARS:
            self.stopped = f"[stopped at {MAX_GREP_OUTPUT_CHARS} characters of output]"
            return False
        self.lines.append(line)
        self.output += len(line) + 1
        return True

    def search_file(self, ws: Workspace, rx: Any, fd: int, info: os.stat_result, rel: str) -> bool:
        """Search one open file; False once a bound is reached."""
        if not stat.S_ISREG(info.st_mode):
            return True
        if info.st_size > MAX_GREP_FILE_BYTES:
            self.large += 1
            return True
        if self.files >= MAX_GREP_FILES:
            self.stopped = f"[stopped after {MAX_GREP_FILES} files]"
            return False
        if self.bytes + info.st_size > MAX_GREP_BYTES:
            self.stopped = f"[stopped at the limit of {MAX_GREP_BYTES} bytes read]"
            return False
        ws.check_time()
        data = _read_at_most(fd, MAX_GREP_FILE_BYTES + 1)
        self.files += 1
        self.bytes += len(data)
        if len(data) > MAX_GREP_FILE_BYTES:
            self.large += 1  # grew since its fstat
            return True
        if b"\x00" in data[:8192]:
            return True
        for number, start, end, at in _matching_lines(rx, data):
            if not self.add(f"{rel}:{number}: {_shown_line(data, start, end, at)}"):
                return False
            ws.check_time()
        return True


def _grep(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ToolFailure("INVALID_ARGUMENTS", "pattern must be a non-empty string")
    rx = compile_pattern(
        pattern, regex=bool(args.get("regex")), ignore_case=bool(args.get("ignore_case"))
    )
    shown = str(args.get("path") or ".")
    top = ws.parts(shown)
    search = _Search()
    skipped = 0
    fd, info = ws.open_entry(top, shown=shown)
    try:
        if stat.S_ISDIR(info.st_mode):
            pass
        elif stat.S_ISREG(info.st_mode):
            search.search_file(ws, rx, fd, info, "/".join(top))
        else:
            raise ToolFailure("NOT_A_FILE", f"{shown}: {_kind(info.st_mode)}, not a regular file")
    finally:
        os.close(fd)
    if stat.S_ISDIR(info.st_mode):
        walk = _Walk(ws, top, recursive=True)
        for dir_fd, name, parts, is_dir in walk:
            if is_dir:
                continue
            try:
                file_fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
            except OSError:
                walk.skipped += 1  # became a link, or went away, since it was listed
                continue
            try:
                file_info = os.fstat(file_fd)
                if not stat.S_ISREG(file_info.st_mode):
                    walk.skipped += 1
                    continue
                if not search.search_file(ws, rx, file_fd, file_info, "/".join(parts)):
                    break
            finally:
                os.close(file_fd)
        skipped = walk.skipped
        if walk.truncated and not search.stopped:
            search.stopped = f"[stopped after looking at {MAX_WALK_ENTRIES} entries]"
    lines = list(search.lines) or [f"no match for {pattern!r}"]
    notes = [search.stopped, _skipped_note(skipped)]
    if search.large:
        notes.append(f"[{search.large} files larger than {MAX_GREP_FILE_BYTES} bytes skipped]")
    lines += [note for note in notes if note]
    return ToolOutcome(
        "\n".join(lines),
        details={"matches": len(search.lines), "files": search.files, "bytes": search.bytes},
    )


# --- the workspace quota -----------------------------------------------------------------

# How long a write waits between tries of the quota folder's lock (held by another write).
QUOTA_LOCK_POLL_S = 0.005


@contextlib.contextmanager
def _quota_turn(ws: Workspace) -> Iterator[int]:
    """The quota folder open and locked (`flock`) for one write: writes to one folder take
    turns, in this process and in any other on the machine, so that no two see the same
    room. Waits no longer than the tool's deadline."""
    counted = ws.quota_root or ws.root
    fd = os.open(counted, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                ws.check_time()
                time.sleep(QUOTA_LOCK_POLL_S)
        yield fd
    finally:
        os.close(fd)  # which also releases the lock


@dataclass
class _Usage:
    """What a folder holds, counted until it passes a bound of the quota."""

    bytes: int = 0
    entries: int = 0

    def over(self, quota: WorkspaceQuota) -> bool:
        return bool(
            (quota.max_bytes and self.bytes > quota.max_bytes)
            or (quota.max_entries and self.entries > quota.max_entries)
        )


def _usage(ws: Workspace, folder_fd: int) -> _Usage:
    """The bytes of the regular files and the count of all entries (files, directories,
    links and special files; links not followed) under the open folder, depth first with
    one descriptor a level. The count stops once it passes a bound: the folder is full
    whatever the rest holds."""
    used = _Usage()
    stack: list[tuple[int, Iterator[str]]] = []

    def enter(fd: int) -> None:
        stack.append((fd, iter(())))  # on the stack first: closed below whatever happens
        stack[-1] = (fd, iter(_count_dir(ws, fd, used)))

    try:
        enter(os.dup(folder_fd))
        while stack and not used.over(ws.quota):
            fd, subdirs = stack[-1]
            name = next(subdirs, None)
            if name is None:
                os.close(fd)
                stack.pop()
                continue
            if len(stack) >= MAX_MEASURED_DEPTH:
                raise ToolFailure(
                    "QUOTA_EXCEEDED",
                    f"the workspace nests directories more than {MAX_MEASURED_DEPTH} deep, "
                    "too deep to measure against its quota; nothing can be written to it",
                )
            ws.check_time()
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # went away, or became a link, since it was listed
            enter(child)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return used


def _count_dir(ws: Workspace, fd: int, used: _Usage) -> list[str]:
    """Count the entries of the open directory into `used`; the names of its directories."""
    subdirs: list[str] = []
    with os.scandir(fd) as scan:
        for entry in scan:
            used.entries += 1
            if used.entries % 1024 == 0:
                ws.check_time()
            try:
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                elif entry.is_file(follow_symlinks=False):
                    used.bytes += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue  # went away since it was listed
            if used.over(ws.quota):
                break
    return subdirs


def _what_write_adds(ws: Workspace, parts: tuple[str, ...]) -> tuple[int, int]:
    """`(entries, bytes replaced)`: how many files and directories a write to `parts` would
    make, and the size of the file it would overwrite. Nothing is made; a link or another
    obstacle on the way is left for the write itself to report."""
    fd = os.open(ws.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, name in enumerate(parts[:-1]):
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                return len(parts) - index, 0
            except OSError:
                return 0, 0
            os.close(fd)
            fd = child
        try:
            info = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return 1, 0
        except OSError:
            return 0, 0
        return 0, info.st_size if stat.S_ISREG(info.st_mode) else 0
    finally:
        os.close(fd)


def _check_quota(
    ws: Workspace, folder_fd: int, parts: tuple[str, ...], shown: str, size: int
) -> None:
    """Refuse (`QUOTA_EXCEEDED`, naming the bound) a write of `size` bytes to `parts` that
    would take the quota's folder past its file count or its bytes."""
    quota = ws.quota
    if not (quota.max_bytes or quota.max_entries):
        return
    added, replaced = _what_write_adds(ws, parts)
    used = _usage(ws, folder_fd)
    if quota.max_entries and used.entries + added > quota.max_entries:
        held = f"{used.entries}" if used.entries <= quota.max_entries else "more than that"
        raise ToolFailure(
            "QUOTA_EXCEEDED",
            f"{shown}: the workspace's quota is {quota.max_entries} files and directories; "
            f"it holds {held}, and this write would add {added}. Delete files or write "
            "into existing ones.",
        )
    after = used.bytes - replaced + size
    if quota.max_bytes and after > quota.max_bytes:
        held = f"{used.bytes}" if used.bytes <= quota.max_bytes else "more than that"
        raise ToolFailure(
            "QUOTA_EXCEEDED",
            f"{shown}: the workspace's quota is {quota.max_bytes} bytes in all its files; "
            f"they hold {held}, and this write of {size} bytes would pass it.",
        )


def _write_file(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolFailure("INVALID_ARGUMENTS", "content must be a string")
    data = content.encode("utf-8")
    quota = ws.quota
    if quota.max_write_bytes and len(data) > quota.max_write_bytes:
        raise ToolFailure(
            "TOO_LARGE",
            f"content is {len(data)} bytes; one write is at most {quota.max_write_bytes} bytes",
        )
    shown = str(args.get("path"))
    parts = ws.parts(args.get("path"))
    if not parts:
        raise ToolFailure("NOT_A_FILE", f"{shown}: is the working directory itself")
    if quota.max_depth and len(parts) > quota.max_depth:
        raise ToolFailure(
            "PATH_TOO_DEEP",
            f"{shown}: the path is {len(parts)} components deep; a write goes at most "
            f"{quota.max_depth} deep",
        )
    with _quota_turn(ws) as counted:
        _check_quota(ws, counted, parts, shown, len(data))
        return _write_within(ws, parts, shown, data)


def _write_within(ws: Workspace, parts: tuple[str, ...], shown: str, data: bytes) -> ToolOutcome:
    """Create or overwrite the file `parts` (its directories made on the way) with `data`."""
    parent = ws.open_dir(parts[:-1], shown=shown, create=True)
    try:
        created = True
        try:
            fd = os.open(parts[-1], _CREATE_FLAGS, 0o644, dir_fd=parent)
        except FileExistsError:
            created = False
            try:
                fd = os.open(parts[-1], _REWRITE_FLAGS, dir_fd=parent)
            except IsADirectoryError:
                raise ToolFailure("NOT_A_FILE", f"{shown}: is a directory") from None
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # a FIFO nobody reads
                    raise ToolFailure(
                        "NOT_A_FILE", f"{shown}: a FIFO, not a regular file"
                    ) from None
                raise _opening_error(parent, parts[-1], parts, shown, exc, want_dir=False) from None
    finally:
        os.close(parent)
    with os.fdopen(fd, "wb") as handle:
        if not created:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise ToolFailure("NOT_A_FILE", f"{shown}: {_kind(mode)}, not a regular file")
            os.ftruncate(fd, 0)
        handle.write(data)
    rel = "/".join(parts)
    verb = "Created" if created else "Overwrote"
    return ToolOutcome(
        f"{verb} {rel} ({len(data)} bytes)",
        details={"path": rel, "bytes": len(data), "created": created},
    )


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
    "Search the text files of the working directory for a string (or, with regex=true, a "
    "regular expression in RE2 syntax: no backreferences or lookaround); prints "
    "path:line: text for each matching line.",
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
    """The tools a session may use, bound to its working directory and its quota."""

    cwd: str
    tools: dict[str, Tool] = field(default_factory=dict)
    timeout_s: float = 30.0
    quota: WorkspaceQuota = WorkspaceQuota()
    # The session's background jobs (`runtime.jobs`), bound by the runtime that runs it:
    # `bash` with background=true and the job tools go there.
    jobs: SessionJobs | None = None

    @classmethod
    def for_session(
        cls,
        names: Sequence[str],
        cwd: str,
        timeout_s: float = 30.0,
        quota: WorkspaceQuota = WorkspaceQuota(),
    ) -> Toolbox:
        from runtime import jobs, pi_tools, sandbox, subagents

        # A preset of the older names (read_file, list_files, write_file) keeps their grep
        # (literal by default, `regex`/`ignore_case`); Pi's grep reads a regex by default.
        older = any(n in BUILTIN_TOOLS and n != "grep" for n in names)
        chosen: dict[str, Tool] = {}
        for name in names:
            tool = BUILTIN_TOOLS.get(name) if older or name != "grep" else None
            tool = tool or pi_tools.PI_TOOLS.get(name) or subagents.SUBAGENT_TOOLS.get(name)
            if tool is None or (name == "bash" and not sandbox.available()):
                continue  # no sandbox, no bash: a command never runs unconfined
            chosen[name] = tool
        if "bash" in chosen and chosen["bash"] is pi_tools.PI_TOOLS["bash"]:
            # Pi's bash may run in the background here; the job tools come with it.
            chosen["bash"] = jobs.background_bash(chosen["bash"])
            chosen.update(jobs.JOB_TOOLS)
        return cls(cwd=cwd, tools=chosen, timeout_s=timeout_s, quota=quota)

    def schemas(self) -> list[JSON]:
        return [tool.schema() for tool in self.tools.values()]

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    async def run(
        self,
        name: str,
        args: Mapping[str, Any],
        on_output: Callable[[bytes], None] | None = None,
        cancel: threading.Event | None = None,
        site: CallSite | None = None,
    ) -> ToolOutcome:
        """Run a tool with its timeout; never raises (except when cancelled). `on_output` is
        called, on the tool's thread, with each piece of a command's output as it comes;
        setting `cancel` stops a running command (which then returns what it wrote).
        `site` names the call: a background job records which call started it."""
        tool = self.tools.get(name)
        if tool is None:
            return ToolOutcome(f"there is no tool named {name!r}", True, "UNKNOWN_TOOL")
        if self.jobs is not None and self.jobs.takes(name, args):
            return await self.jobs.call(name, args, site or CallSite(""), self.timeout_s)
        delay = float(os.environ.get("STRAND_TOOL_DELAY_MS") or 0) / 1000
        deadline = time.monotonic() + self.timeout_s
        # Set when the awaiting side gives up (cancel or timeout): a running command stops.
        cancel = cancel or threading.Event()
        try:
            async with asyncio.timeout(self.timeout_s):
                if delay > 0:
                    await asyncio.sleep(delay)
                return await asyncio.get_running_loop().run_in_executor(
                    _tool_threads(),
                    _run_sync,
                    tool,
                    self.cwd,
                    args,
                    deadline,
                    self.quota,
                    cancel,
                    on_output,
                )
        except TimeoutError:
            return ToolOutcome(
                f"{name} did not finish within {self.timeout_s:g} s and was stopped",
                True,
                "TOOL_TIMEOUT",
            )
        finally:
            cancel.set()


# Tools run on threads of their own, niced: a search that keeps two cores busy must not slow
# down the threads that answer other users' requests.
TOOL_THREADS = 8
TOOL_NICENESS = 10
_tool_pool: ThreadPoolExecutor | None = None
_tool_pool_lock = threading.Lock()


def _tool_threads() -> ThreadPoolExecutor:
    global _tool_pool
    with _tool_pool_lock:
        if _tool_pool is None:
            _tool_pool = ThreadPoolExecutor(
                TOOL_THREADS, thread_name_prefix="strand-tool", initializer=_lower_priority
            )
        return _tool_pool


def _lower_priority() -> None:
    # Linux schedules each thread on its own, so this nices only the calling thread.
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), TOOL_NICENESS)


def _run_sync(
    tool: Tool,
    cwd: str,
    args: Mapping[str, Any],
    deadline: float,
    quota: WorkspaceQuota,
    cancel: threading.Event | None = None,
    output: Callable[[bytes], None] | None = None,
) -> ToolOutcome:
    # The awaiting side gives up at the deadline; the deadline in the workspace makes the
    # thread itself stop soon after, instead of working on unseen.
    try:
        ws = Workspace.at(cwd, deadline=deadline, quota=quota, cancel=cancel, output=output)
        return tool.run(ws, args)
    except ToolFailure as exc:
        return ToolOutcome(str(exc), True, exc.code)
    except OSError as exc:
        return ToolOutcome(f"{tool.name} failed: {exc.strerror or exc}", True, "TOOL_ERROR")
    except Exception as exc:  # a tool bug must not crash the turn
        return ToolOutcome(f"{tool.name} failed: {type(exc).__name__}: {exc}", True, "TOOL_ERROR")
