"""The access matrix: every endpoint × owner, another user, staff, anonymous, revoked token.

Run twice: with personal tokens, and with signed-in browser sessions (cookie + CSRF token).
For each persona the exact status is asserted, and for those who may not see Alice's
session, that nothing of it leaks: the answer for her session is the answer for a session
that does not exist, byte for byte once the id is swapped, and holds none of her content.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from sessions_app import agent, services, store
from sessions_app.models import Session
from sessions_app.services import tokens
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

pytestmark = pytest.mark.django_db(transaction=True)

PI_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "pi" / "cases" / "basic_linear.jsonl"
SECRETS = ("Alice's secret plans", "secret-marker-7731", "alice")


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    body: Any = None
    write: bool = False  # changes the session: refused to staff
    owner: int = 200  # the owner's status
    settle: bool = False  # starts agent work: wait for it before the next call

    @property
    def name(self) -> str:
        return f"{self.method} {self.path}"


APPEND = {
    "expected_seq": "{last_seq}",
    "events": [
        {
            "type": "user/message",
            "data": {
                "entry": {"type": "message", "message": {"role": "user", "content": "appended"}}
            },
        }
    ],
}

# Every session endpoint, in the order the owner calls them: reads first (while a turn waits
# for an approval), then writes, the delete last.
SESSION_ENDPOINTS = [
    Endpoint("GET", "/sessions/{sid}"),
    Endpoint("GET", "/sessions/{sid}/events"),
    Endpoint("GET", "/sessions/{sid}/entries"),
    Endpoint("GET", "/sessions/{sid}/tree"),
    Endpoint("GET", "/sessions/{sid}/leaf"),
    Endpoint("GET", "/sessions/{sid}/context"),
    Endpoint("GET", "/sessions/{sid}/context?format=provider&leaf={entry}"),
    Endpoint("GET", "/sessions/{sid}/views/chat"),
    Endpoint("GET", "/sessions/{sid}/views/trace"),
    Endpoint("GET", "/sessions/{sid}/compare?a={entry}&b={entry}"),
    Endpoint("GET", "/sessions/{sid}/views/requests/{seq}"),
    Endpoint("GET", "/sessions/{sid}/approvals"),
    Endpoint("GET", "/sessions/{sid}/export"),
    Endpoint("GET", "/sessions/{sid}/export.otlp.json"),
    Endpoint("GET", "/sessions/{sid}/files?entry={entry}"),
    # A path the workspace does not hold: the owner and staff are told so.
    Endpoint("GET", "/sessions/{sid}/files/no/such.txt", owner=404),
    Endpoint("GET", "/sessions/{sid}/workspace.tar?entry={entry}"),
    # Share links: the owner's alone (staff revoke them in the admin).
    Endpoint("GET", "/sessions/{sid}/shares", None, True, 200),
    Endpoint("POST", "/sessions/{sid}/shares", {}, True, 201),
    Endpoint(
        "POST", "/sessions/{sid}/approvals/{approval}", {"outcome": "allowed"}, True, 204, True
    ),
    # Once the turn is over (an upload waits for no turn).
    Endpoint("POST", "/sessions/{sid}/files", "tar", True, 200),
    Endpoint("POST", "/sessions/{sid}/messages", {"text": "hello"}, True, 202, True),
    Endpoint("POST", "/sessions/{sid}/steer", {"text": "and steer"}, True, 202, True),
    Endpoint("POST", "/sessions/{sid}/follow-up", {"text": "then follow"}, True, 202, True),
    Endpoint("POST", "/sessions/{sid}/cancel", {}, True, 202),
    Endpoint("POST", "/sessions/{sid}/compact", {}, True, 200),
    Endpoint("PATCH", "/sessions/{sid}", {"title": "Renamed"}, True, 200),
    Endpoint("POST", "/sessions/{sid}/events", APPEND, True, 201),
    Endpoint("PUT", "/sessions/{sid}/leaf", {"entry_id": "{entry}"}, True, 200),
    Endpoint("POST", "/sessions/{sid}/navigate", {"entry_id": "{entry}"}, True, 200),
    Endpoint("POST", "/sessions/{sid}/fork", {"entry_id": "{entry}"}, True, 201),
    # The leaf is a reply that did not fail: the owner is told there is nothing to retry.
    Endpoint("POST", "/sessions/{sid}/retry", {}, True, 422),
    # The latest request (an answer that asks for no tool), replayed with the same preset.
    Endpoint("POST", "/sessions/{sid}/requests/{last_request}/replay", {}, True, 202, True),
    Endpoint("DELETE", "/sessions/{sid}", None, True, 204),
]

# Endpoints that need no session: (endpoint, status for any signed-in persona).
ACCOUNT_ENDPOINTS = [
    Endpoint("GET", "/me"),
    Endpoint("GET", "/sessions"),
    Endpoint("GET", "/sessions?owner=alice&q=secret"),
    Endpoint("POST", "/sessions", {"title": "mine"}, owner=201),
    Endpoint("POST", "/sessions/import", "upload", owner=201),
    Endpoint("GET", "/tokens"),
    # Across sessions, each persona's own (tests/api/test_search.py, test_usage.py).
    Endpoint("GET", "/search?q=secret"),
    Endpoint("GET", "/usage"),
]


def test_every_api_path_is_in_the_matrix() -> None:
    from sessions_app.api import api

    documented = {
        f"{method} {path.removeprefix('/api')}"
        for path, item in api.get_openapi_schema()["paths"].items()
        for method in item
    }
    covered = {
        f"{e.method.lower()} {e.path.split('?')[0]}".replace("{sid}", "{session_id}")
        .replace("{approval}", "{approval_id}")
        .replace("{last_request}", "{seq}")
        .replace("/files/no/such.txt", "/files/{file_path}")
        for e in SESSION_ENDPOINTS + ACCOUNT_ENDPOINTS
    } | {
        "post /tokens",
        "delete /tokens/{token_id}",
        # tests/api/test_shares.py: the owner's alone
        "delete /sessions/{session_id}/shares/{share_id}",
    }
    assert {d.lower() for d in documented} == covered


@dataclass
class World:
    session: Session
    entry: str
    seq: int  # a request/sent
    approval: str
    alice_token_id: int

    def last_request(self) -> int:
        """The seq of the session's latest model request (a `request/sent`)."""
        events = store.events_after(self.session.id, -1, 10_000)
        return [e.seq for e in events if e.type == "request/sent"][-1]

    def fill(self, value: Any, sid: uuid.UUID | None = None) -> Any:
        if isinstance(value, str):
            if value == "{last_seq}":
                self.session.refresh_from_db(fields=["last_seq"])
                return self.session.last_seq
            return value.format(
                sid=sid or self.session.id,
                entry=self.entry,
                seq=self.seq,
                approval=self.approval,
                last_request=self.last_request() if "{last_request}" in value else "",
            )
        if isinstance(value, dict):
            return {k: self.fill(v, sid) for k, v in value.items()}
        if isinstance(value, list):
            return [self.fill(v, sid) for v in value]
        return value


