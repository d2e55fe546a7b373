from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.chat import (
    AssistantItem,
    BashItem,
    BranchSummaryItem,
    ChatView,
    CompactionItem,
    CustomMessageItem,
    ModelChangeItem,
    NoteItem,
    ToolResultItem,
    Usage,
    UserItem,
    project_chat,
)
from tests.projections.fixtures import SessionLog, text, tool_call, usage


def kinds(view: ChatView | tuple[object, ...]) -> list[str]:
    items = view.items if isinstance(view, ChatView) else view
    return [item.kind for item in items]  # type: ignore[attr-defined]


def tool_turn(log: SessionLog, *, approve: str | None = "allowed") -> tuple[str, str, str]:
    """One turn: the user asks, the model reads a file (with approval), then answers."""
    log.turn_start()
    log.step_start()
    user = log.user("Read a.txt please")
    asked = log.assistant(
        [
            {"type": "thinking", "thinking": "Need the file."},
            text("Reading."),
            tool_call("c1", "read", {"path": "a.txt"}),
        ],
        stop_reason="toolUse",
    )
    if approve is not None:
        log.approval_asked("ap1", "c1", "read")
        log.approval_decided("ap1", approve)
    log.tool_call("c1", "read", '{"path":"a.txt"}')
    log.tool_result("c1", "read", "hello")
    log.step_end()
    log.step_start()
    answer = log.assistant([text("It says hello.")], usage_=usage(200, 10, 0.002))
    log.step_end()
    log.turn_end()
    return user, asked, answer


def test_turn_with_tool_call_folds_the_result_under_its_assistant_message() -> None:
    log = SessionLog()
    user, asked, answer = tool_turn(log)

    view = project_chat(log.entries, log.leaf, log.events)

    assert kinds(view) == ["user", "assistant", "assistant"]
    first, second, third = view.items
    assert isinstance(first, UserItem) and first.text == "Read a.txt please"
    assert first.entry_id == user
    assert first.parent_id is None
    assert isinstance(second, AssistantItem) and second.entry_id == asked
    assert second.text == "Reading."
    assert second.thinking == ("Need the file.",)
    [call] = second.tool_calls
    assert call.name == "read" and call.arguments == {"path": "a.txt"}
    assert call.result is not None and call.result.text == "hello"
    assert call.approval == "allowed"
    assert call.status == "ok"
    assert isinstance(third, AssistantItem) and third.entry_id == answer
    assert third.usage == Usage(input=200, output=10, total_tokens=210, cost=0.002)
    assert view.leaf_id == answer
    assert [item.seq for item in view.items] == sorted(item.seq for item in view.items)


def test_rejected_and_waiting_tool_calls() -> None:
    log = SessionLog()
    log.turn_start()
    log.step_start()
    log.user("delete it")
    log.assistant([tool_call("c1", "rm", {}), tool_call("c2", "rm", {})], stop_reason="toolUse")
    log.approval_asked("ap1", "c1", "rm")
    log.approval_decided("ap1", "rejected")
    log.tool_result("c1", "rm", "The user rejected this call.", is_error=True)
    log.approval_asked("ap2", "c2", "rm")

    view = project_chat(log.entries, log.leaf, log.events)

    calls = view.items[1].tool_calls  # type: ignore[union-attr]
    assert [c.status for c in calls] == ["rejected", "waiting_approval"]
    assert calls[1].result is None


def test_without_events_the_chat_still_shows_entries() -> None:
    log = SessionLog()
    tool_turn(log)

    view = project_chat(log.entries, log.leaf)

    assert kinds(view) == ["user", "assistant", "assistant"]
    assert view.items[1].tool_calls[0].approval is None  # type: ignore[union-attr]


def test_user_images_and_error_and_aborted_notices() -> None:
    log = SessionLog()
    log.user([text("look"), {"type": "image", "data": "AAAA", "mimeType": "image/jpeg"}])
    log.assistant([text("partial")], stop_reason="aborted")
    log.user("again")
    log.assistant([], stop_reason="error", error_message="rate limited")

    items = project_chat(log.entries, log.leaf).items

    assert isinstance(items[0], UserItem)
    assert items[0].images[0].data_uri == "data:image/jpeg;base64,AAAA"
    assert isinstance(items[1], AssistantItem) and items[1].notice is not None
    assert items[1].notice.kind == "aborted"
    assert isinstance(items[3], AssistantItem) and items[3].notice is not None
    assert items[3].notice.text == "Error: rate limited"


