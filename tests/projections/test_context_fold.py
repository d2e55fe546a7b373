"""`ContextFold` against the context built whole: down every path of Pi's own files and of
random trees (tool calls left waiting, aborted replies, context edits, compactions), each
leaf's folded messages are `to_provider_messages(build_session_context(...).messages)`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.context import (
    ContextFold,
    ProviderMessages,
    build_session_context,
    index_by_id,
    path_to_root,
    to_provider_messages,
)
from projections.otel_genai import RequestInput
from projections.records import EntryRecord
from tests.projections.test_context import T0, entry, file_entries, records

if TYPE_CHECKING:
    from tests.projections.conftest import PiCase


def folded_down(path: list[EntryRecord]) -> list[tuple[list[Any], str | None, int]]:
    """A fold carried down `path` an entry at a time, as the OTLP export carries one from a
    request's leaf to the next: at each leaf, the messages and summary entry the fold gives
    there (read then) and how many folds had been started by then."""
    fold: ContextFold | None = None
    compaction: EntryRecord | None = None
    started = 0
    out: list[tuple[list[Any], str | None, int]] = []
    for at, step in enumerate(path):
        if step.type == "compaction":
            compaction = step
        if fold is None or not fold.extend([step]):
            fold = ContextFold(path[: at + 1], compaction)
            started += 1
        out.append((fold.messages(), fold.summary_entry_id, started))
    return out


def check_every_leaf(entries: list[dict[str, Any]]) -> None:
    stored = records(entries)
    by_id = index_by_id(stored)
    for leaf in by_id:
        path = path_to_root(by_id, leaf)
        # Read again once the fold has gone on: what it handed out earlier stays as it was.
        for depth, (messages, summary, _) in enumerate(folded_down(path)):
            context = build_session_context(stored, path[depth].id)
            assert messages == to_provider_messages(context.messages), (leaf, depth)
            assert summary == RequestInput.of({}, context).compaction_entry_id


def test_every_path_of_pis_files_folds_to_the_whole_context(pi_case: PiCase) -> None:
    check_every_leaf(file_entries(pi_case.path))


def test_a_fold_goes_on_only_from_its_leaf_and_never_over_an_edit_or_a_compaction() -> None:
    entries = [
        entry("message", "u1", None, message={"role": "user", "content": "a"}),
        entry("message", "u2", "u1", message={"role": "user", "content": "b"}),
        entry("context_edit", "e1", "u2", targetId="u1", replacement=None),
        entry("compaction", "c1", "u2", summary="s", firstKeptEntryId="u2", tokensBefore=1),
    ]
    u1, u2, edit, compaction = records(entries)
    fold = ContextFold([u1], None)
    assert not fold.extend([edit])  # not below u1
    assert fold.extend([u2]) and fold.leaf_id == "u2"
    assert not fold.extend([edit]) and fold.leaf_id == "u2"
    assert not fold.extend([compaction]) and fold.leaf_id == "u2"
    assert fold.extend([]) and [m["content"] for m in fold.messages()] == ["a", "b"]


def test_a_call_left_waiting_is_answered_only_until_its_result_comes() -> None:
    call = {"type": "toolCall", "id": "k", "name": "read", "arguments": {}}
    provider = ProviderMessages()
    provider.add([{"role": "assistant", "content": [call], "stopReason": "toolUse"}])
    waiting = provider.messages()
    assert [m["role"] for m in waiting] == ["assistant", "toolResult"]
    assert waiting[1]["isError"] is True
    result = {"role": "toolResult", "toolCallId": "k", "content": [], "isError": False}
    provider.add([result])
    assert provider.messages()[1] is result
    assert [m["role"] for m in waiting] == ["assistant", "toolResult"]  # handed out: unchanged


# --- random trees -----------------------------------------------------------------------

ids = st.sampled_from([f"e{n}" for n in range(12)])


@st.composite
def conversation(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A tree whose entries name earlier ones as parents (or none): replies whose tool
    calls are answered, answered twice, or left waiting; edits and compactions anywhere."""
    entries: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 14))):
        entry_id = f"e{n}"
        earlier = [e["id"] for e in entries]
        rooted = not earlier or draw(st.integers(0, 5)) == 0  # now and then a new root
        parent: str | None = None if rooted else draw(st.sampled_from(earlier))
        kind = draw(
            st.sampled_from(
                ["user", "assistant", "assistant", "result", "result", "edit", "compaction"]
                + ["branch_summary", "custom_message", "bash"]
            )
        )
        if kind == "user":
            entries.append(message(entry_id, parent, {"role": "user", "content": entry_id}))
        elif kind == "assistant":
            calls = [
                {"type": "toolCall", "id": f"k{entry_id}{c}", "name": "t", "arguments": {}}
                for c in range(draw(st.integers(0, 2)))
            ]
            stop = draw(st.sampled_from(["stop", "toolUse", "toolUse", "aborted", "error"]))
            reply = {"role": "assistant", "content": calls, "stopReason": stop, "timestamp": n}
            entries.append(message(entry_id, parent, reply))
        elif kind == "result":
            asked = [
                block["id"]
                for e in entries
                if e["type"] == "message" and e["message"]["role"] == "assistant"
                for block in e["message"]["content"]
            ]
            call_id = draw(st.sampled_from(asked)) if asked else "nobody"
            result: dict[str, Any] = {
                "role": "toolResult",
                "toolCallId": call_id,
                "content": [],
                "isError": False,
            }
            entries.append(message(entry_id, parent, result))
        elif kind == "edit":
            replacement = draw(st.sampled_from([None, {"content": "edited"}, {}]))
            entries.append(
                entry("context_edit", entry_id, parent, targetId=draw(ids), replacement=replacement)
            )
        elif kind == "compaction":
            entries.append(
                entry(
                    "compaction",
                    entry_id,
                    parent,
                    summary="s",
                    firstKeptEntryId=draw(ids),
                    tokensBefore=1,
                )
            )
        elif kind == "branch_summary":
            entries.append(entry("branch_summary", entry_id, parent, summary="b", fromId="e0"))
        elif kind == "custom_message":
            entries.append(
                entry("custom_message", entry_id, parent, customType="c", content="x", display=True)
            )
        else:
            bash = {"role": "bashExecution", "command": "ls", "output": "a", "exitCode": 0}
            entries.append(message(entry_id, parent, bash))
    return entries


