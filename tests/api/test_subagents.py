"""Subagents over the API, with the offline model: `delegate: TEXT` makes a `task` call, which
starts a child session on a copy of the parent's files; the child's answer is the call's
result, its changes come back as a diff, and cancel, depth and caps behave."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from runtime.subagents import ChildAsk, ChildRefused
from sessions_app import services, store
from sessions_app.agent.children import start_child
from sessions_app.models import Session
from tests.api.conftest import Api, body_of, content_of, wait_for, wait_idle

pytestmark = pytest.mark.django_db(transaction=True)

DELEGATING = "delegating"


@pytest.fixture
def parent(alice: Any, workspace: Path) -> Session:
    return services.session_create(owner=alice, title="lead", cwd=str(workspace), preset=DELEGATING)


def children_of(session: Session) -> list[Session]:
    return list(Session.objects.filter(parent=session, origin="subagent").order_by("created_at"))


def events_of(session: Session | str) -> list[Any]:
    sid = session.id if isinstance(session, Session) else session
    return list(store.events_after(sid, -1, 100_000))


def approve_all(api: Api, sessions: list[Session], outcome: str = "allowed") -> None:
    for s in sessions:
        for pending in body_of(api.get(f"/sessions/{s.id}/approvals")):
            decided = api.post(
                f"/sessions/{s.id}/approvals/{pending['approval_id']}", {"outcome": outcome}
            )
            assert decided.status_code in (204, 409), decided.content


def run_to_idle(api: Api, session: Session, text: str) -> None:
    """Send `text` to `session` and allow every approval it and its children ask for."""
    sent = api.post(f"/sessions/{session.id}/messages", {"text": text})
    assert sent.status_code == 202, sent.content

    def settled() -> bool:
        family = [session, *children_of(session)]
        family += [c for child in family[1:] for c in children_of(child)]
        approve_all(api, family)
        return all(body_of(api.get(f"/sessions/{s.id}"))["turn_status"] == "idle" for s in family)

    wait_for(settled, timeout=60)
    wait_idle(session)


def walk(spans: list[Any]) -> Any:
    for span in spans:
        yield span
        yield from walk(span["children"])


def task_results(session: Session) -> list[Any]:
    return [
        e
        for e in events_of(session)
        if e.type == "tool/result" and e.data["entry"]["message"]["toolName"] == "task"
    ]


def test_a_delegated_task_runs_in_a_child_session_on_a_copy_of_the_files(
    as_alice: Api, as_bob: Api, bob: Any, parent: Session, workspace: Path
) -> None:
    run_to_idle(as_alice, parent, "delegate: write hello.txt: hi from the child")

    [child] = children_of(parent)
    assert child.owner_id == parent.owner_id and child.delegation_depth == 1
    created, descriptor, fork = events_of(child)[:3]
    assert created.data["origin"] == "subagent" and created.data["source"] == "subagent"
    assert (
        created.data["parent_session"] == str(parent.id) and created.data["delegation_depth"] == 1
    )
    assert descriptor.type == "subagent/descriptor"
    assert descriptor.data["prompt"] == "write hello.txt: hi from the child"
    assert "task" in descriptor.data["tools"] and "write" in descriptor.data["tools"]
    assert fork.type == "workspace/snapshot" and fork.data["reason"] == "fork"
    assert set(fork.data["files"]) == {"notes.txt"} and fork.data["at"] is None

    # The child wrote in its own folder; the parent's files are as they were.
    assert Path(child.cwd, "hello.txt").read_text() == "hi from the child"
    assert Path(child.cwd, "notes.txt").read_text() == "hello world\n"
    assert not (workspace / "hello.txt").exists()

    # The parent's log names the child; the call's result is the child's answer and diff.
    started = [e for e in events_of(parent) if e.type == "subagent/started"]
    assert [e.data["child_session"] for e in started] == [str(child.id)]
    [result] = task_results(parent)
    message = result.data["entry"]["message"]
    text = message["content"][0]["text"]
    assert message["isError"] is False, text
    child_answer = [e for e in events_of(child) if e.type == "assistant/message"][-1]
    assert child_answer.data["entry"]["message"]["content"][0]["text"] in text
    assert "added hello.txt (+1 -0)" in text and "+hi from the child" in text
    assert message["details"]["child_session"] == str(child.id)
    assert message["details"]["files"] == [
        {"path": "hello.txt", "status": "added", "added": 1, "removed": 0}
    ]
    ends = [e.data["reason"] for e in events_of(child) if e.type == "turn/end"]
    assert ends == ["completed"]

    # The API shows the lineage, and the trace nests the child's turn under the call.
    shown = body_of(as_alice.get(f"/sessions/{child.id}"))
    assert shown["parent_id"] == str(parent.id) and shown["origin"] == "subagent"
    assert shown["delegation_depth"] == 1
    trace = body_of(as_alice.get(f"/sessions/{parent.id}/views/trace"))
    task_span = next(s for s in walk(trace["spans"]) if s["kind"] == "tool" and s["name"] == "task")
    assert ["child_session", str(child.id)] in task_span["outputs"]
    nested = list(walk(task_span["children"]))
    assert any(s["kind"] == "turn" and s["key"].startswith("subagent-") for s in nested)
    assert any(s["kind"] == "tool" and s["name"] == "write" for s in nested)

    # Only who may see the parent sees the child.
    assert as_bob.get(f"/sessions/{child.id}").status_code == 404
    assert as_bob.get(f"/sessions/{child.id}/views/trace").status_code == 404

    # The pages: the list marks the child, its page names its parent in the breadcrumbs,
    # the parent's tree lists it, and the task call's detail shows the child's diff.
    page = Client()
    page.force_login(parent.owner)
    listed = page.get("/").content.decode()
    assert f'class="pill subtle subagent" href="/sessions/{parent.id}/"' in listed
    child_page = page.get(f"/sessions/{child.id}/").content.decode()
    assert f'class="crumb crumb-parent" href="/sessions/{parent.id}/"' in child_page
    assert 'id="subagent-parent"' in child_page
    parent_page = page.get(f"/sessions/{parent.id}/").content.decode()
    assert f'data-child="{child.id}"' in parent_page
    call_id = started[0].data["call_id"]
    detail = page.get(f"/sessions/{parent.id}/?view=trace&span=tool-{call_id}&turn=1")
    shown_detail = detail.content.decode()
    assert f'id="span-child" href="/sessions/{child.id}/"' in shown_detail
    assert "hello.txt" in shown_detail.split('id="span-files"')[1]
    assert f'data-span="subagent-{call_id}-turn-1"' in shown_detail
    # Both export: the child as a Pi file of its own, the parent's page with its trace.
    pi_file = content_of(as_alice.get(f"/sessions/{child.id}/export"))
    assert b"hi from the child" in pi_file
    exported = content_of(page.get(f"/sessions/{parent.id}/export.html")).decode()
    assert "task" in exported and "hi from the child" in exported
    stranger = Client()
    stranger.force_login(bob)
    assert stranger.get(f"/sessions/{child.id}/").status_code == 404


def test_cancelling_the_parent_cancels_the_child(as_alice: Api, parent: Session) -> None:
    sent = as_alice.post(f"/sessions/{parent.id}/messages", {"text": "delegate: write a.txt: x"})
    assert sent.status_code == 202

    def child_started() -> list[Session]:
        approve_all(as_alice, [parent])  # the task call's approval
        return children_of(parent)

    wait_for(child_started)
    [child] = children_of(parent)
    # The child waits for the approval of its write; the parent waits for the child.
    wait_for(lambda: body_of(as_alice.get(f"/sessions/{child.id}/approvals")))
    cancelled = as_alice.post(f"/sessions/{parent.id}/cancel")
    assert body_of(cancelled) == {"running": True}
    wait_idle(parent)
    wait_for(lambda: body_of(as_alice.get(f"/sessions/{child.id}"))["turn_status"] == "idle")

    [result] = task_results(parent)
    assert result.data["error_code"] == "ABORTED"
    assert [e.data["reason"] for e in events_of(parent) if e.type == "turn/end"] == ["aborted"]
    assert [e.data["reason"] for e in events_of(child) if e.type == "turn/end"] == ["aborted"]
    assert not Path(child.cwd, "a.txt").exists()


def test_a_subagent_past_the_depth_limit_is_refused(
    as_alice: Api, parent: Session, settings: Any
) -> None:
    settings.STRAND_SUBAGENT_MAX_DEPTH = 1
    run_to_idle(as_alice, parent, "delegate: delegate: read notes.txt")

    [child] = children_of(parent)
    assert children_of(child) == []
    [refused] = task_results(child)
    assert refused.data["error_code"] == "SUBAGENT_DEPTH"
    assert "at most 1 deep" in refused.data["entry"]["message"]["content"][0]["text"]
    # The child ends well, and its answer (the refusal reported) is the parent's result.
    [result] = task_results(parent)
    assert result.data["entry"]["message"]["isError"] is False


def test_children_per_session_and_per_user_are_capped(
    as_alice: Api, parent: Session, settings: Any, alice: Any, workspace: Path
) -> None:
    settings.STRAND_SUBAGENTS_PER_SESSION = 1
    # Two children an hour for the user: a refusal for the session's cap counts none.
    settings.STRAND_SUBAGENTS_PER_USER_HOUR = 2
    run_to_idle(as_alice, parent, "delegate: read notes.txt")
    run_to_idle(as_alice, parent, "delegate: read notes.txt")
    assert len(children_of(parent)) == 1
    first, second = task_results(parent)
    assert "error_code" not in first.data
    assert second.data["error_code"] == "SUBAGENT_CAP"

    settings.STRAND_SUBAGENTS_PER_SESSION = 16
    other = services.session_create(owner=alice, cwd=str(workspace), preset=DELEGATING)
    run_to_idle(as_alice, other, "delegate: read notes.txt")
    run_to_idle(as_alice, other, "delegate: read notes.txt")
    assert len(children_of(other)) == 1
    assert task_results(other)[1].data["error_code"] == "RATE_LIMITED"


def test_a_child_gets_no_tool_its_parent_lacks(alice: Any, parent: Session) -> None:
    ask = ChildAsk(str(parent.id), "call_1", 1, None, "look", tools=("read", "teleport"))
    with pytest.raises(ChildRefused) as refused:
        start_child(ask)
    assert refused.value.code == "SUBAGENT_TOOLS" and "teleport" in str(refused.value)
    narrow = start_child(ChildAsk(str(parent.id), "call_2", 1, None, "look", tools=("read",)))
    assert narrow.tools == ("read",)
    child = Session.objects.get(id=narrow.session_id)
    # Its turns keep to those tools, whatever the preset offers.
    from sessions_app.agent.log import _setup

    assert list(_setup(str(child.id)).preset["tools"]) == ["read"]
    assert json.loads(json.dumps(child.preset["tools"])) == ["read"]


def test_a_child_past_its_time_is_cancelled(as_alice: Api, parent: Session, settings: Any) -> None:
    settings.STRAND_SUBAGENT_TIMEOUT_S = 0.5
    sent = as_alice.post(f"/sessions/{parent.id}/messages", {"text": "delegate: write late.txt: x"})
    assert sent.status_code == 202
    # The task call is allowed; the child's own write is never decided.
    wait_for(lambda: body_of(as_alice.get(f"/sessions/{parent.id}/approvals")))
    approve_all(as_alice, [parent])
    wait_idle(parent)
    [child] = children_of(parent)
    wait_for(lambda: body_of(as_alice.get(f"/sessions/{child.id}"))["turn_status"] == "idle")
    [result] = task_results(parent)
    assert result.data["error_code"] == "SUBAGENT_TIMEOUT"
    assert "ran past 0.5 s" in result.data["entry"]["message"]["content"][0]["text"]
    assert [e.data["reason"] for e in events_of(child) if e.type == "turn/end"] == ["aborted"]
    # The parent goes on: its model reads the error and the turn completes.
    assert [e.data["reason"] for e in events_of(parent) if e.type == "turn/end"] == ["completed"]
