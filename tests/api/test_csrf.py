"""Cookie-authenticated writes need the CSRF token; token-authenticated ones do not."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from sessions_app import services
from tests.api.conftest import CSRF_SECRET, Api, body_of, cookie_api, token_api

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(alice: Any) -> Api:
    return cookie_api(alice)


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "/sessions", {"title": "x"}),
        ("PATCH", "/sessions/{sid}", {"title": "x"}),
        ("DELETE", "/sessions/{sid}", None),
        ("POST", "/sessions/{sid}/messages", {"text": "x"}),
        ("POST", "/tokens", {"name": "x"}),
    ],
)
def test_cookie_writes_without_the_csrf_token_are_refused(
    signed_in: Api, alice: Any, method: str, path: str, body: Any
) -> None:
    session = services.session_create(owner=alice, title="kept")
    url = path.format(sid=session.id)
    headers: list[dict[str, Any]] = [{}, {"HTTP_X_CSRFTOKEN": "B" * 32}]
    for header in headers:
        response = signed_in.client.generic(
            method,
            "/api" + url,
            "" if body is None else json.dumps(body),
            content_type="application/json",
            **header,
        )
        assert response.status_code == 403, header
        assert body_of(response)["error"] == "csrf_failed"
    session.refresh_from_db()
    assert session.title == "kept"


def test_cookie_writes_with_the_csrf_token_pass(signed_in: Api) -> None:
    assert signed_in.post("/sessions", {"title": "x"}).status_code == 201


def test_cookie_reads_need_no_csrf_token(signed_in: Api) -> None:
    assert signed_in.client.get("/api/sessions").status_code == 200


def test_a_csrf_cookie_alone_is_not_enough(alice: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    client.cookies["csrftoken"] = CSRF_SECRET
    response = client.post("/api/sessions", "{}", content_type="application/json")
    assert response.status_code == 403


def test_token_writes_need_no_csrf_token(alice: Any) -> None:
    api = token_api(alice)
    defaults: dict[str, Any] = dict(api.client.defaults)
    api.client = Client(enforce_csrf_checks=True, **defaults)
    assert api.post("/sessions", {"title": "x"}).status_code == 201


def test_anonymous_writes_are_unauthorized_not_csrf_failures() -> None:
    response = Client(enforce_csrf_checks=True).post(
        "/api/sessions", "{}", content_type="application/json"
    )
    assert response.status_code == 401
