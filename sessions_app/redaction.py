"""What the guest of a share link does not see: tool outputs, file contents, the system
prompt, and text matching its owner's patterns (`sessions_app.services.shares`).

Each is replaced by a marker the guest sees ("[redacted: tool output]"), never dropped.
The rules apply to the records the views are folded from: while `redacting(...)` is in
force, every entry and event that a read hands to a projection passes through
`entry_data` / `event_data` first. So the chat, the trace, the context view (its rebuilt
messages, its system prompt), the tree's one-line texts and the live refresh all show the
same redacted facts, applied on the server before anything is drawn, and no view can
forget a rule. Outside `redacting` these are one context-variable read per record.

Patterns run on RE2, whose matching is linear in the input (no backtracking, so no
pattern can make a read take long), with a bounded memory per pattern; at most
`PATTERNS_MAX` patterns of at most `PATTERN_CHARS_MAX` characters each.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import re2

from sessions_app.errors import DomainError

PATTERNS_MAX = 20
PATTERN_CHARS_MAX = 200
PATTERN_MAX_MEM = 1 << 20  # bytes of RE2's automaton per pattern

TOOL_OUTPUT = "[redacted: tool output]"
FILE_CONTENTS = "[redacted: file contents]"
SYSTEM_PROMPT = "[redacted: system prompt]"
PATTERN = "[redacted]"

# Tools whose result is a file's content, and tools whose arguments carry one.
FILE_READ_TOOLS = frozenset({"read", "read_file"})
FILE_WRITE_TOOLS = frozenset({"write", "write_file", "edit"})
# Keys whose values are ids, names and kinds the views link and lay out by: a pattern
# never rewrites them (an image's base64 `data` included), whatever it matches.
STRUCTURAL_KEYS = frozenset(
    {
        "id",
        "parentId",
        "type",
        "role",
        "timestamp",
        "toolCallId",
        "toolName",
        "call_id",
        "tool",
        "name",
        "provider",
        "model",
        "api",
        "stopReason",
        "mimeType",
        "data",
        "firstKeptEntryId",
        "fromId",
        "targetId",
        "leaf_entry_id",
        "payload_sha256",
        "approval_id",
        "reason",
        "from",
        "to",
        "sha256",
    }
)


class BadPattern(DomainError):
    """A redaction pattern that is not one RE2 takes, or too many or too long ones."""


def compile_patterns(patterns: Sequence[Any]) -> tuple[Any, ...]:
    """The owner's patterns compiled, or `BadPattern` saying which one is refused."""
    if len(patterns) > PATTERNS_MAX:
        raise BadPattern(f"at most {PATTERNS_MAX} redaction patterns, got {len(patterns)}")
    compiled = []
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern:
            raise BadPattern("a redaction pattern must be a non-empty string")
        if len(pattern) > PATTERN_CHARS_MAX:
            raise BadPattern(
                f"a redaction pattern is at most {PATTERN_CHARS_MAX} characters, got {len(pattern)}"
            )
        if "\x00" in pattern:
            raise BadPattern("a redaction pattern must not contain NUL characters")
        options = re2.Options()
        options.max_mem = PATTERN_MAX_MEM
        options.log_errors = False
        try:
            found = re2.compile(pattern, options)
        except re2.error as exc:
            reason = exc.args[0] if exc.args else exc
            if isinstance(reason, bytes):
                reason = reason.decode("utf-8", errors="replace")
            raise BadPattern(
                f"cannot use the pattern {pattern!r}: {reason} (patterns are RE2: no "
                "backreferences, no lookaround)"
            ) from None
        if found.search(""):
            raise BadPattern(f"the pattern {pattern!r} matches empty text")
        compiled.append(found)
    return tuple(compiled)