def call(api: Api, endpoint: Endpoint, world: World, sid: uuid.UUID | None = None) -> Any:
    path = world.fill(endpoint.path, sid)
    if endpoint.body == "upload":
        upload = SimpleUploadedFile("s.jsonl", PI_FILE.read_bytes())
        extra: dict[str, Any] = {"HTTP_X_CSRFTOKEN": "A" * 32} if api.csrf else {}
        return api.client.post("/api" + path, {"file": upload}, **extra)
    if endpoint.body == "tar":
        packed = io.BytesIO()
        with tarfile.open(fileobj=packed, mode="w") as archive:
            member = tarfile.TarInfo("uploaded.txt")
            member.size = 2
            archive.addfile(member, io.BytesIO(b"up"))
        headers: dict[str, Any] = {"HTTP_X_CSRFTOKEN": "A" * 32} if api.csrf else {}
        return api.client.generic(
            "POST", "/api" + path, packed.getvalue(), content_type="application/x-tar", **headers
        )
    body = world.fill(endpoint.body, sid) if endpoint.body is not None else None
    if body is None and endpoint.method in ("POST", "PUT", "PATCH"):
        body = {}
    return api.call(endpoint.method, path, body)


@pytest.fixture
def world(alice: Any, workspace: Path) -> World:
    """Alice's session, with a turn that waits for her approval of a file write."""
    session = services.session_create(
        owner=alice, title="Alice's secret plans", cwd=str(workspace), preset=OFFLINE_PRESET
    )
    entry = store.append_events(session.id, 0, [user_msg("secret-marker-7731")]).entry_ids[0]
    agent.agent_send_message(session, "write notes.txt: secret-marker-7731 changed")
    pending = wait_for(lambda: agent.agent_pending_approvals(session))
    sent = [e for e in store.events_after(session.id, -1, 1000) if e.type == "request/sent"]
    spare, _ = tokens.token_create(alice, "spare")
    return World(session, entry, sent[0].seq, pending[0].approval_id, spare.pk)


