"""The audit desk: staff see what was sent to which model, what changed, and what it cost.

The requests are written to the store as the runtime writes them (`audit_data`): Alice's
session changes its header once and then repeats it (a resume), and its last request is
tampered with (a well-formed hash of another payload); Bob's session, under a hostile
title, holds a request whose header_seq names no header. Everything is read through the
same doors staff use: the admin's pages, its action, the exports, the command.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections
from django.http import StreamingHttpResponse
from django.test import Client
from django.utils.html import escape

from projections.header_diff import header_changed
from sessions_app import streaming
from sessions_app.audit import admin as admin_audit
from sessions_app.models import Event, RequestAudit, Session
from sessions_app.selectors import audit
from sessions_app.store import NewEvent
from tests.security.test_csp import assert_strict_policy, refused
from tests.sessions_app.audit_data import WRONG_HASH, AuditLog, audit_log, written_on

pytestmark = pytest.mark.django_db

LIST = "/admin/sessions_app/requestaudit/"
HOSTILE = '<script>alert("t")</script> =HYPERLINK("http://x") ' + "a long title " * 8
HOSTILE_LINE = "<script>alert('prompt')</script>"
PROMPT_AFTER = f"You are careful.\nAnswer at length.\nCite files.\n{HOSTILE_LINE}"
HOSTILE_TOOL = "search<img src=x onerror=alert(1)>"
SEARCH = {"name": HOSTILE_TOOL, "description": "Search <files>.", "parameters": {"type": "object"}}
DAY_1 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
DAY_2 = datetime(2026, 3, 4, 9, 0, tzinfo=UTC)


@dataclass
class Desk:
    alice: AuditLog
    bob: AuditLog
    first_header: int  # Alice's
    changed_header: int
    repeated_header: int
    ok_requests: list[tuple[Session, int]]
    tampered: int  # Alice's
    unrebuildable: int  # Bob's


@pytest.fixture
def desk(alice: User, bob: User) -> Desk:
    with written_on(DAY_1):
        a = audit_log(alice, "Alice audited")
        first = a.set_header()
        ok_1 = a.exchange("Read a.txt", tokens=(100, 20), cost=0.01)
        changed = a.set_header(
            model="gpt-audit-2", system_prompt=PROMPT_AFTER, tools=[*a.header["tools"], SEARCH]
        )
        ok_2 = a.exchange("And b.txt", tokens=(200, 30), cost=0.02)
        repeated = a.set_header(reason="resume")
        tampered = a.exchange("And c.txt", tokens=(300, 40), cost=0.03, tamper=True)
    with written_on(DAY_2):
        b = audit_log(bob, HOSTILE, provider="anthropic", model="claude-<b>x</b>")
        ok_3 = b.exchange("Hello", tokens=(50, 5), cost=0.5)
        unrebuildable = b.exchange("Again", tokens=(60, 6), cost=0.25, header_seq=0)
    return Desk(
        a,
        b,
        first,
        changed,
        repeated,
        [(a.session, ok_1), (a.session, ok_2), (b.session, ok_3)],
        tampered,
        unrebuildable,
    )


def staff_client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def staff(carol: User) -> Client:
    return staff_client(carol)  # staff, not a superuser: no model permission granted


def row_of(session: Session, seq: int) -> RequestAudit:
    return RequestAudit.objects.get(session=session, seq=seq)


def rows_html(html: str) -> str:
    """The list's rows (the filters beside them name sessions too); "" when none."""
    start = html.find('<table id="result_list"')
    return html[start : html.index("</table>", start)] if start >= 0 else ""


def listed(client: Client, query: str = "") -> list[RequestAudit]:
    """The rows the list shows for a query string, by their detail links."""
    html = rows_html(client.get(LIST + query).content.decode())
    return [r for r in RequestAudit.objects.all() if f"{LIST}{r.pk}/change/" in html]


def body(response: Any) -> str:
    return b"".join(response.streaming_content).decode()


# --- access ------------------------------------------------------------------------------


