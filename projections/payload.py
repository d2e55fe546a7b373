"""The exact provider payload of one model request, and its hash.

The runtime sends `build_payload(...)` unchanged through the provider SDK and records
`payload_sha256(payload)` in the request's `request/sent` manifest. The request view later
rebuilds the payload from stored facts (the `request/header` and the entries as of the
request) and compares hashes, so everything here must be a pure function of its arguments.

Messages come in the neutral shape that `projections.context.to_provider_messages` returns:
roles `user`, `assistant` and `toolResult` with Pi content blocks (`text`, `image`
{data, mimeType}, `thinking`, `toolCall` {id, name, arguments}). Tool schemas come as
`{name, description, parameters}` with a JSON Schema under `parameters`.

The conversions follow pi-ai's providers (`openai-completions`, `anthropic`) so that a
session imported from Pi reads to the model the way Pi would have sent it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from projections.tokens import js_json_stringify

PROVIDERS = ("openai", "anthropic", "offline")

# Anthropic refuses a request without max_tokens. A fixed default keeps the payload a pure
# function of the header when the preset does not say.
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096

# Keys that build_payload owns; a parameter with one of these names would silently replace
# part of the conversation, so it is refused instead.
_RESERVED = {
    "openai": frozenset({"model", "messages", "tools"}),
    "anthropic": frozenset({"model", "messages", "tools", "system"}),
}

# The fields under which OpenAI-compatible servers return reasoning text. Pi stores that
# field name as the thinking block's signature and sends the reasoning back under it.
_OPENAI_REASONING_FIELDS = frozenset({"reasoning_content", "reasoning", "reasoning_text"})

# Anthropic tool ids must match ^[a-zA-Z0-9_-]{1,64}$; ids from other providers may not.
_ANTHROPIC_ID_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]")

# A str decoded from JSON can hold a lone surrogate, which no provider accepts and UTF-8
# cannot encode (pi-ai strips them too).
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")

JSON = dict[str, Any]


class PayloadError(ValueError):
    """The request cannot be expressed for this provider."""


# --- public ------------------------------------------------------------------------------


def build_payload(
    *,
    provider: str,
    model: str,
    params: Mapping[str, Any],
    system_prompt: str,
    tools: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> JSON:
    """The request body for `provider`, exactly as it is sent.

    `provider` is a provider kind: `openai` (Chat Completions, also for DeepSeek, vLLM,
    Ollama… behind a base URL), `anthropic` (Messages API) or `offline` (the built-in model,
    which takes the OpenAI shape). `params` (temperature, max_tokens, thinking, …) are
    copied to the top level of the body as they are.
    """
    if provider in ("openai", "offline"):
        return _openai_payload(model, params, system_prompt, tools, messages)
    if provider == "anthropic":
        return _anthropic_payload(model, params, system_prompt, tools, messages)
    raise PayloadError(f"unknown provider kind {provider!r} (expected one of {PROVIDERS})")


def canonical_json(payload: Any) -> bytes:
    """Bytes that identify a payload: sorted keys, no spaces, UTF-8, no NaN or Infinity.

    Integral floats are written as integers (as JavaScript and RFC 8785 do), so a value that
    went through Postgres JSONB and came back as `100` instead of `100.0` hashes the same.
    """
    text = json.dumps(
        _normalize_numbers(payload),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    return text.encode("utf-8")


def payload_sha256(payload: Any) -> str:
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def arguments_json(arguments: Any) -> str:
    """A tool call's arguments as the JSON string a Chat Completions request carries.

    Printed as JavaScript's `JSON.stringify` prints it (as Pi sends it), but with sorted
    keys: JSONB does not keep key order, and the same call read back from the database
    must give the same string the runtime sent.
    """
    return js_json_stringify(_sorted_keys(arguments if arguments is not None else {}))


def _sorted_keys(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _sorted_keys(value[key]) for key in sorted(value, key=str)}
    if isinstance(value, (list, tuple)):
        return [_sorted_keys(item) for item in value]
    return value


# --- shared helpers ----------------------------------------------------------------------


def _normalize_numbers(value: Any) -> Any:
    """Integral floats become ints, recursively; NaN and Infinity are refused by json."""
    kind = type(value)
    if kind is str or kind is int or value is None:
        return value  # the common leaves, without the abstract-class checks below
    if kind is dict:
        return {key: _normalize_numbers(item) for key, item in value.items()}
    if kind is list:
        return [_normalize_numbers(item) for item in value]
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 1e21:
            return int(value)
        return value
    if isinstance(value, Mapping):
        return {key: _normalize_numbers(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalize_numbers(item) for item in value]
    return value


def _clean(text: Any) -> str:
    return _LONE_SURROGATE.sub("", text if isinstance(text, str) else str(text or ""))


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    """Content as a list of blocks; Pi allows a bare string for user messages."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, Sequence):
        return [block for block in content if isinstance(block, Mapping)]
    return []