def test_interrupted_turn_gets_a_note_after_its_last_visible_item() -> None:
    log = SessionLog()
    log.turn_start()
    log.step_start()
    log.user("run both")
    asked = log.assistant(
        [tool_call("c1", "bash", {"cmd": "make"}), tool_call("c2", "bash", {"cmd": "test"})],
        stop_reason="toolUse",
    )
    log.tool_call("c1", "bash", '{"cmd":"make"}')
    # The process died here; recovery closes the turn.
    log.tool_result(
        "c1", "bash", "outcome unknown", is_error=True, error_code="TOOL_OUTCOME_UNKNOWN"
    )
    log.tool_result("c2", "bash", "not started", is_error=True, error_code="TOOL_NOT_STARTED")
    log.step_end("interrupted")
    log.turn_end("interrupted")
    log.turn_start()
    log.step_start()
    log.user("what happened?")

    view = project_chat(log.entries, log.leaf, log.events)

    assert kinds(view) == ["user", "assistant", "note", "user"]
    note = view.items[2]
    assert isinstance(note, NoteItem)
    assert note.notice.kind == "interrupted"
    assert note.after_entry_id == asked
    assert note.turn == 1
    calls = view.items[1].tool_calls  # type: ignore[union-attr]
    assert [c.status for c in calls] == ["interrupted", "not_started"]
    assert calls[0].result is not None
    assert calls[0].result.error_code == "TOOL_OUTCOME_UNKNOWN"


def test_turn_aborted_during_tools_gets_a_note_but_aborted_stream_does_not_twice() -> None:
    log = SessionLog()
    log.turn_start()
    log.step_start()
    log.user("go")
    log.assistant([tool_call("c1", "read", {})], stop_reason="toolUse")
    log.tool_result(
        "c1", "read", "aborted before dispatch", is_error=True, error_code="ABORTED_BEFORE_DISPATCH"
    )
    log.step_end()
    log.turn_end("aborted")
    log.turn_start()
    log.step_start()
    log.user("again")
    log.assistant([text("par")], stop_reason="aborted")
    log.step_end()
    log.turn_end("aborted")

    view = project_chat(log.entries, log.leaf, log.events)

    assert kinds(view) == ["user", "assistant", "note", "user", "assistant"]
    assert view.items[1].tool_calls[0].status == "aborted"  # type: ignore[union-attr]
    assert view.items[2].notice.kind == "aborted"  # type: ignore[union-attr]
    assert view.items[4].notice.kind == "aborted"  # type: ignore[union-attr]


def test_error_turn_without_an_error_message_gets_a_note() -> None:
    log = SessionLog()
    log.turn_start()
    log.user("hi")
    log.turn_end("error", error="provider unreachable")

    view = project_chat(log.entries, log.leaf, log.events)

    assert kinds(view) == ["user", "note"]
    assert view.items[1].notice.text == "Error: provider unreachable"  # type: ignore[union-attr]


def compacted_session() -> tuple[SessionLog, dict[str, str]]:
    log = SessionLog()
    ids = {
        "u1": log.user("first question"),
        "a1": log.assistant([text("first answer")]),
        "u2": log.user("second question"),
        "a2": log.assistant([text("second answer")]),
    }
    ids["c1"] = log.compaction("They asked two questions.", ids["u2"], 5000)
    ids["u3"] = log.user("third question")
    ids["a3"] = log.assistant([text("third answer")])
    return log, ids


def test_compaction_card_sits_where_kept_messages_begin_and_holds_the_replaced_ones() -> None:
    log, ids = compacted_session()

    view = project_chat(log.entries, log.leaf)

    assert kinds(view) == ["compaction", "user", "assistant", "user", "assistant"]
    card = view.items[0]
    assert isinstance(card, CompactionItem)
    assert card.entry_id == ids["c1"]
    assert card.tokens_before == 5000
    assert card.summary == "They asked two questions."
    assert not card.superseded
    assert [item.entry_id for item in card.replaced] == [ids["u1"], ids["a1"]]
    assert [item.entry_id for item in view.items[1:]] == [ids[k] for k in ("u2", "a2", "u3", "a3")]


def test_a_compaction_card_holds_its_system_checkpoint() -> None:
    log = SessionLog()
    log.user("first")
    checkpoint = {
        "role": "system",
        "content": "appended text",
        "sections": {"preamble": "You are helpful.", "old": None},
        "toolsAdded": [{"name": "read"}, {"name": "edit"}],
        "timestamp": 5,
    }
    first = log.compaction("S.", None, 100)
    plain = project_chat(log.entries, log.leaf).items[0]
    assert isinstance(plain, CompactionItem) and plain.checkpoint is None
    log.add_entry(
        "compaction",
        {
            "summary": "T.",
            "firstKeptEntryId": first,
            "tokensBefore": 9,
            "systemMessage": checkpoint,
        },
    )

    card = project_chat(log.entries, log.leaf).items[0]

    assert isinstance(card, CompactionItem) and card.checkpoint is not None
    assert card.checkpoint.sections == (("preamble", "You are helpful."), ("old", None))
    assert card.checkpoint.tools_added == ("read", "edit")
    assert card.checkpoint.text == "appended text"


