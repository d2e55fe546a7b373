"""The workspace in Chromium: the Files view follows a click in the tree, a tool call's
diff in the trace, the compare page's changed files, and the Files view without
JavaScript."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from sessions_app import services, store
from sessions_app.store import NewEvent
from sessions_app.store.blobs import blobs_put
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


def write(page: Page, path: str, text: str) -> None:
    """Ask the offline model to write a file, and allow it."""
    send(page, f"write {path}: {text}")
    page.locator(".approval button[value=allowed]").click()
    wait_turn(page)


def test_the_files_view_follows_a_click_in_the_tree(signed_in: Page) -> None:
    page = signed_in
    new_session(page, "Files follow the tree")
    write(page, "notes.txt", "the first version")
    after_first = page.locator("#tree .node.r-assistant").last.get_attribute("data-id")
    write(page, "notes.txt", "the second version")
    write(page, "src/app.py", "def main(): return 1")

    page.click("[data-view-tab=files]")
    expect(page).to_have_url(re.compile(r"\?view=files$"))
    tree = page.locator(".file-tree")
    expect(tree.locator("[data-file]")).to_have_count(2)
    expect(tree.locator("summary")).to_have_text("src/")
    tree.locator('[data-file="notes.txt"]').click()
    expect(page.locator("#file-view .file-content")).to_have_text("the second version")
    screenshot(page, "files-01-panel")

    # A click on an entry before the second write: the files there, the same file shown.
    page.locator(f"#node-{after_first} .node-text").click()
    expect(page.locator(f"#node-{after_first}")).to_have_class(re.compile("current"))
    expect(tree.locator("[data-file]")).to_have_count(1)
    expect(page.locator("#file-view .file-content")).to_have_text("the first version")
    with page.expect_download() as download:
        page.locator("#file-download").click()
    saved = download.value.path()
    assert saved is not None and saved.read_text() == "the first version"
    expect(page.locator(".download-all")).to_have_attribute(
        "href", re.compile(rf"/workspace\.tar\?entry={after_first}$")
    )
    screenshot(page, "files-02-after-a-click-in-the-tree")


def test_a_tool_calls_diff_in_the_trace(signed_in: Page) -> None:
    page = signed_in
    new_session(page, "A diff in the trace")
    write(page, "notes.txt", "one")
    write(page, "notes.txt", "two")
    page.click("[data-view-tab=trace]")
    marked = page.locator(".span.kind-tool .files-mark")
    expect(marked).to_have_count(2)
    # On the page loaded again: no live refresh of the turns just run is still on its way.
    page.reload()
    wait_live(page)
    page.locator(".turn-block").first.locator(".span.kind-tool .span-name").click()
    files = page.locator("#span-detail #span-files")
    expect(files.locator(".ws-file")).to_have_attribute("data-path", "notes.txt")
    expect(files.locator(".ws-counts")).to_have_text("+1 −1")
    expect(files.locator(".dl.del")).to_have_text("-one")
    expect(files.locator(".dl.add")).to_have_text("+two")
    screenshot(page, "files-03-trace-diff")


def test_the_compare_page_lists_changed_files(signed_in: Page) -> None:
    page = signed_in
    new_session(page, "Files on two branches")
    send(page, "hello")
    wait_turn(page)
    fork_point = page.locator("#tree .node.r-assistant").last.get_attribute("data-id")
    write(page, "a.txt", "only on A")
    branch_a = page.locator("#tree .node").last.get_attribute("data-id")
    page.locator(f"#node-{fork_point} .node-text").click()
    expect(page.locator(f"#node-{fork_point}")).to_have_class(re.compile("current"))
    write(page, "b.txt", "only on B")
    # The branch shown is B's; compare it with A's leaf from A's actions (on the page
    # loaded again: a live refresh still on its way would redraw the tree without them).
    page.reload()
    wait_live(page)
    page.locator(f"#node-{branch_a} .node-more").click()
    page.locator("#node-panel .compare-with").click()
    expect(page).to_have_url(re.compile(r"/compare\?"))
    files = page.locator("#compare-files")
    expect(files.locator(".ws-file")).to_have_count(2)
    expect(files.locator('.ws-file[data-path="a.txt"] .pill')).to_have_text("added")
    expect(files.locator('.ws-file[data-path="b.txt"] .pill')).to_have_text("removed")
    expect(files.locator('.ws-file[data-path="a.txt"] .dl.add')).to_have_text("+only on A")
    screenshot(page, "files-04-compare")


def test_the_files_view_works_without_javascript(
    browser: Browser, server: Server, make_user: Any, db_access: None
) -> None:
    user = make_user()
    session = services.session_create(owner=user, title="Files, no script", cwd="")
    [entry] = store.append_events(
        session.id,
        0,
        [
            NewEvent(
                "user/message",
                {"entry": {"type": "message", "message": {"role": "user", "content": "hi"}}},
            )
        ],
    ).entry_ids
    content = b"<b>not bold</b>\n"
    sha = hashlib.sha256(content).hexdigest()
    blobs_put(owner_id=user.pk, blobs={sha: content})
    state = {"sha256": sha, "size": len(content), "mode": 0o644}
    snapshot = {"at": entry, "reason": "upload", "files": {"docs/page.html": state}}
    store.append_events(session.id, 1, [NewEvent("workspace/snapshot", snapshot)])
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    sign_in(page, server, user)
    page.goto(f"{server.url}/sessions/{session.id}/")
    page.click("[data-view-tab=files]")
    expect(page).to_have_url(re.compile(r"\?view=files$"))
    page.locator("summary", has_text="docs/").click()  # folds the folder, no script
    expect(page.locator('[data-file="docs/page.html"]')).to_be_hidden()
    page.locator("summary", has_text="docs/").click()
    page.locator('[data-file="docs/page.html"]').click()
    expect(page).to_have_url(re.compile(r"file=docs%2Fpage\.html"))
    expect(page.locator("#file-view .file-content")).to_have_text("<b>not bold</b>")
    screenshot(page, "files-05-no-javascript")
    context.close()
