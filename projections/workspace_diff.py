"""What changed between two workspaces: per file, +N/−M lines and a bounded unified diff.

Pure: the caller folds the two manifests (`projections.workspace`) and hands over the
contents `diff_plan` asks for. Every output is bounded, whatever the files hold:

- at most `files` files are listed (the rest are counted), and contents are read for a
  file only while the call's content budget (`input_bytes`) lasts;
- a file is diffed line by line only below `file_input_bytes`; the lines the two sides
  share at their start and end are set aside first, and a middle longer than
  `match_lines` (or than what is left of `total_match_lines` for the whole diff) is shown
  as one replaced block: difflib's matching is quadratic at worst;
- the diff text shown is capped per file and per call (lines and bytes), each line at
  `line_chars` characters, with a note of what was left out.

Text is UTF-8 without NUL; anything else is binary and shown by its sizes. Lines end at
"\\n" only, so a CRLF file diffs as such (its "\\r" shown as ␍), and a last line without a
newline gets git's "\\ No newline at end of file".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from projections.workspace import Manifest, WorkspaceFile

ADDED, REMOVED, CHANGED, MODE = "added", "removed", "changed", "mode"
CONTEXT_LINES = 3
NO_NEWLINE = "\\ No newline at end of file"


@dataclass(frozen=True, slots=True)
class DiffLimits:
    files: int = 200  # files listed; the rest are counted
    input_bytes: int = 8_000_000  # contents read for one diff, both sides of every file
    file_input_bytes: int = 2_000_000  # a larger side is not diffed line by line
    match_lines: int = 3_000  # a changed middle longer than this is one replaced block
    total_match_lines: int = 15_000  # lines matched by difflib over all files of one diff
    file_lines: int = 400  # diff lines shown per file
    file_bytes: int = 64_000
    total_lines: int = 2_000  # diff lines shown over all files
    total_bytes: int = 256_000
    line_chars: int = 400  # characters of one line shown


LIMITS = DiffLimits()


@dataclass(frozen=True, slots=True)
class DiffLine:
    kind: str  # "@" hunk header, " " context, "-" removed, "+" added, "\\" a note
    text: str


@dataclass(frozen=True, slots=True)
class FileDiff:
    path: str
    status: str  # added, removed, changed, or mode (only the mode changed)
    size_before: int | None
    size_after: int | None
    mode_before: int | None = None
    mode_after: int | None = None
    binary: bool = False
    # Lines added and removed; None when the file was not compared line by line.
    added: int | None = None
    removed: int | None = None
    lines: tuple[DiffLine, ...] = ()
    hidden_lines: int = 0  # diff lines left out by the caps
    # Why there is no line diff: "too large", "over budget", "missing" (content not stored).
    skipped: str = ""


@dataclass(frozen=True, slots=True)
class WorkspaceDiff:
    files: tuple[FileDiff, ...]
    added: int  # files added, removed, changed in all (listed or not)
    removed: int
    changed: int
    more_files: int  # changed files not listed

    @property
    def empty(self) -> bool:
        return not self.files and not self.more_files

    @property
    def total(self) -> int:
        return self.added + self.removed + self.changed


@dataclass(frozen=True, slots=True)
class _Change:
    path: str
    status: str
    before: WorkspaceFile | None
    after: WorkspaceFile | None


@dataclass(frozen=True, slots=True)
class DiffPlan:
    """The files a diff lists, and the contents (by sha256) it needs to diff them."""

    changes: tuple[_Change, ...]
    shas: frozenset[str]
    added: int
    removed: int
    changed: int


def diff_plan(before: Manifest, after: Manifest, limits: DiffLimits = LIMITS) -> DiffPlan:
    """Which files changed from `before` to `after`, and which contents to read for the
    first `limits.files` of them (while the content budget lasts)."""
    changes: list[_Change] = []
    counts = {ADDED: 0, REMOVED: 0, CHANGED: 0}
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path), after.get(path)
        if old is not None and new is not None:
            if old.sha256 == new.sha256 and old.mode == new.mode:
                continue
            status = CHANGED if old.sha256 != new.sha256 else MODE
        else:
            status = ADDED if old is None else REMOVED
        counts[CHANGED if status == MODE else status] += 1
        if len(changes) < limits.files:
            changes.append(_Change(path, status, old, new))
    shas: set[str] = set()
    budget = limits.input_bytes
    for change in changes:
        sides = [s for s in (change.before, change.after) if s is not None]
        if change.status == MODE or any(s.size > limits.file_input_bytes for s in sides):
            continue
        cost = sum(s.size for s in sides)
        if cost > budget:
            break
        budget -= cost
        shas.update(s.sha256 for s in sides)
    return DiffPlan(
        tuple(changes), frozenset(shas), counts[ADDED], counts[REMOVED], counts[CHANGED]
    )


def diff_workspaces(
    plan: DiffPlan, contents: Mapping[str, bytes], limits: DiffLimits = LIMITS
) -> WorkspaceDiff:
    """The diff `plan` lists, from the `contents` it asked for (sha256 → bytes)."""
    budget = _Budget(limits.total_lines, limits.total_bytes, limits.total_match_lines)
    files = tuple(
        _file_diff(change, plan.shas, contents, limits, budget) for change in plan.changes
    )
    return WorkspaceDiff(
        files=files,
        added=plan.added,
        removed=plan.removed,
        changed=plan.changed,
        more_files=plan.added + plan.removed + plan.changed - len(files),
    )


def workspace_diff(
    before: Manifest, after: Manifest, contents: Mapping[str, bytes], limits: DiffLimits = LIMITS
) -> WorkspaceDiff:
    """`diff_plan` and `diff_workspaces` in one, for contents already at hand."""
    return diff_workspaces(diff_plan(before, after, limits), contents, limits)


# --- one file ------------------------------------------------------------------------------


class _Budget:
    def __init__(self, lines: int, size: int, match: int) -> None:
        self.lines, self.size, self.match = lines, size, match


def _file_diff(
    change: _Change,
    planned: frozenset[str],
    contents: Mapping[str, bytes],
    limits: DiffLimits,
    budget: _Budget,
) -> FileDiff:
    old, new = change.before, change.after
    base = FileDiff(
        path=change.path,
        status=change.status,
        size_before=old.size if old else None,
        size_after=new.size if new else None,
        mode_before=old.mode if old else None,
        mode_after=new.mode if new else None,
    )
    if change.status == MODE:
        return base
    sides = [s for s in (old, new) if s is not None]
    if any(s.size > limits.file_input_bytes for s in sides):
        return replace(base, skipped="too large")
    if any(s.sha256 not in planned for s in sides):
        return replace(base, skipped="over budget")
    if any(s.sha256 not in contents for s in sides):
        return replace(base, skipped="missing")
    a = _text(contents[old.sha256]) if old else ""
    b = _text(contents[new.sha256]) if new else ""
    if a is None or b is None:
        return replace(base, binary=True)
    old_lines, new_lines = _split(a), _split(b)
    match_lines = min(limits.match_lines, budget.match)
    opcodes = _opcodes(old_lines, new_lines, match_lines)
    middle = _middle_size(*_middle(old_lines, new_lines))
    if middle <= match_lines:  # difflib matched it
        budget.match -= middle
    added, removed = _counts(opcodes)
    shown, hidden = _capped(_items(old_lines, new_lines, opcodes), limits, budget)
    return replace(base, added=added, removed=removed, lines=shown, hidden_lines=hidden)


def _text(content: bytes) -> str | None:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text


def _split(text: str) -> list[str]:
    """Lines ending at "\\n" (kept), the last one without it when the text has none."""
    if not text:
        return []
    lines = text.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


Opcode = tuple[str, int, int, int, int]


def unified_lines(
    a: Sequence[str], b: Sequence[str], match_lines: int = LIMITS.match_lines
) -> tuple[list[DiffLine], int, int]:
    """The unified diff of two line lists (each line with its "\\n"), and the number of
    lines it adds and removes. Bounded work: difflib matches only the middle between the
    shared start and end, and only when that middle is at most `match_lines` long."""
    opcodes = _opcodes(a, b, match_lines)
    lines = [line for kind, raw in _items(a, b, opcodes) for line in _rendered(kind, raw)]
    return lines, *_counts(opcodes)


def _counts(opcodes: Sequence[Opcode]) -> tuple[int, int]:
    """Lines added and removed."""
    added = sum(j2 - j1 for tag, _, _, j1, j2 in opcodes if tag in ("insert", "replace"))
    removed = sum(i2 - i1 for tag, i1, i2, _, _ in opcodes if tag in ("delete", "replace"))
    return added, removed


def _items(a: Sequence[str], b: Sequence[str], opcodes: list[Opcode]) -> Iterator[tuple[str, str]]:
    """The diff's hunk headers and lines (as the files hold them), one at a time: the
    caller draws only those it shows."""
    for group in _grouped(opcodes, CONTEXT_LINES):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        yield "@", f"@@ -{_range(i1, i2)} +{_range(j1, j2)} @@"
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                yield from ((" ", line) for line in a[x1:x2])
                continue
            yield from (("-", line) for line in a[x1:x2])
            yield from (("+", line) for line in b[y1:y2])


def _middle(a: Sequence[str], b: Sequence[str]) -> tuple[int, int, int]:
    """Where the lines the two sides share at their start end (`start`), and where those
    they share at their end begin, in `a` and in `b`."""
    start = 0
    while start < len(a) and start < len(b) and a[start] == b[start]:
        start += 1
    end_a, end_b = len(a), len(b)
    while end_a > start and end_b > start and a[end_a - 1] == b[end_b - 1]:
        end_a, end_b = end_a - 1, end_b - 1
    return start, end_a, end_b


def _middle_size(start: int, end_a: int, end_b: int) -> int:
    return end_a - start + end_b - start


def _opcodes(a: Sequence[str], b: Sequence[str], match_lines: int) -> list[Opcode]:
    start, end_a, end_b = _middle(a, b)
    middle: list[Opcode]
    if _middle_size(start, end_a, end_b) > match_lines:
        middle = [_block(start, end_a, start, end_b)] if (end_a > start or end_b > start) else []
    else:
        matcher = difflib.SequenceMatcher(None, a[start:end_a], b[start:end_b], autojunk=True)
        middle = [
            (tag, i1 + start, i2 + start, j1 + start, j2 + start)
            for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        ]
    ops: list[Opcode] = []
    if start:
        ops.append(("equal", 0, start, 0, start))
    ops.extend(middle)
    if end_a < len(a):
        ops.append(("equal", end_a, len(a), end_b, len(b)))
    return ops


def _block(i1: int, i2: int, j1: int, j2: int) -> Opcode:
    tag = "replace" if i2 > i1 and j2 > j1 else "delete" if i2 > i1 else "insert"
    return (tag, i1, i2, j1, j2)


def _grouped(opcodes: list[Opcode], n: int) -> list[list[Opcode]]:
    """Hunks with `n` lines of context, as difflib's `get_grouped_opcodes` makes them."""
    codes = list(opcodes)
    if not any(tag != "equal" for tag, *_ in codes):
        return []
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = (tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2)
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = (tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n))
    groups: list[list[Opcode]] = []
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            groups.append(group)
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        groups.append(group)
    return groups


