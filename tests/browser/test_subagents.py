"""A subagent in Chromium, with the offline model: `delegate: …` in a session of the
`delegating` preset starts a child session; the child's words stream into the parent's
chat while it works, its answer and its diff come back as the call's result, the trace
nests the child's turn under the call, and the pages link parent and child both ways."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from sessions_app import store
from sessions_app.models import Session
from tests.browser.conftest import (
    Server,
    expect_turn,
    new_session,
    screenshot,
    sign_in,
    wait_live,
    wait_turn,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _child_of(parent_id: str, timeout: float = 20) -> Session:
    deadline = time.monotonic() + timeout
    while True:
        child = Session.objects.filter(parent_id=uuid.UUID(parent_id), origin="subagent").first()
        if child is not None:
            return child
        assert time.monotonic() < deadline, "no child session was started"
        time.sleep(0.1)


def test_a_delegated_task_streams_nests_and_links(
    page: Page, server: Server, make_user: Any
) -> None:
    user: User = make_user()
    sign_in(page, server, user)
    page.select_option(".new-session select[name=preset]", "delegating")
    url = new_session(page, "Lead session")
    parent_id = url.rstrip("/").split("/")[-1]

    expect_turn(page)
    page.fill("textarea[data-composer]", "delegate: write hello.txt: hi <b>from</b> the child")
    page.click("#composer-state button.primary")
    approval = page.locator(".approval")
    expect(approval).to_contain_text("task")
    approval.locator("button[value=allowed]").click()
    # The parent's trace, shown while the child works: the child's spans appear under the
    # call as they are written, with no reload.
    expect(page.locator(".approval")).to_have_count(0)
    page.click("a[data-view-tab=trace]")
    expect(page.locator("#view")).to_have_attribute("data-view", "trace")

    # The child waits for the approval of its own write, on its own page; its breadcrumbs
    # and header name the parent.
    child = _child_of(parent_id)
    waiting = page.locator('.span.kind-approval.status-waiting a[data-span^="subagent-"]')
    expect(waiting).to_have_count(1, timeout=15_000)
    screenshot(page, "subagents-00-child-spans-live")
    page.click("a[data-view-tab=chat]")
    expect(page.locator("#view")).to_have_attribute("data-view", "chat")
    other = page.context.new_page()
    other.goto(f"{server.url}/sessions/{child.id}/")
    wait_live(other)
    expect(other.locator(f'a.crumb-parent[href="/sessions/{parent_id}/"]')).to_have_text(
        "Lead session"
    )
    expect(other.locator("#subagent-parent")).to_be_visible()
    child_approval = other.locator(".approval")
    expect(child_approval).to_contain_text("write")
    screenshot(other, "subagents-01-child-waits")
    child_approval.locator("button[value=allowed]").click()

    # While the child answers, its words stream into the parent's task call.
    page.wait_for_function(
        """() => {
          const el = document.querySelector("[data-live-call]");
          return el && el.textContent.includes("Here is what I found");
        }""",
        timeout=20_000,
    )
    wait_turn(page)
    page.goto(url)
    task = page.locator('#chat details.tool:has(.tool-name:text-is("task"))')
    expect(task.locator("pre.output").last).to_contain_text("added hello.txt (+1 -0)")
    # What the model and the child wrote is shown as text, never as markup.
    expect(task.locator("pre.output").last).to_contain_text("+hi <b>from</b> the child")
    assert task.locator("b").count() == 0
    expect(task.locator("a[data-child-link]")).to_have_attribute("href", f"/sessions/{child.id}/")
    screenshot(page, "subagents-02-answer")

    # The trace nests the child's turn under the call; the call's detail shows its diff.
    page.goto(f"{url}?view=trace")
    task_span = page.locator('.span.kind-tool a.span-name:has-text("task")').first
    expect(page.locator('a.span-name[data-span^="subagent-"]').first).to_be_visible()
    nested_write = page.locator('a.span-name[data-span^="subagent-"]:has-text("write")')
    expect(nested_write.first).to_be_visible()
    task_span.click()
    detail = page.locator("#span-detail")
    expect(detail.locator("#span-child")).to_have_attribute("href", f"/sessions/{child.id}/")
    expect(detail.locator("#span-files")).to_contain_text("hello.txt")
    screenshot(page, "subagents-03-trace")

    # The parent's files are as they were; the list marks the child and links its parent.
    parent_cwd = Session.objects.get(id=parent_id).cwd
    assert parent_cwd and parent_cwd != child.cwd
    assert not Path(parent_cwd, "hello.txt").exists()
    assert Path(child.cwd, "hello.txt").read_text() == "hi <b>from</b> the child"
    page.goto(server.url + "/")
    expect(page.locator(f'a.pill.subagent[href="/sessions/{parent_id}/"]')).to_be_visible()
    other.close()


def test_cancelling_the_parent_in_the_browser_cancels_its_child(
    page: Page, server: Server, make_user: Any
) -> None:
    user: User = make_user()
    sign_in(page, server, user)
    page.select_option(".new-session select[name=preset]", "delegating")
    url = new_session(page, "Lead to cancel")
    parent_id = url.rstrip("/").split("/")[-1]
    expect_turn(page)
    page.fill("textarea[data-composer]", "delegate: write never.txt: no")
    page.click("#composer-state button.primary")
    page.locator(".approval button[value=allowed]").click()
    child = _child_of(parent_id)
    # The running call links to its child, where the child's own approval waits.
    link = page.locator("#chat details.tool a[data-child-link]")
    expect(link).to_have_attribute("href", f"/sessions/{child.id}/")
    other = page.context.new_page()
    other.goto(f"{server.url}/sessions/{child.id}/")
    wait_live(other)
    expect(other.locator(".approval")).to_contain_text("write")  # the child waits

    page.locator("button[data-cancel]").click()
    wait_turn(page)
    task = page.locator('#chat details.tool:has(.tool-name:text-is("task"))')
    expect(task.locator(".pill.error")).to_contain_text("ABORTED")
    expect(task).to_contain_text("cancelled with its parent")
    # The child's page sees its own turn end, cancelled, with no approval left to give.
    expect(other.locator("#session-state")).to_have_attribute("data-state", "aborted")
    expect(other.locator(".approval")).to_have_count(0)
    screenshot(other, "subagents-04-child-cancelled")
    ends = [
        e.data["reason"] for e in store.events_after(child.id, -1, 1000) if e.type == "turn/end"
    ]
    assert ends == ["aborted"]
    assert not Path(child.cwd, "never.txt").exists()
    other.close()
