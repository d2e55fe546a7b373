"""Pi's tools: `read`, `write`, `edit`, `bash`, `grep`, `find` and `ls`, with the names,
descriptions and parameter schemas of Pi 1.6.0's own tools (`pi_tools_v1_6.json`, taken
from Pi's code by `tests/fixtures/pi/v1.6/tool_schemas.mjs`).

They run on the same guarded workspace as the older tools (`runtime.tools`): paths are
opened one component at a time without following links, writes are held to the workspace's
quota. Pi's paths may be absolute; one inside the working directory is taken relative to
it, any other is refused. `bash` runs each command in its own sandbox (`runtime.sandbox`)
and is offered only where that sandbox can run. `write`, `edit` and `bash` need approval.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime import sandbox
from runtime.tools import (
    _READ_FLAGS,
    MAX_GREP_BYTES,
    MAX_GREP_FILE_BYTES,
    MAX_GREP_MATCHES,
    MAX_LIST_ENTRIES,
    MAX_PATTERN_CHARS,
    MAX_READ_BYTES,
    Tool,
    ToolFailure,
    ToolOutcome,
    Workspace,
    _check_quota,
    _kind,
    _matching_lines,
    _quota_turn,
    _read_at_most,
    _Walk,
    _write_file,
    _write_within,
    compile_pattern,
)

SCHEMAS: dict[str, Any] = json.loads(
    (Path(__file__).with_name("pi_tools_v1_6.json")).read_text(encoding="utf-8")
)
MAX_FIND_RESULTS = 1000
BASH_MAX_TIMEOUT_S = 600
# A command is stopped this long before the tool's own deadline, so that its result, with
# the output it wrote, arrives before the toolbox gives up on the call.
BASH_RESULT_MARGIN_S = 1.0


def _relative(ws: Workspace, path: Any) -> Any:
    """Pi's path, absolute or relative, as a path relative to the working directory (an
    absolute path outside it is left for `Workspace.parts` to refuse)."""
    if isinstance(path, str) and path.startswith("/"):
        root = str(ws.root)
        if path == root:
            return "."
        if path.startswith(root + "/"):
            return path[len(root) + 1 :] or "."
    return path


def _with_path(ws: Workspace, args: Mapping[str, Any], default: str | None = None) -> dict:
    out = dict(args)
    if "path" in out or default is not None:
        out["path"] = _relative(ws, out.get("path") or default)
    return out


READ_MAX_LINES = 2000  # Pi's DEFAULT_MAX_LINES
READ_MAX_BYTES = 50 * 1024  # Pi's DEFAULT_MAX_BYTES
READ_CHUNK = 1024 * 1024


def _read(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    """Pi's read of a text file: the lines from `offset` (1-based), at most `limit` of them,
    cut to 2000 lines or 50 KB (whichever comes first) with Pi's notices. The file is read in
    chunks and only the lines that can be shown are kept, so memory does not grow with it."""
    shown = str(args.get("path"))
    offset, limit = args.get("offset"), args.get("limit")
    for name, value in (("offset", offset), ("limit", limit)):
        if value is not None and (
            not isinstance(value, int | float) or isinstance(value, bool) or value < 0
        ):
            raise ToolFailure("INVALID_ARGUMENTS", f"{name} must be a number, 0 or more")
    start = max(0, int(offset) - 1) if offset else 0
    end = math.inf if limit is None else start + int(limit)
    parts = ws.parts(_relative(ws, args.get("path")))
    fd, info = ws.open_entry(parts, shown=shown)
    try:
        if not stat.S_ISREG(info.st_mode):
            raise ToolFailure("NOT_A_FILE", f"{shown}: {_kind(info.st_mode)}, not a regular file")
        first = _read_at_most(fd, min(8192, info.st_size) or 1)
        if b"\x00" in first:
            raise ToolFailure("BINARY_FILE", f"{shown}: a binary file ({info.st_size} bytes)")
        total, kept, first_line_bytes = _select_lines(ws, fd, first, start, end)
    finally:
        os.close(fd)
    if start >= total:
        raise ToolFailure(
            "OFFSET_PAST_END", f"Offset {offset} is beyond end of file ({total} lines total)"
        )
    cut = truncate_head("\n".join(kept))
    details: dict[str, Any] | None = None
    if cut["firstLineExceedsLimit"]:
        text = (
            f"[Line {start + 1} is {format_size(first_line_bytes)}, exceeds "
            f"{format_size(READ_MAX_BYTES)} limit. Use bash: sed -n '{start + 1}p' {shown} | "
            f"head -c {READ_MAX_BYTES}]"
        )
        details = {"truncation": cut}
    elif cut["truncated"]:
        last = start + cut["outputLines"]
        text = cut.pop("content")
        by = "" if cut["truncatedBy"] == "lines" else f" ({format_size(READ_MAX_BYTES)} limit)"
        text += f"\n\n[Showing lines {start + 1}-{last} of {total}{by}. Use offset={last + 1} to continue.]"
        details = {"truncation": cut}
    elif end < total:
        text = f"{cut['content']}\n\n[{total - end} more lines in file. Use offset={end + 1} to continue.]"
    else:
        text = cut["content"]
    if details is not None:
        details["truncation"].pop("content", None)  # the text holds it
    return ToolOutcome(text, details=details)


def _select_lines(
    ws: Workspace, fd: int, first: bytes, start: int, end: float
) -> tuple[int, list[str], int]:
    """The file's line count (its pieces between line breaks), the selected lines that
    `truncate_head` can show (each cut past the byte limit), and the byte length of the first
    selected line; as Pi's `selectLinesFromStream` makes them."""
    kept: list[str] = []
    kept_bytes = 0
    full = False
    first_line_bytes = -1
    line = 0
    current: list[bytes] = []
    current_bytes = 0
    data = first
    while data:
        pieces = data.split(b"\n")
        for index, piece in enumerate(pieces):
            selected = start <= line < end
            if selected and not full and current_bytes <= READ_MAX_BYTES:
                current.append(piece)
            if selected:
                current_bytes += len(piece)
            if index == len(pieces) - 1:
                break  # the line goes on in the next chunk
            if selected:
                if first_line_bytes < 0:
                    first_line_bytes = current_bytes
                if not full:
                    text = b"".join(current).decode("utf-8", errors="replace")
                    kept_bytes += len(text.encode("utf-8")) + (1 if kept else 0)
                    kept.append(text)
                    full = len(kept) > READ_MAX_LINES or kept_bytes > READ_MAX_BYTES
            current, current_bytes = [], 0
            line += 1
        ws.check_time()
        data = _read_at_most(fd, READ_CHUNK)
    if start <= line < end:
        if first_line_bytes < 0:
            first_line_bytes = current_bytes
        if not full:
            kept.append(b"".join(current).decode("utf-8", errors="replace"))
    return line + 1, kept, max(first_line_bytes, 0)


