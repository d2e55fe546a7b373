"""A running command in Chromium: its output reaches the page over the live socket while it
runs, the result then shows like a terminal, and cancel stops the command with everything it
started."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from runtime import sandbox
from tests.browser.conftest import Server, new_session, screenshot, send, sign_in, wait_turn

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here"),
]


@pytest.fixture
def signed_in(page: Page, server: Server, make_user: Any) -> Page:
    user: User = make_user()
    sign_in(page, server, user)
    return page


def allow(page: Page) -> None:
    approval = page.locator(".approval")
    expect(approval).to_contain_text("bash")
    approval.locator("button[value=allowed]").click()


def processes_with(marker: str) -> list[int]:
    """The host's processes whose command line holds `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(pid))
    return found


def test_a_command_streams_its_output_before_it_ends(signed_in: Page) -> None:
    page = signed_in
    new_session(page, "Streaming a command")
    send(page, "run for i in 1 2 3 4 5; do echo tick $i; sleep 0.6; done")
    allow(page)
    # The first tick is on the page while the command still runs (no turn has ended, and
    # the call has no result yet).
    page.wait_for_function(
        """() => {
          const el = document.querySelector("[data-live-call]");
          return el && el.textContent.includes("tick 1")
            && window.strandLive.turnsEnded === window.__turnsBefore;
        }""",
        timeout=20_000,
    )
    assert page.locator(".terminal .term-status").count() == 0
    # Allowed and running: the call says so, not "pending".
    expect(page.locator("#chat details.tool summary .pill")).to_have_text("running")
    screenshot(page, "tools-01-live-output")
    wait_turn(page)
    terminal = page.locator("#chat .terminal")
    expect(terminal.locator(".cmd")).to_have_text(
        "for i in 1 2 3 4 5; do echo tick $i; sleep 0.6; done"
    )
    expect(terminal.locator(".term-out")).to_contain_text("tick 5")
    expect(terminal.locator(".term-status")).to_contain_text(re.compile(r"exit 0 · [0-9.]+ s"))
    screenshot(page, "tools-02-terminal-result")


def test_cancel_stops_a_running_command_and_all_it_started(signed_in: Page) -> None:
    page = signed_in
    new_session(page, "Cancelling a command")
    marker = f"31.{os.getpid()}"
    send(page, f"run echo started; (sleep {marker} &); sleep {marker}; echo never")
    allow(page)
    page.wait_for_function(
        """() => {
          const el = document.querySelector("[data-live-call]");
          return el && el.textContent.includes("started");
        }""",
        timeout=20_000,
    )
    assert processes_with(f"sleep {marker}")  # the command and the one it left behind
    page.locator("button[data-cancel]").click()
    wait_turn(page)
    expect(page.locator("#session-state")).to_have_attribute("data-state", "aborted")
    deadline = time.monotonic() + 10
    while processes_with(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(f"sleep {marker}") == []
    tool = page.locator("#chat details.tool")
    expect(tool.locator("summary .pill")).to_have_text("aborted")
    # The result is the command's own: what it wrote before it was stopped.
    expect(tool.locator(".term-out")).to_contain_text(re.compile(r"started\s+Command aborted"))
    screenshot(page, "tools-03-cancelled-command")
