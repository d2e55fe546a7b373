"""JSON nesting depth is bounded at append and at Pi import, and every renderer is safe at
the depth allowed (`STRAND_MAX_JSON_DEPTH`).

An entry nested some 330 levels deep once gave a 500 on the context view, a RecursionError
in turns and an HTML export that died mid-stream. Now: one level past the limit is refused
with where (through daphne, with Bob served meanwhile and nothing written), a line of a Pi
file past it is refused by its number, and a session whose entries of every kind nest at
exactly the limit — in a message's content, a tool call's arguments, a tool result's
details, a custom entry's data, a custom message's details — is drawn by every view, the
API, both exports and the comparison, and the agent runs a turn on it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from projections.nesting import depth_of
from sessions_app import services, store
from sessions_app.events import event_type_for_entry
from sessions_app.models import Entry, Session
from sessions_app.render import render_markdown
from sessions_app.services import pi_io
from sessions_app.store import NewEvent
from tests.api.conftest import OFFLINE_PRESET, content_of, token_api, wait_idle
from tests.security.served import TIMEOUT_S, client, meanwhile, served


def nest(levels: int) -> Any:
    """`levels` objects and arrays, alternating, around one string."""
    value: Any = "bottom"
    for level in range(levels):
        value = {"k": value} if level % 2 else [value]
    return value


def at_depth(template: Callable[[Any], dict[str, Any]], depth: int) -> dict[str, Any]:
    """`template(nest(n))` for the n that makes the whole entry exactly `depth` deep."""
    levels = 0
    while depth_of(template(nest(levels))) < depth:
        levels += 1
    entry = template(nest(levels))
    assert depth_of(entry) == depth
    return entry


def user(deep: Any) -> dict[str, Any]:
    content = [{"type": "text", "text": "**deep** user", "meta": deep}]
    return {"type": "message", "message": {"role": "user", "content": content}}


def assistant(deep: Any) -> dict[str, Any]:
    call = {"type": "toolCall", "id": "call-1", "name": "read_file", "arguments": {"x": deep}}
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "a *deep* answer"}, call],
        "provider": "offline",
        "model": "offline",
        "usage": {"input": 1, "output": 1, "totalTokens": 2},
        "stopReason": "toolUse",
    }
    return {"type": "message", "message": message}


def tool_result(deep: Any) -> dict[str, Any]:
    message = {
        "role": "toolResult",
        "toolCallId": "call-1",
        "toolName": "read_file",
        "content": [{"type": "text", "text": "read"}],
        "details": deep,
        "isError": False,
    }
    return {"type": "message", "message": message}


def custom(deep: Any) -> dict[str, Any]:
    return {"type": "custom", "customType": "deep", "data": deep}


def custom_message(deep: Any) -> dict[str, Any]:
    return {
        "type": "custom_message",
        "customType": "deep",
        "content": "a custom message",
        "display": True,
        "details": deep,
    }


TEMPLATES = [user, assistant, tool_result, custom, custom_message]


def deep_session(owner: Any, depth: int, **create: Any) -> Session:
    session = services.session_create(owner=owner, title="deep", **create)
    entries = [at_depth(t, depth) for t in TEMPLATES]
    store.append_events(
        session.id, 0, [NewEvent(event_type_for_entry(e), {"entry": e}) for e in entries]
    )
    session.refresh_from_db()
    return session


def entry_event(entry: dict[str, Any]) -> dict[str, Any]:
    return {"type": event_type_for_entry(entry), "data": {"entry": entry}}


# --- refused past the limit --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_entry_one_level_past_the_limit_is_refused_through_daphne(alice, bob):
    limit = settings.STRAND_MAX_JSON_DEPTH
    session = services.session_create(owner=alice, title="deep")
    attacks = [at_depth(t, limit + 1) for t in TEMPLATES] + [user(nest(330))]
    with served() as url:
        alice_http, bob_http = client(alice), client(bob)
        with meanwhile(
            lambda: bob_http.get(f"{url}/api/sessions", timeout=TIMEOUT_S).status_code
        ) as bobs:
            answers = [
                alice_http.post(
                    f"{url}/api/sessions/{session.id}/events",
                    json={"expected_seq": 0, "events": [entry_event(entry)]},
                    timeout=TIMEOUT_S,
                )
                for entry in attacks
            ]
            # Deeper than any JSON parser here reads: refused as unreadable, still a 4xx.
            unreadable = "[" * 100_000 + "]" * 100_000
            answers.append(
                alice_http.post(
                    f"{url}/api/sessions/{session.id}/events",
                    data='{"expected_seq": 0, "events": [{"type": "user/message", "data": '
                    f'{{"entry": {{"type": "message", "deep": {unreadable}}}}}}}]}}',
                    headers={"Content-Type": "application/json"},
                    timeout=TIMEOUT_S,
                )
            )
    for answer in answers[:-1]:
        assert answer.status_code == 422, answer.text
        detail = answer.json()["detail"]
        assert answer.json()["error"] == "invalid_event"
        assert f"nests deeper than {limit} levels at entry." in detail, detail
        assert "STRAND_MAX_JSON_DEPTH" in detail
    assert answers[0].json()["detail"].split(" at ")[1].startswith("entry.message.content[0]")
    assert answers[-1].status_code == 400, answers[-1].text
    assert set(bobs) == {200}
    session.refresh_from_db()
    assert session.last_seq == 0 and not Entry.objects.filter(session=session).exists()


@pytest.mark.django_db
def test_event_data_past_the_limit_is_refused_before_anything_is_written(alice):
    session = services.session_create(owner=alice, title="deep")
    limit = settings.STRAND_MAX_JSON_DEPTH
    fine = NewEvent("user/message", {"entry": at_depth(user, limit)})
    # Data beside the entry counts from its own key, as the entry does.
    too_deep = NewEvent(
        "assistant/message", {"entry": assistant("x"), "timing": {"t": nest(limit)}}
    )
    with pytest.raises(store.InvalidEvent, match=r"at timing\.t"):
        store.append_events(session.id, 0, [fine, too_deep])
    # An event that adds no entry counts from its data.
    with pytest.raises(store.InvalidEvent, match="nests deeper than"):
        store.append_events(session.id, 0, [NewEvent("leaf/moved", {"to": None, "x": nest(limit)})])
    session.refresh_from_db()
    assert session.last_seq == 0


def pi_file(*entries: dict[str, Any]) -> bytes:
    header = {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"}
    lines = [header]
    parent = None
    for number, entry in enumerate(entries):
        entry_id = f"e{number}"
        lines.append({"id": entry_id, "parentId": parent, "timestamp": "t", **entry})
        parent = entry_id
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


@pytest.mark.django_db
@pytest.mark.parametrize("levels", [1, 270, 100_000])
def test_a_pi_line_past_the_limit_refuses_the_file_at_that_line(alice, levels):
    limit = settings.STRAND_MAX_JSON_DEPTH
    deep = at_depth(user, limit + 1) if levels == 1 else user("HERE")
    content = pi_file(at_depth(user, limit), at_depth(custom, limit), deep)
    # 270 levels, or past the parser itself (100,000: the line cannot be read at all).
    content = content.replace(b'"HERE"', b"[" * levels + b"]" * levels)
    with pytest.raises(pi_io.PiImportError) as refused:
        pi_io.pi_import(source=io.BytesIO(content), owner=alice)
    assert str(refused.value).startswith("line 4: nests objects and arrays deeper than the limit")
    assert not Session.objects.filter(owner=alice).exists()


@pytest.mark.django_db
def test_a_pi_file_at_the_limit_imports_whole(alice):
    limit = settings.STRAND_MAX_JSON_DEPTH
    content = pi_file(*(at_depth(t, limit) for t in TEMPLATES))
    imported = pi_io.pi_import(source=io.BytesIO(content), owner=alice)
    assert imported.entries == len(TEMPLATES)


# --- every renderer at the limit ---------------------------------------------------------


@pytest.fixture
def signed_in(alice: Any) -> Client:
    browser = Client()
    browser.force_login(alice)
    return browser


def complete(response: Any) -> bytes:
    assert response.status_code == 200, response.content[:500]
    return content_of(response)


@pytest.mark.django_db
def test_every_page_and_export_draws_a_session_nested_at_the_limit(alice, signed_in):
    session = deep_session(alice, settings.STRAND_MAX_JSON_DEPTH)
    page = f"/sessions/{session.id}/"
    for query in ("", "?view=trace", "?view=context", "?all=1", "?tree=1", "?view=context&all=1"):
        assert b"a custom message" in complete(signed_in.get(page + query)) or "trace" in query
    html = complete(signed_in.get(f"/sessions/{session.id}/export.html"))
    assert html.rstrip().endswith(b"</html>")
    lines = complete(signed_in.get(f"/sessions/{session.id}/export.jsonl")).splitlines()
    assert len(lines) == 1 + len(TEMPLATES)
    assert all(depth_of(json.loads(line)) <= settings.STRAND_MAX_JSON_DEPTH for line in lines)
    leaves = list(
        Entry.objects.filter(session=session).order_by("seq").values_list("entry_id", flat=True)
    )
    compared = signed_in.get(f"/sessions/{session.id}/compare", {"a": leaves[1], "b": leaves[-1]})
    assert compared.status_code == 200


@pytest.mark.django_db
def test_every_api_view_answers_for_a_session_nested_at_the_limit(alice):
    session = deep_session(alice, settings.STRAND_MAX_JSON_DEPTH)
    api = token_api(alice)
    base = f"/sessions/{session.id}"
    for path in (
        "/context",
        "/views/chat",
        "/views/trace",
        "/entries",
        "/entries?path=true",
        "/events",
        "/tree",
        "/export",
        "",
    ):
        answer = api.get(base + path)
        assert answer.status_code == 200, (path, answer.content[:300])
        content_of(answer)


def test_markdown_nested_far_past_the_limit_renders():
    quoted = "> " * 1000 + "deep"
    listed = "".join("  " * n + "- item\n" for n in range(1000))
    emphasis = "*" * 5000 + "x" + "*" * 5000
    for text in (quoted, listed, emphasis, "[" * 5000 + "x" + "]" * 5000):
        assert str(render_markdown(text))


@pytest.mark.django_db(transaction=True)
def test_a_turn_runs_on_a_session_nested_at_the_limit(alice, workspace: Path):
    session = deep_session(
        alice, settings.STRAND_MAX_JSON_DEPTH, cwd=str(workspace), preset=OFFLINE_PRESET
    )
    sent = token_api(alice).post(f"/sessions/{session.id}/messages", {"text": "list files"})
    assert sent.status_code == 202, sent.content
    wait_idle(session)
    events = store.events_after(session.id, -1, 1000)
    assert [e.data["reason"] for e in events if e.type == "turn/end"] == ["completed"]
    # The exact context of each request of the turn, rebuilt from the deep entries.
    requests = [e.seq for e in events if e.type == "request/sent"]
    assert requests
    for seq in requests:
        view = token_api(alice).get(f"/sessions/{session.id}/views/requests/{seq}")
        assert view.status_code == 200, view.content[:300]