def audit_urls(desk: Desk) -> list[str]:
    header = row_of(desk.alice.session, desk.changed_header)
    sent = row_of(desk.alice.session, desk.tampered)
    return [
        LIST,
        f"{LIST}?changes=header",
        f"{LIST}{header.pk}/change/",
        f"{LIST}{sent.pk}/change/",
        f"{LIST}export.csv",
        f"{LIST}export.jsonl",
        f"{LIST}usage/",
        f"{LIST}{sent.pk}/",  # the admin's redirect to the change page
    ]


def test_staff_read_every_audit_page_and_export(staff: Client, desk: Desk) -> None:
    for url in audit_urls(desk):
        response = staff.get(url, follow=True)
        assert response.status_code == 200, url


def test_a_user_who_is_not_staff_gets_404_everywhere(desk: Desk, alice: User) -> None:
    owner = staff_client(alice)  # Alice owns a session in the audit, and still sees none of it
    for url in audit_urls(desk):
        assert owner.get(url).status_code == 404, url
    action = owner.post(LIST, {"action": "check_integrity", "_selected_action": ["1"]})
    assert action.status_code == 404


def test_a_visitor_is_sent_to_the_admins_sign_in(desk: Desk) -> None:
    for url in audit_urls(desk):
        response = Client().get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url


def test_staff_change_nothing(staff: Client, desk: Desk) -> None:
    row = row_of(desk.alice.session, desk.changed_header)
    events = Event.objects.count()
    assert staff.get(f"{LIST}add/").status_code == 403
    assert staff.post(f"{LIST}{row.pk}/delete/").status_code == 403
    assert staff.post(f"{LIST}{row.pk}/change/", {"model": "x"}).status_code == 200  # a page
    all_rows = [str(r.pk) for r in RequestAudit.objects.all()]
    staff.post(LIST, {"action": "check_integrity", "_selected_action": all_rows})
    assert Event.objects.count() == events


# --- the list ----------------------------------------------------------------------------


def test_each_row_links_to_the_sessions_context_view_at_its_request(
    staff: Client, desk: Desk
) -> None:
    html = rows_html(staff.get(LIST).content.decode())
    for session, seq in desk.ok_requests:
        assert f'href="/sessions/{session.id}/?view=context&amp;request={seq}"' in html
    # A header links to the session's context view.
    assert f'href="/sessions/{desk.alice.session.id}/?view=context"' in html


def test_the_list_flags_tampered_and_unrebuildable_requests(staff: Client, desk: Desk) -> None:
    html = rows_html(staff.get(LIST).content.decode())
    assert html.count("✓ ok") == 3
    assert html.count("✗ differs") == 1 and html.count("✗ broken") == 1
    assert f"recorded {WRONG_HASH}" in html  # the tampered row's tooltip says what differs
    assert "no request/header at seq 0" in html


def test_the_list_shows_cost_and_what_each_header_changed(staff: Client, desk: Desk) -> None:
    html = rows_html(staff.get(LIST).content.decode())
    for cost in ("$0.0100", "$0.0200", "$0.0300", "$0.5000", "$0.2500"):
        assert cost in html
    assert "model, prompt, tools +1" in html  # the changed header
    assert html.count("no change") == 1 and html.count("initial") == 2


def test_a_hostile_title_is_cut_escaped_and_whole_on_hover(staff: Client, desk: Desk) -> None:
    html = staff.get(LIST).content.decode()
    assert "<script>alert" not in html
    assert escape(HOSTILE)[:60] in html  # in the title attribute, whole
    assert escape("claude-<b>x</b>") in html and "<b>x</b>" not in html


def test_the_admin_index_names_its_models_in_proper_english(staff: Client, admin_user: Any) -> None:
    html = staff_client(admin_user).get("/admin/").content.decode()
    assert "Entries" in html and "Entrys" not in html and "API tokens" in html


# --- filters -----------------------------------------------------------------------------


def test_header_changes_only(staff: Client, desk: Desk) -> None:
    shown = listed(staff, "?changes=header")
    assert [(r.session_id, r.seq) for r in shown] == [(desk.alice.session.id, desk.changed_header)]


def test_header_changes_of_one_user_and_of_one_session(
    staff: Client, desk: Desk, alice: User, bob: User
) -> None:
    assert len(listed(staff, f"?changes=header&owner__id__exact={alice.pk}")) == 1
    assert listed(staff, f"?changes=header&owner__id__exact={bob.pk}") == []
    bobs = listed(staff, f"?session={desk.bob.session.id}")
    assert {r.session_id for r in bobs} == {desk.bob.session.id} and len(bobs) == 3


