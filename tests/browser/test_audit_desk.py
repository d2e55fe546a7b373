"""The audit desk in Chromium at 1,400 px, as the administrator `make run` creates uses it:
sign in, open the audit, filter to one user's header changes, read a header's diff, follow
a request to the session's context view, check the hashes, download both exports, and
open the usage page."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from sessions_app.services import demo
from tests.browser.conftest import Server, screenshot
from tests.sessions_app.audit_data import audit_log, written_on

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTH = 1400
HOSTILE = "<img src=x onerror=alert(1)> =SUM(A1) a session title far too long to fit " * 2
PROMPT_AFTER = "You are careful.\nAnswer at length.\nCite files."


@pytest.fixture
def administrator(db_access: None) -> tuple[User, str]:
    """The account `make run` makes and the password it prints."""
    user, password = demo.local_account_ensure(io.StringIO())
    if password is None:  # made by an earlier test of this run
        password = "a-long-test-password-42"
        user.set_password(password)
        user.save(update_fields=["password"])
    return user, password


@pytest.fixture
def requests_made(db_access: None) -> dict[str, Any]:
    """Dana changes her session's model, prompt and tools once; Eve's session, under a
    hostile title, holds a tampered request; both have sessions on two days."""
    dana = User.objects.create_user(username=f"dana-{datetime.now(UTC):%H%M%S%f}")
    eve = User.objects.create_user(username=f"eve-{datetime.now(UTC):%H%M%S%f}")
    with written_on(datetime(2026, 3, 2, 10, tzinfo=UTC)):
        log = audit_log(dana, "Dana's refactor")
        log.exchange("Read a.txt", cost=0.02)
        changed = log.set_header(
            model="gpt-audit-2",
            system_prompt=PROMPT_AFTER,
            tools=[*log.header["tools"], {"name": "search", "description": "Search."}],
        )
        request = log.exchange("And b.txt", cost=0.03)
    with written_on(datetime(2026, 3, 3, 10, tzinfo=UTC)):
        other = audit_log(eve, HOSTILE, provider="anthropic", model="claude-x")
        other.exchange("Hello", cost=0.5)
        other.exchange("Again", tamper=True)
    for i in range(12):  # enough rows to see the list's lines
        with written_on(datetime(2026, 3, 4, 10, i, tzinfo=UTC)):
            audit_log(dana if i % 2 else eve, f"Session {i} " + "with a long title " * 4).exchange(
                "hi"
            )
    return {
        "dana": dana,
        "eve": eve,
        "session": log.session,
        "changed": changed,
        "request": request,
    }


def sign_in_as_administrator(page: Page, server: Server, account: tuple[User, str]) -> None:
    page.set_viewport_size({"width": WIDTH, "height": 900})
    page.goto(server.url + "/admin/")
    page.fill("input[name=username]", account[0].get_username())
    page.fill("input[name=password]", account[1])
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_be_visible()


def assert_one_line_a_row(page: Page) -> None:
    rows = page.locator("#result_list tbody tr")
    heights = [rows.nth(i).bounding_box()["height"] for i in range(rows.count())]  # type: ignore[index]
    assert heights and max(heights) - min(heights) < 1, heights
    # The text of every cell takes one line: its height, padding aside, is one line's.
    tallest = page.evaluate(
        """() => Math.max(...[...document.querySelectorAll('#result_list tbody td, #result_list tbody th')]
            .map(cell => {
                const style = getComputedStyle(cell);
                const inner = cell.clientHeight - parseFloat(style.paddingTop)
                    - parseFloat(style.paddingBottom);
                return inner / parseFloat(style.lineHeight);
            }))"""
    )
    assert tallest < 1.5, tallest
    widths = page.evaluate(
        "() => { const r = document.querySelector('#changelist .results');"
        " return [r.scrollWidth, r.clientWidth]; }"
    )
    assert widths[0] <= widths[1], widths  # no column cut off or scrolled away


def test_an_administrator_audits_model_requests(
    page: Page,
    server: Server,
    administrator: tuple[User, str],
    requests_made: dict[str, Any],
    tmp_path: Path,
) -> None:
    sign_in_as_administrator(page, server, administrator)
    page.click("text=Model requests (audit)")
    expect(page.locator("#result_list")).to_be_visible()
    assert_one_line_a_row(page)
    title = page.locator("#result_list a.audit-title", has_text="<img src=x").first
    expect(title).to_have_attribute(
        "title", re.compile("^" + re.escape(HOSTILE.strip()) + ".* at request 6$")
    )
    screenshot(page, "audit-list-1400")

    # One user's header changes.
    dana = requests_made["dana"].get_username()
    page.locator("#changelist-filter").get_by_role("link", name=dana, exact=True).click()
    page.locator("#changelist-filter").get_by_role("link", name="header changes only").click()
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td.field-what")).to_contain_text("model, prompt, tools +1")
    assert_one_line_a_row(page)

    # The header's diff.
    rows.first.locator("th.field-when a").click()
    expect(page.locator("#header-diff")).to_be_visible()
    expect(page.locator(".audit-text-diff .line.removed")).to_have_text("-Answer briefly.")
    expect(page.locator(".audit-text-diff .line.added")).to_have_text(
        ["+Answer at length.", "+Cite files."]
    )
    expect(page.locator(".audit-tools")).to_contain_text("search")
    expect(page.locator(".messagelist")).to_have_count(0)
    screenshot(page, "audit-header-diff")

    # A request sent under it, followed to the session's context view at that request.
    page.get_by_role("link", name=f"seq {requests_made['request']}").click()
    expect(page.locator(".messagelist")).to_have_count(0)
    expect(page.locator(".badge.ok", has_text="matches")).to_be_visible()
    page.get_by_role("link", name="Open in the session's context view").click()
    session = requests_made["session"]
    assert page.url.endswith(
        f"/sessions/{session.id}/?view=context&request={requests_made['request']}"
    )
    expect(page.locator(".request-picker select")).to_have_value(str(requests_made["request"]))
    expect(page.locator("#hash-badge")).to_have_attribute("data-matches", "true")

    # The hashes of Eve's requests, checked by the action over every filtered row.
    page.goto(
        server.url + f"/admin/sessions_app/requestaudit/?owner__id__exact={requests_made['eve'].pk}"
    )
    page.check("#action-toggle")
    page.select_option("select[name=action]", "check_integrity")
    page.click("button[name=index]")
    expect(page.locator(".audit-verdict.bad")).to_be_visible()
    counts = page.locator("table.audit-counts")
    expect(counts.locator("tr", has_text="Hash does not match")).to_contain_text("1")
    expect(counts.locator("tr", has_text="Requests checked")).to_contain_text("8")
    screenshot(page, "audit-integrity")

    # Both exports of that filtered list.
    page.get_by_role("link", name="Back to the list").click()
    with page.expect_download() as csv_download:
        page.get_by_role("link", name="Export CSV").click()
    csv_path = tmp_path / "audit.csv"
    csv_download.value.save_as(csv_path)
    rows_csv = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    assert {r["owner"] for r in rows_csv} == {requests_made["eve"].get_username()}
    assert len(rows_csv) == 15  # 7 sessions: 7 headers, 8 requests
    assert any(r["session_title"] == HOSTILE for r in rows_csv)
    with page.expect_download() as jsonl_download:
        page.get_by_role("link", name="Export JSON lines").click()
    jsonl_path = tmp_path / "audit.jsonl"
    jsonl_download.value.save_as(jsonl_path)
    rows_json = [json.loads(line) for line in jsonl_path.read_text().splitlines()]
    assert [r["seq"] for r in rows_json] == [int(r["seq"]) for r in rows_csv]

    # Usage under the same filter: a chart and its table for each measure.
    page.get_by_role("link", name="Usage").click()
    expect(page.locator("svg.audit-chart")).to_have_count(6)
    expect(page.locator("svg.audit-chart").first.locator("rect.bar")).to_have_count(2)
    expect(page.locator(".audit-total")).to_contain_text("8 requests")
    screenshot(page, "audit-usage-1400")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= WIDTH


def test_the_usage_page_at_1400_px_fits_its_charts_beside_their_tables(
    page: Page, server: Server, administrator: tuple[User, str], requests_made: dict[str, Any]
) -> None:
    sign_in_as_administrator(page, server, administrator)
    page.goto(server.url + "/admin/sessions_app/requestaudit/usage/")
    pairs = page.locator(".audit-usage-pair")
    expect(pairs).to_have_count(6)
    for i in range(6):
        chart = pairs.nth(i).locator("svg").bounding_box()
        table = pairs.nth(i).locator("table").bounding_box()
        assert chart and table and table["x"] > chart["x"] + chart["width"], i  # beside it
    filters = page.locator("#changelist-filter").bounding_box()
    content = page.locator(".changelist-form-container").bounding_box()
    assert filters and content and filters["x"] >= content["x"] + content["width"]
    screenshot(page, "audit-usage-all")
