"""Pi v3 messages as the runtime writes them (user, assistant, toolResult) and their usage.

The shapes are Pi's `AgentMessage`s, so that a session exports to a Pi file unchanged:
assistant messages carry `api`, `provider`, `model`, `usage` (with `cost`), `stopReason`
and an epoch-ms `timestamp`; tool results carry `toolCallId`, `toolName`, `content`,
`isError` and `timestamp`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.config import AgentConfig, Pricing

JSON = dict[str, Any]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class TokenCounts:
    input: int = 0  # uncached input
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write


def usage_of(tokens: TokenCounts, pricing: Pricing) -> JSON:
    """Pi's `usage` object, with the cost in dollars from per-million prices."""
    cost = {
        "input": tokens.input * pricing.input / 1e6,
        "output": tokens.output * pricing.output / 1e6,
        "cacheRead": tokens.cache_read * pricing.cache_read / 1e6,
        "cacheWrite": tokens.cache_write * pricing.cache_write / 1e6,
    }
    cost["total"] = sum(cost.values())
    return {
        "input": tokens.input,
        "output": tokens.output,
        "cacheRead": tokens.cache_read,
        "cacheWrite": tokens.cache_write,
        "totalTokens": tokens.total,
        "cost": cost,
    }


def user_message(text: str, timestamp: int | None = None) -> JSON:
    return {
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "timestamp": timestamp if timestamp is not None else now_ms(),
    }


def assistant_message(
    config: AgentConfig,
    content: Sequence[Mapping[str, Any]],
    *,
    tokens: TokenCounts,
    stop_reason: str,
    error_message: str | None = None,
    timestamp: int | None = None,
) -> JSON:
    message: JSON = {
        "role": "assistant",
        "content": [dict(block) for block in content],
        "api": config.api,
        "provider": config.provider,
        "model": config.model,
        "usage": usage_of(tokens, config.pricing),
        "stopReason": stop_reason,
    }
    if error_message is not None:
        message["errorMessage"] = error_message
    message["timestamp"] = timestamp if timestamp is not None else now_ms()
    return message


def tool_result_message(
    call_id: str,
    tool_name: str,
    text: str,
    *,
    is_error: bool,
    details: Mapping[str, Any] | None = None,
    timestamp: int | None = None,
) -> JSON:
    message: JSON = {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": tool_name,
        "content": [{"type": "text", "text": text}],
    }
    if details:
        message["details"] = dict(details)
    message["isError"] = is_error
    message["timestamp"] = timestamp if timestamp is not None else now_ms()
    return message


def message_entry(message: Mapping[str, Any], *, parent_id: str | None | object = ...) -> JSON:
    """A Pi `message` entry; the store fills id and timestamp. A given `parent_id` (even
    None, for a new root) is written as is; otherwise the store uses the current leaf."""
    entry: JSON = {"type": "message", "message": dict(message)}
    if parent_id is not ...:
        entry["parentId"] = parent_id
    return entry


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, Sequence):
        return ""
    return "".join(
        str(block.get("text") or "")
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text"
    )


def tool_calls_in(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if not isinstance(content, Sequence) or isinstance(content, str):
        return []
    return [b for b in content if isinstance(b, Mapping) and b.get("type") == "toolCall"]
