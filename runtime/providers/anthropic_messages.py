"""Anthropic Messages through the official `anthropic` SDK, streaming."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anthropic

from runtime.providers.base import (
    CUT,
    ProviderError,
    StopUpdate,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    UsageUpdate,
)
from runtime.providers.faults import check_event_stream, classify, malformed
from runtime.providers.openai_chat import split_known

_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "toolUse",
    "refusal": "error",
}


class AnthropicProvider:
    """Streams one request. The SDK does not retry: the runtime retries, so that each
    attempt is a recorded request (`max_retries` is kept for callers that pass it)."""

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str,
        max_retries: int = 0,
        timeout_s: float = 600.0,
    ) -> None:
        self._key = api_key
        self._client = anthropic.AsyncAnthropic(
            base_url=base_url, api_key=api_key, max_retries=max_retries, timeout=timeout_s
        )

    async def stream(self, payload: Mapping[str, Any]) -> AsyncIterator[StreamEvent]:
        create = self._client.messages.create
        known, extra = split_known(payload, create)
        try:
            stream = await create(**known, extra_body=extra or None)
        except Exception as exc:
            raise _error(exc, self._key, streaming=False) from None
        stopped = False
        try:
            await check_event_stream(stream.response, secret=self._key)
            async for event in stream:
                stopped = stopped or getattr(event, "type", None) == "message_stop"
                try:
                    items = _events(event)
                except (AttributeError, TypeError, KeyError, ValueError) as exc:
                    raise malformed(exc, secret=self._key) from None
                for item in items:
                    yield item
        except ProviderError:
            raise
        except Exception as exc:
            raise _error(exc, self._key, streaming=True) from None
        finally:
            await stream.close()
        if not stopped:
            # As Pi's own provider: without message_stop the answer is not whole.
            raise ProviderError("the stream ended before message_stop", kind=CUT)


def _events(event: Any) -> list[StreamEvent]:
    kind = getattr(event, "type", None)
    if kind == "message_start":
        return [_usage(event.message.usage)]
    if kind == "message_delta":
        events: list[StreamEvent] = []
        if event.usage is not None:
            events.append(_usage(event.usage))
        if event.delta.stop_reason:
            events.append(StopUpdate(_STOP.get(event.delta.stop_reason, "stop")))
        return events
    if kind == "content_block_start":
        return _block_start(f"block-{event.index}", event.content_block)
    if kind == "content_block_delta":
        return _block_delta(f"block-{event.index}", event.delta)
    return []


def _block_start(key: str, block: Any) -> list[StreamEvent]:
    kind = getattr(block, "type", None)
    if kind == "text":
        return [TextDelta(key, block.text or "")] if block.text else []
    if kind == "thinking":
        return [ThinkingDelta(key, block.thinking or "", signature=block.signature or None)]
    if kind == "redacted_thinking":
        return [ThinkingDelta(key, "", signature=block.data, redacted=True)]
    if kind == "tool_use":
        # The arguments arrive as input_json deltas; a non-empty start input is rare.
        start = block.input if isinstance(block.input, dict) and block.input else None
        return [
            ToolCallDelta(
                key, call_id=block.id, name=block.name, arguments=json.dumps(start) if start else ""
            )
        ]
    return []


def _block_delta(key: str, delta: Any) -> list[StreamEvent]:
    kind = getattr(delta, "type", None)
    if kind == "text_delta":
        return [TextDelta(key, delta.text)]
    if kind == "thinking_delta":
        return [ThinkingDelta(key, delta.thinking)]
    if kind == "signature_delta":
        return [ThinkingDelta(key, "", signature=delta.signature)]
    if kind == "input_json_delta":
        return [ToolCallDelta(key, arguments=delta.partial_json)]
    return []


def _usage(usage: Any) -> UsageUpdate:
    def count(name: str) -> int | None:
        value = getattr(usage, name, None)
        return int(value) if isinstance(value, int) else None

    return UsageUpdate(
        input=count("input_tokens"),
        output=count("output_tokens"),
        cache_read=count("cache_read_input_tokens"),
        cache_write=count("cache_creation_input_tokens"),
    )


def _error(exc: Exception, secret: str, *, streaming: bool) -> ProviderError:
    return classify(exc, anthropic.APIError, secret=secret, streaming=streaming)
