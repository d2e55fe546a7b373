"""Running turns through the pages: send, approve, cancel, edit and resend, with the
built-in offline model, and the trace and context views of what ran."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from sessions_app import services, workspaces
from sessions_app.agent import agent_wait
from sessions_app.models import Entry, Event, Session
from tests.web.conftest import client_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fast_offline_model", "agent_shutdown"),
]


@pytest.fixture
def workspace(tmp_path: Path, settings: Any, alice: User) -> Path:
    """Alice's own folder: where her sessions work."""
    settings.STRAND_WORKSPACE_ROOTS = [str(tmp_path)]
    folder = Path(workspaces.default_cwd(alice))
    (folder / "README.md").write_text("# Hello from the workspace\n")
    return folder


@pytest.fixture
def session(alice: User, workspace: Path) -> Session:
    return services.session_create(owner=alice, title="Agent at work", cwd=str(workspace))


def page(session: Session, query: str = "") -> str:
    return reverse("session", args=[session.id]) + query


def send(client: Client, session: Session, text: str, mode: str = "message") -> Any:
    return client.post(reverse("session-send", args=[session.id]), {"text": text, "mode": mode})


def wait_for_event(session: Session, event_type: str, timeout: float = 10.0) -> Event:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = Event.objects.filter(session=session, type=event_type).order_by("-seq").first()
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {event_type} within {timeout}s")


def test_a_sent_message_runs_a_turn_that_every_view_shows(session: Session) -> None:
    client = client_for(session.owner)
    response = send(client, session, "list files and read README.md")
    assert response.status_code == 302
    agent_wait(session.id, timeout=20)
    chat = client.get(page(session)).content.decode()
    assert chat.count('class="tool status-ok"') == 2
    assert "Hello from the workspace" in chat
    trace = client.get(page(session, "?view=trace")).content.decode()
    assert "Turn 1" in trace and "TTFT" in trace
    assert trace.count('class="span kind-request') == 2
    assert trace.count('class="span kind-tool') == 2
    context = client.get(page(session, "?view=context")).content.decode()
    assert 'id="hash-badge" class="badge ok" data-matches="true"' in context
    assert "Changes since request" in context
    first = Event.objects.filter(session=session, type="request/sent").order_by("seq").first()
    assert first is not None
    earlier = client.get(page(session, f"?view=context&request={first.seq}")).content.decode()
    assert "This is the first request on this branch" in earlier


def test_the_context_view_lists_the_latest_requests_and_still_shows_an_older_one(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessions_app.selectors import requests

    monkeypatch.setattr(requests, "REQUEST_LIST", 1)
    client = client_for(session.owner)
    send(client, session, "list files and read README.md")
    agent_wait(session.id, timeout=20)
    sent = list(Event.objects.filter(session=session, type="request/sent").order_by("seq"))
    assert len(sent) == 2
    latest = client.get(page(session, "?view=context")).content.decode()
    assert "the latest 1 request on this branch" in latest
    assert latest.count("<option ") == 1 and f'value="{sent[-1].seq}" selected' in latest
    older = client.get(page(session, f"?view=context&request={sent[0].seq}")).content.decode()
    assert f'<option value="{sent[0].seq}" selected>#{sent[0].seq}</option>' in older
    assert 'id="hash-badge" class="badge ok" data-matches="true"' in older


def test_a_selected_span_shows_its_inputs_and_outputs(session: Session) -> None:
    client = client_for(session.owner)
    send(client, session, "read README.md")
    agent_wait(session.id, timeout=20)
    call = Event.objects.get(session=session, type="tool/call")
    key = f"tool-{call.data['call_id']}"
    html = client.get(
        page(session, f"?view=trace&span={key}&turn=1&fragment=span"),
        headers={"HX-Request": "true", "HX-Target": "span-detail"},
    ).content.decode()
    assert html.lstrip().startswith('<aside id="span-detail"')
    assert "read" in html and "README.md" in html and "run_ms" in html


def test_a_write_waits_for_approval_and_runs_once_allowed(
    session: Session, workspace: Path
) -> None:
    client = client_for(session.owner)
    send(client, session, "write notes.txt: approved text")
    asked = wait_for_event(session, "approval/asked")
    html = client.get(page(session)).content.decode()
    assert 'class="approval card"' in html and "<strong>write</strong>" in html
    assert 'data-running="true"' in html and "Steer" in html and "Cancel turn" in html
    client.post(
        reverse("session-approval", args=[session.id, asked.data["approval_id"]]),
        {"outcome": "allowed"},
    )
    agent_wait(session.id, timeout=20)
    assert (workspace / "notes.txt").read_text() == "approved text"
    html = client.get(page(session)).content.decode()
    assert 'class="approval card"' not in html and 'data-running="false"' in html


def test_cancel_ends_the_running_turn_as_aborted(session: Session, workspace: Path) -> None:
    client = client_for(session.owner)
    send(client, session, "write never.txt: nope")
    wait_for_event(session, "approval/asked")
    client.post(reverse("session-cancel", args=[session.id]))
    agent_wait(session.id, timeout=20)
    end = wait_for_event(session, "turn/end")
    assert end.data["reason"] == "aborted"
    assert not (workspace / "never.txt").exists()
    html = client.get(page(session, "?view=trace")).content.decode()
    assert "status-aborted" in html


def test_a_second_message_while_a_turn_runs_is_refused_unless_steered(session: Session) -> None:
    client = client_for(session.owner)
    send(client, session, "write wait.txt: x")
    wait_for_event(session, "approval/asked")
    refused = send(client, session, "another", mode="message")
    assert refused.status_code == 302
    follow = client.get(page(session)).content.decode()
    assert "a turn is running" in follow
    send(client, session, "and then this", mode="follow_up")
    assert wait_for_event(session, "inbox/queued").data["target"] == "next_turn"
    client.post(reverse("session-cancel", args=[session.id]))
    agent_wait(session.id, timeout=20)


def test_edit_and_resend_makes_a_sibling_branch(session: Session) -> None:
    client = client_for(session.owner)
    send(client, session, "hello there")
    agent_wait(session.id, timeout=20)
    first = Entry.objects.get(session=session, type="message", data__message__role="user")
    client.post(
        reverse("session-resend", args=[session.id]),
        {"entry_id": first.entry_id, "text": "hello again, differently"},
    )
    agent_wait(session.id, timeout=20)
    users = Entry.objects.filter(session=session, data__message__role="user")
    assert users.count() == 2
    assert {u.parent_id for u in users} == {first.parent_id}
    html = client.get(page(session)).content.decode()
    tree, chat = html[: html.index('id="chat"')], html[html.index('id="chat"') :]
    assert "hello again, differently" in chat and "hello there" not in chat
    assert "hello there" in tree  # the first branch stays in the tree
