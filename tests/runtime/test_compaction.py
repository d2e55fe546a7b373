"""Pi's cut point and kept window: a compaction never separates a tool result from its call."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.context import NO_RESULT_TEXT, build_session_context, to_provider_messages
from projections.records import EntryRecord
from runtime.compaction import (
    compaction_entry,
    context_tokens,
    entries_left_behind,
    find_cut_point,
    prepare_compaction,
    serialize_conversation,
)

_ids = itertools.count()


def entry(kind: str, parent: str | None, **data: Any) -> EntryRecord:
    entry_id = f"e{next(_ids)}"
    body = {
        "type": kind,
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2026-01-01T00:00:00.000Z",
        **data,
    }
    return EntryRecord(entry_id, parent, kind, body["timestamp"], body, next(_ids))


def msg(role: str, parent: str | None, **fields: Any) -> EntryRecord:
    return entry("message", parent, message={"role": role, **fields})


def chain(*specs: tuple[str, dict[str, Any]], parent: str | None = None) -> list[EntryRecord]:
    path: list[EntryRecord] = []
    for kind, fields in specs:
        parent = path[-1].id if path else parent
        if kind in ("user", "assistant", "toolResult"):
            path.append(msg(kind, parent, **fields))
        else:
            path.append(entry(kind, parent, **fields))
    return path


def user(text: str) -> tuple[str, dict[str, Any]]:
    return ("user", {"content": text})


def assistant(
    text: str = "", calls: Sequence[tuple[str, str]] = (), usage: int | None = None
) -> tuple[str, dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "toolCall", "id": cid, "name": "read_file", "arguments": {"path": p}}
        for cid, p in calls
    ]
    fields: dict[str, Any] = {"content": content, "stopReason": "toolUse" if calls else "stop"}
    if usage is not None:
        fields["usage"] = {
            "input": usage,
            "output": 0,
            "cacheRead": 0,
            "cacheWrite": 0,
            "totalTokens": usage,
        }
    return ("assistant", fields)


def result(call_id: str, text: str) -> tuple[str, dict[str, Any]]:
    return (
        "toolResult",
        {
            "toolCallId": call_id,
            "toolName": "read_file",
            "content": [{"type": "text", "text": text}],
            "isError": False,
        },
    )


def test_the_cut_lands_on_the_assistant_before_its_results():
    path = chain(
        user("a" * 40),
        assistant("b" * 40),
        user("c" * 40),
        assistant("", [("c1", "x.txt")]),
        result("c1", "r" * 80),
        assistant("done"),
    )
    # Walking back from the newest: 1 + 20 tokens reach 15 at the tool result, which is
    # not a cut point; the first cut point at or after it is the assistant "done".
    cut = find_cut_point(path, 0, len(path), 15)
    assert path[cut.first_kept_index].data["message"]["content"][0]["text"] == "done"
    assert cut.is_split_turn and cut.turn_start_index == 2
    # More to keep: the cut moves to the assistant that made the call, results follow it.
    cut = find_cut_point(path, 0, len(path), 22)
    assert path[cut.first_kept_index].data["message"]["role"] == "assistant"
    assert path[cut.first_kept_index + 1].data["message"]["role"] == "toolResult"


def test_settings_entries_before_the_cut_are_kept_with_it():
    path = chain(
        user("a" * 40),
        assistant("b" * 40),
        ("model_change", {"provider": "p", "modelId": "m"}),
        ("label", {"targetId": "x", "label": "l"}),
        user("c" * 40),
        assistant("d" * 8),
    )
    cut = find_cut_point(path, 0, len(path), 10)
    assert path[cut.first_kept_index].type == "model_change"
    # As in Pi: a cut that is not on a user message counts as splitting the turn that
    # began at the nearest user message before it.
    assert cut.is_split_turn and cut.turn_start_index == 0


def test_prepare_summarizes_from_the_previous_kept_entry():
    path = chain(
        user("one " * 10), assistant("two " * 10), user("three " * 10), assistant("four " * 10)
    )
    first = prepare_compaction(path, 20)
    assert first is not None and first.first_kept_entry_id == path[2].id
    assert [m["role"] for m in first.messages] == ["user", "assistant"]
    compaction = entry(
        "compaction",
        path[-1].id,
        summary="S1",
        firstKeptEntryId=first.first_kept_entry_id,
        tokensBefore=first.tokens_before,
    )
    path.append(compaction)
    assert prepare_compaction(path, 20) is None  # the path ends in a compaction
    path += chain(user("five " * 10), assistant("six " * 10), parent=compaction.id)
    second = prepare_compaction(path, 20)
    assert second is not None and second.previous_summary == "S1"
    # Messages kept last time are summarized again, with the previous summary.
    assert [m["content"] for m in second.messages[:1]] == ["three " * 10]


def test_usage_from_before_the_latest_compaction_does_not_count():
    path = chain(user("x" * 400), assistant("y", usage=5000))
    compaction = entry(
        "compaction", path[-1].id, summary="s" * 40, firstKeptEntryId=path[1].id, tokensBefore=5000
    )
    path.append(compaction)
    context = build_session_context(path, compaction.id)
    # The kept assistant reported 5000 tokens for a context that no longer exists.
    assert context_tokens(path, context.messages) == 10 + 1
    fresh = chain(user("x" * 400), assistant("y", usage=5000), user("z" * 8))
    assert context_tokens(fresh, build_session_context(fresh, fresh[-1].id).messages) == 5002


def test_serialized_conversation_reads_as_a_record():
    path = chain(user("read it"), assistant("ok", [("c1", "a.txt")]), result("c1", "x" * 2500))
    text = serialize_conversation([e.data["message"] for e in path])
    lines = text.split("\n\n")
    assert lines[0] == "[User]: read it"
    assert lines[1] == "[Assistant]: ok"
    assert lines[2] == '[Assistant tool calls]: read_file(path="a.txt")'
    assert lines[3].startswith("[Tool result]: " + "x" * 2000)
    assert "500 more characters cut" in text


def test_entries_left_behind_stop_at_the_common_ancestor():
    trunk = chain(user("a"), assistant("b"))
    left = [msg("user", trunk[-1].id, content="c")]
    left.append(msg("assistant", left[0].id, content=[{"type": "text", "text": "d"}]))
    right = [msg("user", trunk[-1].id, content="e")]
    assert entries_left_behind(trunk + left, trunk + right) == left
    assert entries_left_behind(trunk + left, trunk) == left
    assert entries_left_behind(trunk + left, []) == trunk + left


# --- property: no orphans, whatever the shape of the session -----------------------------

_turn = st.lists(st.integers(min_value=0, max_value=3), min_size=0, max_size=3)  # calls per step
_extra = st.sampled_from([None, None, None, "model_change", "label", "branch_summary"])


@st.composite
def sessions(draw: st.DrawFn) -> list[tuple[str, dict[str, Any]]]:
    specs: list[tuple[str, dict[str, Any]]] = []
    call_ids = itertools.count()
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        extra = draw(_extra)
        if extra == "model_change":
            specs.append(("model_change", {"provider": "p", "modelId": "m"}))
        elif extra == "label":
            specs.append(("label", {"targetId": "x", "label": "l"}))
        elif extra == "branch_summary":
            specs.append(
                ("branch_summary", {"fromId": "root", "summary": "b" * draw(st.integers(1, 200))})
            )
        specs.append(user("u" * draw(st.integers(1, 300))))
        for calls in draw(_turn):
            ids = [f"c{next(call_ids)}" for _ in range(calls)]
            specs.append(assistant("a" * draw(st.integers(0, 200)), [(i, "f.txt") for i in ids]))
            specs += [result(i, "r" * draw(st.integers(0, 400))) for i in ids]
        specs.append(assistant("end" * draw(st.integers(1, 50))))
    return specs


def _compact(path: list[EntryRecord], keep: int) -> list[EntryRecord]:
    prep = prepare_compaction(path, keep)
    if prep is None:
        return path
    data = compaction_entry(prep, "summary", path[-1].id)
    return [
        *path,
        entry(
            "compaction",
            path[-1].id,
            **{k: v for k, v in data.items() if k not in ("type", "parentId")},
        ),
    ]


@settings(max_examples=150, deadline=None)
@given(sessions(), st.integers(min_value=1, max_value=600), st.integers(min_value=1, max_value=600))
def test_compaction_never_orphans_a_tool_result(specs, keep, keep_again):
    path = chain(*specs)
    for round_, keep_tokens in enumerate((keep, keep_again)):  # chained compactions too
        if round_:
            more = [user("again"), assistant("", [("late", "g.txt")]), result("late", "ok")]
            path = [*path, *chain(*more, parent=path[-1].id)]
        path = _compact(path, keep_tokens)
        kept_id = path[-1].data.get("firstKeptEntryId") if path[-1].type == "compaction" else None
        if kept_id is not None:
            kept = next(e for e in path if e.id == kept_id)
            assert not (kept.type == "message" and kept.data["message"]["role"] == "toolResult")
        context = build_session_context(path, path[-1].id)
        called: set[str] = set()
        for message in context.messages:
            if message["role"] == "assistant":
                called |= {b["id"] for b in message["content"] if b["type"] == "toolCall"}
            elif message["role"] == "toolResult":
                assert message["toolCallId"] in called
        sent = to_provider_messages(context.messages)
        kept_results = [m for m in context.messages if m["role"] == "toolResult"]
        sent_results = [m for m in sent if m["role"] == "toolResult"]
        assert sent_results == kept_results  # none dropped, none made up
        assert all(NO_RESULT_TEXT not in str(m["content"]) for m in sent_results)
