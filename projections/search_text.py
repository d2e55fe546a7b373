"""What search reads of an entry: its searchable parts, their text and the facts the filters
match (role, tool, error, model), and the normalised form both the index and a query use.

One entry may give several parts: an assistant message gives its text (part 0) and one part
per tool call it makes (part k for the k-th call), so that a search for a tool's arguments
finds the call, and the filter `role=toolCall` the calls alone.

Normalisation is NFKC, then case folding, then runs of white space made one space: full-width
and half-width forms, upper and lower case, and line breaks inside a phrase match alike. It
is plain Python so that the index (written by the projector) and the tail of entries after
the projector's checkpoint (matched at query time) match the same way.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# The text kept of one part: a tool's output can be megabytes, which no snippet needs and
# which would make the trigram index of every such row that much larger.
TEXT_MAX = 32_000

_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class SearchPart:
    part: int
    role: str  # user, assistant, toolCall, toolResult, bashExecution, custom, compaction, …
    text: str  # as written (capped at TEXT_MAX), for snippets
    tool_name: str = ""
    is_error: bool = False
    model: str = ""

    @property
    def normalised(self) -> str:
        return normalise(self.text)


def normalise(text: str) -> str:
    """The form the index holds and a query term is matched in."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def clean(text: str) -> str:
    """Text Postgres can store (no NUL), at most TEXT_MAX characters."""
    return text.replace("\x00", "")[:TEXT_MAX]


def entry_parts(entry: Mapping[str, Any]) -> list[SearchPart]:
    """The searchable parts of one Pi entry (none for entries that carry no text)."""
    return [part for part in _parts(entry) if part.text.strip()]


def _parts(entry: Mapping[str, Any]) -> Iterator[SearchPart]:
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        if isinstance(message, Mapping):
            yield from _message_parts(message)
    elif kind in ("compaction", "branch_summary"):
        yield SearchPart(0, str(kind), clean(_string(entry.get("summary"))))
    elif kind == "custom_message":
        yield SearchPart(0, "custom", clean(_content_text(entry.get("content"))))


def _message_parts(message: Mapping[str, Any]) -> Iterator[SearchPart]:
    role = _string(message.get("role"))
    content = message.get("content")
    if role == "assistant":
        model = _string(message.get("model"))
        yield SearchPart(0, "assistant", clean(_content_text(content)), model=model)
        calls = [c for c in content if _is_call(c)] if isinstance(content, list) else []
        for index, call in enumerate(calls, start=1):
            name = _string(call.get("name"))
            arguments = call.get("arguments")
            shown = arguments if isinstance(arguments, str) else _json(arguments)
            yield SearchPart(
                index, "toolCall", clean(f"{name} {shown}"), tool_name=name, model=model
            )
    elif role == "toolResult":
        yield SearchPart(
            0,
            "toolResult",
            clean(_content_text(content)),
            tool_name=_string(message.get("toolName")),
            is_error=message.get("isError") is True,
        )
    elif role == "bashExecution":
        text = f"{_string(message.get('command'))}\n{_string(message.get('output'))}"
        yield SearchPart(0, "bashExecution", clean(text), tool_name="bash")
    elif role:
        yield SearchPart(0, role, clean(_content_text(content)))


def _is_call(block: Any) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "toolCall"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = [
        _string(block.get("text"))
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text"
    ]
    return "\n".join(texts)


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return ""
