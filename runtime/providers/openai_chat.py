"""OpenAI-compatible Chat Completions (OpenAI, DeepSeek, vLLM, Ollama, LM Studio…) through
the official `openai` SDK, streaming."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Mapping
from typing import Any

import openai

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

_STOP = {"stop": "stop", "length": "length", "tool_calls": "toolUse", "function_call": "toolUse"}
# Where OpenAI-compatible servers put reasoning text (DeepSeek, vLLM, OpenRouter…).
_REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_text")


def split_known(payload: Mapping[str, Any], method: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The payload as keyword arguments the SDK method declares, plus the rest for
    `extra_body`: the SDK merges both into one JSON body equal to the payload."""
    names = set(inspect.signature(method).parameters) - {
        "extra_headers",
        "extra_query",
        "extra_body",
        "timeout",
    }
    known = {k: v for k, v in payload.items() if k in names}
    extra = {k: v for k, v in payload.items() if k not in names}
    return known, extra


class OpenAIChatProvider:
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
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, max_retries=max_retries, timeout=timeout_s
        )

    async def stream(self, payload: Mapping[str, Any]) -> AsyncIterator[StreamEvent]:
        create = self._client.chat.completions.create
        known, extra = split_known(payload, create)
        try:
            stream = await create(**known, extra_body=extra or None)
        except Exception as exc:
            raise _error(exc, self._key, streaming=False) from None
        state = _StreamState()
        try:
            await check_event_stream(stream.response, secret=self._key)
            async for chunk in stream:
                try:
                    events = state.events(chunk)
                except (AttributeError, TypeError, KeyError, ValueError) as exc:
                    raise malformed(exc, secret=self._key) from None
                for event in events:
                    yield event
        except ProviderError:
            raise
        except Exception as exc:
            raise _error(exc, self._key, streaming=True) from None
        finally:
            await stream.close()
        if not state.finished:
            # A stream that stops without a finish_reason was cut: by the network, a proxy
            # or a crashing server. It is not an answer.
            raise ProviderError("the stream ended before a finish_reason", kind=CUT)


class _StreamState:
    """Turns chunks into stream events; remembers which reasoning field the server uses."""

    def __init__(self) -> None:
        self.reasoning_field: str | None = None
        self.finished = False

    def events(self, chunk: Any) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            events.append(_usage(usage))
        for choice in getattr(chunk, "choices", None) or ():
            if choice.delta is not None:
                events.extend(self._delta_events(choice.delta))
            if choice.finish_reason:
                self.finished = True
                events.append(StopUpdate(_STOP.get(choice.finish_reason, "error")))
        return events

    def _delta_events(self, delta: Any) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        extra = getattr(delta, "model_extra", None) or {}
        for name in _REASONING_FIELDS:
            value = getattr(delta, name, None) or extra.get(name)
            if isinstance(value, str) and value:
                # Pi keeps the field's name as the thinking block's signature, and the
                # payload sends reasoning back under that field.
                first = self.reasoning_field is None
                self.reasoning_field = self.reasoning_field or name
                events.append(ThinkingDelta("thinking", value, signature=name if first else None))
                break
        if delta.content:
            events.append(TextDelta("text", delta.content))
        for call in delta.tool_calls or ():
            function = call.function
            events.append(
                ToolCallDelta(
                    key=f"tool-{call.index}",
                    call_id=call.id or None,
                    name=(function.name if function is not None else None) or None,
                    arguments=(function.arguments if function is not None else None) or "",
                )
            )
        return events


def _usage(usage: Any) -> UsageUpdate:
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    return UsageUpdate(
        input=max(prompt - cached, 0),
        output=int(getattr(usage, "completion_tokens", 0) or 0),
        cache_read=cached,
        cache_write=0,
    )


def _error(exc: Exception, secret: str, *, streaming: bool) -> ProviderError:
    return classify(exc, openai.APIError, secret=secret, streaming=streaming)