def truncate_head(content: str) -> dict[str, Any]:
    """Pi's truncateHead: the first lines of `content` that fit in 2000 lines and 50 KB, and
    how it was cut."""
    total_bytes = len(content.encode("utf-8"))
    lines = content.split("\n") if content else []
    if content.endswith("\n"):
        lines.pop()
    base = {
        "totalLines": len(lines),
        "totalBytes": total_bytes,
        "lastLinePartial": False,
        "maxLines": READ_MAX_LINES,
        "maxBytes": READ_MAX_BYTES,
    }
    if len(lines) <= READ_MAX_LINES and total_bytes <= READ_MAX_BYTES:
        return {
            "content": content,
            "truncated": False,
            "truncatedBy": None,
            "outputLines": len(lines),
            "outputBytes": total_bytes,
            "firstLineExceedsLimit": False,
            **base,
        }
    if len(lines[0].encode("utf-8")) > READ_MAX_BYTES:
        return {
            "content": "",
            "truncated": True,
            "truncatedBy": "bytes",
            "outputLines": 0,
            "outputBytes": 0,
            "firstLineExceedsLimit": True,
            **base,
        }
    out: list[str] = []
    used = 0
    by = "lines"
    for index, line in enumerate(lines[:READ_MAX_LINES]):
        size = len(line.encode("utf-8")) + (1 if index > 0 else 0)
        if used + size > READ_MAX_BYTES:
            by = "bytes"
            break
        out.append(line)
        used += size
    if len(out) >= READ_MAX_LINES and used <= READ_MAX_BYTES:
        by = "lines"
    text = "\n".join(out)
    return {
        "content": text,
        "truncated": True,
        "truncatedBy": by,
        "outputLines": len(out),
        "outputBytes": len(text.encode("utf-8")),
        "firstLineExceedsLimit": False,
        **base,
    }


def format_size(size: int) -> str:
    """Pi's formatSize: 512B, 50.0KB, 1.5MB."""
    if size < 1024:
        return f"{size}B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f}KB"
    return f"{size / (1024 * 1024):.1f}MB"


