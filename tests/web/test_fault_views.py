"""A failed model request on the page: an error card on the failed reply in the chat and
on the failed step in the trace (what failed, after how many attempts), and Retry, which
starts a new turn from the same point."""

from __future__ import annotations

import html
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from sessions_app import services, store, workspaces
from sessions_app.agent import agent_wait
from sessions_app.models import Event, Session
from tests.runtime.servers import Failure, ScriptedServer, error_body, text_answer
from tests.web.conftest import client_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fast_offline_model", "agent_shutdown"),
]


@pytest.fixture
def workspace(tmp_path: Path, settings: Any, alice: User) -> Path:
    settings.STRAND_WORKSPACE_ROOTS = [str(tmp_path)]
    return Path(workspaces.default_cwd(alice))


@pytest.fixture
def session(alice: User, workspace: Path, serve_preset: Any) -> Session:
    # No automatic retry, so that the first failure is the reply's.
    name = serve_preset("flaky", **{**services.DEFAULT_PRESET, "max_retries": 0})
    return services.session_create(owner=alice, title="Flaky", cwd=str(workspace), preset=name)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    running = ScriptedServer("openai")
    yield running
    running.close()


def page(session: Session, query: str = "") -> str:
    return reverse("session", args=[session.id]) + query


def send(session: Session, text: str) -> None:
    client = client_for(session.owner)
    response = client.post(reverse("session-send", args=[session.id]), {"text": text})
    assert response.status_code == 302
    agent_wait(session.id, timeout=20)


def failed_reply(session: Session) -> Event:
    return Event.objects.get(session=session, type="assistant/message")


def test_the_failed_reply_has_an_error_card_with_retry_in_chat_and_trace(session):
    send(session, "fault 502 once, to see the card")
    client = client_for(session.owner)
    chat = client.get(page(session)).content.decode()
    reply = failed_reply(session)
    assert f'class="fault-card" data-fault="server_error" data-entry="{reply.entry_id}"' in chat
    assert "Provider error (HTTP 502)" in chat and "after 1 attempt<" in chat
    assert "Bad gateway" in chat and "data-retry" in chat
    trace = client.get(page(session, "?view=trace")).content.decode()
    assert 'class="span-fault depth-1"' in trace and "Provider error (HTTP 502)" in trace
    assert trace.count("data-retry") == 1


def test_retry_starts_a_turn_from_the_same_point_and_leaves_the_failure_in_the_tree(session):
    send(session, "fault 503 once, then retry")
    reply = failed_reply(session)
    client = client_for(session.owner)
    response = client.post(
        reverse("session-retry", args=[session.id]), {"entry_id": reply.entry_id}
    )
    assert response.status_code == 302
    agent_wait(session.id, timeout=20)
    start = Event.objects.filter(session=session, type="turn/start").order_by("-seq").first()
    assert start is not None and start.data["trigger"] == "retry"
    session.refresh_from_db()
    answer = store.entries_of(session.id)[-1]
    assert answer.parent_id == reply.data["entry"]["parentId"]
    assert session.leaf_entry_id == answer.id
    chat = client.get(page(session)).content.decode()
    assert "fault-card" not in chat and "You said:" in chat
    # The failed reply is still there, on the branch left behind.
    left = client.get(page(session, f"?leaf={reply.entry_id}")).content.decode()
    assert f'data-entry="{reply.entry_id}"' in left and "fault-card" in left


def test_retry_of_a_reply_that_did_not_fail_writes_nothing(session):
    send(session, "hello")
    reply = failed_reply(session)
    session.refresh_from_db()
    before = session.last_seq
    client = client_for(session.owner)
    response = client.post(
        reverse("session-retry", args=[session.id]), {"entry_id": reply.entry_id}, follow=True
    )
    assert "not a failed reply" in response.content.decode()
    session.refresh_from_db()
    assert session.last_seq == before


def test_retry_is_refused_to_a_reader(session, bob):
    send(session, "fault 401")
    reply = failed_reply(session)
    response = client_for(bob).post(
        reverse("session-retry", args=[session.id]), {"entry_id": reply.entry_id}
    )
    assert response.status_code == 404
    assert Event.objects.filter(session=session, type="turn/start").count() == 1


def test_a_providers_error_text_is_escaped(alice, workspace, serve_preset, server, monkeypatch):
    monkeypatch.setenv("FLAKY_KEY", "sk-flaky-000111")
    name = serve_preset(
        "remote",
        provider="openai",
        model="m",
        base_url=server.base_url,
        api_key_env="FLAKY_KEY",
        max_retries=0,
    )
    session = services.session_create(owner=alice, cwd=str(workspace), preset=name)
    hostile = '<img src=x onerror="alert(1)"> broke'
    server.script(Failure(500, error_body("openai", hostile)), text_answer("openai", "ok"))
    send(session, "hi")
    chat = client_for(alice).get(page(session)).content.decode()
    assert "<img src=x" not in chat and html.escape(hostile, quote=True) in chat
    assert os.environ["FLAKY_KEY"] not in chat