def _range(start: int, stop: int) -> str:
    """A hunk's line range as unified diffs write it (1-based; an empty range names the
    line before it)."""
    length = stop - start
    first = start + 1 if length else start
    return str(first) if length == 1 else f"{first},{length}"


def _rendered(kind: str, raw: str, line_chars: int | None = None) -> list[DiffLine]:
    """One item of the diff as it is drawn: without its newline, a carriage return shown
    as ␍, cut at `line_chars`, and git's note after a last line without a newline."""
    if kind == "@":
        return [DiffLine(kind, raw)]
    ends = raw.endswith("\n")
    text = raw[:-1] if ends else raw
    if text.endswith("\r"):
        text = text[:-1] + "␍"
    if line_chars is not None and len(text) > line_chars:
        text = f"{text[:line_chars]}… {len(text) - line_chars:,} more characters"
    return [DiffLine(kind, text)] if ends else [DiffLine(kind, text), DiffLine("\\", NO_NEWLINE)]


def _drawn_count(kind: str, raw: str) -> int:
    return 1 if kind == "@" or raw.endswith("\n") else 2


def _capped(
    items: Iterable[tuple[str, str]], limits: DiffLimits, budget: _Budget
) -> tuple[tuple[DiffLine, ...], int]:
    """The lines shown under the file's and the call's caps, each cut at `line_chars`; and
    how many were left out (counted, not drawn)."""
    shown: list[DiffLine] = []
    size = hidden = 0
    for kind, raw in items:
        if hidden:
            hidden += _drawn_count(kind, raw)
            continue
        for line in _rendered(kind, raw, limits.line_chars):
            cost = len(line.text.encode("utf-8", "surrogatepass")) + 1
            if (
                hidden
                or len(shown) >= limits.file_lines
                or size + cost > limits.file_bytes
                or budget.lines <= 0
                or budget.size < cost
            ):
                hidden += 1
                continue
            shown.append(line)
            size += cost
            budget.lines -= 1
            budget.size -= cost
    return tuple(shown), hidden