def test_the_header_filter_agrees_with_the_diff(desk: Desk) -> None:
    headers = list(Event.objects.filter(type="request/header").order_by("session_id", "seq"))
    expected = set()
    for previous, current in zip([None, *headers], headers, strict=False):
        before = previous.data if previous and previous.session_id == current.session_id else None
        if header_changed(before, current.data):
            expected.add(current.pk)
    found = set(audit.only_header_changes(audit.audit_rows()).values_list("pk", flat=True))
    assert found == expected and len(found) == 1


@pytest.mark.parametrize(
    "query",
    ["?session=not-a-uuid", "?owner__id__exact=x", "?changes=all", "?type__exact=tool/call"],
)
def test_a_bad_filter_is_refused(staff: Client, desk: Desk, query: str) -> None:
    # The list, as the admin does, starts again without the filter; the doors that answer
    # with data say what was wrong.
    assert staff.get(LIST + query)["Location"] == LIST + "?e=1"
    for door in ("export.csv", "export.jsonl", "usage/"):
        response = staff.get(LIST + door + query)
        assert response.status_code == 400, door
        assert response.json()["error"] == "bad_filter"


# --- one header, one request -------------------------------------------------------------


def test_a_header_opens_on_its_diff(staff: Client, desk: Desk) -> None:
    row = row_of(desk.alice.session, desk.changed_header)
    html = staff.get(f"{LIST}{row.pk}/change/").content.decode()
    assert "What this header changed" in html
    assert escape('"gpt-audit-1"') in html and escape('"gpt-audit-2"') in html
    assert '<div class="line removed"><span class="sign">-</span>Answer briefly.</div>' in html
    assert '<div class="line added"><span class="sign">+</span>Answer at length.</div>' in html
    assert f"<code>{escape(HOSTILE_TOOL)}</code>" in html and 'class="badge ok">added' in html
    assert f'<span class="sign">+</span>{escape(HOSTILE_LINE)}</div>' in html
    assert HOSTILE_TOOL not in html and HOSTILE_LINE not in html
    assert refused(html) == []
    sent = row_of(desk.alice.session, desk.changed_header + 2)
    assert f"{LIST}{sent.pk}/change/" in html  # the requests sent under it


def test_a_repeated_header_and_a_first_one_say_so(staff: Client, desk: Desk) -> None:
    repeated = row_of(desk.alice.session, desk.repeated_header)
    assert "Nothing: it repeats" in staff.get(f"{LIST}{repeated.pk}/change/").content.decode()
    first = row_of(desk.alice.session, desk.first_header)
    assert "first header" in staff.get(f"{LIST}{first.pk}/change/").content.decode()


def test_a_request_page_shows_no_stray_notices(staff: Client, desk: Desk) -> None:
    session, seq = desk.ok_requests[1]
    html = staff.get(f"{LIST}{row_of(session, seq).pk}/change/").content.decode()
    assert 'class="messagelist"' not in html and "ContextMessage(" not in html
    assert "Messages (3)" in html and "matches" in html


def test_a_tampered_and_an_unrebuildable_request_open_and_say_why(
    staff: Client, desk: Desk
) -> None:
    tampered = row_of(desk.alice.session, desk.tampered)
    html = staff.get(f"{LIST}{tampered.pk}/change/").content.decode()
    assert "does not match" in html and WRONG_HASH in html
    broken = row_of(desk.bob.session, desk.unrebuildable)
    html = staff.get(f"{LIST}{broken.pk}/change/").content.decode()
    assert "cannot be rebuilt" in html and "no request/header at seq 0" in html
    assert "&quot;header_seq&quot;: 0" in html  # the manifest as stored


# --- integrity at scale ------------------------------------------------------------------


