"""The whole tree in Chromium, a window at a time: a run of a long line opens, a collapsed
branch expands in place and its entry is clicked, the path above and the rows further on
are read as the user clicks or scrolls, a link opened from the keyboard hands the focus on;
and the same windows as plain pages with JavaScript off."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, expect

from bench.trees import branchy_file
from sessions_app import services
from sessions_app.models import Entry, Session
from sessions_app.services import pi_io
from tests.browser.conftest import Server, screenshot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LARGE = 6_000  # more than TREE_FULL_LIMIT entries: drawn near the branch shown


def imported(owner: User, entries: int) -> Session:
    data = branchy_file(entries)
    return pi_io.pi_import(source=io.BytesIO(data), owner=owner, name=f"Branchy {entries}").session


def entries_in(text: str) -> int:
    """N of a run's "N entries" (after the level a deep row writes out)."""
    found = re.search(r"([\d,]+) entries", text)
    assert found is not None, text
    return int(found.group(1).replace(",", ""))


def test_the_whole_tree_opens_runs_and_branches_and_reads_on(
    signed_in: Page, server: Server, user: User, db_access: None
) -> None:
    page = signed_in
    session = imported(user, LARGE)
    page.goto(f"{server.url}/sessions/{session.id}/?tree=1")
    tree = page.locator("#tree")
    rows = tree.locator("li.node")
    shown = rows.count()
    assert 0 < shown < 600
    expect(tree.locator(f"#node-{session.leaf_entry_id}")).to_have_class(re.compile("shown-leaf"))

    # A run of a long line opens to its rows, in place.
    run = tree.locator("[data-tree-load=run]").last
    count = entries_in(run.inner_text())
    run.click()
    expect(rows).to_have_count(shown + count)
    shown += count

    # A collapsed branch expands below its row; a click on its entry moves the leaf there.
    below = tree.locator("[data-tree-load=below]").last
    top = below.locator("xpath=../preceding-sibling::li[1]").get_attribute("data-id")
    assert top is not None
    below.click()
    expect(rows).to_have_count(shown + 3)  # the rest of the side branch's tool turn
    end = top
    for _ in range(3):
        end = Entry.objects.get(session=session, parent_id=end).entry_id
    row = tree.locator(f"#node-{end}")
    expect(row).to_be_visible()
    screenshot(page, "40-tree-branch-expanded")
    row.locator(".node-text").click()
    expect(page.locator(f"#tree #node-{end}")).to_have_class(re.compile("current"))
    expect(page.locator("#chat")).to_contain_text("instead, turn")

    # The path above, read from the keyboard: the focus goes on to the first row read.
    page.goto(f"{server.url}/sessions/{session.id}/?tree=1")
    rows = page.locator("#tree li.node")
    shown = rows.count()
    earlier = page.locator("#tree [data-tree-load=previous]")
    expect(earlier).to_contain_text("earlier entries of this branch")
    earlier.focus()
    page.keyboard.press("Enter")
    expect(earlier).to_have_count(1)  # the window above has its own, further up
    page.wait_for_function(
        "(n) => document.querySelectorAll('#tree li.node').length > n", arg=shown
    )
    page.wait_for_function(
        "() => !!(document.activeElement && document.activeElement.closest('#tree li'))"
    )


def test_the_whole_tree_reads_on_as_the_user_scrolls(
    signed_in: Page, server: Server, user: User, db_access: None
) -> None:
    page = signed_in
    session = imported(user, 1_000)  # laid out whole, drawn 600 rows at a time
    top = Entry.objects.filter(session=session).order_by("seq").first()
    assert top is not None
    services.session_move_leaf(session=session, to=top.entry_id)
    page.goto(f"{server.url}/sessions/{session.id}/?tree=1")
    rows = page.locator("#tree li.node")
    expect(page.locator("#tree [data-tree-load=next]")).to_have_count(1)
    first = rows.count()
    for _ in range(20):  # scroll to the end of the tree, again as it grows, till it ends
        page.evaluate(
            """() => {
                const links = document.querySelectorAll("#tree [data-tree-load=next]");
                if (links.length) links[links.length - 1].scrollIntoView();
            }"""
        )
        page.wait_for_timeout(250)
        if not page.locator("#tree [data-tree-load=next]").count():
            break
    page.wait_for_function(
        "(n) => document.querySelectorAll('#tree li.node').length > n", arg=first
    )
    runs = page.locator("#tree [data-tree-load=run]")
    folded = sum(entries_in(runs.nth(i).inner_text()) for i in range(runs.count()))
    expect(page.locator("#tree [data-tree-load=next]")).to_have_count(0)
    assert rows.count() + folded == 1_000


def test_the_whole_tree_reads_on_without_javascript(
    browser: Browser, server: Server, make_user: Any, db_access: None
) -> None:
    user: User = make_user()
    session = imported(user, LARGE)
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    sign_in(page, server, user)
    page.goto(f"{server.url}/sessions/{session.id}/?tree=1")
    earlier = page.locator("#tree [data-tree-load=previous]")
    expect(earlier).to_contain_text("earlier entries of this branch")
    shown = set(page.locator("#tree li.node").evaluate_all("(rows) => rows.map((r) => r.id)"))
    earlier.click()  # a plain link: the page of the window above
    expect(page).to_have_url(re.compile(r"tree_at="))
    above = set(page.locator("#tree li.node").evaluate_all("(rows) => rows.map((r) => r.id)"))
    assert above and not above & shown
    expect(page.locator("#tree [data-tree-load=previous]")).to_contain_text("earlier entries")
    page.locator("#tree [data-tree-load=run]").first.click()
    expect(page).to_have_url(re.compile(r"tree_rows=\d+-\d+"))
    expect(page.locator("#tree li.node").first).to_be_visible()
    expect(page.locator("#tree-around a")).to_have_text("The tree around the branch shown")
    screenshot(page, "41-tree-no-javascript-run")
    context.close()
