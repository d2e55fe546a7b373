"""What changed from one `request/header` to the next one of a session.

A header is the snapshot of everything a model request is sent under besides the messages:
provider, model, parameters, thinking level, the rendered system prompt and the tool
schemas. An auditor's first question about a new header is what it changed; this fold
answers it from the two headers' data alone: the settings that differ, parameters added,
removed or changed (by key), the system prompt as a line diff, and tools added, removed or
changed (description, other fields, and the parameter schema as a line diff of its JSON).

Two headers are compared on the fields that decide a request, with the defaults the runtime
writes for a missing one, so a header that only repeats the previous one (a `resume`)
changes nothing. Values are compared as canonical JSON, with integral floats as integers:
JSONB may give `100` back for a stored `100.0`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

# The header fields that decide a request, with the value a header that lacks one means
# (the runtime's own defaults, `runtime.header`).
HEADER_DEFAULTS: Mapping[str, Any] = {
    "provider": "",
    "model": "",
    "params": {},
    "system_prompt": "",
    "tools": [],
    "thinking_level": "off",
}
SETTINGS = ("provider", "model", "thinking_level")
_SHORT = {"thinking_level": "thinking"}
CONTEXT_LINES = 3


@dataclass(frozen=True, slots=True)
class ValueChange:
    """One named value that differs, as JSON text (None on the side that lacks it)."""

    name: str
    before: str | None
    after: str | None


@dataclass(frozen=True, slots=True)
class DiffLine:
    kind: Literal["context", "added", "removed"]
    text: str
    before_line: int | None  # 1-based line number on the side that has the line
    after_line: int | None


@dataclass(frozen=True, slots=True)
class Hunk:
    """A run of changed lines with a few unchanged ones around them, as `diff -u` shows."""

    before_start: int  # 1-based; the line before the hunk when it removes nothing
    before_count: int
    after_start: int
    after_count: int
    lines: tuple[DiffLine, ...]

    @property
    def heading(self) -> str:
        return (
            f"@@ -{self.before_start},{self.before_count} +{self.after_start},{self.after_count} @@"
        )


@dataclass(frozen=True, slots=True)
class ToolChange:
    name: str
    fields: tuple[ValueChange, ...]  # description and any other top-level field
    parameters: tuple[Hunk, ...]  # the parameter schema, as a diff of its indented JSON


@dataclass(frozen=True, slots=True)
class HeaderDiff:
    first: bool  # no header before this one: nothing to compare with
    settings: tuple[ValueChange, ...]  # provider, model, thinking_level
    params: tuple[ValueChange, ...]
    system_prompt: tuple[Hunk, ...]
    tools_added: tuple[str, ...]
    tools_removed: tuple[str, ...]
    tools_changed: tuple[ToolChange, ...]

    @property
    def changed(self) -> bool:
        return bool(
            self.settings
            or self.params
            or self.system_prompt
            or self.tools_added
            or self.tools_removed
            or self.tools_changed
        )

    @property
    def summary(self) -> tuple[str, ...]:
        """Short names of what changed, for one line of a list."""
        parts = [_SHORT.get(change.name, change.name) for change in self.settings]
        if self.params:
            parts.append("params")
        if self.system_prompt:
            parts.append("prompt")
        tools = [
            f"{sign}{len(names)}"
            for sign, names in (
                ("+", self.tools_added),
                ("−", self.tools_removed),
                ("~", self.tools_changed),
            )
            if names
        ]
        if tools:
            parts.append("tools " + " ".join(tools))
        return tuple(parts)


def diff_headers(
    previous: Mapping[str, Any] | None,
    current: Mapping[str, Any],
    *,
    context: int = CONTEXT_LINES,
) -> HeaderDiff:
    """What `current` changed from `previous` (the session's header before it, if any)."""
    if previous is None:
        return HeaderDiff(True, (), (), (), (), (), ())
    before, after = _fields(previous), _fields(current)
    settings = tuple(
        ValueChange(name, _json(before[name]), _json(after[name]))
        for name in SETTINGS
        if _canonical(before[name]) != _canonical(after[name])
    )
    params = _mapping_changes(_mapping(before["params"]), _mapping(after["params"]))
    prompt = text_diff(str(before["system_prompt"]), str(after["system_prompt"]), context)
    old_tools, new_tools = _tools(before["tools"]), _tools(after["tools"])
    return HeaderDiff(
        first=False,
        settings=settings,
        params=params,
        system_prompt=prompt,
        tools_added=tuple(name for name in new_tools if name not in old_tools),
        tools_removed=tuple(name for name in old_tools if name not in new_tools),
        tools_changed=tuple(
            _tool_change(name, old_tools[name], new_tools[name], context)
            for name in new_tools
            if name in old_tools and _canonical(old_tools[name]) != _canonical(new_tools[name])
        ),
    )


def header_changed(previous: Mapping[str, Any] | None, current: Mapping[str, Any]) -> bool:
    """Whether `current` differs from `previous` in anything that decides a request."""
    if previous is None:
        return False
    before, after = _fields(previous), _fields(current)
    return any(_canonical(before[name]) != _canonical(after[name]) for name in HEADER_DEFAULTS)


def text_diff(before: str, after: str, context: int = CONTEXT_LINES) -> tuple[Hunk, ...]:
    """The lines of `after` that differ from `before`, in hunks (empty when equal)."""
    if before == after:
        return ()
    # Lines keep their ends while matched, so that texts differing only in a line end (or
    # a final newline) still give a hunk; the ends are dropped for display.
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    return tuple(_hunk(old, new, group) for group in matcher.get_grouped_opcodes(context))


def _hunk(
    old: Sequence[str], new: Sequence[str], group: Sequence[tuple[str, int, int, int, int]]
) -> Hunk:
    lines: list[DiffLine] = []
    for tag, a0, a1, b0, b1 in group:
        if tag == "equal":
            lines += [
                DiffLine("context", _shown(old[a0 + i]), a0 + i + 1, b0 + i + 1)
                for i in range(a1 - a0)
            ]
            continue
        lines += [DiffLine("removed", _shown(old[i]), i + 1, None) for i in range(a0, a1)]
        lines += [DiffLine("added", _shown(new[i]), None, i + 1) for i in range(b0, b1)]
    first, last = group[0], group[-1]
    before_count, after_count = last[2] - first[1], last[4] - first[3]
    return Hunk(
        before_start=first[1] + 1 if before_count else first[1],
        before_count=before_count,
        after_start=first[3] + 1 if after_count else first[3],
        after_count=after_count,
        lines=tuple(lines),
    )


def _shown(line: str) -> str:
    return line.rstrip("\r\n")


def _fields(header: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: header.get(name) if header.get(name) is not None else default
        for name, default in HEADER_DEFAULTS.items()
    }


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _mapping_changes(
    before: Mapping[str, Any], after: Mapping[str, Any]
) -> tuple[ValueChange, ...]:
    return tuple(
        ValueChange(
            str(key),
            _json(before[key]) if key in before else None,
            _json(after[key]) if key in after else None,
        )
        for key in sorted(set(before) | set(after), key=str)
        if key not in before
        or key not in after
        or _canonical(before[key]) != _canonical(after[key])
    )


def _tools(value: Any) -> dict[str, Mapping[str, Any]]:
    """Tools by name, in their order; a later schema of the same name wins, as a provider
    would see only one tool of a name."""
    tools: dict[str, Mapping[str, Any]] = {}
    for tool in value if isinstance(value, list) else ():
        if isinstance(tool, Mapping):
            tools[str(tool.get("name") or "")] = tool
    return tools


def _tool_change(
    name: str, before: Mapping[str, Any], after: Mapping[str, Any], context: int
) -> ToolChange:
    others = {key: value for key, value in before.items() if key not in ("name", "parameters")}
    others_after = {key: value for key, value in after.items() if key not in ("name", "parameters")}
    return ToolChange(
        name=name,
        fields=_mapping_changes(others, others_after),
        parameters=text_diff(
            _json(before.get("parameters"), indent=2),
            _json(after.get("parameters"), indent=2),
            context,
        ),
    )


def _normalize(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    return value


def _json(value: Any, indent: int | None = None) -> str:
    return json.dumps(
        _normalize(value), indent=indent, sort_keys=True, ensure_ascii=False, default=str
    )


def _canonical(value: Any) -> str:
    return _json(value)
