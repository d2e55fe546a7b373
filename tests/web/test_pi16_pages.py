"""Sessions imported from Pi 1.6 files on the pages: every view of every leaf renders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from sessions_app import store
from sessions_app.services import pi_io
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "pi" / "v1.6" / "cases"
NAMES = sorted(p.name.removesuffix(".jsonl") for p in CASES.glob("*.jsonl"))


@pytest.mark.parametrize("name", NAMES)
def test_every_view_of_every_leaf_renders(name: str, alice: User) -> None:
    with (CASES / f"{name}.jsonl").open("rb") as source:
        session = pi_io.pi_import(source=source, owner=alice, name=name).session
    client = client_for(alice)
    url = reverse("session", args=[session.id])
    for entry in store.entries_of(session.id):
        for view in ("chat", "trace", "context"):
            response = client.get(url, {"view": view, "leaf": entry.id})
            assert response.status_code == 200, (view, entry.id, response.content[:300])
    roots = json.loads((CASES / f"{name}.meta.json").read_text())["roots"]
    html = client.get(url, {"view": "chat"}).content.decode()
    for root in roots:
        assert root in html  # every root of the tree is on the page


def imported(name: str, owner: User) -> tuple[str, dict[str, str]]:
    with (CASES / f"{name}.jsonl").open("rb") as source:
        session = pi_io.pi_import(source=source, owner=owner, name=name).session
    notes = json.loads((CASES / f"{name}.meta.json").read_text())["notes"]
    return reverse("session", args=[session.id]), notes


def test_the_chat_shows_system_messages_as_what_they_change(alice: User) -> None:
    url, ids = imported("system_messages", alice)
    html = client_for(alice).get(url, {"view": "chat", "leaf": ids["a3"]}).content.decode()
    assert f'id="entry-{ids["sys1"]}"' in html and f'id="entry-{ids["sys2"]}"' in html
    assert "skills removed" in html
    assert "tools added: edit" in html and "tools removed: write" in html
    assert "You are an expert coding assistant." in html


def test_the_chat_shows_context_edits_and_the_message_they_edit(alice: User) -> None:
    url, ids = imported("context_edits", alice)
    html = client_for(alice).get(url, {"view": "chat", "leaf": ids["a3"]}).content.decode()
    # The original message is still shown; the edit says what the model sees instead.
    assert "Secret: hunter2. Read b.txt" in html
    assert f'href="#entry-{ids["u1"]}"' in html
    assert "is replaced in later contexts by “Secret: [redacted]. Read b.txt”" in html
    assert "is left out of later contexts" in html


def test_the_chat_shows_usage_entries_with_their_cost(alice: User) -> None:
    url, ids = imported("usage_entries", alice)
    html = client_for(alice).get(url, {"view": "chat", "leaf": ids["a2"]}).content.decode()
    assert (
        "Usage outside the conversation (cache_warm, anthropic/claude-sonnet-4-5): 50000 tokens, $0.0150"
        in html
    )
    assert "(future_kind_42, openai/gpt-5)" in html


def messages_of(html: str) -> str:
    """The context view's list of messages (the tree beside it shows the entries as written)."""
    start = html.index('<ol class="ctx-messages"')
    return html[start : html.index("</ol>", start)]


def test_the_context_view_says_which_edit_replaced_or_omitted_what(alice: User) -> None:
    url, ids = imported("context_edits", alice)
    html = client_for(alice).get(url, {"view": "context", "leaf": ids["a3"]}).content.decode()
    shown = messages_of(html)
    assert "Secret: [redacted]. Read b.txt" in shown and "hunter2. Read" not in shown
    assert f'content replaced by context edit <a href="#entry-{ids["e1"]}">' in html
    assert f'(edit <a href="#entry-{ids["e4"]}">{ids["e4"]}</a>)' in html  # the reminder, omitted
    before = client_for(alice).get(url, {"view": "context", "leaf": ids["a2"]}).content.decode()
    assert "Secret: hunter2. Read b.txt" in messages_of(before)
    assert "context edit" not in messages_of(before)


def test_the_context_view_shows_what_pi_sends_for_a_summary_and_links_pi_s_provider_view(
    alice: User,
) -> None:
    url, ids = imported("compactions16", alice)
    client = client_for(alice)
    html = client.get(url, {"view": "context"}).content.decode()
    shown = messages_of(html)
    assert "As Pi sends it (convertToLlm): a user message" in shown
    assert "The conversation history before this point was compacted" in shown
    link = html.index('class="small pi-llm-link" href="')
    href = html[link:].split('href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    answer = client.get(href)
    assert answer.status_code == 200 and answer.json()["format"] == "llm"
    leaf = json.loads((CASES / "compactions16.leaf.json").read_text())["leafId"]
    records = json.loads((CASES / "compactions16.contexts.json").read_text())
    [pi] = [r["llm"] for r in records if r.get("leafId") == leaf]
    assert answer.json()["messages"] == pi


def test_the_trace_of_an_imported_session_shows_its_entries_outside_turns(alice: User) -> None:
    """An imported Pi file has no turns; its system messages, context edits and usage
    entries are in the trace all the same, as what they are, with their details."""
    client = client_for(alice)
    url, ids = imported("context_edits", alice)
    html = client.get(url, {"view": "trace", "leaf": ids["a3"]}).content.decode()
    assert "No turns" not in html and "entries outside turns" in html
    assert '<span class="kind">context_edit</span> context edit (replace)' in html
    assert '<span class="kind">context_edit</span> context edit (omit)' in html
    assert '<span class="kind">system</span> system message' in html
    key = html.split('data-span="context_edit-', 1)[1].split('"', 1)[0]
    detail = client.get(url, {"view": "trace", "leaf": ids["a3"], "span": f"context_edit-{key}"})
    assert ids["u1"] in detail.content.decode().split('id="span-detail"', 1)[1]
    url, ids = imported("usage_entries", alice)
    html = client.get(url, {"view": "trace", "leaf": ids["a2"]}).content.decode()
    assert '<span class="kind">usage</span> usage: cache_warm' in html
    toolbar = html.split('class="toolbar', 1)[1].split("</div>", 1)[0]
    assert "$0.02" in toolbar  # the two usage entries of the branch: $0.015 and $0.00033


def test_a_compaction_card_shows_the_system_state_it_keeps(alice: User) -> None:
    url, ids = imported("compactions16", alice)
    html = client_for(alice).get(url, {"view": "chat", "leaf": ids["a3"]}).content.decode()
    card = html.split(f'id="entry-{ids["c1"]}"', 1)[1].split("Summary the model sees", 1)[0]
    assert "System state kept" in card and "tools: read" in card
    assert "You are helpful." in card and "cwd: /b" in card