@dataclass(frozen=True, slots=True)
class Redaction:
    tool_outputs: bool = False
    file_contents: bool = False
    system_prompt: bool = False
    patterns: tuple[Any, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.tool_outputs or self.file_contents or self.system_prompt or self.patterns)

    # --- entries (Pi's shape) ---------------------------------------------------------

    def entry(self, data: Mapping[str, Any]) -> Mapping[str, Any]:
        out = dict(data)
        message = out.get("message")
        if isinstance(message, Mapping):
            out["message"] = self._message(message)
        if self.system_prompt and isinstance(out.get("systemMessage"), Mapping):
            out["systemMessage"] = self._message(out["systemMessage"])
        return self._walk(out)

    def _message(self, message: Mapping[str, Any]) -> Mapping[str, Any]:
        role = message.get("role")
        out = dict(message)
        if role == "toolResult":
            tool = str(message.get("toolName") or "")
            if self.file_contents and tool in FILE_READ_TOOLS:
                out["content"], out["details"] = [_text(FILE_CONTENTS)], None
            elif self.tool_outputs:
                out["content"], out["details"] = [_text(TOOL_OUTPUT)], None
            elif self.file_contents and tool in FILE_WRITE_TOOLS:
                out["details"] = None  # an edit's diff
        elif role == "bashExecution" and self.tool_outputs:
            out["output"] = TOOL_OUTPUT
        elif role == "assistant" and self.file_contents:
            content = message.get("content")
            if isinstance(content, list):
                out["content"] = [self._block(block) for block in content]
        elif role == "system" and self.system_prompt:
            out["content"] = SYSTEM_PROMPT
            sections = message.get("sections")
            if isinstance(sections, Mapping):
                out["sections"] = {
                    k: None if v is None else SYSTEM_PROMPT for k, v in sections.items()
                }
        return out

    def _block(self, block: Any) -> Any:
        if (
            isinstance(block, Mapping)
            and block.get("type") == "toolCall"
            and block.get("name") in FILE_WRITE_TOOLS
            and isinstance(block.get("arguments"), Mapping)
        ):
            return {**block, "arguments": _file_arguments(block["arguments"])}
        return block

    # --- events -------------------------------------------------------------------------

    def event(self, event_type: str, data: Mapping[str, Any]) -> Mapping[str, Any]:
        out = dict(data)
        if isinstance(out.get("entry"), Mapping):
            out["entry"] = self.entry(out["entry"])
        calls = event_type in ("tool/call", "approval/asked")
        if calls and self.file_contents and out.get("tool") in FILE_WRITE_TOOLS:
            out["arguments"] = _file_arguments_text(str(out.get("arguments") or ""))
        if self.system_prompt:
            if event_type == "request/header":
                out["system_prompt"] = SYSTEM_PROMPT
            preset = out.get("preset")
            if event_type == "session/created" and isinstance(preset, Mapping):
                out["preset"] = self.preset(preset)
        return self._walk(out)

    def preset(self, preset: Mapping[str, Any]) -> Mapping[str, Any]:
        out = dict(preset)
        if self.system_prompt and out.get("system_prompt"):
            out["system_prompt"] = SYSTEM_PROMPT
        return self._walk(out)

    # --- patterns -------------------------------------------------------------------------

    def text(self, value: str) -> str:
        for pattern in self.patterns:
            value = pattern.sub(PATTERN, value)
        return value

    def _walk(self, value: Any, key: str | None = None) -> Any:
        if not self.patterns or key in STRUCTURAL_KEYS:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {k: self._walk(v, str(k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._walk(v) for v in value]
        return value


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def _file_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A write's or an edit's arguments with everything but the path redacted."""
    return {k: v if k == "path" else FILE_CONTENTS for k, v in arguments.items()}


def _file_arguments_text(raw: str) -> str:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return json.dumps({"arguments": FILE_CONTENTS})
    if not isinstance(parsed, Mapping):
        return json.dumps({"arguments": FILE_CONTENTS})
    return json.dumps(_file_arguments(parsed), ensure_ascii=False)


# --- the reads a guest's request makes --------------------------------------------------------

_active: ContextVar[Redaction | None] = ContextVar("strand_redaction", default=None)


@contextlib.contextmanager
def redacting(redaction: Redaction | None) -> Iterator[None]:
    """Every record read inside this block passes through `redaction`."""
    token = _active.set(redaction if redaction is not None and redaction.any else None)
    try:
        yield
    finally:
        _active.reset(token)


def entry_data(data: Any) -> Any:
    redaction = _active.get()
    if redaction is None or not isinstance(data, Mapping):
        return data
    return redaction.entry(data)


def event_data(event_type: str, data: Any) -> Any:
    redaction = _active.get()
    if redaction is None or not isinstance(data, Mapping):
        return data
    return redaction.event(event_type, data)


def active() -> Redaction | None:
    return _active.get()
