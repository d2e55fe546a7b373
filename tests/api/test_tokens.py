"""Personal API tokens: made and shown once, stored hashed, revoked for good."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from sessions_app.models import ApiToken
from sessions_app.services import tokens
from tests.api.conftest import Api, body_of, cookie_api

pytestmark = pytest.mark.django_db


def bearer(token: str) -> Api:
    return Api(Client(HTTP_AUTHORIZATION=f"Bearer {token}"))


def test_a_token_is_stored_only_as_a_digest(alice: Any) -> None:
    row, plaintext = tokens.token_create(alice, "laptop")
    assert plaintext.startswith("strand_") and len(plaintext) > 40
    stored = ApiToken.objects.filter(pk=row.pk).values().get()
    assert plaintext not in {str(v) for v in stored.values()}
    assert stored["digest"] == hashlib.sha256(plaintext.encode()).hexdigest()
    assert plaintext.startswith(stored["prefix"]) and len(stored["prefix"]) < 20


def test_a_token_signs_in_and_records_its_use(alice: Any) -> None:
    row, plaintext = tokens.token_create(alice, "ci")
    me = body_of(bearer(plaintext).get("/me"))
    assert me == {"username": "alice", "is_staff": False, "auth": "token"}
    row.refresh_from_db()
    assert row.last_used_at is not None


def test_a_revoked_token_is_refused(alice: Any) -> None:
    row, plaintext = tokens.token_create(alice, "old")
    tokens.token_revoke(alice, row.pk)
    response = bearer(plaintext).get("/sessions")
    assert response.status_code == 401
    assert body_of(response)["error"] == "unauthorized"
    tokens.token_revoke(alice, row.pk)  # twice is harmless
    assert tokens.tokens_of(alice).get().revoked_at is not None


def test_only_the_owner_revokes_a_token(alice: Any, bob: Any) -> None:
    row, plaintext = tokens.token_create(alice, "mine")
    with pytest.raises(tokens.TokenNotFound):
        tokens.token_revoke(bob, row.pk)
    assert bearer(plaintext).get("/me").status_code == 200


@pytest.mark.parametrize(
    "header",
    [
        "Bearer nonsense",
        "Bearer strand_" + "x" * 43,
        "Bearer strand_" + "x" * 400,
        "Bearer ",
        "bearer strand_",
    ],
)
def test_unknown_tokens_are_refused(header: str, alice: Any) -> None:
    response = Client(HTTP_AUTHORIZATION=header).get("/api/me")
    assert response.status_code == 401


def test_another_scheme_is_not_a_sign_in(alice: Any) -> None:
    assert Client(HTTP_AUTHORIZATION="Basic YWxpY2U6eA==").get("/api/me").status_code == 401


def test_tokens_through_the_api(alice: Any) -> None:
    browser = cookie_api(alice)
    made = browser.post("/tokens", {"name": "script"})
    assert made.status_code == 201
    token = body_of(made)["token"]
    listed = body_of(browser.get("/tokens"))
    assert [t["name"] for t in listed] == ["script"]
    assert "token" not in listed[0] and "digest" not in listed[0]
    program = bearer(token)
    assert program.get("/tokens").status_code == 200
    # A token cannot make more tokens, but it can revoke itself.
    assert program.post("/tokens", {"name": "more"}).status_code == 403
    assert program.delete(f"/tokens/{listed[0]['id']}").status_code == 204
    assert program.get("/tokens").status_code == 401
    assert browser.post("/tokens", {"name": ""}).status_code == 422
    assert browser.post("/tokens", {"name": "   "}).status_code == 422


def test_create_token_command_prints_a_working_token(alice: Any, capsys: Any) -> None:
    call_command("create_token", "alice", "--name", "deploy")
    plaintext = capsys.readouterr().out.strip()
    assert bearer(plaintext).get("/me").status_code == 200
    assert tokens.tokens_of(alice).get().name == "deploy"


def test_create_token_command_refuses_unknown_and_disabled_users(alice: Any) -> None:
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("create_token", "ghost")
    alice.is_active = False
    alice.save()
    with pytest.raises(CommandError, match="disabled"):
        call_command("create_token", "alice")
    assert not ApiToken.objects.exists()
