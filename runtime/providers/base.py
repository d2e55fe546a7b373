"""One streaming interface for every model provider.

A provider takes the exact request body (`projections.payload.build_payload`) and yields
`StreamEvent`s; the `Assembler` turns them into a Pi assistant message. Failures are raised
as `ProviderError`, which says whether the provider refused the context as too long.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.messages import TokenCounts

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class TextDelta:
    key: str  # identifies the content block the delta belongs to
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    key: str
    text: str = ""
    # The signature (Anthropic) or the field the server used for reasoning (OpenAI-compatible).
    signature: str | None = None
    redacted: bool = False


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    key: str
    call_id: str | None = None
    name: str | None = None
    arguments: str = ""  # a fragment of the raw JSON argument string


@dataclass(frozen=True, slots=True)
class UsageUpdate:
    """Token counts so far; a field left None keeps its previous value."""

    input: int | None = None
    output: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None


@dataclass(frozen=True, slots=True)
class StopUpdate:
    reason: str  # Pi's stopReason: stop, length, toolUse, error


StreamEvent = TextDelta | ThinkingDelta | ToolCallDelta | UsageUpdate | StopUpdate


# What went wrong with a model request, as a word the log, the views and the retry policy
# share. The message of a `ProviderError` is the provider's own account (key redacted).
CUT = "cut"  # the stream ended before the model said it was done
STALL = "stall"  # no bytes for longer than the preset's request_timeout_s
RATE_LIMITED = "rate_limited"  # HTTP 429
QUOTA = "quota"  # HTTP 429 insufficient_quota: retrying does not help
OVERLOADED = "overloaded"  # Anthropic's 529 / overloaded_error
SERVER_ERROR = "server_error"  # HTTP 5xx, 408, 409
CONNECTION = "connection"  # no answer at all: refused, reset, DNS
MALFORMED = "malformed"  # an event or chunk that is not valid JSON / SSE
NOT_A_STREAM = "not_a_stream"  # a plain body answered a streaming request
INVALID_TOOL_ARGUMENTS = "invalid_tool_arguments"  # tool-call arguments never became JSON
AUTH = "auth"  # HTTP 401 / 403
CONTEXT_LENGTH = "context_length"  # the prompt does not fit the model's window
BAD_REQUEST = "bad_request"  # another 4xx
REFUSED = "refused"  # the model ended its reply with an error (a content filter)
UNKNOWN = "unknown"

FAULT_KINDS = (
    CUT,
    STALL,
    RATE_LIMITED,
    QUOTA,
    OVERLOADED,
    SERVER_ERROR,
    CONNECTION,
    MALFORMED,
    NOT_A_STREAM,
    INVALID_TOOL_ARGUMENTS,
    AUTH,
    CONTEXT_LENGTH,
    BAD_REQUEST,
    REFUSED,
    UNKNOWN,
)
# Faults that a second identical request may not meet. The others are deterministic (the
# same request fails the same way) or need a person (a key, a quota, a shorter context).
RETRYABLE = frozenset({CUT, STALL, RATE_LIMITED, OVERLOADED, SERVER_ERROR, CONNECTION})

# Error types and codes providers put in their error bodies (Anthropic's `error.type`,
# OpenAI's `error.code`) → fault kind; they decide when there is no HTTP status (an error
# event inside a stream) and refine one (429 with insufficient_quota).
_CODE_KINDS = {
    "overloaded_error": OVERLOADED,
    "rate_limit_error": RATE_LIMITED,
    "rate_limit_exceeded": RATE_LIMITED,
    "insufficient_quota": QUOTA,
    "api_error": SERVER_ERROR,
    "server_error": SERVER_ERROR,
    "authentication_error": AUTH,
    "permission_error": AUTH,
    "invalid_api_key": AUTH,
    "context_length_exceeded": CONTEXT_LENGTH,
    "invalid_request_error": BAD_REQUEST,
    "request_too_large": BAD_REQUEST,
    "not_found_error": BAD_REQUEST,
}


def fault_kind(status: int | None, code: str | None = None) -> str:
    """The fault an HTTP status (and the body's error type or code) stands for."""
    by_code = _CODE_KINDS.get(code or "")
    if by_code is not None and (status is None or by_code in (QUOTA, CONTEXT_LENGTH)):
        return by_code
    if status is None:
        return by_code or UNKNOWN
    if status in (401, 403):
        return AUTH
    if status == 429:
        return RATE_LIMITED
    if status == 529:
        return OVERLOADED
    if status >= 500 or status in (408, 409):
        return SERVER_ERROR
    if status >= 400:
        return BAD_REQUEST
    return by_code or UNKNOWN


class ProviderError(Exception):
    """The provider failed the request. `overflow`: it refused the context as too long.
    `kind` is one of `FAULT_KINDS`; `retry_after_s` is what the provider asked to wait."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        overflow: bool = False,
        kind: str | None = None,
        retry_after_s: float | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.overflow = overflow or kind == CONTEXT_LENGTH
        self.kind = kind or (CONTEXT_LENGTH if overflow else fault_kind(status, code))
        self.retry_after_s = retry_after_s
        self.code = code

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE


class Provider(Protocol):
    def stream(self, payload: Mapping[str, Any]) -> AsyncIterator[StreamEvent]:
        """Send `payload` unchanged and yield what the model streams back."""
        ...


# Phrases providers use when the prompt does not fit the model's context window.
_OVERFLOW = re.compile(
    r"prompt is too long|context[ _-]?length[ _-]?exceeded|maximum context length"
    r"|exceeds? (?:the )?(?:model'?s? )?context(?: window)?|context window|too many tokens"
    r"|reduce the length of the messages|input is too long",
    re.IGNORECASE,
)


def is_context_overflow(message: str, code: str | None = None) -> bool:
    if code in ("context_length_exceeded", "string_above_max_length"):
        return True
    return bool(_OVERFLOW.search(message or ""))


@dataclass
class _Block:
    kind: str  # text, thinking, toolCall
    text: str = ""
    signature: str | None = None
    redacted: bool = False
    call_id: str = ""
    name: str = ""
    raw_arguments: str = ""


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """One tool call as the model made it: parsed arguments and the raw string."""

    call_id: str
    name: str
    arguments: Mapping[str, Any]
    raw_arguments: str
    arguments_valid: bool


@dataclass
class Assembler:
    """Folds stream events into the content of one assistant message."""

    blocks: dict[str, _Block] = field(default_factory=dict)
    tokens: TokenCounts = TokenCounts()
    stop_reason: str | None = None
    received_any: bool = False

    def add(self, event: StreamEvent) -> None:
        if isinstance(event, UsageUpdate):
            self.tokens = TokenCounts(
                input=_keep(event.input, self.tokens.input),
                output=_keep(event.output, self.tokens.output),
                cache_read=_keep(event.cache_read, self.tokens.cache_read),
                cache_write=_keep(event.cache_write, self.tokens.cache_write),
            )
            return
        if isinstance(event, StopUpdate):
            self.stop_reason = event.reason
            return
        self.received_any = True
        if isinstance(event, TextDelta):
            self._block(event.key, "text").text += event.text
        elif isinstance(event, ThinkingDelta):
            block = self._block(event.key, "thinking")
            block.text += event.text
            if event.signature is not None:
                block.signature = (block.signature or "") + event.signature
            block.redacted = block.redacted or event.redacted
        elif isinstance(event, ToolCallDelta):
            block = self._block(event.key, "toolCall")
            block.call_id = block.call_id or (event.call_id or "")
            block.name = block.name or (event.name or "")
            block.raw_arguments += event.arguments

    def _block(self, key: str, kind: str) -> _Block:
        if key not in self.blocks:
            self.blocks[key] = _Block(kind)
        return self.blocks[key]

    @property
    def received_chars(self) -> int:
        """How much of the answer arrived: text, thinking and raw tool-call arguments."""
        return sum(len(b.text) + len(b.raw_arguments) + len(b.name) for b in self.blocks.values())

    def tool_calls(self) -> list[ToolCallRequest]:
        calls = []
        for block in self.blocks.values():
            if block.kind != "toolCall":
                continue
            arguments, valid = parse_arguments(block.raw_arguments)
            calls.append(
                ToolCallRequest(block.call_id, block.name, arguments, block.raw_arguments, valid)
            )
        return calls

    def content(self, *, with_tool_calls: bool = True) -> list[JSON]:
        """Pi content blocks in stream order; a cut-off stream keeps no tool calls."""
        content: list[JSON] = []
        for block in self.blocks.values():
            if block.kind == "text":
                if block.text:
                    content.append({"type": "text", "text": block.text})
            elif block.kind == "thinking":
                thinking: JSON = {"type": "thinking", "thinking": block.text}
                if block.signature:
                    thinking["thinkingSignature"] = block.signature
                if block.redacted:
                    thinking["redacted"] = True
                content.append(thinking)
            elif with_tool_calls:
                arguments, _ = parse_arguments(block.raw_arguments)
                content.append(
                    {
                        "type": "toolCall",
                        "id": block.call_id,
                        "name": block.name,
                        "arguments": dict(arguments),
                    }
                )
        return content


def parse_arguments(raw: str) -> tuple[Mapping[str, Any], bool]:
    """A tool call's argument object; an empty string is `{}`, anything else not an object
    is invalid (and reads as `{}`)."""
    if not raw.strip():
        return {}, True
    try:
        value = json.loads(raw)
    except ValueError:
        return {}, False
    return (value, True) if isinstance(value, dict) else ({}, False)


def _keep(new: int | None, old: int) -> int:
    return old if new is None else int(new)