def test_chained_compactions_nest_their_cards() -> None:
    log, ids = compacted_session()
    second = log.compaction("Three questions.", ids["u3"], 7000)
    log.user("fourth")

    view = project_chat(log.entries, log.leaf)

    assert kinds(view) == ["compaction", "user", "assistant", "user"]
    outer = view.items[0]
    assert isinstance(outer, CompactionItem) and outer.entry_id == second
    assert kinds(outer.replaced) == ["compaction", "user", "assistant"]
    inner = outer.replaced[0]
    assert isinstance(inner, CompactionItem) and inner.entry_id == ids["c1"]
    assert kinds(inner.replaced) == ["user", "assistant"]


def test_compaction_whose_first_kept_entry_is_off_the_path_replaces_everything_before() -> None:
    log = SessionLog()
    u1 = log.user("one")
    log.assistant([text("1")])
    compaction = log.compaction("summary", "elsewhere", 100)
    log.user("two")

    view = project_chat(log.entries, log.leaf)

    assert kinds(view) == ["compaction", "user"]
    card = view.items[0]
    assert isinstance(card, CompactionItem) and card.entry_id == compaction
    assert card.replaced[0].entry_id == u1


def test_older_compaction_inside_kept_messages_is_marked_superseded() -> None:
    log = SessionLog()
    u1 = log.user("one")
    log.assistant([text("1")])
    old = log.compaction("old", u1, 10)
    log.user("two")
    log.compaction("new", u1, 20)

    view = project_chat(log.entries, log.leaf)

    assert kinds(view) == ["compaction", "user", "assistant", "compaction", "user"]
    assert view.items[3].entry_id == old
    assert view.items[3].superseded  # type: ignore[union-attr]
    assert view.items[0].replaced == ()  # type: ignore[union-attr]


def test_cards_notes_and_hidden_entries() -> None:
    log = SessionLog()
    log.model_change("anthropic", "claude-x")
    log.thinking_level("high")
    log.user("hi")
    log.session_info("demo")
    log.label(log.leaf or "", "start")
    log.custom_message("reminder", "Remember the tests.", display=True)
    log.custom_message("state", "hidden", display=False)
    log.branch_summary("We tried another approach.")
    log.branch_summary("")
    log.bash("ls", "a.txt", exit_code=2)

    items = project_chat(log.entries, log.leaf).items

    assert kinds(items) == ["model_change", "user", "custom_message", "branch_summary", "bash"]
    assert isinstance(items[0], ModelChangeItem) and items[0].model_id == "claude-x"
    assert isinstance(items[2], CustomMessageItem) and items[2].custom_type == "reminder"
    assert isinstance(items[3], BranchSummaryItem)
    assert items[3].summary == "We tried another approach."
    assert isinstance(items[4], BashItem) and items[4].is_error


def test_orphan_tool_result_is_shown_on_its_own() -> None:
    log = SessionLog()
    log.user("hi")
    log.tool_result("gone", "read", "late result")

    items = project_chat(log.entries, log.leaf).items

    assert isinstance(items[1], ToolResultItem)
    assert items[1].result.text == "late result"


def test_chat_follows_the_chosen_branch() -> None:
    log = SessionLog()
    root = log.user("start")
    first = log.assistant([text("A")])
    log.navigate(root)
    second = log.assistant([text("B")])

    on_b = project_chat(log.entries, second)
    on_a = project_chat(log.entries, first)

    assert [i.text for i in on_b.items] == ["start", "B"]  # type: ignore[union-attr]
    assert [i.text for i in on_a.items] == ["start", "A"]  # type: ignore[union-attr]


@pytest.mark.parametrize(("leaf", "expected_leaf", "count"), [(None, None, 0), ("nope", "LAST", 2)])
def test_null_leaf_is_empty_and_unknown_leaf_falls_back_to_last_entry(
    leaf: str | None, expected_leaf: str | None, count: int
) -> None:
    log = SessionLog()
    log.user("a")
    last = log.assistant([text("b")])

    view = project_chat(log.entries, leaf)

    assert view.leaf_id == (last if expected_leaf == "LAST" else None)
    assert len(view.items) == count