def test_the_integrity_action_counts_and_names_the_first_problems(
    staff: Client, desk: Desk
) -> None:
    selected = [str(r.pk) for r in RequestAudit.objects.all()]
    response = staff.post(LIST, {"action": "check_integrity", "_selected_action": selected})
    html = response.content.decode()
    assert response.status_code == 200
    counts = dict(
        (name, int(value))
        for name, value in (
            ("checked", _cell(html, "Requests checked")),
            ("matched", _cell(html, "Hash matches")),
            ("mismatched", _cell(html, "Hash does not match")),
            ("unrebuildable", _cell(html, "Cannot be rebuilt")),
        )
    )
    assert counts == {"checked": 5, "matched": 3, "mismatched": 1, "unrebuildable": 1}
    assert f"{LIST}{row_of(desk.alice.session, desk.tampered).pk}/change/" in html
    assert f"request={desk.unrebuildable}" in html
    assert refused(html) == [] and "<script>alert" not in html


def test_the_integrity_action_checks_every_filtered_row_across_pages(
    staff: Client, desk: Desk, bob: User
) -> None:
    response = staff.post(
        f"{LIST}?owner__id__exact={bob.pk}",
        {"action": "check_integrity", "select_across": "1", "_selected_action": ["0"]},
    )
    html = response.content.decode()
    assert _cell(html, "Requests checked") == "2" and _cell(html, "Cannot be rebuilt") == "1"


def _cell(html: str, heading: str) -> str:
    start = html.index(f"<th>{heading}</th><td>") + len(f"<th>{heading}</th><td>")
    return html[start : html.index("</td>", start)]


def test_verify_requests_reports_counts_and_the_first_problems(desk: Desk) -> None:
    out = io.StringIO()
    with pytest.raises(CommandError, match="2 request"):
        call_command("verify", "--requests", stdout=out)
    text = out.getvalue()
    assert "5 request(s) of 2 session(s) checked: 3 match" in text
    assert f"{desk.alice.session.id}#{desk.tampered} does not match: recorded {WRONG_HASH}" in text
    assert f"{desk.bob.session.id}#{desk.unrebuildable} cannot be rebuilt" in text
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("verify", "--requests", "--show", "1", stdout=out)
    named = [line for line in out.getvalue().splitlines() if line.startswith("  ")]
    first = min(
        (desk.alice.session.id, desk.tampered), (desk.bob.session.id, desk.unrebuildable)
    )  # requests are checked by session, then seq
    assert len(named) == 1 and named[0].startswith(f"  {first[0]}#{first[1]} ")


def test_verify_requests_of_a_sound_session_passes(alice: User) -> None:
    log = audit_log(alice, "Sound")
    log.exchange("one")
    log.exchange("two")
    out = io.StringIO()
    call_command("verify", "--requests", str(log.session.id), stdout=out)
    assert "2 request(s) of 1 session(s) checked: 2 match their hash, 0 do not" in out.getvalue()
    out = io.StringIO()
    call_command("verify", str(log.session.id), stdout=out)  # as before: every projection
    assert "1 session(s) verified" in out.getvalue()


# --- exports -----------------------------------------------------------------------------


def test_the_csv_export_holds_the_filtered_rows(staff: Client, desk: Desk, bob: User) -> None:
    response = staff.get(f"{LIST}export.csv?owner__id__exact={bob.pk}")
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="model-requests-')
    rows = list(csv.DictReader(io.StringIO(body(response))))
    assert [r["seq"] for r in rows] == [str(desk.unrebuildable), str(desk.ok_requests[2][1]), "1"]
    sent = rows[1]
    assert sent["type"] == "request/sent" and sent["owner"] == "bob"
    assert sent["input_tokens"] == "50" and sent["output_tokens"] == "5" and sent["cost"] == "0.5"
    # A title a spreadsheet would read as a formula is kept as text.
    hostile = {"title": "=cmd|' /C calc'!A0"}
    Session.objects.filter(id=desk.bob.session.id).update(**hostile)
    again = list(
        csv.DictReader(io.StringIO(body(staff.get(f"{LIST}export.csv?owner__id__exact={bob.pk}"))))
    )
    assert again[0]["session_title"] == "'" + hostile["title"]


