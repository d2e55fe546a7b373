"""A turn run on an imported Pi 1.6 session: its recorded requests say, as the context view
does, which message a context edit replaced or left out, and by which edit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from sessions_app.models import Session
from tests.api.conftest import Api, body_of, converse
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db(transaction=True)

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "pi" / "v1.6" / "cases"


def test_a_recorded_request_names_the_edits_that_replaced_or_omitted_its_messages(
    as_alice: Api, alice: Any
) -> None:
    upload = SimpleUploadedFile("s.jsonl", (CASES / "context_edits.jsonl").read_bytes())
    imported = body_of(as_alice.client.post("/api/sessions/import", {"file": upload}))
    session = Session.objects.get(id=imported["session"]["id"])
    ids = json.loads((CASES / "context_edits.meta.json").read_text())["notes"]
    moved = as_alice.put(f"/sessions/{session.id}/leaf", {"entry_id": ids["a3"]})
    assert moved.status_code == 200
    events = converse(as_alice, session, "What does b.txt say?")
    seq = next(e.seq for e in events if e.type == "request/sent")

    view = body_of(as_alice.get(f"/sessions/{session.id}/views/requests/{seq}"))
    assert view["matches"] is True
    by_entry = {m["entry_id"]: m for m in view["messages"]}
    assert by_entry[ids["u1"]]["edit_id"] == ids["e1"]
    assert "[redacted]" in by_entry[ids["u1"]]["text"]
    assert by_entry[ids["a1"]]["edit_id"] == ids["e2"]
    assert by_entry[ids["u2"]]["edit_id"] is None
    assert {"entry_id": ids["cm"], "edit_id": ids["e4"]} in view["omitted"]
    context = body_of(as_alice.get(f"/sessions/{session.id}/context?leaf={ids['a3']}"))
    assert context["omitted"] == view["omitted"]
    assert len(context["sources"]) == len(context["messages"])
    sources = {s["entry_id"]: s["edit_id"] for s in context["sources"]}
    assert sources[ids["u1"]] == ids["e1"] and sources[ids["u2"]] is None

    html = (
        client_for(alice)
        .get(f"/sessions/{session.id}/", {"view": "context", "request": str(seq)})
        .content.decode()
    )
    assert 'id="hash-badge" class="badge ok"' in html
    assert f'content replaced by context edit <a href="#entry-{ids["e1"]}">' in html
    assert f'(edit <a href="#entry-{ids["e4"]}">{ids["e4"]}</a>)' in html