def _personas(mode: str, alice: Any, bob: Any, carol: Any) -> dict[str, Api]:
    from django.test import Client

    make = token_api if mode == "token" else cookie_api
    row, plaintext = tokens.token_create(alice, "to revoke")
    tokens.token_revoke(alice, row.pk)
    revoked = Api(Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}"))
    return {
        "alice": make(alice),
        "bob": make(bob),
        "carol": make(carol),
        "anonymous": Api(Client(enforce_csrf_checks=True)),
        "revoked": revoked,
    }


def _expected(persona: str, endpoint: Endpoint) -> int:
    if persona in ("anonymous", "revoked"):
        return 401
    if persona == "bob":
        return 404
    assert persona == "carol"
    return 403 if endpoint.write else (endpoint.owner if endpoint.owner == 404 else 200)


@pytest.mark.parametrize("mode", ["token", "cookie"])
def test_access_matrix(mode: str, world: World, alice: Any, bob: Any, carol: Any) -> None:
    personas = _personas(mode, alice, bob, carol)
    failures: list[str] = []

    def check(persona: str, endpoint: Endpoint, response: Any, expected: int) -> None:
        if response.status_code != expected:
            failures.append(
                f"{persona} {endpoint.name}: {response.status_code} != {expected} "
                f"{response.content[:200]!r}"
            )
        if response.status_code >= 400:
            error = body_of(response)
            if set(error) - {"error", "detail", "errors", "current_seq", "retry_after"} or not (
                isinstance(error.get("error"), str) and isinstance(error.get("detail"), str)
            ):
                failures.append(f"{persona} {endpoint.name}: not an error body: {error}")

    # Everyone but the owner, over every session endpoint: nothing changes, nothing leaks.
    for persona in ("anonymous", "revoked", "bob", "carol"):
        api = personas[persona]
        for endpoint in SESSION_ENDPOINTS:
            response = call(api, endpoint, world)
            check(persona, endpoint, response, _expected(persona, endpoint))
            if persona == "carol":
                continue
            text = response.content.decode()
            for secret in SECRETS:
                if secret in text:
                    failures.append(f"{persona} {endpoint.name}: leaks {secret!r}")
            # Her session is answered exactly like one that does not exist.
            ghost = uuid.uuid4()
            other = call(api, endpoint, world, sid=ghost)
            swapped = other.content.decode().replace(str(ghost), str(world.session.id))
            if (other.status_code, swapped) != (response.status_code, text):
                failures.append(f"{persona} {endpoint.name}: differs from an unknown session")

    # Endpoints without a session.
    for persona, api in personas.items():
        for endpoint in ACCOUNT_ENDPOINTS:
            signed_in = persona not in ("anonymous", "revoked")
            response = call(api, endpoint, world)
            check(persona, endpoint, response, endpoint.owner if signed_in else 401)
            if persona in ("bob", "anonymous", "revoked"):
                for secret in SECRETS[:2]:
                    if secret in response.content.decode():
                        failures.append(f"{persona} {endpoint.name}: leaks {secret!r}")
        token_create = Endpoint("POST", "/tokens", {"name": "new"})
        response = call(api, token_create, world)
        # Tokens are made from a browser session only: a token cannot mint more tokens.
        expected = (
            401 if persona in ("anonymous", "revoked") else (201 if mode == "cookie" else 403)
        )
        check(persona, token_create, response, expected)
        if persona != "alice":
            revoke = Endpoint("DELETE", f"/tokens/{world.alice_token_id}")
            check(
                persona,
                revoke,
                call(api, revoke, world),
                401 if persona in ("anonymous", "revoked") else 404,
            )

    # Lists: Carol sees Alice's session, Bob does not, even when he asks for it by owner.
    listed = {
        persona: [s["id"] for s in body_of(personas[persona].get("/sessions?limit=200"))["items"]]
        for persona in ("alice", "bob", "carol")
    }
    assert str(world.session.id) in listed["alice"]
    assert str(world.session.id) in listed["carol"]
    assert str(world.session.id) not in listed["bob"]
    assert body_of(personas["bob"].get("/sessions?owner=alice"))["items"] == []

    # Nothing Bob, Carol or the others did changed Alice's session.
    assert not failures, "\n".join(failures)
    assert Session.objects.get(id=world.session.id).title == "Alice's secret plans"
    assert agent.agent_pending_approvals(world.session)

    # The owner, over every session endpoint.
    alice_api = personas["alice"]
    for endpoint in SESSION_ENDPOINTS:
        response = call(alice_api, endpoint, world)
        check("alice", endpoint, response, endpoint.owner)
        if endpoint.settle:
            wait_idle(world.session)
    revoke = Endpoint("DELETE", f"/tokens/{world.alice_token_id}")
    check("alice", revoke, call(alice_api, revoke, world), 204)
    assert not failures, "\n".join(failures)
    assert alice_api.get(f"/sessions/{world.session.id}").status_code == 404


