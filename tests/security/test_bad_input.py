"""Bad input is a 4xx at every door, and nothing is written.

Postgres refuses NUL in text and in JSON, a lone surrogate has no UTF-8 form, and a JSON
`1e999` is infinity to Python. Each reached a query or `int()` and answered 500: a NUL in
`?leaf=`, `compare?a=`, `retry`'s `entry_id`, the htmx `HX-Current-URL` of a rename (the
rename applied, then the 500) and the audit filters `?model=` `?provider=`; a Pi v1 file with
`firstKeptEntryIndex: 1e999` (OverflowError). Every door below is tried through Django's
test client (real requests through the middleware, the views and Postgres): a 400/422 with a
JSON body on the API, a page saying what is wrong on the pages, exit status 1 and one line
from a command, and the session as it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
from axes.models import AccessAttempt
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from deploy import daphne
from sessions_app.models import Event, Session
from tests.api.conftest import CSRF_SECRET, Api, body_of, cookie_api, token_api
from tests.runtime.conftest import child_database_url
from tests.security.test_sockets import Browser, Server

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
NUL = "%00"
HUGE = "9" * 19  # past any seq (bigint holds 19 digits, our seqs 2**62)


def page_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def events_of(session: Session) -> list[tuple[int, str]]:
    return list(Event.objects.filter(session=session).values_list("seq", "type"))


def assert_page_refused(response: Any, *words: str) -> None:
    assert response.status_code == 400, response.content[:300]
    html = response.content.decode()
    assert "Bad request" in html
    for word in words:
        assert word in html


def assert_api_refused(response: Any, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    body = body_of(response)
    assert body["error"] and body["detail"]
    return body


# --- pages: query parameters -----------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        f"leaf={NUL}",
        f"entry=a{NUL}b",
        f"span={NUL}",
        f"view=context&request={HUGE}",
        f"view=trace&before={HUGE}",
        f"x{NUL}=1",
    ],
)
def test_a_session_page_refuses_nul_and_overflow(
    alice: Any, alice_session: Session, query: str
) -> None:
    response = page_client(alice).get(f"/sessions/{alice_session.id}/?{query}")
    assert_page_refused(response)


def test_the_compare_page_refuses_a_nul(alice: Any, alice_session: Session) -> None:
    leaf = alice_session.leaf_entry_id
    client = page_client(alice)
    assert_page_refused(client.get(f"/sessions/{alice_session.id}/compare?a={NUL}&b={leaf}"))
    assert_page_refused(client.get(f"/sessions/{alice_session.id}/compare?a={leaf}&b=x{NUL}"))


def test_the_home_search_refuses_a_nul(alice: Any) -> None:
    assert_page_refused(page_client(alice).get(f"/?q=walrus{NUL}"))


@pytest.mark.parametrize("parameter", ["model", "provider"])
def test_the_audit_filters_refuse_a_nul(carol: Any, parameter: str) -> None:
    client = page_client(carol)
    response = client.get(f"/admin/sessions_app/requestaudit/?{parameter}=x{NUL}")
    assert_page_refused(response, parameter)


@pytest.mark.parametrize(
    "path",
    [
        "?owner__id__exact=%C2%B2",  # a digit to str.isdigit, not to int()
        f"?owner__id__exact={HUGE}0",
        "%C2%B2/change/",
        f"{HUGE}0/change/",
    ],
)
def test_the_audit_ids_that_are_no_number_are_no_500(carol: Any, path: str) -> None:
    response = page_client(carol).get(f"/admin/sessions_app/requestaudit/{path}")
    assert response.status_code in (200, 302, 404), response.content[:300]


# --- pages: forms and the headers they read ----------------------------------------------------


def test_a_rename_with_a_nul_in_hx_current_url_is_not_applied(
    alice: Any, alice_session: Session
) -> None:
    before = events_of(alice_session)
    response = page_client(alice).post(
        f"/sessions/{alice_session.id}/rename",
        {"title": "Renamed"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL=f"http://testserver/sessions/{alice_session.id}/?leaf={NUL}",
    )
    assert response.status_code == 400, response.content[:300]
    alice_session.refresh_from_db()
    assert alice_session.title == "Alice's secret plans"
    assert events_of(alice_session) == before


@pytest.mark.parametrize("return_to", [f"leaf={NUL}", f"?request={HUGE}&view=context"])
def test_a_rename_with_a_bad_return_to_is_not_applied(
    alice: Any, alice_session: Session, return_to: str
) -> None:
    before = events_of(alice_session)
    response = page_client(alice).post(
        f"/sessions/{alice_session.id}/rename", {"title": "Renamed", "return_to": return_to}
    )
    assert_page_refused(response)
    alice_session.refresh_from_db()
    assert alice_session.title == "Alice's secret plans"
    assert events_of(alice_session) == before


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("rename", {"title": "a\x00b"}),
        ("retry", {"entry_id": "\x00"}),
        ("leaf", {"entry_id": "x\x00"}),
        ("label", {"entry_id": "x", "label": "\x00"}),
        ("messages", {"text": "hello\x00"}),
        ("cancel", {"return_to": "", "x\x00": "1"}),
    ],
)
def test_a_form_field_with_a_nul_is_refused_before_any_write(
    alice: Any, alice_session: Session, path: str, fields: dict[str, str]
) -> None:
    before = events_of(alice_session)
    response = page_client(alice).post(f"/sessions/{alice_session.id}/{path}", fields)
    assert_page_refused(response, "NUL")
    assert events_of(alice_session) == before


def test_a_header_with_a_nul_is_refused(alice: Any, alice_session: Session) -> None:
    response = page_client(alice).get(
        f"/sessions/{alice_session.id}/", HTTP_USER_AGENT="curl\x00evil"
    )
    assert_page_refused(response)


def test_a_sign_in_with_a_nul_is_refused_and_not_recorded(alice: Any) -> None:
    # django-axes records a failed sign-in with its user name and user agent: a NUL in
    # either reached Postgres.
    response = Client().post("/accounts/login/", {"username": "alice\x00", "password": "wrong"})
    assert response.status_code == 400
    assert not AccessAttempt.objects.exists()


# --- Pi imports --------------------------------------------------------------------------


def v1_file(first_kept: str) -> bytes:
    lines = [
        '{"type":"session","id":"s1","timestamp":"2025-01-01T00:00:00Z","cwd":"/w"}',
        '{"type":"message","timestamp":"t","message":{"role":"user","content":"hi"}}',
        '{"type":"compaction","timestamp":"t","summary":"S","firstKeptEntryIndex":'
        + first_kept
        + "}",
    ]
    return ("\n".join(lines) + "\n").encode()


def test_the_api_import_refuses_an_overflowing_number(alice: Any) -> None:
    before = Session.objects.count()
    response = token_api(alice).client.post(
        "/api/sessions/import", {"file": SimpleUploadedFile("s.jsonl", v1_file("1e999"))}
    )
    body = assert_api_refused(response, 422)
    assert "line 3" in body["detail"] and "out of range" in body["detail"]
    assert Session.objects.count() == before


def test_the_page_import_refuses_an_overflowing_number(alice: Any) -> None:
    before = Session.objects.count()
    client = page_client(alice)
    response = client.post(
        "/sessions/import",
        {"file": SimpleUploadedFile("s.jsonl", v1_file("-1e999"))},
        follow=True,
    )
    assert response.status_code == 200
    assert "line 3" in response.content.decode() and "out of range" in response.content.decode()
    assert Session.objects.count() == before


def test_an_import_with_a_huge_integer_index_is_read_as_pi_reads_it(alice: Any) -> None:
    # An integer is exact however long; as an index past the file it names no entry.
    response = token_api(alice).client.post(
        "/api/sessions/import", {"file": SimpleUploadedFile("s.jsonl", v1_file("9" * 400))}
    )
    assert response.status_code == 201, response.content[:300]


def v3_file(content: str) -> bytes:
    lines = [
        '{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00Z","cwd":"/w"}',
        '{"type":"message","id":"a1","parentId":null,"timestamp":"t",'
        '"message":{"role":"user","content":' + content + "}}",
    ]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize(
    ("content", "reason"), [('"a\\u0000b"', "NUL"), ('"\\ud800"', "lone surrogate")]
)
def test_imports_refuse_unstorable_text_with_its_line(
    alice: Any, content: str, reason: str
) -> None:
    before = Session.objects.count()
    upload = SimpleUploadedFile("s.jsonl", v3_file(content))
    response = token_api(alice).client.post("/api/sessions/import", {"file": upload})
    body = assert_api_refused(response, 422)
    assert "line 2" in body["detail"] and reason in body["detail"]
    page = page_client(alice).post(
        "/sessions/import",
        {"file": SimpleUploadedFile("s.jsonl", v3_file(content))},
        follow=True,
    )
    assert page.status_code == 200 and reason in page.content.decode()
    assert Session.objects.count() == before


def on_the_test_database() -> dict[str, str]:
    """A command's environment: the test database, so "nothing written" is read where the
    command would have written. (A command commits what it writes, the local account it
    makes included: the tests that run one flush the database after them.)"""
    return {**os.environ, "DATABASE_URL": child_database_url()}


@pytest.mark.django_db(transaction=True)
def test_the_command_import_refuses_an_overflowing_number(tmp_path: Path) -> None:
    pi_file = tmp_path / "s.jsonl"
    pi_file.write_bytes(v1_file("1e999"))
    result = subprocess.run(
        [sys.executable, "manage.py", "import_pi", str(pi_file)],
        cwd=ROOT,
        env=on_the_test_database(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "line 3" in result.stderr and "out of range" in result.stderr


# --- the API ------------------------------------------------------------------------------


@pytest.fixture(params=["token", "cookie"])
def as_alice_by(request: pytest.FixtureRequest, alice: Any) -> Api:
    return token_api(alice) if request.param == "token" else cookie_api(alice)


def post_raw(api: Api, path: str, body: str) -> Any:
    """POST `body` as it is (JSON the client's encoder would not write)."""
    extra: dict[str, Any] = {"HTTP_X_CSRFTOKEN": CSRF_SECRET} if api.csrf else {}
    return api.client.generic("POST", path, body, content_type="application/json", **extra)


def append_body(text: Any, expected_seq: int) -> str:
    entry = {"type": "message", "message": {"role": "user", "content": text}}
    return json.dumps(
        {
            "expected_seq": expected_seq,
            "events": [{"type": "user/message", "data": {"entry": entry}}],
        }
    )


@pytest.mark.parametrize(
    "raw",
    [
        '"a\\u0000b"',  # NUL
        '"\\ud800"',  # a lone surrogate
        "1e999",  # overflows to infinity
        "-1e999",
    ],
)
def test_an_api_append_refuses_bad_json_and_writes_nothing(
    as_alice_by: Api, alice_session: Session, raw: str
) -> None:
    before = events_of(alice_session)
    body = append_body("PLACEHOLDER", alice_session.last_seq).replace('"PLACEHOLDER"', raw)
    response = post_raw(as_alice_by, f"/api/sessions/{alice_session.id}/events", body)
    assert_api_refused(response)
    assert events_of(alice_session) == before


def test_an_api_expected_seq_past_any_seq_is_refused(
    as_alice_by: Api, alice_session: Session
) -> None:
    before = events_of(alice_session)
    body = append_body("hi", 10**30)
    response = post_raw(as_alice_by, f"/api/sessions/{alice_session.id}/events", body)
    assert_api_refused(response, 422)
    assert events_of(alice_session) == before


@pytest.mark.parametrize(
    "path",
    [
        "/sessions/{sid}/views/chat?leaf=" + NUL,
        "/sessions/{sid}/compare?a=" + NUL + "&b=x",
        "/sessions/{sid}/tree?leaf=x" + NUL,
        "/sessions?q=" + NUL,
        "/sessions?limit=" + HUGE,
        "/sessions?limit=1e999",
        "/sessions/{sid}/events?after_seq=" + HUGE + "0",
        "/sessions/{sid}/entries?after_seq=1e999",
        "/sessions/{sid}/views/requests/" + HUGE + "0",
    ],
)
def test_api_query_parameters_refuse_nul_and_overflow(
    as_alice_by: Api, alice_session: Session, path: str
) -> None:
    response = as_alice_by.get(path.format(sid=alice_session.id))
    assert response.status_code in (400, 404, 422), response.content[:300]
    assert body_of(response)["error"]


@pytest.mark.parametrize("entry_id", ["\\u0000", "\\ud800"])
def test_api_cursors_with_unstorable_ids_are_refused(
    as_alice_by: Api, alice_session: Session, entry_id: str
) -> None:
    import base64

    raw = '{"k":"below","as_of":1,"leaf":null,"parent":"' + entry_id + '"}'
    cursor = base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
    response = as_alice_by.get(f"/sessions/{alice_session.id}/tree?cursor={quote(cursor)}")
    assert response.status_code in (400, 422), response.content[:300]


def test_an_api_retry_with_a_nul_entry_id_writes_nothing(
    as_alice_by: Api, alice_session: Session
) -> None:
    before = events_of(alice_session)
    response = as_alice_by.post(f"/sessions/{alice_session.id}/retry", {"entry_id": "\x00"})
    assert_api_refused(response)
    assert events_of(alice_session) == before


# --- commands -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        [b"events", b"\xff"],  # bytes that are not UTF-8: a lone surrogate to Python
        [b"session_new", b"--title", b"caf\xe9"],
        [b"events", b"00000000-0000-0000-0000-000000000000", b"--limit", HUGE.encode() + b"0"],
    ],
)
@pytest.mark.django_db(transaction=True)
def test_commands_refuse_unstorable_and_overflowing_arguments(arguments: list[bytes]) -> None:
    before = Session.objects.count()
    result = subprocess.run(
        [sys.executable.encode(), b"manage.py", *arguments],
        cwd=ROOT,
        env=on_the_test_database(),
        capture_output=True,
        timeout=120,
    )
    stderr = result.stderr.decode(errors="replace").strip()
    assert result.returncode == 1, stderr
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("CommandError:")
    assert Session.objects.count() == before


