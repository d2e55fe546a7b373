from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from projections.payload import (
    ANTHROPIC_DEFAULT_MAX_TOKENS,
    PayloadError,
    arguments_json,
    build_payload,
    canonical_json,
    payload_sha256,
)
from tests.projections.fixtures import READ_TOOL

IMAGE = {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}

CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "Read a.txt", "timestamp": 1},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "I should read it."},
            {"type": "text", "text": "Reading."},
            {
                "type": "toolCall",
                "id": "call_1",
                "name": "read",
                "arguments": {"path": "a.txt", "limit": 10.0},
            },
        ],
        "stopReason": "toolUse",
    },
    {
        "role": "toolResult",
        "toolCallId": "call_1",
        "toolName": "read",
        "content": [{"type": "text", "text": "hello"}],
        "isError": False,
    },
    {"role": "user", "content": [{"type": "text", "text": "And this?"}, IMAGE]},
]


def build(provider: str, **overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "provider": provider,
        "model": "m-1",
        "params": {"temperature": 0.5},
        "system_prompt": "Be brief.",
        "tools": [READ_TOOL],
        "messages": CONVERSATION,
    }
    arguments.update(overrides)
    return build_payload(**arguments)


def test_openai_payload_has_system_first_and_chat_completions_shapes() -> None:
    payload = build("openai")

    assert payload["model"] == "m-1"
    assert payload["temperature"] == 0.5
    assert payload["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Read a.txt"},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"limit":10,"path":"a.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "hello"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}},
            ],
        },
    ]
    assert payload["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read",
                "description": "Read a file.",
                "parameters": READ_TOOL["parameters"],
            },
        }
    ]


def test_offline_model_takes_the_openai_shape() -> None:
    assert build("offline") == build("openai")


def test_openai_tool_only_assistant_has_null_content_and_empty_one_is_dropped() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "toolCall", "id": "c", "name": "x"}]},
        {"role": "toolResult", "toolCallId": "c", "content": [], "isError": True},
        {"role": "assistant", "content": [{"type": "text", "text": "  "}]},
    ]
    payload = build("openai", messages=messages, system_prompt="", tools=[])

    assert "tools" not in payload
    assert payload["messages"] == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "x", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "(see attached image)"},
    ]


def test_openai_tool_result_images_follow_the_group_in_one_user_message() -> None:
    messages = [
        {"role": "toolResult", "toolCallId": "a", "content": [{"type": "text", "text": "1"}]},
        {"role": "toolResult", "toolCallId": "b", "content": [IMAGE]},
    ]
    payload = build("openai", messages=messages, system_prompt="")

    assert [m["role"] for m in payload["messages"]] == ["tool", "tool", "user"]
    assert payload["messages"][2]["content"][0]["text"] == "Attached image(s) from tool result:"


def test_openai_reasoning_goes_back_only_under_the_servers_own_field() -> None:
    assistant = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "thinkingSignature": "reasoning_content"},
            {"type": "text", "text": "ok"},
        ],
    }
    unknown = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "hmm", "thinkingSignature": "sig=="}],
    }
    payload = build("openai", messages=[assistant, unknown], system_prompt="")

    assert payload["messages"] == [
        {"role": "assistant", "content": "ok", "reasoning_content": "hmm"},
    ]


def test_anthropic_payload_uses_messages_api_shapes() -> None:
    payload = build("anthropic", params={"max_tokens": 1000})

    assert payload["system"] == "Be brief."
    assert payload["max_tokens"] == 1000
    assert payload["tools"] == [
        {
            "name": "read",
            "description": "Read a file.",
            "input_schema": READ_TOOL["parameters"],
        }
    ]
    assert payload["messages"] == [
        {"role": "user", "content": "Read a.txt"},
        {
            "role": "assistant",
            "content": [
                # Unsigned thinking cannot be verified by Anthropic, so it goes back as text.
                {"type": "text", "text": "I should read it."},
                {"type": "text", "text": "Reading."},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "read",
                    "input": {"path": "a.txt", "limit": 10.0},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": "hello",
                    "is_error": False,
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And this?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "aGVsbG8="},
                },
            ],
        },
    ]