def _write(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    done = _write_file(ws, _with_path(ws, args))
    return ToolOutcome(f"Successfully wrote to {args.get('path')}", details=done.details)


def _edit(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    shown = str(args.get("path"))
    edits = args.get("edits")
    if not isinstance(edits, list) or not edits:
        raise ToolFailure("INVALID_ARGUMENTS", "edits must be a non-empty list")
    for edit in edits:
        if not (
            isinstance(edit, dict)
            and isinstance(edit.get("oldText"), str)
            and isinstance(edit.get("newText"), str)
            and edit["oldText"]
        ):
            raise ToolFailure(
                "INVALID_ARGUMENTS", "each edit needs a non-empty oldText and a newText string"
            )
    parts = ws.parts(_relative(ws, args.get("path")))
    if not parts:
        raise ToolFailure("NOT_A_FILE", f"{shown}: is the working directory itself")
    with _quota_turn(ws) as counted:
        fd, info = ws.open_entry(parts, shown=shown)
        try:
            if not stat.S_ISREG(info.st_mode):
                raise ToolFailure(
                    "NOT_A_FILE", f"{shown}: {_kind(info.st_mode)}, not a regular file"
                )
            data = _read_at_most(fd, MAX_READ_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > MAX_READ_BYTES:
            raise ToolFailure("TOO_LARGE", f"{shown}: larger than {MAX_READ_BYTES} bytes")
        if b"\x00" in data[:8192]:
            raise ToolFailure("BINARY_FILE", f"{shown}: a binary file")
        original = data.decode("utf-8", errors="replace")
        updated = apply_edits(original, edits, shown)
        encoded = updated.encode("utf-8")
        _check_quota(ws, counted, parts, shown, len(encoded))
        _write_within(ws, parts, shown, encoded)
    diff, patch, first_line = edit_diff(shown, original, updated)
    return ToolOutcome(
        f"Successfully replaced {len(edits)} block(s) in {shown}.",
        details={"diff": diff, "patch": patch, "firstChangedLine": first_line},
    )


def apply_edits(content: str, edits: list[Mapping[str, str]], shown: str) -> str:
    """Every edit matched against the original: each oldText exactly once, none overlapping.
    The new text."""
    spans: list[tuple[int, int, str]] = []
    for index, edit in enumerate(edits):
        old = edit["oldText"]
        at = content.find(old)
        label = f"edits[{index}]" if len(edits) > 1 else "oldText"
        if at < 0:
            raise ToolFailure(
                "EDIT_NOT_FOUND",
                f"Could not find {label} in {shown}. The old text must match exactly, "
                "including all whitespace and newlines.",
            )
        if content.find(old, at + 1) >= 0:
            raise ToolFailure(
                "EDIT_NOT_UNIQUE",
                f"Found {content.count(old)} occurrences of {label} in {shown}. The text "
                "must be unique; give more context to make it so.",
            )
        spans.append((at, at + len(old), edit["newText"]))
    spans.sort()
    for (_, end, _), (start, _, _) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise ToolFailure("EDIT_OVERLAP", f"edits overlap in {shown}; merge them into one edit")
    pieces: list[str] = []
    cursor = 0
    for start, end, new in spans:
        pieces += [content[cursor:start], new]
        cursor = end
    pieces.append(content[cursor:])
    updated = "".join(pieces)
    if updated == content:
        raise ToolFailure("EDIT_NO_CHANGE", f"No changes made to {shown}: the edits change nothing")
    return updated


def edit_diff(shown: str, before: str, after: str, context: int = 4) -> tuple[str, str, int]:
    """A diff to show (`+N text`, `-N text`, ` N text` lines, ` ...` where unchanged lines
    are left out, as Pi shows it), a unified patch (as Pi's jsdiff writes it) and the first
    changed line of the new text."""
    old_lines = _lines(before)
    new_lines = _lines(after)
    width = len(str(max(len(old_lines), len(new_lines))))
    skip = f" {'':>{width}} ..."
    shown_lines: list[str] = []
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    groups = list(matcher.get_grouped_opcodes(context))
    for group in groups:
        if shown_lines or group[0][1] > 0:
            shown_lines.append(skip)
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                shown_lines += [f" {i + 1:>{width}} {old_lines[i]}" for i in range(i1, i2)]
                continue
            shown_lines += [f"-{i + 1:>{width}} {old_lines[i]}" for i in range(i1, i2)]
            shown_lines += [f"+{j + 1:>{width}} {new_lines[j]}" for j in range(j1, j2)]
    if groups and groups[-1][-1][2] < len(old_lines):
        shown_lines.append(skip)
    changed = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    first = changed[0][3] + 1 if changed else 1
    return "\n".join(shown_lines), _patch(shown, before, after, context), first


def _patch(shown: str, before: str, after: str, context: int) -> str:
    old = before.splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    out = [f"--- {shown}\n", f"+++ {shown}\n"]

    def line(mark: str, text: str) -> str:
        if text.endswith("\n"):
            return mark + text
        return f"{mark}{text}\n\\ No newline at end of file\n"

    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        i1, i2 = group[0][1], group[-1][2]
        j1, j2 = group[0][3], group[-1][4]
        # An empty range starts at the line before it, as in every unified diff.
        old_start = i1 + 1 if i2 > i1 else i1
        new_start = j1 + 1 if j2 > j1 else j1
        out.append(f"@@ -{old_start},{i2 - i1} +{new_start},{j2 - j1} @@\n")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                out += [line(" ", t) for t in old[a1:a2]]
                continue
            out += [line("-", t) for t in old[a1:a2]]
            out += [line("+", t) for t in new[b1:b2]]
    return "".join(out)


def _lines(text: str) -> list[str]:
    # The line after a final newline is no line (Pi numbers the file's lines the same way).
    if not text:
        return []
    lines = text.split("\n")
    return lines[:-1] if len(lines) > 1 and lines[-1] == "" else lines


GREP_DEFAULT_LIMIT = 100  # Pi's
GREP_MAX_CONTEXT = 20  # lines before and after a match; Pi takes any number
GREP_MAX_LINE_CHARS = 500  # Pi's GREP_MAX_LINE_LENGTH
GREP_MAX_OUTPUT_BYTES = 50 * 1024  # Pi's DEFAULT_MAX_BYTES


def _grep_pi(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    """Pi's grep: `path:N: text` for a matching line, `path-N- text` for a line of context
    around it, files filtered by `glob` (relative to the searched folder; without `/`, a
    file name at any depth; a leading `!` leaves the files it matches out), at most `limit`
    matches (Pi's 100 by default, never more than Strand's own bound) and 50 KB of output,
    with Pi's notices."""
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ToolFailure("INVALID_ARGUMENTS", "pattern must be a non-empty string")
    rx = compile_pattern(
        pattern, regex=not args.get("literal"), ignore_case=bool(args.get("ignoreCase"))
    )
    limit = _limit(args, GREP_DEFAULT_LIMIT, ceiling=MAX_GREP_MATCHES)
    context = args.get("context") or 0
    if not isinstance(context, int | float) or isinstance(context, bool) or context < 0:
        raise ToolFailure("INVALID_ARGUMENTS", "context must be a number of lines, 0 or more")
    context = min(int(context), GREP_MAX_CONTEXT)
    keep = _glob_filter(args.get("glob"))
    shown = str(args.get("path") or ".")
    top = ws.parts(_relative(ws, shown))
    found = _PiGrep(rx, limit, context)
    fd, info = ws.open_entry(top, shown=shown)
    try:
        if stat.S_ISREG(info.st_mode):
            found.search(ws, fd, info, top[-1] if top else shown)
        elif not stat.S_ISDIR(info.st_mode):
            raise ToolFailure("NOT_A_FILE", f"{shown}: {_kind(info.st_mode)}, not a regular file")
    finally:
        os.close(fd)
    if stat.S_ISDIR(info.st_mode):
        walk = _Walk(ws, top, recursive=True)
        for dir_fd, name, parts, is_dir in walk:
            rel = "/".join(parts[len(top) :])
            if is_dir or not keep(rel):
                continue
            try:
                file_fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue  # became a link, or went away, since it was listed
            try:
                if not found.search(ws, file_fd, os.fstat(file_fd), rel):
                    break
            finally:
                os.close(file_fd)
    return found.outcome()


def _glob_filter(glob: Any) -> Any:
    if glob is None or glob == "":
        return lambda rel: True
    if not isinstance(glob, str) or len(glob) > MAX_PATTERN_CHARS:
        raise ToolFailure("INVALID_ARGUMENTS", "glob must be a glob pattern")
    negated = glob.startswith("!")
    rx = glob_regex(re.sub(r"^(?:\./)+", "", glob[1:] if negated else glob))
    return lambda rel: bool(rx.fullmatch(rel)) != negated


class _PiGrep:
    """The lines of one Pi grep as they are found, and the bounds they reached."""

    def __init__(self, rx: Any, limit: int, context: int) -> None:
        self.rx, self.limit, self.context = rx, limit, context
        self.lines: list[str] = []
        self.bytes = 0
        self.matches = 0
        self.limit_reached = False
        self.lines_cut = False
        self.read = 0

    def search(self, ws: Workspace, fd: int, info: os.stat_result, rel: str) -> bool:
        """Search one open file; False once the match limit is passed."""
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_GREP_FILE_BYTES:
            return True
        if self.read + info.st_size > MAX_GREP_BYTES:
            return False
        ws.check_time()
        data = _read_at_most(fd, MAX_GREP_FILE_BYTES + 1)
        self.read += len(data)
        if len(data) > MAX_GREP_FILE_BYTES or b"\x00" in data[:8192]:
            return True
        numbers = [number for number, _, _, _ in _matching_lines(self.rx, data)]
        if not numbers:
            return True
        lines = _lines(data.decode("utf-8", errors="replace"))
        if self.matches + len(numbers) > self.limit:
            self.limit_reached = True
            numbers = numbers[: self.limit - self.matches]
        matching = set(numbers)
        shown: set[int] = set()
        for number in numbers:
            low, high = max(1, number - self.context), min(len(lines), number + self.context)
            shown.update(range(low, high + 1))
        for at in sorted(shown):
            self._add(rel, at, lines[at - 1], at in matching)
        self.matches += len(numbers)
        ws.check_time()
        return not self.limit_reached

    def _add(self, rel: str, number: int, text: str, is_match: bool) -> None:
        text = text.rstrip("\r")
        if len(text) > GREP_MAX_LINE_CHARS:
            text = text[:GREP_MAX_LINE_CHARS] + "... [truncated]"
            self.lines_cut = True
        line = f"{rel}:{number}: {text}" if is_match else f"{rel}-{number}- {text}"
        if self.bytes - 1 <= GREP_MAX_OUTPUT_BYTES:
            self.lines.append(line)
        self.bytes += len(line.encode("utf-8")) + 1

    def outcome(self) -> ToolOutcome:
        if not self.matches:
            return ToolOutcome("No matches found")
        text = "\n".join(self.lines)
        notices: list[str] = []
        details: dict[str, Any] = {}
        if self.limit_reached:
            notices.append(
                f"{self.limit} matches limit reached. Use limit={self.limit * 2} for more, "
                "or refine pattern"
            )
            details["matchLimitReached"] = self.limit
        encoded = text.encode("utf-8")
        if len(encoded) > GREP_MAX_OUTPUT_BYTES:
            text = encoded[:GREP_MAX_OUTPUT_BYTES].decode("utf-8", "ignore").rsplit("\n", 1)[0]
            notices.append("50.0KB limit reached")
            details["truncation"] = {"truncated": True, "truncatedBy": "bytes"}
        if self.lines_cut:
            notices.append(
                f"Some lines truncated to {GREP_MAX_LINE_CHARS} chars. Use read tool to see "
                "full lines"
            )
            details["linesTruncated"] = True
        if notices:
            text += f"\n\n[{'. '.join(notices)}]"
        return ToolOutcome(text, details=details or None)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as Pi's `find` reads it: `**` crosses directories, `*` and `?` do not, `{a,b}`
    is either; a pattern without `/` matches a file name at any depth."""
    if "/" not in pattern:
        pattern = "**/" + pattern
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "{" and "}" in pattern[i:]:
            end = pattern.index("}", i)
            out.append(
                "(?:" + "|".join(re.escape(x) for x in pattern[i + 1 : end].split(",")) + ")"
            )
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + "/?")


def _limit(args: Mapping[str, Any], default: int, ceiling: int | None = None) -> int:
    raw = args.get("limit")
    if raw is None:
        return default
    if not isinstance(raw, int | float) or isinstance(raw, bool) or raw < 1:
        raise ToolFailure("INVALID_ARGUMENTS", "limit must be a positive number")
    return min(int(raw), ceiling or default)


def _find(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ToolFailure("INVALID_ARGUMENTS", "pattern must be a non-empty string")
    limit = _limit(args, MAX_FIND_RESULTS)
    rx = glob_regex(pattern)
    top = ws.parts(_relative(ws, args.get("path") or "."))
    walk = _Walk(ws, top, recursive=True)
    found: list[str] = []
    reached = False
    for _, _, parts, is_dir in walk:
        rel = "/".join(parts[len(top) :]) + ("/" if is_dir else "")
        if rx.fullmatch(rel):
            if len(found) >= limit:
                reached = True
                break
            found.append(rel)
    if not found:
        return ToolOutcome("No files found matching pattern")
    text = "\n".join(found)
    details: dict[str, Any] = {}
    if reached:
        text += f"\n\n[{limit} results limit reached. Use limit={limit * 2} for more, or refine pattern]"
        details["resultLimitReached"] = limit
    return ToolOutcome(text, details=details or None)


def _ls(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    limit = _limit(args, MAX_LIST_ENTRIES)
    shown = str(args.get("path") or ".")
    parts = ws.parts(_relative(ws, shown))
    fd = ws.open_dir(parts, shown=shown)
    try:
        with os.scandir(fd) as scan:
            entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in scan]
    finally:
        os.close(fd)
    entries.sort(key=lambda e: e[0].lower())
    results = [name + ("/" if is_dir else "") for name, is_dir in entries[:limit]]
    if not results:
        return ToolOutcome("(empty directory)")
    text = "\n".join(results)
    details: dict[str, Any] = {}
    if len(entries) > limit:
        text += f"\n\n[{limit} entries limit reached. Use limit={limit * 2} for more]"
        details["entryLimitReached"] = limit
    return ToolOutcome(text, details=details or None)


def _bash(ws: Workspace, args: Mapping[str, Any]) -> ToolOutcome:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ToolFailure("INVALID_ARGUMENTS", "command must be a non-empty string")
    if "\x00" in command:
        raise ToolFailure("INVALID_ARGUMENTS", "command must not contain a NUL character")
    limits = sandbox.SandboxLimits()
    timeout = args.get("timeout")
    if timeout is not None:
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise ToolFailure("INVALID_ARGUMENTS", "timeout must be a positive number of seconds")
        limits = sandbox.SandboxLimits(wall_s=min(float(timeout), BASH_MAX_TIMEOUT_S))
    try:
        done = sandbox.run(
            command,
            ws.root,
            limits,
            cancel=ws.cancel,
            deadline=ws.deadline - BASH_RESULT_MARGIN_S,
            on_output=ws.output,
        )
    except sandbox.SandboxUnavailable as exc:
        raise ToolFailure("NO_SANDBOX", f"bash cannot run here: {exc}") from None
    details: dict[str, Any] = {
        "exit_code": done.exit_code,
        "signal": done.signal,
        "stopped": done.stopped,
        "wall_time_seconds": round(done.duration_s, 1),
        "output_bytes": done.output_bytes,
        "dropped_bytes": done.dropped_bytes,
        "limits": limits.as_dict(),
    }
    text = done.output
    if done.dropped_bytes:
        details["truncation"] = {"truncated": True, "droppedBytes": done.dropped_bytes}

    def status(line: str) -> str:
        return f"{text}\n\n{line}" if text else line

    if done.stopped == "timeout":
        return ToolOutcome(
            status(f"Command timed out after {round(done.duration_s, 1):g} seconds"),
            True,
            "TOOL_TIMEOUT",
            details,
        )
    if done.stopped == "cancelled":
        return ToolOutcome(status("Command aborted"), True, "ABORTED", details)
    if done.stopped == "output":
        return ToolOutcome(
            status(f"Command stopped: it wrote more than {limits.output_max_bytes} bytes"),
            True,
            "OUTPUT_LIMIT",
            details,
        )
    if done.exit_code is None:
        return ToolOutcome(
            status(f"Command terminated by signal {done.signal}"), True, "COMMAND_FAILED", details
        )
    if done.exit_code != 0:
        return ToolOutcome(
            status(f"Command exited with code {done.exit_code}"), True, "COMMAND_FAILED", details
        )
    return ToolOutcome(text or "(no output)", details=details)


def _pi(name: str, run: Any, *, needs_approval: bool = False) -> Tool:
    spec = SCHEMAS[name]
    return Tool(spec["name"], spec["description"], spec["parameters"], run, needs_approval)


PI_TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        _pi("read", _read),
        _pi("write", _write, needs_approval=True),
        _pi("edit", _edit, needs_approval=True),
        _pi("bash", _bash, needs_approval=True),
        _pi("grep", _grep_pi),
        _pi("find", _find),
        _pi("ls", _ls),
    )
}
