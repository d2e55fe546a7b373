"""Every costly door has a limit: hammered past it, the door answers 429 with `Retry-After`
and the refused request writes nothing. Sign-in pauses after repeated failures, and a client
cannot number its appended events into turns and steps.

Each door is tried for real (the API through HTTP with a token or a signed-in browser, the
pages through their forms) with a limit of one request an hour: the first request does its
work, the second, of the same kind, is refused and leaves the database as it was. The small
writes (renames, leaf moves, labels, approval decisions, cancels, deletions, token
revocations) are limited as the costly ones are: each is an event every viewer is sent, or a
row, and a script could otherwise send them as fast as the server answers.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from sessions_app import agent, services, store
from sessions_app.models import ApiToken, Entry, Event, Session
from sessions_app.services import demo, tokens
from tests.api.conftest import (
    OFFLINE_PRESET,
    Api,
    body_of,
    cookie_api,
    token_api,
    user_msg,
    wait_for,
    wait_idle,
)
from tests.web.conftest import client_for, conversation, message

ONE_AN_HOUR = (1, 3600)


def limit(settings: Any, scope: str) -> None:
    settings.STRAND_RATE_LIMITS = {scope: ONE_AN_HOUR}


def writes() -> tuple[int, int, int, int]:
    """What a refused request must leave as it was: sessions, events, entries, tokens."""
    return (
        Session.objects.count(),
        Event.objects.count(),
        Entry.objects.count(),
        ApiToken.objects.count(),
    )


def assert_refused_by_api(response: Any, scope: str) -> None:
    assert response.status_code == 429, response.content
    body = body_of(response)
    assert body["error"] == "rate_limited" and f"rate limit for {scope}" in body["detail"]
    assert 0 < body["retry_after"] <= 3600
    assert response["Retry-After"] == str(body["retry_after"])


def assert_refused_page(response: Any, words: str) -> None:
    assert response.status_code == 429, response.content[:300]
    assert 0 < int(response["Retry-After"]) <= 3600
    html = response.content.decode()
    assert f"Too many {words}: at most 1 per hour." in html and "Try again in" in html


def entry_append(text: str, **data: Any) -> dict[str, Any]:
    message = {"role": "user", "content": text}
    return {
        "type": "user/message",
        "data": {"entry": {"type": "message", "message": message}, **data},
    }


# --- the API --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_appends_are_limited(as_alice: Api, alice: User, settings: Any) -> None:
    limit(settings, "append")
    session = services.session_create(owner=alice, title="appends")
    first = as_alice.post(
        f"/sessions/{session.id}/events", {"expected_seq": 0, "events": [entry_append("one")]}
    )
    assert first.status_code == 201, first.content
    before = writes()
    refused = as_alice.post(
        f"/sessions/{session.id}/events", {"expected_seq": 1, "events": [entry_append("two")]}
    )
    assert_refused_by_api(refused, "append")
    assert writes() == before


@pytest.mark.django_db
def test_session_creation_is_limited(as_alice: Api, settings: Any) -> None:
    limit(settings, "session")
    assert as_alice.post("/sessions", {"title": "one"}).status_code == 201
    before = writes()
    assert_refused_by_api(as_alice.post("/sessions", {"title": "two"}), "session")
    assert writes() == before


@pytest.mark.django_db
def test_forks_are_limited(as_alice: Api, alice: User, settings: Any) -> None:
    limit(settings, "fork")
    session = services.session_create(owner=alice, title="to fork")
    entry = store.append_events(session.id, 0, [user_msg("hello")]).entry_ids[0]
    fork = as_alice.post(f"/sessions/{session.id}/fork", {"entry_id": entry})
    assert fork.status_code == 201, fork.content
    before = writes()
    refused = as_alice.post(f"/sessions/{session.id}/fork", {"entry_id": entry})
    assert_refused_by_api(refused, "fork")
    assert writes() == before


@pytest.mark.django_db
def test_searching_the_list_is_limited_and_plain_listing_is_not(
    as_alice: Api, alice: User, settings: Any
) -> None:
    limit(settings, "search")
    services.session_create(owner=alice, title="findable")
    assert [s["title"] for s in body_of(as_alice.get("/sessions?q=find"))["items"]] == ["findable"]
    assert_refused_by_api(as_alice.get("/sessions?q=find"), "search")
    for _ in range(3):  # the list itself is not a search
        assert as_alice.get("/sessions").status_code == 200


@pytest.mark.django_db
def test_token_creation_is_limited(alice: User, settings: Any) -> None:
    limit(settings, "token")
    browser = cookie_api(alice)
    assert browser.post("/tokens", {"name": "first"}).status_code == 201
    before = writes()
    assert_refused_by_api(browser.post("/tokens", {"name": "second"}), "token")
    assert writes() == before
    assert list(ApiToken.objects.filter(user=alice).values_list("name", flat=True)) == ["first"]


@pytest.mark.django_db
def test_limits_count_per_user(as_alice: Api, as_bob: Api, settings: Any) -> None:
    limit(settings, "session")
    assert as_alice.post("/sessions", {"title": "alice's"}).status_code == 201
    assert as_alice.post("/sessions", {"title": "again"}).status_code == 429
    assert as_bob.post("/sessions", {"title": "bob's"}).status_code == 201


# --- the API's small writes ------------------------------------------------------------------


@pytest.mark.django_db
def test_renames_are_limited(as_alice: Api, alice: User, settings: Any) -> None:
    limit(settings, "rename")
    session = services.session_create(owner=alice, title="first")
    assert as_alice.patch(f"/sessions/{session.id}", {"title": "second"}).status_code == 200
    before = writes()
    assert_refused_by_api(as_alice.patch(f"/sessions/{session.id}", {"title": "third"}), "rename")
    assert writes() == before
    session.refresh_from_db()
    assert session.title == "second"


@pytest.mark.django_db
def test_leaf_moves_are_limited_whether_put_or_navigated(
    as_alice: Api, alice: User, settings: Any
) -> None:
    limit(settings, "navigate")
    session = services.session_create(owner=alice, title="a tree")
    first, _second = store.append_events(
        session.id, 0, [user_msg("first"), user_msg("second")]
    ).entry_ids
    moved = as_alice.put(f"/sessions/{session.id}/leaf", {"entry_id": first})
    assert moved.status_code == 200, moved.content
    before = writes()
    assert_refused_by_api(
        as_alice.put(f"/sessions/{session.id}/leaf", {"entry_id": None}), "navigate"
    )
    refused = as_alice.post(f"/sessions/{session.id}/navigate", {"entry_id": first})
    assert_refused_by_api(refused, "navigate")
    assert writes() == before
    session.refresh_from_db()
    assert session.leaf_entry_id == first


@pytest.mark.django_db
def test_session_deletion_is_limited(as_alice: Api, alice: User, settings: Any) -> None:
    limit(settings, "delete")
    one, two = (services.session_create(owner=alice, title=t) for t in ("one", "two"))
    assert as_alice.delete(f"/sessions/{one.id}").status_code == 204
    before = writes()
    assert_refused_by_api(as_alice.delete(f"/sessions/{two.id}"), "delete")
    assert writes() == before
    assert Session.objects.filter(id=two.id).exists()


@pytest.mark.django_db
def test_token_revocation_is_limited(as_alice: Api, alice: User, settings: Any) -> None:
    limit(settings, "revoke")
    one, _ = tokens.token_create(alice, "one")
    two, two_plain = tokens.token_create(alice, "two")
    assert as_alice.delete(f"/tokens/{one.pk}").status_code == 204
    assert_refused_by_api(as_alice.delete(f"/tokens/{two.pk}"), "revoke")
    two.refresh_from_db()
    assert two.revoked_at is None
    still = Api(Client(HTTP_AUTHORIZATION=f"Bearer {two_plain}"))
    assert still.get("/me").status_code == 200


def waiting_turn(api: Api, owner: User, text: str = "write a.txt: one") -> Session:
    """A session of `owner` whose turn waits for the approval of a write."""
    session = services.session_create(owner=owner, title="writes", preset=OFFLINE_PRESET)
    assert api.post(f"/sessions/{session.id}/messages", {"text": text}).status_code == 202
    wait_for(lambda: agent.agent_pending_approvals(session))
    return session


@pytest.mark.django_db(transaction=True)
def test_approval_decisions_are_limited(
    as_alice: Api, alice: User, workspace_root: Any, settings: Any
) -> None:
    limit(settings, "approval")
    session = waiting_turn(as_alice, alice, "write a.txt: one\nwrite b.txt: two")
    base = f"/sessions/{session.id}/approvals"
    first = agent.agent_pending_approvals(session)[0].approval_id
    assert as_alice.post(f"{base}/{first}", {"outcome": "allowed"}).status_code == 204
    second = wait_for(
        lambda: [a for a in agent.agent_pending_approvals(session) if a.approval_id != first]
    )[0].approval_id
    before = writes()
    assert_refused_by_api(as_alice.post(f"{base}/{second}", {"outcome": "allowed"}), "approval")
    assert writes() == before
    assert [a.approval_id for a in agent.agent_pending_approvals(session)] == [second]


@pytest.mark.django_db(transaction=True)
def test_cancels_are_limited(
    as_alice: Api, alice: User, workspace_root: Any, settings: Any
) -> None:
    limit(settings, "cancel")
    one = waiting_turn(as_alice, alice)
    assert as_alice.post(f"/sessions/{one.id}/cancel").status_code == 202
    wait_idle(one)
    two = waiting_turn(as_alice, alice)
    before = writes()
    assert_refused_by_api(as_alice.post(f"/sessions/{two.id}/cancel"), "cancel")
    assert writes() == before
    assert agent.agent_turn_status(two) == "running"


# --- the API's model calls: compaction and summaries -----------------------------------------


@pytest.fixture
def small_context(monkeypatch: pytest.MonkeyPatch) -> str:
    """A server preset (the offline model) that keeps so little that a few messages compact."""
    presets = {"small": {"provider": "offline", "keep_recent_tokens": 10}}
    monkeypatch.setenv("STRAND_PRESETS", json.dumps(presets))
    return "small"


def compactable(owner: User, preset: str, title: str) -> Session:
    """A session with enough on its path for the offline model to compact or summarize."""
    session = services.session_create(owner=owner, title=title, preset=preset)
    events = []
    for i in range(3):
        events += [
            message("user", f"question {i} " * 20),
            message("assistant", f"answer {i} " * 20),
        ]
    store.append_events(session.id, session.last_seq, events)
    session.refresh_from_db()
    return session


@pytest.mark.django_db(transaction=True)
def test_compaction_is_limited(
    as_alice: Api, alice: User, small_context: str, settings: Any
) -> None:
    limit(settings, "compact")
    one, two = (compactable(alice, small_context, t) for t in ("one", "two"))
    done = as_alice.post(f"/sessions/{one.id}/compact", {})
    assert done.status_code == 200, done.content
    assert store.entries_by_id(one.id, [body_of(done)["entry_id"]])[0].type == "compaction"
    before = writes()
    assert_refused_by_api(as_alice.post(f"/sessions/{two.id}/compact", {}), "compact")
    assert writes() == before


@pytest.mark.django_db(transaction=True)
def test_navigating_with_a_summary_is_limited_and_without_one_is_not(
    as_alice: Api, alice: User, small_context: str, settings: Any
) -> None:
    limit(settings, "summary")
    one, two = (compactable(alice, small_context, t) for t in ("one", "two"))
    root = store.entries_of(one.id)[1].id
    done = as_alice.post(f"/sessions/{one.id}/navigate", {"entry_id": root, "summarize": True})
    assert done.status_code == 200, done.content
    assert body_of(done)["summary_entry_id"]
    before = writes()
    target = store.entries_of(two.id)[1].id
    refused = as_alice.post(f"/sessions/{two.id}/navigate", {"entry_id": target, "summarize": True})
    assert_refused_by_api(refused, "summary")
    assert writes() == before
    two.refresh_from_db()
    assert two.leaf_entry_id == store.entries_of(two.id)[-1].id  # the leaf did not move
    plain = as_alice.post(f"/sessions/{two.id}/navigate", {"entry_id": target})
    assert plain.status_code == 200  # moving without a summary calls no model


# --- the pages --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_new_session_form_is_limited(alice: User, settings: Any) -> None:
    limit(settings, "session")
    browser = client_for(alice)
    assert browser.post(reverse("session-new"), {"title": "one"}).status_code == 302
    before = writes()
    assert_refused_page(browser.post(reverse("session-new"), {"title": "two"}), "new sessions")
    assert writes() == before


@pytest.mark.django_db
def test_the_fork_form_is_limited_also_for_staff(alice: User, carol: User, settings: Any) -> None:
    limit(settings, "fork")
    session = conversation(alice, "Alice's")
    entry = store.entries_of(session.id)[0].id
    staff = client_for(carol)
    url = reverse("session-fork", args=[session.id])
    assert staff.post(url, {"entry_id": entry}).status_code == 302
    before = writes()
    assert_refused_page(staff.post(url, {"entry_id": entry}), "forks")
    assert writes() == before


@pytest.mark.django_db
def test_searching_the_list_page_is_limited(alice: User, settings: Any) -> None:
    limit(settings, "search")
    conversation(alice, "Parser work", ("How do we tokenize?", "With a lexer."))
    browser = client_for(alice)
    assert "Parser work" in browser.get("/", {"q": "lexer"}).content.decode()
    assert_refused_page(browser.get("/", {"q": "lexer"}), "searches")
    assert browser.get("/").status_code == 200  # the list without a search still opens


@pytest.mark.django_db
def test_an_htmx_request_refused_gets_the_message_in_the_flash_area(
    alice: User, settings: Any
) -> None:
    limit(settings, "search")
    browser = client_for(alice)
    htmx = {"HX-Request": "true", "HX-Target": "session-rows"}
    assert browser.get("/", {"q": "x"}, headers=htmx).status_code == 200
    refused = browser.get("/", {"q": "x"}, headers=htmx)
    assert_refused_page(refused, "searches")
    assert refused["HX-Retarget"] == "#flash" and refused["HX-Reswap"] == "outerHTML"
    assert refused.content.decode().strip().startswith('<div id="flash"')


@pytest.mark.django_db
def test_the_import_form_answers_429_when_limited(alice: User, settings: Any) -> None:
    limit(settings, "import")
    browser = client_for(alice)

    def upload() -> Any:
        file = io.BytesIO(demo.PI_DEMO_FILE.read_bytes())
        file.name = "again.jsonl"
        return browser.post(reverse("session-import"), {"file": file})

    assert upload().status_code == 302
    before = writes()
    assert_refused_page(upload(), "imports")
    assert writes() == before


@pytest.mark.django_db(transaction=True)
def test_the_compact_and_summary_forms_are_limited(
    alice: User, small_context: str, settings: Any
) -> None:
    settings.STRAND_RATE_LIMITS = {"compact": ONE_AN_HOUR, "summary": ONE_AN_HOUR}
    one, two = (compactable(alice, small_context, t) for t in ("one", "two"))
    browser = client_for(alice)
    compact = reverse("session-compact", args=[one.id])
    assert browser.post(compact).status_code == 302
    assert Entry.objects.filter(session=one, type="compaction").exists()
    before = writes()
    assert_refused_page(browser.post(reverse("session-compact", args=[two.id])), "compactions")
    assert writes() == before

    summary = reverse("session-leaf-summary", args=[one.id])
    start = store.entries_of(one.id)[1].id
    assert browser.post(summary, {"entry_id": start}).status_code == 302
    assert Entry.objects.filter(session=one, type="branch_summary").exists()
    before = writes()
    target = store.entries_of(two.id)[1].id
    refused = browser.post(reverse("session-leaf-summary", args=[two.id]), {"entry_id": target})
    assert_refused_page(refused, "branch summaries")
    assert writes() == before


@pytest.mark.django_db(transaction=True)
def test_a_refused_message_leaves_the_composer_and_starts_no_turn(
    alice: User, settings: Any
) -> None:
    settings.STRAND_RATE_LIMITS = {"message": ONE_AN_HOUR}
    session = services.session_create(owner=alice, title="talk")
    browser = client_for(alice)
    url = reverse("session-send", args=[session.id])
    htmx = {"HX-Request": "true"}
    assert browser.post(url, {"text": "hello"}, headers=htmx).status_code == 200
    wait_idle(session)
    before = writes()
    refused = browser.post(url, {"text": "again"}, headers=htmx)
    assert_refused_page(refused, "messages")
    assert refused["HX-Retarget"] == "#flash"  # the page, and the typed text, stay
    assert writes() == before


# --- the pages' small writes ---------------------------------------------------------------------


HTMX = {"HX-Request": "true"}


def assert_refused_in_flash(response: Any, words: str) -> None:
    """An htmx form refused: the flash area says why, the page stays as it was."""
    assert_refused_page(response, words)
    assert response["HX-Retarget"] == "#flash"


@pytest.mark.django_db
def test_the_rename_form_is_limited(alice: User, settings: Any) -> None:
    limit(settings, "rename")
    session = conversation(alice, "first")
    browser = client_for(alice)
    url = reverse("session-rename", args=[session.id])
    assert browser.post(url, {"title": "second"}, headers=HTMX).status_code == 200
    before = writes()
    assert_refused_in_flash(browser.post(url, {"title": "third"}, headers=HTMX), "renames")
    assert writes() == before
    session.refresh_from_db()
    assert session.title == "second"


@pytest.mark.django_db
def test_clicks_in_the_tree_are_limited(alice: User, settings: Any) -> None:
    limit(settings, "navigate")
    session = conversation(alice, "a tree", ("one", "two"), ("three", "four"))
    first = store.entries_of(session.id)[0].id
    browser = client_for(alice)
    url = reverse("session-leaf", args=[session.id])
    assert browser.post(url, {"entry_id": first}, headers=HTMX).status_code == 200
    before = writes()
    refused = browser.post(url, {"entry_id": store.entries_of(session.id)[2].id}, headers=HTMX)
    assert_refused_in_flash(refused, "moves in the tree")
    assert writes() == before
    session.refresh_from_db()
    assert session.leaf_entry_id == first


@pytest.mark.django_db
def test_the_label_form_is_limited(alice: User, settings: Any) -> None:
    limit(settings, "label")
    session = conversation(alice, "labelled")
    entry = store.entries_of(session.id)[0].id
    browser = client_for(alice)
    url = reverse("session-label", args=[session.id])
    assert browser.post(url, {"entry_id": entry, "label": "start"}).status_code == 302
    assert Entry.objects.filter(session=session, type="label").count() == 1
    before = writes()
    assert_refused_page(browser.post(url, {"entry_id": entry, "label": "again"}), "labels")
    assert writes() == before


@pytest.mark.django_db
def test_the_delete_form_is_limited(alice: User, settings: Any) -> None:
    limit(settings, "delete")
    one, two = conversation(alice, "one"), conversation(alice, "two")
    browser = client_for(alice)
    assert browser.post(reverse("session-delete", args=[one.id])).status_code == 302
    before = writes()
    refused = browser.post(reverse("session-delete", args=[two.id]))
    assert_refused_page(refused, "deletions")
    assert writes() == before
    # The confirmation page is a read, and still opens.
    assert browser.get(reverse("session-delete", args=[two.id])).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_the_approval_and_cancel_forms_are_limited(
    alice: User, workspace_root: Any, settings: Any
) -> None:
    settings.STRAND_RATE_LIMITS = {"approval": ONE_AN_HOUR, "cancel": ONE_AN_HOUR}
    session = waiting_turn(token_api(alice), alice, "write a.txt: one\nwrite b.txt: two")
    browser = client_for(alice)
    first = agent.agent_pending_approvals(session)[0].approval_id
    decide = reverse("session-approval", args=[session.id, first])
    assert browser.post(decide, {"outcome": "allowed"}).status_code == 302
    second = wait_for(
        lambda: [a for a in agent.agent_pending_approvals(session) if a.approval_id != first]
    )[0].approval_id
    before = writes()
    refused = browser.post(
        reverse("session-approval", args=[session.id, second]), {"outcome": "allowed"}
    )
    assert_refused_page(refused, "approval decisions")
    assert writes() == before
    cancel = reverse("session-cancel", args=[session.id])
    assert browser.post(cancel).status_code == 302
    wait_idle(session)
    other = waiting_turn(token_api(alice), alice)
    before = writes()
    assert_refused_page(browser.post(reverse("session-cancel", args=[other.id])), "cancels")
    assert writes() == before
    assert agent.agent_turn_status(other) == "running"


@pytest.mark.django_db(transaction=True)
def test_the_retry_form_answers_429_when_limited(alice: User, settings: Any) -> None:
    session = services.session_create(owner=alice, title="fails", preset=OFFLINE_PRESET)
    agent.agent_send_message(session.id, "fault 401")
    wait_idle(session)
    failed = Event.objects.get(session=session, type="assistant/message").entry_id
    limit(settings, "message")
    browser = client_for(alice)
    url = reverse("session-retry", args=[session.id])
    assert browser.post(url, {"entry_id": failed}).status_code == 302
    wait_idle(session)
    before = writes()
    assert_refused_page(browser.post(url, {"entry_id": failed}), "messages")
    assert writes() == before


# --- sign-in ----------------------------------------------------------------------------------


def sign_in(client: Client, password: str, address: str = "10.0.0.1") -> Any:
    return client.post(
        reverse("login"), {"username": "alice", "password": password}, REMOTE_ADDR=address
    )


def signed_in(client: Client) -> bool:
    return client.get("/").status_code == 200


@pytest.mark.django_db
def test_sign_in_pauses_after_repeated_failures(alice: User, settings: Any) -> None:
    failures = settings.AXES_FAILURE_LIMIT
    browser = Client()
    for _ in range(failures - 1):
        answer = sign_in(browser, "wrong")
        assert answer.status_code == 200 and "did not match" in answer.content.decode()
    paused = sign_in(browser, "wrong")
    assert paused.status_code == 429
    assert int(paused["Retry-After"]) == int(settings.AXES_COOLOFF_TIME.total_seconds())
    assert "Sign-in paused" in paused.content.decode()
    # The right password does not get through while paused.
    assert sign_in(browser, "alice-pass-1234").status_code == 429
    assert not signed_in(browser)
    # Another address is not paused: a stranger cannot lock Alice out of her account.
    elsewhere = Client()
    assert sign_in(elsewhere, "alice-pass-1234", address="10.0.0.2").status_code == 302
    assert signed_in(elsewhere)


@pytest.mark.django_db
def test_a_successful_sign_in_clears_the_failures(alice: User, settings: Any) -> None:
    browser = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        sign_in(browser, "wrong")
    assert sign_in(browser, "alice-pass-1234").status_code == 302
    browser.logout()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert sign_in(browser, "wrong").status_code == 200
    assert sign_in(browser, "alice-pass-1234").status_code == 302


# --- turns and steps belong to the runtime ---------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("event", "error"),
    [
        (entry_append("forged", turn=7), "not_allowed"),
        (entry_append("forged", step=2), "not_allowed"),
        ({**entry_append("forged"), "turn": 7, "step": 2}, "validation_error"),
    ],
    ids=["data.turn", "data.step", "top-level"],
)
def test_an_appended_event_cannot_set_turn_or_step(
    as_alice: Api, alice: User, event: dict[str, Any], error: str
) -> None:
    session = services.session_create(owner=alice, title="honest trace")
    before = writes()
    refused = as_alice.post(
        f"/sessions/{session.id}/events", {"expected_seq": 0, "events": [event]}
    )
    assert refused.status_code == 422, refused.content
    body = body_of(refused)
    assert body["error"] == error
    assert "cannot set turn" in body["detail"] or "cannot set step" in body["detail"]
    assert writes() == before
    assert not Event.objects.filter(session=session, turn__isnull=False).exists()
    # The same event without the numbering is welcome.
    accepted = as_alice.post(
        f"/sessions/{session.id}/events", {"expected_seq": 0, "events": [entry_append("fine")]}
    )
    assert accepted.status_code == 201
    logged = body_of(as_alice.get(f"/sessions/{session.id}/events"))["events"]
    assert [(e["type"], e["turn"], e["step"]) for e in logged][-1] == ("user/message", None, None)


@pytest.mark.django_db
def test_a_forged_forwarded_address_does_not_escape_the_pause(alice: User, settings: Any) -> None:
    # No trusted proxy: X-Forwarded-For is the client's own writing and changes nothing.
    browser = Client()
    for n in range(settings.AXES_FAILURE_LIMIT):
        browser.post(
            reverse("login"),
            {"username": "alice", "password": "wrong"},
            REMOTE_ADDR="10.0.0.9",
            HTTP_X_FORWARDED_FOR=f"192.0.2.{n}",
        )
    answer = browser.post(
        reverse("login"),
        {"username": "alice", "password": "alice-pass-1234"},
        REMOTE_ADDR="10.0.0.9",
        HTTP_X_FORWARDED_FOR="192.0.2.200",
    )
    assert answer.status_code == 429


@pytest.mark.django_db
def test_behind_a_trusted_proxy_the_pause_holds_for_the_forwarded_address(
    alice: User, settings: Any
) -> None:
    settings.STRAND_TRUSTED_PROXIES = 1
    proxy = "10.0.0.1"  # every request arrives from the proxy

    def attempt(password: str, client_seen_by_proxy: str, forged: str = "") -> Any:
        chain = f"{forged}, {client_seen_by_proxy}" if forged else client_seen_by_proxy
        return Client().post(
            reverse("login"),
            {"username": "alice", "password": password},
            REMOTE_ADDR=proxy,
            HTTP_X_FORWARDED_FOR=chain,
        )

    for n in range(settings.AXES_FAILURE_LIMIT):
        # The attacker forges a different left-most address each time; the proxy appends
        # the real one, which is what counts.
        attempt("wrong", "198.51.100.7", forged=f"192.0.2.{n}")
    assert attempt("alice-pass-1234", "198.51.100.7").status_code == 429
    # Alice, from her own address through the same proxy, is not locked out.
    assert attempt("alice-pass-1234", "203.0.113.5").status_code == 302