def test_anthropic_groups_consecutive_tool_results_into_one_user_message() -> None:
    messages = [
        {
            "role": "assistant",
            "content": [
                {"type": "toolCall", "id": "call|1", "name": "a", "arguments": {}},
                {"type": "toolCall", "id": "call_2", "name": "b", "arguments": {}},
            ],
        },
        {"role": "toolResult", "toolCallId": "call|1", "content": [], "isError": True},
        {"role": "toolResult", "toolCallId": "call_2", "content": [IMAGE], "isError": False},
    ]
    payload = build("anthropic", messages=messages)

    assert len(payload["messages"]) == 2
    results = payload["messages"][1]["content"]
    assert [r["tool_use_id"] for r in results] == ["call_1", "call_2"]
    assert payload["messages"][0]["content"][0]["id"] == "call_1"
    assert results[0]["is_error"] is True
    assert results[1]["content"][0] == {"type": "text", "text": "(see attached image)"}


def test_anthropic_keeps_signed_and_redacted_thinking() -> None:
    messages = [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "plan", "thinkingSignature": "sig"},
                {"type": "thinking", "thinking": "", "redacted": True, "thinkingSignature": "x"},
                {"type": "thinking", "thinking": "   "},
                {"type": "text", "text": "done"},
            ],
        }
    ]
    payload = build("anthropic", messages=messages)

    assert payload["messages"][0]["content"] == [
        {"type": "thinking", "thinking": "plan", "signature": "sig"},
        {"type": "redacted_thinking", "data": "x"},
        {"type": "text", "text": "done"},
    ]


def test_anthropic_needs_max_tokens_and_gets_a_fixed_default() -> None:
    payload = build("anthropic", system_prompt="")

    assert payload["max_tokens"] == ANTHROPIC_DEFAULT_MAX_TOKENS
    assert "system" not in payload


def test_unknown_provider_and_reserved_params_are_refused() -> None:
    with pytest.raises(PayloadError, match="unknown provider"):
        build("gemini")
    with pytest.raises(PayloadError, match="messages"):
        build("openai", params={"messages": []})
    with pytest.raises(PayloadError, match="system"):
        build("anthropic", params={"system": "sneaky"})


def test_canonical_json_is_sorted_compact_utf8() -> None:
    payload = {"b": [1.0, 2.5], "a": "é", "c": {"z": None, "y": True}}

    assert canonical_json(payload) == '{"a":"é","b":[1,2.5],"c":{"y":true,"z":null}}'.encode()


def test_canonical_json_refuses_nan() -> None:
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_hash_is_sha256_of_canonical_json_and_ignores_key_order() -> None:
    first = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 1}
    second = {"temperature": 1.0, "messages": [{"content": "hi", "role": "user"}], "model": "m"}

    assert payload_sha256(first) == hashlib.sha256(canonical_json(first)).hexdigest()
    assert payload_sha256(first) == payload_sha256(second)


def test_same_facts_give_the_same_hash() -> None:
    reordered_args = json.loads(json.dumps(CONVERSATION))
    reordered_args[1]["content"][2]["arguments"] = {"limit": 10, "path": "a.txt"}

    assert payload_sha256(build("openai")) == payload_sha256(
        build("openai", messages=reordered_args)
    )
    assert payload_sha256(build("openai")) != payload_sha256(build("anthropic"))


def test_arguments_json_prints_like_javascript_with_sorted_keys() -> None:
    assert arguments_json({"b": 1.0, "a": "é", "c": [1e-7]}) == '{"a":"é","b":1,"c":[1e-7]}'
    assert arguments_json(None) == "{}"


def test_lone_surrogates_are_stripped_from_text() -> None:
    messages = [{"role": "user", "content": "bad \ud800 char"}]
    payload = build("openai", messages=messages, system_prompt="")

    assert payload["messages"][0]["content"] == "bad  char"
    assert canonical_json(payload)
