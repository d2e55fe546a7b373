"""build_session_context against Pi 0.73.1's buildSessionContext, and the provider boundary."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.context import (
    UNSET,
    SessionContext,
    UnsetType,
    build_session_context,
    convert_to_llm,
    index_by_id,
    js_date_ms,
    path_to_root,
    pi_bash_execution_text,
    to_provider_messages,
)
from projections.pi_file import iter_pi_entries
from projections.records import EntryRecord
from projections.tokens import estimate_tokens, js_json_stringify
from tests.projections.conftest import PI_FIXTURES

if TYPE_CHECKING:
    from tests.projections.conftest import PiCase

T0 = "2026-01-01T00:00:00.000Z"
T0_MS = 1767225600000


# --- building entries ----------------------------------------------------------------


def entry(kind: str, entry_id: str, parent_id: str | None, **fields: Any) -> dict[str, Any]:
    timestamp = fields.pop("timestamp", T0)
    return {"type": kind, "id": entry_id, "parentId": parent_id, "timestamp": timestamp, **fields}


def user(entry_id: str, parent_id: str | None, text: str = "hi", **fields: Any) -> dict[str, Any]:
    message = {"role": "user", "content": text, "timestamp": 1}
    return entry("message", entry_id, parent_id, message=message, **fields)


def assistant(
    entry_id: str,
    parent_id: str | None,
    text: str = "ok",
    *,
    provider: str = "anthropic",
    model: str = "claude",
    calls: Sequence[str] = (),
    stop: str = "stop",
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    content += [{"type": "toolCall", "id": c, "name": "read", "arguments": {}} for c in calls]
    message = {
        "role": "assistant",
        "content": content,
        "provider": provider,
        "model": model,
        "stopReason": stop,
        "timestamp": 2,
    }
    return entry("message", entry_id, parent_id, message=message)


def tool_result(entry_id: str, parent_id: str | None, call_id: str) -> dict[str, Any]:
    message = {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "read",
        "content": [{"type": "text", "text": "file"}],
        "isError": False,
        "timestamp": 3,
    }
    return entry("message", entry_id, parent_id, message=message)


def text_field(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def records(entries: Sequence[dict[str, Any]]) -> list[EntryRecord]:
    """Records as the store would hold the entries, in file order."""
    return [
        EntryRecord(
            id=text_field(data, "id") or "",
            parent_id=text_field(data, "parentId"),
            type=text_field(data, "type") or "",
            timestamp=text_field(data, "timestamp") or "",
            data=data,
            seq=seq,
        )
        for seq, data in enumerate(entries)
    ]


def pi_context(
    entries: Sequence[dict[str, Any]], leaf: str | None | UnsetType = UNSET
) -> dict[str, Any]:
    """The context as the JSON Pi would print."""
    built = build_session_context(records(entries), leaf)
    as_json: dict[str, Any] = json.loads(json.dumps(built.to_pi()))
    return as_json


def summary_of(context: dict[str, Any]) -> list[str]:
    """Each message as role:text, to read a context at a glance."""
    out = []
    for message in context["messages"]:
        role = message["role"]
        if role in ("compactionSummary", "branchSummary"):
            out.append(f"{role}:{message.get('summary')}")
        elif role == "custom":
            out.append(f"custom:{message.get('content')}")
        elif isinstance(message.get("content"), str):
            out.append(f"{role}:{message['content']}")
        else:
            texts = [
                b.get("text", "") for b in message.get("content", []) if b.get("type") == "text"
            ]
            out.append(f"{role}:{'|'.join(texts)}")
    return out


# A branching session used by several tests:
#   u1 ─ a1 ─ u2 ─ a2          (branch A)
#            └─ u3 ─ a3        (branch B, written last)
BRANCHED = [
    user("u1", None, "first"),
    assistant("a1", "u1", "one"),
    user("u2", "a1", "A"),
    assistant("a2", "u2", "A-reply", model="claude-a"),
    user("u3", "a1", "B"),
    assistant("a3", "u3", "B-reply", model="claude-b"),
]


# --- the leaf ------------------------------------------------------------------------


@pytest.mark.parametrize("leaf", [UNSET, None, "u1", ""])
def test_no_entries_give_an_empty_context(leaf: str | None | UnsetType) -> None:
    assert pi_context([], leaf) == {"messages": [], "thinkingLevel": "off", "model": None}


def test_null_leaf_gives_an_empty_context_even_with_entries() -> None:
    assert pi_context(BRANCHED, None) == {"messages": [], "thinkingLevel": "off", "model": None}


@pytest.mark.parametrize(
    ("leaf", "expected"),
    [
        (UNSET, ["user:first", "assistant:one", "user:B", "assistant:B-reply"]),
        ("no-such-entry", ["user:first", "assistant:one", "user:B", "assistant:B-reply"]),
        ("", ["user:first", "assistant:one", "user:B", "assistant:B-reply"]),
        ("a2", ["user:first", "assistant:one", "user:A", "assistant:A-reply"]),
        ("u2", ["user:first", "assistant:one", "user:A"]),
        ("u1", ["user:first"]),
    ],
    ids=["unset-is-last-entry", "unknown-is-last-entry", "empty-is-last-entry", "a2", "u2", "u1"],
)
def test_leaf_picks_the_path(leaf: str | UnsetType, expected: list[str]) -> None:
    assert summary_of(pi_context(BRANCHED, leaf)) == expected


def test_unset_leaf_is_last_in_file_order_not_newest_by_time() -> None:
    entries = [
        user("u1", None, "root"),
        user("late", "u1", "late", timestamp="2027-01-01T00:00:00Z"),
        user("early", "u1", "early", timestamp="2020-01-01T00:00:00Z"),
    ]
    assert summary_of(pi_context(entries)) == ["user:root", "user:early"]


# --- the path ------------------------------------------------------------------------


def test_orphan_starts_its_own_path() -> None:
    entries = [user("u1", None, "root"), user("o1", "gone", "orphan"), user("o2", "o1", "child")]
    assert summary_of(pi_context(entries, "o2")) == ["user:orphan", "user:child"]


def test_entry_naming_itself_as_parent_ends_the_walk() -> None:
    entries = [user("u1", None, "root"), user("me", "me", "self")]
    assert summary_of(pi_context(entries, "me")) == ["user:self"]


def test_parent_cycle_is_walked_once() -> None:
    entries = [user("x", "y", "x"), user("y", "x", "y"), user("z", "x", "z")]
    assert summary_of(pi_context(entries, "z")) == ["user:y", "user:x", "user:z"]


def test_empty_parent_id_is_a_root() -> None:
    entries = [user("u1", None, "root"), user("u2", "", "second root")]
    assert summary_of(pi_context(entries, "u2")) == ["user:second root"]


def test_duplicate_id_resolves_to_the_later_entry() -> None:
    entries = [user("u1", None, "first"), user("u1", None, "again"), user("u2", "u1", "child")]
    assert summary_of(pi_context(entries, "u2")) == ["user:again", "user:child"]


def test_path_to_root_is_root_first_and_empty_for_unknown_leaf() -> None:
    by_id = index_by_id(records(BRANCHED))
    assert [e.id for e in path_to_root(by_id, "a3")] == ["u1", "a1", "u3", "a3"]
    assert path_to_root(by_id, "nope") == []
    assert path_to_root(by_id, None) == []


# --- settings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "leaf", "thinking", "model"),
    [
        ([user("u1", None)], "u1", "off", None),
        (
            [
                user("u1", None),
                entry("thinking_level_change", "t1", "u1", thinkingLevel="high"),
                entry("thinking_level_change", "t2", "t1", thinkingLevel="low"),
            ],
            "t2",
            "low",
            None,
        ),
        (
            [
                user("u1", None),
                entry("thinking_level_change", "t1", "u1", thinkingLevel="high"),
                entry("thinking_level_change", "t2", "u1", thinkingLevel="low"),
            ],
            "t1",
            "high",
            None,
        ),
        (
            [entry("model_change", "m1", None, provider="openai", modelId="gpt")],
            "m1",
            "off",
            {"provider": "openai", "modelId": "gpt"},
        ),
        (
            [
                entry("model_change", "m1", None, provider="openai", modelId="gpt"),
                assistant("a1", "m1", provider="anthropic", model="claude"),
            ],
            "a1",
            "off",
            {"provider": "anthropic", "modelId": "claude"},
        ),
        (
            [
                assistant("a1", None, provider="anthropic", model="claude"),
                entry("model_change", "m1", "a1", provider="openai", modelId="gpt"),
            ],
            "m1",
            "off",
            {"provider": "openai", "modelId": "gpt"},
        ),
        (
            [entry("model_change", "m1", None, provider="openai")],
            "m1",
            "off",
            {"provider": "openai"},
        ),
        (
            [entry("thinking_level_change", "t1", None)],
            "t1",
            None,
            None,
        ),
    ],
    ids=[
        "defaults",
        "last-level-wins",
        "other-branch-level-ignored",
        "model-change",
        "assistant-after-change-wins",
        "change-after-assistant-wins",
        "missing-model-id-key-absent",
        "level-missing-is-undefined",
    ],
)
def test_settings_pass(
    entries: list[dict[str, Any]], leaf: str, thinking: str | None, model: dict[str, Any] | None
) -> None:
    built = build_session_context(records(entries), leaf)
    assert built.thinking_level == thinking
    assert built.model == model
    pi = built.to_pi()
    assert list(pi) == (
        ["messages", "thinkingLevel", "model"] if thinking else ["messages", "model"]
    )


def test_model_set_before_a_compaction_still_counts() -> None:
    entries = [
        user("u1", None),
        assistant("a1", "u1", provider="p", model="m"),
        entry("compaction", "c1", "a1", summary="s", firstKeptEntryId="zz", tokensBefore=5),
    ]
    assert pi_context(entries)["model"] == {"provider": "p", "modelId": "m"}


# --- emission ------------------------------------------------------------------------


def test_message_entries_are_emitted_unchanged_whatever_their_role() -> None:
    bash = {"role": "bashExecution", "command": "ls", "output": "", "excludeFromContext": True}
    entries = [
        user("u1", None),
        assistant("a1", "u1", stop="aborted"),
        assistant("a2", "a1", stop="error"),
        entry("message", "b1", "a2", message=bash),
        entry("message", "x1", "b1", message={"role": "somethingNew", "n": 1}),
    ]
    built = build_session_context(records(entries))
    assert list(built.messages) == [e["message"] for e in entries]
    assert all(m is e["message"] for m, e in zip(built.messages, entries, strict=True))


def test_custom_message_shape_and_key_order() -> None:
    entries = [
        entry(
            "custom_message",
            "c1",
            None,
            customType="note",
            content="hello",
            display=False,
            details={"k": 1},
        )
    ]
    [message] = pi_context(entries)["messages"]
    assert message == {
        "role": "custom",
        "customType": "note",
        "content": "hello",
        "display": False,
        "details": {"k": 1},
        "timestamp": T0_MS,
    }
    assert list(message) == ["role", "customType", "content", "display", "details", "timestamp"]


def test_custom_message_without_details_has_no_details_key() -> None:
    entries = [entry("custom_message", "c1", None, customType="n", content=[], display=True)]
    [message] = pi_context(entries)["messages"]
    assert "details" not in message


def test_custom_message_with_null_details_keeps_null() -> None:
    entries = [
        entry("custom_message", "c1", None, customType="n", content="x", display=1, details=None)
    ]
    [message] = pi_context(entries)["messages"]
    assert message["details"] is None
    assert message["display"] == 1


@pytest.mark.parametrize(
    ("summary", "emitted"),
    [("went elsewhere", True), ("", False), (None, False), (0, False), ("0", True), ([], True)],
)
def test_branch_summary_only_when_summary_is_truthy(summary: Any, emitted: bool) -> None:
    entries = [user("u1", None), entry("branch_summary", "b1", "u1", fromId="u1", summary=summary)]
    messages = pi_context(entries)["messages"]
    assert len(messages) == (2 if emitted else 1)
    if emitted:
        assert messages[1] == {
            "role": "branchSummary",
            "summary": summary,
            "fromId": "u1",
            "timestamp": T0_MS,
        }


def test_branch_summary_without_summary_key_is_skipped() -> None:
    entries = [entry("branch_summary", "b1", None, fromId="root")]
    assert pi_context(entries)["messages"] == []


@pytest.mark.parametrize(
    "kind", ["custom", "label", "session_info", "model_change", "thinking_level_change", "x"]
)
def test_entries_that_never_reach_the_context(kind: str) -> None:
    entries = [user("u1", None), entry(kind, "e1", "u1", data={"a": 1}, label="l", name="n")]
    assert summary_of(pi_context(entries)) == ["user:hi"]


# --- compaction ------------------------------------------------------------------------

#   u1 a1 u2 a2 [c1 keeps from u2] u3 a3
COMPACTED = [
    user("u1", None, "old"),
    assistant("a1", "u1", "old-reply"),
    user("u2", "a1", "kept"),
    assistant("a2", "u2", "kept-reply"),
    entry("compaction", "c1", "a2", summary="S1", firstKeptEntryId="u2", tokensBefore=900),
    user("u3", "c1", "after"),
    assistant("a3", "u3", "after-reply"),
]


def test_compaction_emits_summary_then_kept_window_then_the_rest() -> None:
    context = pi_context(COMPACTED)
    assert summary_of(context) == [
        "compactionSummary:S1",
        "user:kept",
        "assistant:kept-reply",
        "user:after",
        "assistant:after-reply",
    ]
    assert context["messages"][0] == {
        "role": "compactionSummary",
        "summary": "S1",
        "tokensBefore": 900,
        "timestamp": T0_MS,
    }


def test_first_kept_entry_not_on_the_path_keeps_nothing_before_the_compaction() -> None:
    entries = [
        user("u1", None, "old"),
        user("side", "u1", "other branch"),
        user("u2", "u1", "main"),
        entry("compaction", "c1", "u2", summary="S", firstKeptEntryId="side", tokensBefore=1),
        user("u3", "c1", "after"),
    ]
    assert summary_of(pi_context(entries)) == ["compactionSummary:S", "user:after"]


def test_only_the_latest_compaction_counts_and_older_ones_emit_nothing() -> None:
    entries = [
        *COMPACTED,
        entry("compaction", "c2", "a3", summary="S2", firstKeptEntryId="u2", tokensBefore=5),
        user("u4", "c2", "newest"),
    ]
    assert summary_of(pi_context(entries)) == [
        "compactionSummary:S2",
        "user:kept",
        "assistant:kept-reply",
        "user:after",
        "assistant:after-reply",
        "user:newest",
    ]


def test_compaction_on_another_branch_does_not_apply() -> None:
    entries = [*COMPACTED, user("side", "a2", "side branch")]
    assert summary_of(pi_context(entries, "side")) == [
        "user:old",
        "assistant:old-reply",
        "user:kept",
        "assistant:kept-reply",
        "user:side branch",
    ]


def test_compaction_keeping_itself_keeps_nothing_before_it() -> None:
    entries = [
        user("u1", None),
        entry("compaction", "c1", "u1", summary="S", firstKeptEntryId="c1", tokensBefore=1),
    ]
    assert summary_of(pi_context(entries)) == ["compactionSummary:S"]


def test_compaction_missing_fields_leaves_their_keys_out() -> None:
    entries = [entry("compaction", "c1", None)]
    assert pi_context(entries)["messages"] == [{"role": "compactionSummary", "timestamp": T0_MS}]


def test_compaction_at_the_leaf_gives_just_the_summary_and_kept_window() -> None:
    assert summary_of(pi_context(COMPACTED, "c1")) == [
        "compactionSummary:S1",
        "user:kept",
        "assistant:kept-reply",
    ]


# --- timestamps ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-01-02T03:04:05.678Z", 1704164645678),
        ("2024-01-02T03:04:05.6789Z", 1704164645678),  # cut, not rounded
        ("2024-01-02T03:04:05.6Z", 1704164645600),
        ("2024-01-02T03:04Z", 1704164640000),
        ("2024-01-02", 1704153600000),
        ("2024-01", 1704067200000),
        ("2024", 1704067200000),
        ("+002024-01-02T00:00:00Z", 1704153600000),
        ("-000001-01-01T00:00:00Z", -62198755200000),
        ("2024-01-02T03:04:05.678+02:00", 1704157445678),
        ("2024-01-02T03:04:05+0200", 1704157445000),
        ("2024-01-02 03:04:05Z", 1704164645000),
        ("2024-02-30T00:00:00Z", 1709251200000),  # day overflow rolls on
        ("2024-01-02T24:00:00Z", 1704240000000),
        ("2024-01-02T24:00:01Z", None),
        ("2024-13-02T00:00:00Z", None),
        ("2024-01-02T03:04:60Z", None),
        ("+275760-09-13T00:00:00.000Z", 8640000000000000),
        ("+275760-09-13T00:00:00.001Z", None),
        ("", None),
        ("yesterday", None),
        (" 2024-01-02T03:04:05Z", None),
        (None, 0),
        (True, 1),
        (1.9, 1),
        (-1.9, -1),
        (1704164645678, 1704164645678),
        ({"a": 1}, None),
    ],
)
def test_js_date_ms_matches_v8(value: object, expected: int | None) -> None:
    assert js_date_ms(value) == expected


def test_invalid_entry_timestamp_becomes_null() -> None:
    entries = [entry("custom_message", "c1", None, customType="n", content="x", timestamp="no")]
    assert pi_context(entries)["messages"][0]["timestamp"] is None


def test_missing_entry_timestamp_becomes_null() -> None:
    data = {"type": "branch_summary", "id": "b1", "parentId": None, "summary": "s", "fromId": "r"}
    assert pi_context([data])["messages"][0]["timestamp"] is None


# --- to_provider_messages --------------------------------------------------------------


def texts(message: dict[str, Any]) -> str:
    return "".join(block["text"] for block in message["content"] if block["type"] == "text")


def test_bash_execution_becomes_user_text() -> None:
    bash = {
        "role": "bashExecution",
        "command": "make test",
        "output": "1 failed",
        "exitCode": 2,
        "cancelled": False,
        "truncated": True,
        "fullOutputPath": "/tmp/out.txt",
        "timestamp": 7,
    }
    [message] = to_provider_messages([bash])
    assert message["role"] == "user"
    assert message["timestamp"] == 7
    text = texts(message)
    for part in ("make test", "1 failed", "code 2", "truncated", "/tmp/out.txt"):
        assert part in text


def test_bash_execution_cancelled_and_silent() -> None:
    bash = {"role": "bashExecution", "command": "sleep 9", "output": "", "cancelled": True}
    text = texts(to_provider_messages([bash])[0])
    assert "cancelled" in text
    assert "code" not in text


def test_bash_execution_excluded_from_context_is_dropped() -> None:
    bash = {"role": "bashExecution", "command": "ls", "output": "x", "excludeFromContext": True}
    assert to_provider_messages([bash]) == []


@pytest.mark.parametrize(
    ("content", "blocks"),
    [
        ("note", [{"type": "text", "text": "note"}]),
        ([{"type": "image", "data": "AA==", "mimeType": "image/png"}], None),
    ],
)
def test_custom_message_becomes_user_with_same_content(content: Any, blocks: Any) -> None:
    custom = {"role": "custom", "customType": "n", "content": content, "display": False}
    [message] = to_provider_messages([custom])
    assert message == {"role": "user", "content": blocks if blocks is not None else content}


@pytest.mark.parametrize("role", ["compactionSummary", "branchSummary"])
def test_summaries_become_tagged_user_text_in_our_own_words(role: str) -> None:
    [message] = to_provider_messages([{"role": role, "summary": "did X", "timestamp": 4}])
    text = texts(message)
    assert message["role"] == "user"
    assert "<summary>\ndid X\n</summary>" in text
    assert not text.startswith("<summary>")  # a preamble comes first
    assert "compacted into the following summary" not in text
    assert "summary of a branch that this conversation came back from" not in text


def test_user_assistant_and_results_pass_through_as_the_same_objects() -> None:
    messages = [
        user("u", None)["message"],
        assistant("a", None, calls=["c1"])["message"],
        tool_result("r", None, "c1")["message"],
    ]
    out = to_provider_messages(messages)
    assert len(out) == 3
    assert all(o is m for o, m in zip(out, messages, strict=True))


def test_unknown_roles_are_dropped() -> None:
    assert to_provider_messages([{"role": "hookMessage", "content": "x"}, {"x": 1}]) == []


def roles_and_ids(messages: list[dict[str, Any]]) -> list[str]:
    out = []
    for message in messages:
        if message["role"] == "toolResult":
            synthetic = message["content"] == [{"type": "text", "text": "No result provided"}]
            out.append(f"result:{message['toolCallId']}{'!' if synthetic else ''}")
        else:
            out.append(message["role"])
    return out


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        (["A:c1,c2", "R:c1", "U"], ["assistant", "result:c1", "result:c2!", "user"]),
        (["A:c1", "A:"], ["assistant", "result:c1!", "assistant"]),
        (["A:c1,c2"], ["assistant", "result:c1!", "result:c2!"]),
        (["A:c1", "R:c1", "R:c1"], ["assistant", "result:c1"]),
        (["U", "R:c9"], ["user"]),
        (["A:c1", "U", "R:c1"], ["assistant", "result:c1!", "user"]),
        (["A:", "R:c1"], ["assistant"]),
        (["X:c1", "R:c1", "U"], ["user"]),
        (["A:c1", "R:c2", "R:c1"], ["assistant", "result:c1"]),
        (["A:c1,c2", "R:c2", "R:c1"], ["assistant", "result:c2", "result:c1"]),
    ],
    ids=[
        "missing-result-after-real-ones",
        "next-assistant-closes-calls",
        "end-closes-calls",
        "duplicate-result-dropped",
        "result-without-call-dropped",
        "late-result-after-user-dropped",
        "result-for-no-call-dropped",
        "aborted-assistant-and-its-results-dropped",
        "foreign-result-dropped",
        "results-keep-their-order",
    ],
)
def test_every_tool_call_is_answered_exactly_once(steps: list[str], expected: list[str]) -> None:
    messages: list[dict[str, Any]] = []
    for step in steps:
        kind, _, arg = step.partition(":")
        calls = [c for c in arg.split(",") if c]
        if kind == "A":
            messages.append(assistant("a", None, calls=calls)["message"])
        elif kind == "X":
            messages.append(assistant("a", None, calls=calls, stop="aborted")["message"])
        elif kind == "R":
            messages.append(tool_result("r", None, arg)["message"])
        else:
            messages.append(user("u", None)["message"])
    assert roles_and_ids(to_provider_messages(messages)) == expected


def test_synthetic_result_shape() -> None:
    call = assistant("a", None, calls=["c1"])["message"]
    synthetic = to_provider_messages([call])[1]
    assert synthetic == {
        "role": "toolResult",
        "toolCallId": "c1",
        "toolName": "read",
        "content": [{"type": "text", "text": "No result provided"}],
        "isError": True,
        "timestamp": call["timestamp"],
    }
    assert list(synthetic) == ["role", "toolCallId", "toolName", "content", "isError", "timestamp"]


# --- estimate_tokens -------------------------------------------------------------------


def math_ceil_4(chars: int) -> int:
    return -(-chars // 4)


@pytest.mark.parametrize(
    ("message", "tokens"),
    [
        ({"role": "user", "content": "abcde"}, 2),
        ({"role": "user", "content": ""}, 0),
        (
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "abcd"},
                    {"type": "image", "data": "x", "mimeType": "image/png"},
                ],
            },
            1,
        ),
        ({"role": "user", "content": "😀😀"}, 1),  # 4 UTF-16 units
        (
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "ab"},
                    {"type": "thinking", "thinking": "cd"},
                    {"type": "toolCall", "id": "1", "name": "read", "arguments": {"a": 1.0}},
                ],
            },
            # 2 + 2 + len("read") + len('{"a":1}')
            math_ceil_4(2 + 2 + 4 + 7),
        ),
        (
            {
                "role": "toolResult",
                "content": [
                    {"type": "text", "text": "abc"},
                    {"type": "image", "data": "x", "mimeType": "image/png"},
                ],
            },
            math_ceil_4(3 + 4800),
        ),
        ({"role": "custom", "content": "abcdefghi"}, 3),
        ({"role": "bashExecution", "command": "ls", "output": "abcdef"}, 2),
        ({"role": "compactionSummary", "summary": "x" * 10}, 3),
        ({"role": "branchSummary", "summary": "x" * 8}, 2),
        ({"role": "somethingElse", "content": "x" * 100}, 0),
    ],
)
def test_estimate_tokens(message: dict[str, Any], tokens: int) -> None:
    assert estimate_tokens(message) == tokens


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (
            {"a": [1.0, 1e-7, 1.5e16, 1e21, 0.000001]},
            '{"a":[1,1e-7,15000000000000000,1e+21,0.000001]}',
        ),
        ("\ud800é\n", '"\\ud800é\\n"'),
        ([True, None, 2**60], "[true,null,1152921504606847000]"),
    ],
)
def test_js_json_stringify(value: Any, text: str) -> None:
    assert js_json_stringify(value) == text


# --- properties ----------------------------------------------------------------------

ids = st.sampled_from([f"e{i}" for i in range(12)])
parents = st.one_of(st.none(), ids, st.just("missing"), st.just(""))


@st.composite
def random_entry(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(
            [
                "message",
                "message",
                "message",
                "compaction",
                "branch_summary",
                "custom_message",
                "model_change",
                "thinking_level_change",
                "label",
                "custom",
            ]
        )
    )
    fields: dict[str, Any] = {}
    if kind == "message":
        role = draw(st.sampled_from(["user", "assistant", "toolResult", "bashExecution", "custom"]))
        fields["message"] = {"role": role, "content": draw(st.text(max_size=5))}
    elif kind == "compaction":
        fields.update(summary=draw(st.text(max_size=3)), firstKeptEntryId=draw(ids), tokensBefore=1)
    elif kind == "branch_summary":
        fields.update(summary=draw(st.sampled_from(["", "s", None])), fromId=draw(ids))
    elif kind == "custom_message":
        fields.update(customType="c", content=draw(st.text(max_size=3)), display=True)
    timestamp = draw(st.sampled_from([T0, "bad", "2026-02-30"]))
    return entry(kind, draw(ids), draw(parents), timestamp=timestamp, **fields)


leaves = st.one_of(st.just(UNSET), st.none(), ids, st.just("missing"))


def naive_path(entries: list[dict[str, Any]], leaf: Any) -> list[dict[str, Any]]:
    """An independent walk: dict lookups, a visited set, root first."""
    if leaf is None or not entries:
        return []
    by_id = {e["id"]: e for e in entries}
    current = by_id.get(leaf) if isinstance(leaf, str) and leaf else None
    current = current or entries[-1]
    path: list[dict[str, Any]] = []
    while current is not None and all(current["id"] != p["id"] for p in path):
        path.insert(0, current)
        parent = current["parentId"]
        current = by_id.get(parent) if parent else None
    return path


def source_on_path(message: dict[str, Any], path: list[dict[str, Any]]) -> bool:
    """Whether some entry on `path` could have produced `message`."""
    role = message["role"]
    if role == "branchSummary":
        return any(
            e["type"] == "branch_summary"
            and e.get("summary") == message["summary"]
            and e.get("fromId") == message["fromId"]
            for e in path
        )
    custom_entry = any(
        e["type"] == "custom_message" and e.get("content") == message.get("content") for e in path
    )
    if role == "custom" and custom_entry:
        return True
    return any(e["type"] == "message" and e["message"] is message for e in path)


@settings(max_examples=300, deadline=None)
@given(st.lists(random_entry(), max_size=15), leaves)
def test_context_holds_only_messages_from_the_path(
    entries: list[dict[str, Any]], leaf: str | None | UnsetType
) -> None:
    built = build_session_context(records(entries), leaf)
    path = naive_path(entries, leaf)
    compactions = [e for e in path if e["type"] == "compaction"]
    summaries = [m for m in built.messages if m["role"] == "compactionSummary"]
    assert len(summaries) == (1 if compactions else 0)
    if compactions:
        assert built.messages[0] is summaries[0]
        assert summaries[0]["summary"] == compactions[-1]["summary"]
    for message in built.messages[1 if compactions else 0 :]:
        assert source_on_path(message, path), message
    if not compactions:
        emitting = [
            e
            for e in path
            if e["type"] in ("message", "custom_message")
            or (e["type"] == "branch_summary" and e.get("summary"))
        ]
        assert len(built.messages) == len(emitting)


@settings(max_examples=300, deadline=None)
@given(st.lists(random_entry(), max_size=15), leaves)
def test_provider_messages_never_leave_a_call_unanswered(
    entries: list[dict[str, Any]], leaf: str | None | UnsetType
) -> None:
    for e in entries:
        message = e.get("message")
        if isinstance(message, dict) and message["role"] == "assistant":
            message["content"] = [{"type": "toolCall", "id": e["id"], "name": "t", "arguments": {}}]
        elif isinstance(message, dict) and message["role"] == "toolResult":
            message["toolCallId"] = e["parentId"] or ""
            message["content"] = []
    out = to_provider_messages(build_session_context(records(entries), leaf).messages)
    assert {m["role"] for m in out} <= {"user", "assistant", "toolResult"}
    waiting: set[str] = set()
    for message in out:
        if message["role"] == "toolResult":
            assert message["toolCallId"] in waiting
            waiting.discard(message["toolCallId"])
        else:
            assert not waiting, "a call was left without a result"
            if message["role"] == "assistant":
                waiting = {b["id"] for b in message["content"] if b["type"] == "toolCall"}
    assert not waiting


def test_session_context_to_pi_is_json_ready() -> None:
    built = SessionContext(
        messages=({"role": "user", "content": "x"},), thinking_level="off", model=None
    )
    assert json.loads(json.dumps(built.to_pi())) == {
        "messages": [{"role": "user", "content": "x"}],
        "thinkingLevel": "off",
        "model": None,
    }


# --- Pi's own output ---------------------------------------------------------------------


def file_entries(path: Path) -> list[dict[str, Any]]:
    with path.open("rb") as lines:
        return list(iter_pi_entries(lines))[1:]


def test_matches_pi_build_session_context(pi_case: PiCase) -> None:
    # A version 1 file gets random ids on migration, so Pi's leaf ids name entries of Pi's
    # migrated file: build from that one (our own migration is checked in test_pi_file).
    source = pi_case.migrated_path or pi_case.path
    entries = records(file_entries(source))
    expected_contexts = pi_case.contexts()
    assert expected_contexts, f"{pi_case.name} has no contexts file"
    for expected in expected_contexts:
        leaf = expected.get("leafId", UNSET)  # no key: Pi's leaf was undefined
        ours = json.loads(json.dumps(build_session_context(entries, leaf).to_pi()))
        assert ours == expected["context"], f"leaf {leaf!r}"


SYNTHETIC_ROLES = ("bashExecution", "custom", "branchSummary", "compactionSummary")


def calls(messages: list[dict[str, Any]]) -> set[str]:
    return {
        block["id"]
        for m in messages
        if m["role"] == "assistant"
        for block in m["content"]
        if block.get("type") == "toolCall"
    }


def test_provider_messages_follow_pi_s_convert_to_llm(pi_case: PiCase) -> None:
    """Pi 1.6.0's `convertToLlm` of each context (recorded as `llm`) against ours: the same
    messages in the same order, user/assistant/toolResult passed on as they are, synthetic
    roles as user messages (in our own words, so only their place and role are compared),
    and system messages left to Strand's request header. pi-ai's later pass is ours too:
    error and aborted replies are dropped and every call gets a result."""
    records_ = [r for r in pi_case.contexts() if "llm" in r]
    if not records_:
        pytest.skip("the case has no convertToLlm records (Pi 0.73.1's cases)")
    for record in records_:
        context = record["context"]["messages"]
        pi_llm = [m for m in record["llm"] if m["role"] != "system"]
        converted = [m for m in context if m["role"] not in ("system",)]
        # Pi's convertToLlm drops the `!!` bash executions and nothing else but system ones.
        kept = [
            m
            for m in converted
            if not (m["role"] == "bashExecution" and m.get("excludeFromContext"))
        ]
        assert len(pi_llm) == len(kept), record.get("leafId")
        ours = to_provider_messages(context)
        for source, theirs in zip(kept, pi_llm, strict=True):
            if source["role"] in SYNTHETIC_ROLES:
                assert theirs["role"] == "user" and theirs.get("timestamp") == source.get(
                    "timestamp"
                )
                continue
            assert theirs == source
            if source["role"] == "assistant" and source.get("stopReason") in ("error", "aborted"):
                assert source not in ours
            elif source["role"] == "toolResult" and source.get("toolCallId") not in calls(ours):
                # Beyond Pi: a result no call asked for (its call was edited away, say) would
                # make the provider refuse the request, so it is not sent.
                assert source not in ours
            else:
                assert any(m is source or m == source for m in ours)
        assert all(m["role"] in ("user", "assistant", "toolResult") for m in ours)


def pi_llm_records(pi_case: PiCase) -> list[dict[str, Any]]:
    """Pi 1.6.0's `convertToLlm` of each context of the case: recorded beside the context in
    a 1.6 case, and for a 0.73.1 case by the 1.6 generator (`llm_of_0.73.1.json`)."""
    if pi_case.pi_version != "0.73.1":
        return pi_case.contexts()
    recorded = json.loads((PI_FIXTURES / "v1.6" / "llm_of_0.73.1.json").read_text("utf-8"))
    records_: list[dict[str, Any]] = recorded[pi_case.name]
    return records_


def test_pi_format_provider_view_is_pi_s_convert_to_llm_word_for_word(pi_case: PiCase) -> None:
    """For every leaf of every case, Strand's context through `convert_to_llm` is what Pi
    1.6.0's `convertToLlm` gives: system messages passed on, summaries, bash executions
    and custom messages in Pi's own words."""
    source = pi_case.migrated_path or pi_case.path
    entries = records(file_entries(source))
    expected = pi_llm_records(pi_case)
    assert expected and all("llm" in record for record in expected)
    for record in expected:
        leaf = record.get("leafId", UNSET)
        context = build_session_context(entries, leaf)
        ours = json.loads(json.dumps(convert_to_llm(context.messages)))
        assert ours == record["llm"], f"leaf {leaf!r}"


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"command": "ls", "output": "a\n", "exitCode": 0}, "Ran `ls`\n```\na\n\n```"),
        ({"command": "x", "output": "", "exitCode": None}, "Ran `x`\n(no output)"),
        (
            {"output": "o", "exitCode": 2},
            "Ran `undefined`\n```\no\n```\n\nCommand exited with code 2",
        ),
        (
            {"command": "t", "cancelled": True, "exitCode": 1, "truncated": True},
            "Ran `t`\n(no output)\n\n(command cancelled)",
        ),
        (
            {"command": "f", "output": "x", "truncated": True, "fullOutputPath": "/tmp/o"},
            "Ran `f`\n```\nx\n```\n\n[Output truncated. Full output: /tmp/o]",
        ),
        ({"command": 3, "output": ["a", None, 1.5]}, "Ran `3`\n```\na,,1.5\n```"),
    ],
)
def test_bash_executions_read_as_pi_writes_them(fields: dict[str, Any], text: str) -> None:
    assert pi_bash_execution_text({"role": "bashExecution", **fields}) == text


