"""Background jobs in Chromium: `run in background …` answers with a job id and the turn
ends; when the job ends its notice shows in the chat as the job's (a turn the notice
started answers it), and the trace draws the job under the turn that started it, its output
in its detail. `kill job …` stops a job; the notice arrives while that turn runs."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from runtime import sandbox
from tests.browser.conftest import new_session, screenshot, send, wait_live, wait_turn

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here"),
]


def allow(page: Page, tool: str) -> None:
    approval = page.locator(".approval")
    expect(approval).to_contain_text(tool)
    approval.locator("button[value=allowed]").click()


def test_a_background_job_reaches_the_chat_and_the_trace(signed_in: Page) -> None:
    page = signed_in
    new_session(page, "A background job")
    send(page, "run in background sleep 1; echo done-in-background")
    allow(page, "bash")
    wait_turn(page)
    chat = page.locator("#chat")
    expect(chat).to_contain_text("Started background job bash-1")
    # The job's end: its notice, as the job's, and the offline model's answer to it.
    notice = chat.locator(".msg.job-notice[data-job=bash-1]")
    expect(notice).to_contain_text("[job bash-1 ended: exit 0", timeout=20_000)
    expect(notice).to_contain_text("done-in-background")
    expect(notice.locator(".who")).to_have_text("Background job bash-1")
    expect(chat.locator(".msg.assistant[data-entry]").last).to_contain_text(
        "Noted: background job bash-1 ended: exit 0", timeout=20_000
    )
    screenshot(page, "jobs-01-notice-in-chat")

    page.goto(page.url.split("?")[0] + "?view=trace")
    wait_live(page)
    job = page.locator("#turn-1 .span.kind-job")
    expect(job).to_have_count(1)
    expect(job.locator(".span-name")).to_contain_text("job bash-1: sleep 1; echo")
    expect(job).to_have_class(re.compile(r"status-ok"))
    job.locator(".span-name").click()
    detail = page.locator("#span-detail")
    expect(detail).to_contain_text("done-in-background")
    expect(detail).to_contain_text("exit_code")
    screenshot(page, "jobs-02-job-in-trace")


def test_kill_job_stops_it_and_the_running_turn_reads_its_notice(signed_in: Page) -> None:
    page = signed_in
    new_session(page, "Killing a job")
    send(page, "run in background sleep 120")
    allow(page, "bash")
    wait_turn(page)
    send(page, "kill job bash-1")
    allow(page, "job_kill")
    wait_turn(page)
    chat = page.locator("#chat")
    notice = chat.locator(".msg.job-notice[data-job=bash-1]")
    expect(notice).to_contain_text("[job bash-1 ended: killed")
    expect(chat.locator(".msg.assistant[data-entry]").last).to_contain_text(
        "Noted: background job bash-1"
    )
    screenshot(page, "jobs-03-killed")