def message(entry_id: str, parent: str | None, body: dict[str, Any]) -> dict[str, Any]:
    return entry("message", entry_id, parent, message=body, timestamp=T0)


@settings(max_examples=300, deadline=None)
@given(conversation())
def test_every_path_of_a_random_tree_folds_to_the_whole_context(
    entries: list[dict[str, Any]],
) -> None:
    check_every_leaf(entries)


@pytest.mark.parametrize("edits", [0, 1])
def test_a_long_line_is_folded_once(edits: int) -> None:
    """Down a line of 200 tool turns a single fold serves every leaf; an edit starts one more."""
    entries: list[dict[str, Any]] = []
    parent: str | None = None
    for n in range(200):
        call = {"type": "toolCall", "id": f"k{n}", "name": "t", "arguments": {}}
        turn = [
            message(
                f"a{n}", parent, {"role": "assistant", "content": [call], "stopReason": "toolUse"}
            ),
            message(f"r{n}", f"a{n}", {"role": "toolResult", "toolCallId": f"k{n}", "content": []}),
        ]
        entries += turn
        parent = f"r{n}"
    if edits:
        entries.append(entry("context_edit", "x", parent, targetId="a0", replacement=None))
    path = path_to_root(index_by_id(records(entries)), entries[-1]["id"])
    messages, _, started = folded_down(path)[-1]
    assert started == 1 + edits
    assert messages == to_provider_messages(build_session_context(records(entries)).messages)