def test_same_records_give_the_same_chat() -> None:
    log = SessionLog()
    tool_turn(log)

    first = project_chat(log.entries, log.leaf, log.events)
    again = project_chat(list(reversed(log.entries)), log.leaf, list(reversed(log.events)))

    assert first == again


def flatten(items: tuple[object, ...]) -> list[object]:
    out: list[object] = []
    for item in items:
        out.append(item)
        if isinstance(item, CompactionItem):
            out.extend(flatten(item.replaced))
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["user", "assistant", "compaction"]), max_size=30), st.data())
def test_every_message_on_the_path_shows_once_whatever_the_compactions(
    kinds_: list[str], data: st.DataObject
) -> None:
    log = SessionLog()
    messages: list[str] = []
    for kind in kinds_:
        if kind == "user":
            messages.append(log.user("u"))
        elif kind == "assistant":
            messages.append(log.assistant([text("a")]))
        else:
            first_kept = data.draw(st.sampled_from([*messages, "off-path"]))
            log.compaction("s", first_kept, 1)

    items = flatten(project_chat(log.entries, log.leaf).items)

    shown = [i.entry_id for i in items if not isinstance(i, CompactionItem)]  # type: ignore[attr-defined]
    assert sorted(shown) == sorted(messages)
    assert len(items) == len(kinds_)


def calls_of(view: ChatView) -> dict[str, str]:
    """call id → status, of every tool call shown."""
    return {
        call.call_id: call.status
        for item in view.items
        if isinstance(item, AssistantItem)
        for call in item.tool_calls
    }


def test_a_call_is_running_once_allowed_or_dispatched_until_its_result_or_its_turn_ends() -> None:
    log = SessionLog()
    log.turn_start()
    log.step_start()
    log.user("Run two things")
    log.assistant(
        [tool_call("c1", "bash", {"command": "ls"}), tool_call("c2", "read", {"path": "a"})],
        stop_reason="toolUse",
    )
    log.approval_asked("ap1", "c1", "bash")

    def statuses() -> dict[str, str]:
        return calls_of(project_chat(log.entries, log.leaf, log.events))

    assert statuses() == {"c1": "waiting_approval", "c2": "pending"}
    log.approval_decided("ap1", "allowed")
    assert statuses() == {"c1": "running", "c2": "pending"}
    log.tool_call("c1", "bash", '{"command":"ls"}')
    log.tool_call("c2", "read", '{"path":"a"}')
    assert statuses() == {"c1": "running", "c2": "running"}
    log.tool_result("c1", "bash", "a.txt")
    assert statuses() == {"c1": "ok", "c2": "running"}
    log.turn_end("interrupted")
    assert statuses() == {"c1": "ok", "c2": "pending"}  # no longer running, and no result


def test_a_job_notice_claimed_from_the_inbox_is_the_jobs_not_the_users() -> None:
    log = SessionLog()
    log.created()
    # A notice queued while a turn ran, claimed at its next step (the queue names the job).
    log.turn_start()
    log.step_start()
    log.user("run in background make")
    log.assistant([text("Started.")])
    log.step_end()
    log.event(
        "inbox/queued",
        {
            "inbox_id": "in1",
            "target": "next_step",
            "text": "[job bash-1 ended]",
            "job_id": "bash-1",
        },
    )
    log.step_start()
    log.inbox_claimed("in1")
    notice = log.user("[job bash-1 ended: exit 0 after 1.0 s]\n$ make\nok")
    log.assistant([text("Noted.")])
    log.step_end()
    log.turn_end()
    # A turn a job's end started, its notice queued outside it: named by its text.
    log.turn_start(trigger="job")
    log.inbox_claimed("in2")
    woke = log.user("[job bash-2 ended: killed after 3.0 s]\n$ sleep 60\n(no output)")
    log.step_start()
    log.assistant([text("Noted.")])
    log.step_end()
    log.turn_end()
    # A steer the user wrote stays the user's.
    log.turn_start()
    log.step_start()
    log.user("go on")
    log.assistant([text("Going on.")])
    log.step_end()
    log.event("inbox/queued", {"inbox_id": "in3", "target": "next_step", "text": "[job x ended"})
    log.step_start()
    log.inbox_claimed("in3")
    steer = log.user("[job x ended, said the user]")
    log.step_end()
    log.turn_end()
    view = project_chat(log.entries, log.leaf, log.events)
    users = {item.entry_id: item for item in view.items if isinstance(item, UserItem)}
    assert users[notice].job_id == "bash-1"
    assert users[woke].job_id == "bash-2"
    assert users[steer].job_id is None
    assert [item.job_id for item in users.values()].count(None) == 3
