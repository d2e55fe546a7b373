"""The HTML export's trace holds what the page's trace holds of a session imported from a
Pi 1.6 file: its entries outside turns, as an `outside` span with the entries as its
children, with the entries' own timestamps; every text of them escaped."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from sessions_app.services import pi_io
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "pi" / "v1.6" / "cases"
MARKUP = '<img src=x onerror="alert(1)"> & </script>'


def exported(owner: User, name: str, text: str) -> str:
    session = pi_io.pi_import(source=io.BytesIO(text.encode()), owner=owner, name=name).session
    response = client_for(owner).get(reverse("session-export-html", args=[session.id]))
    assert response.status_code == 200
    return b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]


def span_data(html: str) -> dict[str, list[Any]]:
    block = html.split('<script type="application/json" id="span-data">', 1)[1]
    return {span[0]: span for span in json.loads(block.split("</script>", 1)[0])}


def test_the_export_s_trace_holds_the_entries_outside_turns_escaped(alice: User) -> None:
    text = (CASES / "context_edits.jsonl").read_text()
    assert "Secret: [redacted]. Read b.txt" in text
    text = text.replace("Secret: [redacted]. Read b.txt", MARKUP.replace('"', '\\"'))

    html = exported(alice, "context_edits", text)

    assert "No turns" not in html and "entries outside turns" in html
    assert "0 turns in the session" in html  # the runs of entries are no turns
    assert '<span class="kind">context_edit</span> context edit (replace)' in html
    assert '<span class="kind">context_edit</span> context edit (omit)' in html
    assert '<span class="kind">system</span> system message' in html
    assert "<img" not in html and 'onerror="' not in html
    spans = span_data(html)
    [outside] = [span for span in spans.values() if span[1] == "outside"]
    children = [span for span in spans.values() if span[1] in ("context_edit", "system")]
    assert len(children) >= 3
    replaced = [span for span in children if span[2] == "context edit (replace)"]
    assert dict((k, v) for k, v, _ in replaced[0][11])["replacement"] == MARKUP
    # Recorded at the import, written by Pi on 2026-11-21: both are said.
    inputs = {key: value for key, value, _ in replaced[0][10]}
    assert inputs["entry_timestamp"] == "2026-11-21 11:00:49 UTC"
    assert replaced[0][4] != inputs["entry_timestamp"]  # the span's start: when it was recorded
    assert dict((k, v) for k, v, _ in outside[10])["entry_timestamps"].startswith("2026-11-21 ")
    # The page draws the same spans under the same keys.
    for key in (outside[0], *(span[0] for span in children)):
        assert f'data-span="{key}"' in html


def test_the_export_counts_usage_entries_outside_turns_in_its_trace(alice: User) -> None:
    html = exported(alice, "usage_entries", (CASES / "usage_entries.jsonl").read_text())

    assert '<span class="kind">usage</span> usage: cache_warm' in html
    assert '<span class="kind">usage</span> usage: future_kind_42' in html
    usage = [span for span in span_data(html).values() if span[1] == "usage"]
    assert usage and all(span[8] for span in usage)  # each with its tokens and cost
