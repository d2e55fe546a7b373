"""Usage through the API and the page, read from the projector's rollups: the numbers are
those of a naive sum over the events; owners see their own, staff everyone's."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from sessions_app import store
from sessions_app.models import Event
from sessions_app.projectors import project_pending
from sessions_app.selectors.usage import TOP_SESSIONS
from sessions_app.store import NewEvent
from tests.api.conftest import Api, body_of, user_msg
from tests.api.test_search import session_with, tool_result

pytestmark = pytest.mark.django_db


def reply(model: str, tokens_in: int, tokens_out: int, cost: float, ttft: int) -> NewEvent:
    usage = {
        "input": tokens_in,
        "output": tokens_out,
        "cacheRead": 7,
        "cacheWrite": 0,
        "totalTokens": tokens_in + tokens_out + 7,
        "cost": {"total": cost},
    }
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}],
        "provider": "prov",
        "model": model,
        "usage": usage,
        "stopReason": "stop",
    }
    return NewEvent(
        "assistant/message",
        {
            "entry": {"type": "message", "message": message},
            "timing": {"ttft_ms": ttft, "duration_ms": ttft * 3},
        },
    )


def tool_call(tool: str) -> NewEvent:
    return NewEvent("tool/call", {"call_id": "c1", "tool": tool, "arguments": "{}"})


def test_usage_matches_a_naive_sum_over_the_events(
    alice: Any, bob: Any, as_alice: Api, as_carol: Api
) -> None:
    first = session_with(
        alice,
        user_msg("hi"),
        reply("small", 100, 20, 0.0125, 300),
        tool_call("bash"),
        tool_result("failed", tool="bash", error=True),
        tool_call("bash"),
        tool_result("fine", tool="bash"),
        tool_call("ls"),
        reply("big", 1000, 50, 0.25, 1200),
        title="First",
    )
    second = session_with(alice, user_msg("again"), reply("small", 10, 2, 0.001, 90))
    session_with(bob, user_msg("bob's"), reply("small", 5000, 5000, 9.0, 50))
    project_pending()
    # More after the projection, and projected again: counted once each.
    store.append_events(second.id, second.last_seq, [reply("small", 1, 1, 0.0005, 40)])
    project_pending()
    events = Event.objects.filter(session__owner=alice, type="assistant/message")
    usages = [e.data["entry"]["message"]["usage"] for e in events]
    body = body_of(as_alice.get("/usage"))
    assert body["user"] == "alice"
    total = body["total"]
    assert total["replies"] == len(usages) == 4
    assert total["input_tokens"] == sum(u["input"] for u in usages)
    assert total["output_tokens"] == sum(u["output"] for u in usages)
    assert total["total_tokens"] == sum(u["totalTokens"] for u in usages)
    assert Decimal(total["cost"]) == sum(Decimal(str(u["cost"]["total"])) for u in usages)
    tools = {t["tool"]: (t["calls"], t["errors"]) for t in body["tools"]}
    assert tools == {"bash": (2, 1), "ls": (1, 0)}
    models = {m["model"]: m for m in body["by_model"]}
    assert models["prov / small"]["replies"] == 3 and models["prov / big"]["replies"] == 1
    assert models["prov / big"]["ttft_p50_ms"] == 1500  # the bucket 1,200 ms falls in
    assert [s["title"] for s in body["by_session"]] == ["First", "Notes"]
    # Bob's usage is not Alice's; staff see everyone's, and one user's.
    everyone = body_of(as_carol.get("/usage"))
    assert everyone["user"] is None and everyone["total"]["replies"] == 5
    assert {u["user"] for u in everyone["by_user"]} == {"alice", "bob"}
    assert body_of(as_carol.get("/usage?user=bob"))["total"]["replies"] == 1
    assert as_alice.get("/usage?user=bob").status_code == 200  # an owner sees their own
    assert body_of(as_alice.get("/usage?user=bob"))["user"] == "alice"
    assert first.id  # (the session the costliest list names first)


def test_the_usage_page_and_csv(alice: Any) -> None:
    session_with(alice, user_msg("hi"), reply("small", 100, 20, 0.5, 300), tool_call("bash"))
    project_pending()
    client = Client()
    client.force_login(alice)
    page = client.get("/usage")
    assert page.status_code == 200
    assert b"<svg" in page.content and b"prov / small" in page.content
    csv = client.get("/usage.csv")
    assert csv.status_code == 200 and csv["Content-Type"].startswith("text/csv")
    lines = csv.content.decode().splitlines()
    assert lines[0].startswith("day,replies") and lines[1].endswith(",0.50000000")
    assert client.get("/usage?since=nonsense").status_code == 400


def test_usage_counts_events_the_projector_has_not_read_yet(alice: Any, as_alice: Api) -> None:
    session = session_with(alice, user_msg("hi"), reply("small", 100, 20, 0.5, 300))
    project_pending()
    store.append_events(session.id, session.last_seq, [reply("small", 1, 1, 0.25, 40)])
    before = body_of(as_alice.get("/usage"))["total"]
    assert before["replies"] == 2 and Decimal(before["cost"]) == Decimal("0.75")
    project_pending()
    assert body_of(as_alice.get("/usage"))["total"] == before


def test_the_audit_desks_usage_page_shows_the_rollups(alice: Any, carol: Any) -> None:
    session_with(
        alice,
        user_msg("hi"),
        tool_call("grep"),
        tool_result("no such file", tool="grep", error=True),
        NewEvent("turn/end", {"turn": 0, "reason": "interrupted"}),
    )
    client = Client()
    client.force_login(carol)
    html = client.get(
        f"/admin/sessions_app/requestaudit/usage/?owner__id__exact={alice.pk}"
    ).content.decode()
    rollups = html[html.index('id="audit-rollups"') :]
    assert '<th scope="row">grep</th><td>1</td><td>1</td>' in rollups
    assert '<th scope="row">interrupted</th><td>1</td>' in rollups


def test_an_imported_pi_files_replies_and_usage_entries_count(
    alice: Any, carol: Any, as_alice: Api
) -> None:
    """A Pi 1.6 file's replies and its `usage` entries (cost outside the context, of a kind
    no version of Pi defines too) count in usage as a reply recorded here does."""
    import json
    from pathlib import Path

    from sessions_app.services import pi_io

    path = Path(__file__).parents[1] / "fixtures/pi/v1.6/cases/usage_entries.jsonl"
    with path.open("rb") as source:
        pi_io.pi_import(source=source, owner=alice, name="usage entries")
    project_pending()
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    replies = [
        e["message"]["usage"]
        for e in lines
        if e["type"] == "message" and e["message"]["role"] == "assistant"
    ]
    spent = [e["usage"] for e in lines if e["type"] == "usage"]
    assert replies and spent
    total = body_of(as_alice.get("/usage"))["total"]
    assert total["replies"] == len(replies)
    assert Decimal(total["cost"]) == sum(Decimal(str(u["cost"]["total"])) for u in replies + spent)
    assert total["total_tokens"] == sum(u["totalTokens"] for u in replies + spent)
    # The audit desk's usage page shows the same tokens and cost, usage entries included.
    staff = Client()
    staff.force_login(carol)
    html = staff.get(
        f"/admin/sessions_app/requestaudit/usage/?owner__id__exact={alice.pk}"
    ).content.decode()
    cost = html[html.index('id="audit-rollup-cost"') :]
    row = cost[cost.index('<tr class="total">') :]
    assert f"<td>{total['total_tokens']}</td><td>{Decimal(total['cost'])}</td>" in row


def test_the_sessions_that_cost_most_are_ranked_with_the_tail(alice: Any, as_alice: Api) -> None:
    """The top sessions are ranked in Postgres from the rollups, beside the sessions with
    events the projector has not read: the cheapest projected session becomes the costliest
    by a reply written after the projection."""
    sessions = [
        session_with(alice, user_msg("hi"), reply("small", 10, 1, n + 1, 300), title=f"S{n}")
        for n in range(TOP_SESSIONS + 2)
    ]
    project_pending()
    cheapest = sessions[0]
    store.append_events(cheapest.id, cheapest.last_seq, [reply("small", 1, 1, 100, 40)])
    ranked = body_of(as_alice.get("/usage"))["by_session"]
    expected = ["S0", *(f"S{n}" for n in range(TOP_SESSIONS + 1, 1, -1))][:TOP_SESSIONS]
    assert [s["title"] for s in ranked] == expected
    assert Decimal(ranked[0]["cost"]) == 101 and Decimal(ranked[1]["cost"]) == TOP_SESSIONS + 2
    project_pending()
    assert body_of(as_alice.get("/usage"))["by_session"] == ranked
