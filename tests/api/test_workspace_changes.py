"""What tool calls changed in the workspace, with the offline model: the trace marks and
diffs a write, and the compare page and API list the files two branches differ in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from sessions_app.models import Session
from tests.api.conftest import Api, body_of, converse

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(workspace_root: Path, as_alice: Api) -> Api:
    return as_alice


def new_session(api: Api) -> Session:
    response = api.post("/sessions", {"title": "changes"})
    assert response.status_code == 201, response.content
    return Session.objects.get(id=body_of(response)["id"])


def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def leaf(session: Session) -> str:
    found = Session.objects.get(id=session.id).leaf_entry_id
    assert found
    return found


def test_the_trace_shows_what_a_write_changed(api: Api, alice: Any) -> None:
    session = new_session(api)
    converse(api, session, "write notes.txt: first words")
    events = converse(api, session, "write notes.txt: second words")
    call = next(e for e in events if e.type == "tool/call")
    page = browser(alice).get(f"/sessions/{session.id}/", {"view": "trace"}).content.decode()
    assert page.count('class="pill files-mark"') == 2
    detail = browser(alice).get(
        f"/sessions/{session.id}/",
        {"view": "trace", "span": f"tool-{call.data['call_id']}", "turn": str(call.turn)},
    )
    html = detail.content.decode()
    assert 'id="span-files"' in html and 'data-path="notes.txt"' in html
    assert "<ins>+1</ins> <del>−1</del>" in html
    assert '<span class="dl del">-first words</span>' in html
    assert '<span class="dl add">+second words</span>' in html


def test_a_call_that_changed_no_file_says_so(api: Api, alice: Any) -> None:
    session = new_session(api)
    events = converse(api, session, "list files")
    call = next(e for e in events if e.type == "tool/call")
    html = (
        browser(alice)
        .get(
            f"/sessions/{session.id}/",
            {"view": "trace", "span": f"tool-{call.data['call_id']}", "turn": str(call.turn)},
        )
        .content.decode()
    )
    assert "This call changed no file in the workspace." in html


def test_compare_lists_the_files_two_branches_differ_in(api: Api, alice: Any, bob: Any) -> None:
    session = new_session(api)
    converse(api, session, "write shared.txt: both")
    fork_point = leaf(session)
    converse(api, session, "write a.txt: only on A")
    converse(api, session, "write shared.txt: changed on A")
    branch_a = leaf(session)
    assert api.put(f"/sessions/{session.id}/leaf", {"entry_id": fork_point}).status_code == 200
    converse(api, session, "write b.txt: only on B")
    branch_b = leaf(session)

    response = api.get(f"/sessions/{session.id}/compare?a={branch_a}&b={branch_b}")
    assert response.status_code == 200, response.content
    files = body_of(response)["files"]
    assert (files["added"], files["removed"], files["changed"]) == (1, 1, 1)
    assert [(f["path"], f["status"]) for f in files["files"]] == [
        ("a.txt", "removed"),
        ("b.txt", "added"),
        ("shared.txt", "changed"),
    ]
    shared = files["files"][2]
    assert (shared["added"], shared["removed"]) == (1, 1)
    assert {"kind": "+", "text": "both"} in shared["lines"]

    page = browser(alice).get(f"/sessions/{session.id}/compare", {"a": branch_a, "b": branch_b})
    html = page.content.decode()
    assert 'id="compare-files"' in html
    for path in ("a.txt", "b.txt", "shared.txt"):
        assert f'data-path="{path}"' in html
    assert (
        browser(bob)
        .get(f"/sessions/{session.id}/compare", {"a": branch_a, "b": branch_b})
        .status_code
        == 404
    )
