"""A URL or a head over Twisted's 16 KiB, through daphne: answered 414 or 431 with a body
that says what was too long (JSON under /api/), never an empty reply, and the server goes on
serving. Just under the limit, the request reaches the application as any other."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.security.served import TIMEOUT_S, served

LIMIT = 16 * 1024


@pytest.fixture(scope="module")
def base(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    with django_db_blocker.unblock(), served() as url:
        yield url


def test_a_long_api_url_is_answered_414_in_json(base: str) -> None:
    answer = requests.get(f"{base}/api/sessions?q={'a' * (LIMIT + 100)}", timeout=TIMEOUT_S)
    assert answer.status_code == 414
    assert answer.reason == "URI Too Long"
    body = answer.json()
    assert body["error"] == "uri_too_long"
    assert str(LIMIT) in body["detail"]


def test_a_long_page_url_is_answered_414_in_a_page(base: str) -> None:
    answer = requests.get(f"{base}/sessions/?x={'b' * (LIMIT * 4)}", timeout=TIMEOUT_S)
    assert answer.status_code == 414
    assert answer.headers["Content-Type"].startswith("text/html")
    assert "URI Too Long" in answer.text


def test_one_long_header_is_answered_431(base: str) -> None:
    answer = requests.get(
        f"{base}/api/me", headers={"X-Padding": "c" * (LIMIT + 1)}, timeout=TIMEOUT_S
    )
    assert answer.status_code == 431
    assert answer.json()["error"] == "headers_too_large"


def test_many_headers_past_the_total_are_answered_431(base: str) -> None:
    headers = {f"X-Pad-{n}": "d" * 500 for n in range(40)}  # 20 KB in lines of 500 bytes
    answer = requests.get(f"{base}/api/me", headers=headers, timeout=TIMEOUT_S)
    assert answer.status_code == 431
    assert "in all" in answer.json()["detail"]


def test_under_the_limit_the_application_answers_and_the_server_goes_on(base: str) -> None:
    for _ in range(3):
        requests.get(f"{base}/api/sessions?q={'e' * (LIMIT * 2)}", timeout=TIMEOUT_S)
    answer = requests.get(f"{base}/api/me?pad={'f' * (LIMIT - 2000)}", timeout=TIMEOUT_S)
    assert answer.status_code == 401  # Django's answer: no token
    assert answer.json()["error"]