def test_convert_to_llm_keeps_undefined_keys_out_and_drops_unknown_roles() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "custom", "customType": "note"},  # no content, no timestamp
        {"role": "compactionSummary", "tokensBefore": 5, "timestamp": 3},  # no summary
        {"role": "hookMessage", "content": "x"},
        {"role": "bashExecution", "command": "c", "excludeFromContext": True},
        {"role": "system", "content": "", "sections": {"a": "b"}},
    ]
    assert convert_to_llm(messages) == [
        {"role": "user"},
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "The conversation history before this point was compacted into the "
                    "following summary:\n\n<summary>\nundefined\n</summary>",
                }
            ],
            "timestamp": 3,
        },
        messages[4],
    ]


# --- Pi 1.6: system messages, checkpoints, context edits -------------------------------


def system_entry(entry_id: str, parent_id: str | None, **message: Any) -> dict[str, Any]:
    body = {"role": "system", "content": "", **message, "timestamp": 0}
    return entry("message", entry_id, parent_id, message=body)


def edit(entry_id: str, parent_id: str, target: str, replacement: Any) -> dict[str, Any]:
    return entry("context_edit", entry_id, parent_id, targetId=target, replacement=replacement)


def test_a_compaction_leads_with_its_checkpoint_and_drops_kept_system_messages() -> None:
    checkpoint = {"role": "system", "content": "", "sections": {"p": "two"}, "timestamp": 5}
    entries = [
        system_entry("s1", None, sections={"p": "one"}),
        user("u1", "s1"),
        system_entry("s2", "u1", sections={"p": "two"}),
        assistant("a1", "s2"),
        entry(
            "compaction", "c", "a1", summary="S", firstKeptEntryId="u1", systemMessage=checkpoint
        ),
        system_entry("s3", "c", sections={"p": "three"}),
    ]
    roles = [m["role"] for m in pi_context(entries)["messages"]]
    assert roles == ["system", "compactionSummary", "user", "assistant", "system"]
    assert pi_context(entries)["messages"][0] == checkpoint