# --- through daphne -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(django_db_setup: Any, django_db_blocker: Any) -> Iterator[Server]:
    port = daphne.free_port()
    env = {"DATABASE_URL": child_database_url(), "STRAND_RECOVER_AT_START": "0"}
    with django_db_blocker.unblock():
        process = daphne.start(port, env)
    try:
        yield Server(f"http://127.0.0.1:{port}", process)
    finally:
        daphne.stop(process)


@pytest.mark.django_db(transaction=True)
def test_through_daphne_the_rename_with_a_nul_return_url_is_refused_and_not_applied(
    server: Server, alice: Any, alice_session: Session
) -> None:
    browser = Browser(server, "alice", "alice-pass-1234")
    page = f"{server.url}/sessions/{alice_session.id}/"
    before = events_of(alice_session)
    answer = browser.http.post(
        f"{page}rename",
        data={"title": "Renamed", "csrfmiddlewaretoken": browser.http.cookies["csrftoken"]},
        headers={"HX-Request": "true", "HX-Current-URL": f"{page}?leaf={NUL}", "Referer": page},
        allow_redirects=False,
        timeout=30,
    )
    assert answer.status_code == 400, answer.text[:300]
    assert "NUL" in answer.text
    alice_session.refresh_from_db()
    assert alice_session.title == "Alice's secret plans"
    assert events_of(alice_session) == before
    # The same page, asked properly, still answers.
    assert browser.http.get(page, timeout=30).status_code == 200
    assert browser.http.get(f"{page}?leaf={NUL}", timeout=30).status_code == 400


@pytest.mark.django_db(transaction=True)
def test_through_daphne_an_api_append_of_1e999_is_refused(
    server: Server, alice: Any, alice_session: Session
) -> None:
    from sessions_app.services import tokens

    _, token = tokens.token_create(alice, "tests")
    before = events_of(alice_session)
    answer = requests.post(
        f"{server.url}/api/sessions/{alice_session.id}/events",
        data=append_body("PLACEHOLDER", alice_session.last_seq).replace('"PLACEHOLDER"', "1e999"),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 400, answer.text[:300]
    assert answer.json()["error"] == "bad_request" and "out of range" in answer.json()["detail"]
    assert events_of(alice_session) == before