def _texts(blocks: Sequence[Mapping[str, Any]]) -> list[str]:
    return [_clean(block.get("text")) for block in blocks if block.get("type") == "text"]


def _images(blocks: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [block for block in blocks if block.get("type") == "image"]


def _merge_params(body: JSON, params: Mapping[str, Any], reserved: frozenset[str]) -> JSON:
    clash = sorted(reserved.intersection(params))
    if clash:
        raise PayloadError(f"request params may not set {', '.join(clash)}")
    return {**params, **body}


def _consecutive_tool_results(
    messages: Sequence[Mapping[str, Any]], start: int
) -> list[Mapping[str, Any]]:
    end = start
    while end < len(messages) and messages[end].get("role") == "toolResult":
        end += 1
    return list(messages[start:end])


def _convert(
    messages: Sequence[Mapping[str, Any]],
    convert_one: Callable[[Mapping[str, Any]], list[JSON]],
    convert_results: Callable[[list[Mapping[str, Any]]], list[JSON]],
) -> list[JSON]:
    """Walk the messages; a run of tool results is converted as one group."""
    out: list[JSON] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        if message.get("role") == "toolResult":
            group = _consecutive_tool_results(messages, index)
            out.extend(convert_results(group))
            index += len(group)
            continue
        out.extend(convert_one(message))
        index += 1
    return out


# --- OpenAI Chat Completions -------------------------------------------------------------


def _openai_payload(
    model: str,
    params: Mapping[str, Any],
    system_prompt: str,
    tools: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> JSON:
    converted: list[JSON] = []
    if system_prompt:
        converted.append({"role": "system", "content": _clean(system_prompt)})
    converted.extend(_convert(messages, _openai_message, _openai_tool_results))
    body: JSON = {"model": model, "messages": converted}
    if tools:
        body["tools"] = [_openai_tool(tool) for tool in tools]
    return _merge_params(body, params, _RESERVED["openai"])


def _openai_tool(tool: Mapping[str, Any]) -> JSON:
    return {
        "type": "function",
        "function": {
            "name": tool.get("name", ""),
            "description": tool.get("description", ""),
            "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
        },
    }


def _data_uri(image: Mapping[str, Any]) -> str:
    return f"data:{image.get('mimeType', 'image/png')};base64,{image.get('data', '')}"


def _openai_message(message: Mapping[str, Any]) -> list[JSON]:
    role = message.get("role")
    if role == "user":
        return _openai_user(message.get("content"))
    if role == "assistant":
        return _openai_assistant(_blocks(message.get("content")))
    raise PayloadError(f"message role {role!r} cannot be sent; convert it first")


def _openai_user(content: Any) -> list[JSON]:
    if isinstance(content, str):
        return [{"role": "user", "content": _clean(content)}]
    parts: list[JSON] = []
    for block in _blocks(content):
        if block.get("type") == "text":
            parts.append({"type": "text", "text": _clean(block.get("text"))})
        elif block.get("type") == "image":
            parts.append({"type": "image_url", "image_url": {"url": _data_uri(block)}})
    return [{"role": "user", "content": parts}] if parts else []


def _openai_assistant(blocks: Sequence[Mapping[str, Any]]) -> list[JSON]:
    # Chat Completions takes assistant text as one plain string; some servers echo a block
    # list back literally. Blank text blocks are dropped as pi-ai does.
    text = "".join(t for t in _texts(blocks) if t.strip())
    message: JSON = {"role": "assistant", "content": text or None}
    calls = [block for block in blocks if block.get("type") == "toolCall"]
    if calls:
        message["tool_calls"] = [
            {
                "id": call.get("id", ""),
                "type": "function",
                "function": {
                    "name": call.get("name", ""),
                    "arguments": arguments_json(call.get("arguments")),
                },
            }
            for call in calls
        ]
    _add_openai_reasoning(message, blocks)
    # A message with neither content nor tool calls is rejected (an aborted, empty stream).
    if message["content"] is None and not calls:
        return []
    return [message]


def _add_openai_reasoning(message: JSON, blocks: Sequence[Mapping[str, Any]]) -> None:
    """Send reasoning back only under the field the server itself used for it."""
    thinking = [
        block
        for block in blocks
        if block.get("type") == "thinking" and _clean(block.get("thinking")).strip()
    ]
    if not thinking:
        return
    field = thinking[0].get("thinkingSignature")
    if field in _OPENAI_REASONING_FIELDS:
        message[field] = "\n".join(_clean(block.get("thinking")) for block in thinking)


def _openai_tool_results(group: list[Mapping[str, Any]]) -> list[JSON]:
    out: list[JSON] = []
    images: list[JSON] = []
    for result in group:
        blocks = _blocks(result.get("content"))
        text = "\n".join(_texts(blocks))
        out.append(
            {
                "role": "tool",
                "tool_call_id": result.get("toolCallId", ""),
                "content": text if text else "(see attached image)",
            }
        )
        images.extend(
            {"type": "image_url", "image_url": {"url": _data_uri(image)}}
            for image in _images(blocks)
        )
    # A tool message carries text only; images ride in one user message after the group.
    if images:
        intro: JSON = {"type": "text", "text": "Attached image(s) from tool result:"}
        out.append({"role": "user", "content": [intro, *images]})
    return out


# --- Anthropic Messages ------------------------------------------------------------------


def _anthropic_payload(
    model: str,
    params: Mapping[str, Any],
    system_prompt: str,
    tools: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> JSON:
    body: JSON = {
        "model": model,
        "messages": _convert(messages, _anthropic_message, _anthropic_tool_results),
    }
    if system_prompt:
        body["system"] = _clean(system_prompt)
    if tools:
        body["tools"] = [_anthropic_tool(tool) for tool in tools]
    merged = _merge_params(body, params, _RESERVED["anthropic"])
    merged.setdefault("max_tokens", ANTHROPIC_DEFAULT_MAX_TOKENS)
    return merged


def _anthropic_tool(tool: Mapping[str, Any]) -> JSON:
    return {
        "name": tool.get("name", ""),
        "description": tool.get("description", ""),
        "input_schema": tool.get("parameters") or {"type": "object", "properties": {}},
    }


def _anthropic_id(call_id: Any) -> str:
    return _ANTHROPIC_ID_BAD_CHARS.sub("_", str(call_id or ""))[:64]


def _anthropic_image(block: Mapping[str, Any]) -> JSON:
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": block.get("mimeType", "image/png"),
            "data": block.get("data", ""),
        },
    }


def _anthropic_message(message: Mapping[str, Any]) -> list[JSON]:
    role = message.get("role")
    if role == "user":
        return _anthropic_user(message.get("content"))
    if role == "assistant":
        return _anthropic_assistant(_blocks(message.get("content")))
    raise PayloadError(f"message role {role!r} cannot be sent; convert it first")


def _anthropic_user(content: Any) -> list[JSON]:
    # Anthropic rejects empty text blocks, so blank text is dropped (as pi-ai does).
    if isinstance(content, str):
        text = _clean(content)
        return [{"role": "user", "content": text}] if text.strip() else []
    parts: list[JSON] = []
    for block in _blocks(content):
        if block.get("type") == "text":
            text = _clean(block.get("text"))
            if text.strip():
                parts.append({"type": "text", "text": text})
        elif block.get("type") == "image":
            parts.append(_anthropic_image(block))
    return [{"role": "user", "content": parts}] if parts else []


def _anthropic_assistant(blocks: Sequence[Mapping[str, Any]]) -> list[JSON]:
    parts: list[JSON] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            text = _clean(block.get("text"))
            if text.strip():
                parts.append({"type": "text", "text": text})
        elif kind == "thinking":
            parts.extend(_anthropic_thinking(block))
        elif kind == "toolCall":
            parts.append(
                {
                    "type": "tool_use",
                    "id": _anthropic_id(block.get("id")),
                    "name": block.get("name", ""),
                    "input": block.get("arguments") or {},
                }
            )
    return [{"role": "assistant", "content": parts}] if parts else []


def _anthropic_thinking(block: Mapping[str, Any]) -> list[JSON]:
    """Signed thinking goes back as thinking; unsigned thinking can only go back as text.

    Anthropic verifies the signature of every thinking block it is sent, so thinking from
    another model or from a cut-off stream would make the request fail.
    """
    signature = block.get("thinkingSignature")
    if block.get("redacted"):
        return [{"type": "redacted_thinking", "data": signature or ""}]
    text = _clean(block.get("thinking"))
    if not text.strip():
        return []
    if isinstance(signature, str) and signature.strip():
        return [{"type": "thinking", "thinking": text, "signature": signature}]
    return [{"type": "text", "text": text}]


def _anthropic_result_content(blocks: Sequence[Mapping[str, Any]]) -> Any:
    if not _images(blocks):
        return "\n".join(_texts(blocks))
    parts: list[JSON] = []
    for block in blocks:
        if block.get("type") == "text":
            parts.append({"type": "text", "text": _clean(block.get("text"))})
        elif block.get("type") == "image":
            parts.append(_anthropic_image(block))
    if not any(part["type"] == "text" for part in parts):
        parts.insert(0, {"type": "text", "text": "(see attached image)"})
    return parts


def _anthropic_tool_results(group: list[Mapping[str, Any]]) -> list[JSON]:
    # All results of one assistant turn go back in a single user message.
    results = [
        {
            "type": "tool_result",
            "tool_use_id": _anthropic_id(result.get("toolCallId")),
            "content": _anthropic_result_content(_blocks(result.get("content"))),
            "is_error": bool(result.get("isError")),
        }
        for result in group
    ]
    return [{"role": "user", "content": results}]