def test_the_latest_edit_on_the_path_wins_and_only_for_later_leaves() -> None:
    entries = [
        user("u1", None, "original"),
        assistant("a1", "u1"),
        edit("e1", "a1", "u1", {"content": "first edit"}),
        edit("e2", "e1", "u1", None),
        edit("e3", "a1", "a1", {"content": "as text"}),  # another branch
    ]
    assert summary_of(pi_context(entries, "a1")) == ["user:original", "assistant:ok"]
    assert summary_of(pi_context(entries, "e1")) == ["user:first edit", "assistant:ok"]
    assert summary_of(pi_context(entries, "e2")) == ["assistant:ok"]
    on_branch = pi_context(entries, "e3")["messages"]
    # A string replaces an assistant's content as one text block; the entry is not changed.
    assert on_branch[1]["content"] == [{"type": "text", "text": "as text"}]
    assert entries[1]["message"]["content"][0]["text"] == "ok"


def test_edits_apply_in_the_kept_range_and_go_with_it() -> None:
    entries = [
        user("u1", None, "one"),
        edit("e1", "u1", "u1", {"content": "edited"}),
        user("u2", "e1", "two"),
        entry("compaction", "c", "u2", summary="S", firstKeptEntryId="u1"),
        entry("compaction", "c2", "c", summary="S2", firstKeptEntryId="u2"),
    ]
    assert summary_of(pi_context(entries, "c")) == [
        "compactionSummary:S",
        "user:edited",
        "user:two",
    ]
    assert summary_of(pi_context(entries, "c2")) == ["compactionSummary:S2", "user:two"]


def test_null_or_missing_content_becomes_empty_of_the_role_s_kind() -> None:
    entries = [
        system_entry("s", None, content=None),
        entry("message", "u", "s", message={"role": "user", "timestamp": 1}),
        entry("custom_message", "m", "u", customType="x", display=True),
    ]
    messages = pi_context(entries)["messages"]
    assert [m["content"] for m in messages] == ["", [], []]
