"""Sharing a session in Chromium: the owner makes a link to one branch with redactions from
the session page; a guest in a private window sees that branch, redacted, and nothing else
(no composer, no other branch, no owner's links); a guest of the whole session sees new
messages arrive live; revoking closes the guest's live socket at once, and the link then
answers 404."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, expect
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from sessions_app import store
from sessions_app.models import Session
from sessions_app.store import NewEvent
from tests.browser.conftest import (
    Server,
    new_session,
    screenshot,
    send,
    sign_in,
    wait_live,
    wait_turn,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

README = "A workspace for the browser tests"
OFF_BRANCH = "OFF-BRANCH-2718"


def make_link(page: Page, server: Server, session_url: str, **options: Any) -> str:
    page.goto(session_url)
    page.click("#share-link")
    if options.get("branch"):
        page.fill("#share-form input[name=branch]", options["branch"])
    for box in ("tool_outputs", "file_contents", "system_prompt"):
        if options.get(box):
            page.check(f"#share-form input[name={box}]")
    if options.get("patterns"):
        page.fill("#share-form textarea[name=patterns]", options["patterns"])
    page.click("#share-form button[type=submit]")
    url = page.locator("#share-url").input_value()
    assert url.startswith(server.url + "/s/"), url
    return url


def test_a_guest_sees_the_redacted_branch_alone_and_revoking_closes_its_socket(
    browser: Browser, server: Server, make_user: Any, db_access: None
) -> None:
    owner_context = browser.new_context(bypass_csp=True)
    owner = owner_context.new_page()
    user: User = make_user("owner")
    sign_in(owner, server, user)
    session_url = new_session(owner, "Shared in Chromium", cwd="~")
    send(owner, "read README.md")
    wait_turn(owner)
    session = Session.objects.get(id=session_url.rstrip("/").rsplit("/", 1)[-1])
    branch = session.leaf_entry_id
    assert branch
    # Another branch, from the first message.
    first = store.entries_of(session.id)[0].id
    store.append_events(
        session.id,
        session.last_seq,
        [
            NewEvent("leaf/moved", {"to": first, "reason": "navigate"}),
            NewEvent(
                "user/message",
                {"entry": {"type": "message", "message": {"role": "user", "content": OFF_BRANCH}}},
            ),
        ],
    )
    link = make_link(
        owner,
        server,
        session_url,
        branch=branch,
        file_contents=True,
        system_prompt=True,
        patterns="A workspace for [a-z ]+",
    )

    guest_context = browser.new_context(bypass_csp=True)  # a private window: no sign-in
    guest = guest_context.new_page()
    guest.goto(link)
    wait_live(guest)
    expect(guest.locator(".session-head h1")).to_have_text("Shared in Chromium")
    expect(guest.locator("#composer")).to_have_count(0)
    expect(guest.locator(".head-actions")).to_have_count(0)
    expect(guest.locator("form[action='/accounts/logout/']")).to_have_count(0)
    expect(guest.locator(f"#tree .node[data-id='{branch}']")).to_have_count(1)
    expect(guest.locator("#tree .node")).to_have_count(guest.locator("#tree .node.on-path").count())
    expect(guest.locator("body")).not_to_contain_text(OFF_BRANCH)
    expect(guest.locator("body")).not_to_contain_text(README)
    guest.locator("#chat details.tool summary").first.click()
    expect(guest.locator("#chat pre.output").first).to_have_text("[redacted: file contents]")
    assert guest.locator(f"a[href^='/sessions/{session.id}']").count() == 0
    guest.click("[data-view-tab=context]")
    expect(guest.locator("#view")).to_have_attribute("data-view", "context")
    expect(guest.locator("pre.prompt").first).to_have_text("[redacted: system prompt]")
    expect(guest.locator("body")).not_to_contain_text(OFF_BRANCH)
    guest.click("[data-view-tab=trace]")
    expect(guest.locator("#view")).to_have_attribute("data-view", "trace")
    expect(guest.locator("body")).not_to_contain_text(README)
    screenshot(guest, "share-guest-branch")

    # The owner revokes: the guest's socket closes now, and the link is gone.
    owner.goto(session_url.rstrip("/") + "/shares")
    owner.click("tr[data-share] button[type=submit]")
    expect(owner.locator("tr[data-share] .pill")).to_have_text("revoked")
    guest.wait_for_function("() => window.strandLive.closedCode === 4403")
    expect(guest.locator("#live-socket")).to_have_count(0)
    expect(guest.locator("#live-ended")).to_have_text(re.compile("shared link was closed"))
    assert guest.goto(link).status == 404  # type: ignore[union-attr]
    owner_context.close()
    guest_context.close()


def test_a_guest_of_the_whole_session_sees_new_messages_live(
    browser: Browser, server: Server, make_user: Any, django_db_blocker: Any
) -> None:
    owner_context = browser.new_context(bypass_csp=True)
    owner = owner_context.new_page()
    sign_in(owner, server, make_user("owner"))
    session_url = new_session(owner, "Watched by a guest", cwd="~")
    link = make_link(owner, server, session_url, patterns="sk-[a-z]+")

    guest_context = browser.new_context(bypass_csp=True)
    guest = guest_context.new_page()
    guest.goto(link)
    wait_live(guest)
    owner.goto(session_url)
    wait_live(owner)
    send(owner, "remember sk-abcdef and list files")
    wait_turn(owner)
    expect(guest.locator("#chat .msg.user")).to_have_text(
        re.compile(r"remember \[redacted\] and list files")
    )
    assert guest.evaluate("window.strandLive.deltas") == 0  # the text in flight is not sent
    # What a guest sends on its socket does nothing.
    with django_db_blocker.unblock():
        session = Session.objects.get(id=session_url.rstrip("/").rsplit("/", 1)[-1])
        before = session.last_seq
        guest.evaluate(
            "() => window.strandLive.socket.send(JSON.stringify("
            "{type: 'message', text: 'from a guest', mode: 'message'}))"
        )
        guest.reload()
        wait_live(guest)
        session.refresh_from_db()
        assert session.last_seq == before
    expect(guest.locator("body")).not_to_contain_text("from a guest")
    expect(guest.locator("body")).not_to_contain_text("sk-abcdef")
    screenshot(guest, "share-guest-live")
    owner_context.close()
    guest_context.close()


@pytest.mark.parametrize("token", ["A" * 43, "not-a-token", "x" * 3000])
def test_a_socket_without_a_live_link_is_refused(server: Server, token: str) -> None:
    url = server.url.replace("http://", "ws://") + f"/ws/sessions/shared/{token}/"
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers={"Origin": server.url}, open_timeout=10).close()
    assert refused.value.response.status_code == 403