def test_a_revoked_token_is_refused_even_with_a_signed_in_cookie(alice: Any) -> None:
    api = cookie_api(alice)
    row, plaintext = tokens.token_create(alice, "old")
    tokens.token_revoke(alice, row.pk)
    response = api.get("/me", HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    assert response.status_code == 401
    assert body_of(response)["error"] == "unauthorized"
    assert api.get("/me").status_code == 200


def test_an_inactive_account_token_is_refused(alice: Any) -> None:
    api = token_api(alice)
    alice.is_active = False
    alice.save()
    assert api.get("/me").status_code == 401


def test_staff_may_change_their_own_sessions(carol: Any) -> None:
    api = token_api(carol)
    session = services.session_create(owner=carol, title="Carol's own")
    assert api.patch(f"/sessions/{session.id}", {"title": "still mine"}).status_code == 200
    assert api.delete(f"/sessions/{session.id}").status_code == 204


def test_staff_read_request_headers_with_system_prompts_others_do_not(
    world: World, as_bob: Api, as_carol: Api
) -> None:
    """System prompts and tool schemas live in request headers; they follow the session."""
    path = f"/sessions/{world.session.id}/views/requests/{world.seq}"
    prompt = services.DEFAULT_PRESET["system_prompt"]
    seen = body_of(as_carol.get(path))
    assert seen["system_prompt"].startswith(prompt)
    assert {tool["name"] for tool in seen["tools"]} >= {"read", "write", "edit"}
    for hidden in (path, f"/sessions/{world.session.id}/events?limit=1000"):
        response = as_bob.get(hidden)
        assert response.status_code == 404
        assert prompt[:30] not in response.content.decode()