def test_the_json_lines_export_holds_the_same_rows_exactly(staff: Client, desk: Desk) -> None:
    lines = body(staff.get(f"{LIST}export.jsonl")).splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == RequestAudit.objects.count() == 9  # 4 headers, 5 requests
    assert list(rows[0]) == list(audit.EXPORT_FIELDS)
    hostile = [r for r in rows if r["session_id"] == str(desk.bob.session.id)]
    assert {r["session_title"] for r in hostile} == {HOSTILE}
    assert {r["model"] for r in hostile if r["seq"] != desk.unrebuildable} == {"claude-<b>x</b>"}
    tampered = next(r for r in rows if r["seq"] == desk.tampered and r["owner"] == "alice")
    assert tampered["payload_sha256"] == WRONG_HASH and tampered["cost"] == 0.03
    assert tampered["attempt"] == 1 and tampered["total_tokens"] == 340
    csv_rows = list(csv.DictReader(io.StringIO(body(staff.get(f"{LIST}export.csv")))))
    assert [r["seq"] for r in csv_rows] == [str(r["seq"]) for r in rows]


def open_cursors() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_cursors WHERE statement LIKE '%strand_request_audit%'")
        row = cur.fetchone()
    return int(row[0]) if row else 0


def test_an_export_streams_from_a_server_side_cursor(
    staff: Client, alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = audit_log(alice, "Many requests")
    for i in range(12):
        log.exchange(f"question {i}")
    # Small pieces, so that these 13 rows make several (an export writes 500 rows a piece),
    # each sent as it is made (not gathered with the next ones).
    monkeypatch.setattr(admin_audit, "ROWS_PER_CHUNK", 4)
    monkeypatch.setattr(streaming, "GATHER", 1)
    response = staff.get(f"{LIST}export.jsonl")
    assert isinstance(response, StreamingHttpResponse)
    pieces = iter(response.streaming_content)
    first = next(pieces)
    assert first.count(b"\n") == 4
    # The rows come through a cursor held open on the server while the body is sent: the
    # export is never read into memory whole, whatever its length.
    assert open_cursors() == 1
    rest = list(pieces)
    assert len(rest) == 3 and b"".join([first, *rest]).count(b"\n") == 13
    assert open_cursors() == 0  # closed once the body is sent


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_under_asgi_an_export_is_an_asynchronous_stream(
    async_client: Any, carol: User, desk: Desk
) -> None:
    await async_client.aforce_login(carol)
    response = await async_client.get(f"{LIST}export.jsonl")
    assert response.status_code == 200 and response.is_async
    try:
        lines = [line async for line in response.streaming_content]
    finally:
        await sync_to_async(connections.close_all)()  # the view's thread holds a connection
    assert b"".join(lines).count(b"\n") == 9


# --- usage -------------------------------------------------------------------------------


def test_usage_per_day_user_and_model(desk: Desk) -> None:
    overview = audit.usage_overview(audit.audit_rows())
    assert [(day.isoformat(), row.requests) for day, row in overview.by_day] == [
        ("2026-03-02", 3),
        ("2026-03-04", 2),
    ]
    assert overview.by_day[0][1].total_tokens == 120 + 230 + 340
    assert overview.by_day[0][1].cost == Decimal("0.06")
    assert [(r.label, r.cost) for r in overview.by_user] == [
        ("alice", Decimal("0.06")),
        ("bob", Decimal("0.75")),
    ]
    assert {r.label for r in overview.by_model} == {
        "openai / gpt-audit-1",
        "openai / gpt-audit-2",
        "anthropic / claude-<b>x</b>",
        "(none) / (none)",  # the request whose header is missing
    }
    assert overview.total.requests == 5 and overview.total.cost == Decimal("0.81")


def test_a_reply_is_the_first_answer_before_the_next_request_or_step_end(alice: User) -> None:
    """Most replies follow their request at once; the others are found by the rule: a
    retried attempt has none, a reply after an inbox event is still the request's, and
    a step that ended before any answer leaves its request without one."""
    log = audit_log(alice, "Replies apart")
    header = log.set_header()
    sent = {"header_seq": header, "leaf_entry_id": None, "payload_sha256": WRONG_HASH}

    def request(attempt: int = 1) -> NewEvent:
        return NewEvent("request/sent", {**sent, "token_estimate": 5, "attempt": attempt})

    def reply(tokens: int, cost: float) -> NewEvent:
        usage = {"input": tokens, "output": 1, "totalTokens": tokens + 1, "cost": {"total": cost}}
        message = {"role": "assistant", "content": [{"type": "text", "text": "Done."}]}
        entry = {"type": "message", "message": {**message, "usage": usage, "stopReason": "stop"}}
        return NewEvent("assistant/message", {"entry": entry})

    first = header + 1
    log._append(
        [
            request(),  # first: retried, so it has no reply
            request(attempt=2),  # first + 1: answered after an inbox event
            NewEvent("inbox/queued", {"inbox_id": "i1", "target": "next_step", "text": "hi"}),
            reply(100, 0.5),
            request(),  # first + 4: the step ended before an answer
            NewEvent("step/end", {"turn": 1, "step": 0}),
            reply(1000, 5),
            request(),  # first + 7: answered at once
            reply(10, 0.25),
        ]
    )
    expected = {first: None, first + 1: 100, first + 4: None, first + 7: 10}
    rows = audit.audit_rows().filter(session=log.session, type="request/sent")
    exported = {r["seq"]: r["input_tokens"] for r in audit.audit_export_rows(rows)}
    assert exported == expected
    facts = audit.audit_row_facts(list(rows), check=False)
    assert {row.seq: facts[row.pk].input_tokens for row in rows} == expected
    overview = audit.usage_overview(rows)
    assert overview.total.requests == 4
    assert (overview.total.input_tokens, overview.total.total_tokens) == (110, 112)
    assert overview.total.cost == Decimal("0.75")


def test_the_usage_page_draws_each_chart_with_its_table(staff: Client, desk: Desk) -> None:
    response = staff.get(f"{LIST}usage/")
    html = response.content.decode()
    assert html.count('<svg class="audit-chart') == 6
    assert html.count('class="audit-usage-table"') == 6
    # Three days from the first to the last, one of them without requests: three columns.
    tokens_per_day = html[html.index("Tokens per day") : html.index("Cost per day")]
    assert tokens_per_day.count('<rect class="bar"') == 3
    assert '<th scope="row">2026-03-03</th>' in tokens_per_day
    assert escape("anthropic / claude-<b>x</b>") in html and "<b>x</b>" not in html
    assert refused(html) == []
    assert_strict_policy(response, "usage")


def test_the_usage_page_takes_the_lists_filters(staff: Client, desk: Desk, bob: User) -> None:
    html = staff.get(f"{LIST}usage/?owner__id__exact={bob.pk}").content.decode()
    assert "2 requests, 121 tokens" in html
    assert "gpt-audit-1" not in html.split('id="changelist-filter"')[0]
    assert f'href="{LIST}export.csv?owner__id__exact={bob.pk}"' in html


def test_the_lists_links_carry_its_filters(staff: Client, desk: Desk, alice: User) -> None:
    query = f"?changes=header&owner__id__exact={alice.pk}"
    html = staff.get(LIST + query).content.decode()
    carried = escape(query)
    for door in ("usage/", "export.csv", "export.jsonl"):
        assert f'href="{LIST}{door}{carried}"' in html, door


def test_the_lists_pages_hold_its_rows_in_order(
    staff: Client, desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_audit.RequestAuditAdmin, "list_per_page", 4)
    pages = [staff.get(f"{LIST}?p={n}").context["cl"] for n in (1, 2, 3)]
    every = list(pages[0].queryset)  # the filtered rows in the list's order, unpaged
    assert len(every) == 9
    assert [[row.pk for row in cl.result_list] for cl in pages] == [
        [row.pk for row in every[start : start + 4]] for start in (0, 4, 8)
    ]


def test_the_lists_count_agrees_with_its_rows(staff: Client, desk: Desk, alice: User) -> None:
    # Unfiltered, the count is taken from the request events themselves.
    assert audit.audit_count(audit.audit_rows()) == audit.audit_rows().count() == 9
    mine = audit.audit_rows().filter(owner=alice)
    assert audit.audit_count(mine) == 6
    assert "9 model requests (audit)" in staff.get(LIST).content.decode()
    assert "6 results" in staff.get(f"{LIST}?owner__id__exact={alice.pk}").content.decode()
