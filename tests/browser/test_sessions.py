"""A person using Strand in Chromium: sign in, run the offline agent, look at the trace and
the exact context, approve, cancel, move around the tree, branch, watch live from a second
browser and a second server, survive a dropped connection, import a Pi file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, expect

from sessions_app import store
from sessions_app.models import Entry, Session
from sessions_app.services import demo
from sessions_app.store import NewEvent
from tests.browser.conftest import (
    Server,
    expect_turn,
    new_session,
    screenshot,
    send,
    sign_in,
    user_folder,
    wait_live,
    wait_turn,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_sign_in_start_a_session_and_see_the_answer_stream_with_tool_calls(
    signed_in: Page,
) -> None:
    page = signed_in
    # In her own folder (or, if another session works there, a copy of it): README.md.
    new_session(page, "First steps", cwd="~")
    send(page, "list files and read README.md")
    # The answer streams into the page before it is committed.
    page.wait_for_function("() => window.strandLive.deltas > 0")
    wait_turn(page)
    chat = page.locator("#chat")
    expect(chat.locator(".msg.user")).to_have_text(re.compile("list files and read README.md"))
    tools = chat.locator("details.tool")
    expect(tools).to_have_count(2)
    expect(tools.nth(0).locator(".tool-name")).to_have_text("ls")
    expect(tools.nth(1).locator(".tool-name")).to_have_text("read")
    tools.nth(1).locator("summary").click()
    expect(tools.nth(1).locator("pre.output")).to_contain_text("A workspace for the browser tests")
    expect(chat.locator(".msg.assistant[data-entry]").last).to_contain_text("Here is what I found")
    screenshot(page, "01-streamed-answer-and-tool-calls")


def test_switch_to_trace_and_context_and_back_without_reloading(signed_in: Page) -> None:
    page = signed_in
    new_session(page, "Views")
    send(page, "read README.md")
    wait_turn(page)
    page.keyboard.press("2")
    expect(page).to_have_url(re.compile(r"\?view=trace$"))
    expect(page.locator(".turn-block")).to_have_count(1)
    page.locator(".span.kind-request .span-name").first.click()
    expect(page.locator("#span-detail")).to_contain_text("payload_sha256")
    screenshot(page, "02-trace-with-a-selected-request")
    page.locator("#span-detail a", has_text="exact context").click()
    expect(page).to_have_url(re.compile(r"view=context"))
    page.keyboard.press("3")
    expect(page).to_have_url(re.compile(r"\?view=context$"))
    badge = page.locator("#hash-badge")
    expect(badge).to_have_attribute("data-matches", "true")
    expect(badge).to_contain_text("matches the recorded hash")
    expect(page.locator("#request-diff")).to_be_visible()
    screenshot(page, "03-context-hash-matches")
    page.locator("[data-view-tab=chat]").click()
    expect(page).to_have_url(re.compile(r"/sessions/[0-9a-f-]+/$"))
    expect(page.locator("#chat .msg.user")).to_have_count(1)


def test_views_switch_in_place(signed_in: Page) -> None:
    page = signed_in
    new_session(page, "In place")
    page.evaluate("window.__sameDocument = true")
    for key, view in (("2", "trace"), ("3", "context"), ("1", "chat")):
        page.keyboard.press(key)
        expect(page.locator("#view")).to_have_attribute("data-view", view)
    assert page.evaluate("window.__sameDocument") is True


def test_approve_a_write(signed_in: Page, workspace: Path, user: User) -> None:
    page = signed_in
    new_session(page, "Approvals")
    send(page, "write approved.txt: written after approval")
    approval = page.locator(".approval")
    expect(approval.locator("strong")).to_have_text("write")
    expect(approval).to_contain_text("approved.txt")
    expect(page.locator("#session-state")).to_have_attribute("data-state", "waiting")
    screenshot(page, "04-approval-asked")
    approval.locator("button[value=allowed]").click()
    wait_turn(page)
    expect(page.locator(".approval")).to_have_count(0)
    expect(page.locator("#chat details.tool")).to_have_class(re.compile("status-ok"))
    # In the session's own folder, inside hers.
    [written] = user_folder(workspace, user).glob("sessions/*/approved.txt")
    assert written.read_text() == "written after approval"
    screenshot(page, "05-approved-write")


def test_cancel_a_running_turn(signed_in: Page) -> None:
    page = signed_in
    new_session(page, "Cancel")
    # The offline reply streams for about two seconds. On a loaded machine the click can
    # land after the reply has ended (the turn then ends as completed, nothing to cancel),
    # so the message goes again, at most three times; a cancel that never stops a running
    # turn fails on each.
    for _ in range(3):
        drawn = page.evaluate("() => window.strandLive.deltas")
        send(page, "tell me a long story about branching trees, " * 5)
        page.wait_for_function(f"() => window.strandLive.deltas > {drawn} + 2")
        page.locator("button[data-cancel]").click()
        wait_turn(page)
        if page.locator("#chat .notice.aborted").count():
            break
    expect(page.locator("#chat .notice.aborted")).to_have_text("Aborted")
    expect(page.locator("#session-state")).to_have_attribute("data-state", "aborted")
    screenshot(page, "06-cancelled-turn")


def test_click_an_earlier_node_and_the_chat_follows(signed_in: Page) -> None:
    page = signed_in
    new_session(page, "Navigate")
    send(page, "first question")
    wait_turn(page)
    send(page, "second question")
    wait_turn(page)
    expect(page.locator("#chat .msg.user")).to_have_count(2)
    page.locator("#tree .node.r-assistant .node-text").first.click()
    expect(page.locator("#chat .msg.user")).to_have_count(1)
    expect(page.locator("#chat")).not_to_contain_text("second question")
    expect(page.locator("#tree .node.r-assistant").first).to_have_class(re.compile("current"))
    screenshot(page, "07-earlier-node")


def test_edit_and_resend_makes_a_branch(signed_in: Page) -> None:
    page = signed_in
    new_session(page, "Branching")
    send(page, "the original wording")
    wait_turn(page)
    page.locator("#chat .msg.user .edit-link").first.click()
    form = page.locator("#chat .msg.user .edit-form")
    expect(form.locator("textarea")).to_have_value("the original wording")
    form.locator("textarea").fill("a better wording")
    expect_turn(page)
    form.locator("button[type=submit]").click()
    wait_turn(page)
    expect(page.locator("#chat .msg.user")).to_have_text(re.compile("a better wording"))
    expect(page.locator("#chat")).not_to_contain_text("the original wording")
    users = page.locator("#tree .node.r-user")
    expect(users).to_have_count(2)
    expect(page.locator("#tree")).to_contain_text("the original wording")
    screenshot(page, "08-edited-branch")
    # The old branch is one click away.
    page.locator("#tree .node.r-assistant", has_text="the original wording").locator(
        ".node-text"
    ).click()
    expect(page.locator("#chat .msg.user")).to_have_text(re.compile("the original wording"))


def test_a_second_browser_on_another_server_sees_updates_live(
    signed_in: Page, browser: Browser, servers: tuple[Server, Server], user: User
) -> None:
    page = signed_in
    first, second = servers
    url = new_session(page, "Together")
    watcher_context = browser.new_context()
    watcher = watcher_context.new_page()
    sign_in(watcher, second, user)
    watcher.goto(url.replace(first.url, second.url))
    wait_live(watcher)
    send(page, "hello from the first browser")
    expect(watcher.locator("#chat .msg.user")).to_contain_text("hello from the first browser")
    expect(watcher.locator("#chat .msg.assistant[data-entry]")).to_contain_text(
        "You said", timeout=20_000
    )
    expect(watcher.locator("#tree .node")).to_have_count(2)
    assert watcher.evaluate("window.strandLive.duplicates") == 0
    screenshot(watcher, "09-second-browser-second-server")
    watcher_context.close()


def test_a_dropped_websocket_catches_up_without_duplicates(
    signed_in: Page, db_access: None
) -> None:
    page = signed_in
    url = new_session(page, "Reconnect")
    session = Session.objects.get(id=url.rstrip("/").rsplit("/", 1)[-1])
    # Reconnect after a fixed pause, then drop the socket and write while it is gone.
    page.evaluate("window.strandLive.reconnectDelayMs = 1500")
    connects = page.evaluate("window.strandLive.connects")
    page.evaluate("window.strandLive.socket.close()")
    page.wait_for_function("() => window.strandLive.connected === false")
    for text in ("written while away", "and more while away"):
        session.refresh_from_db()
        store.append_events(
            session.id,
            session.last_seq,
            [
                NewEvent(
                    "user/message",
                    {"entry": {"type": "message", "message": {"role": "user", "content": text}}},
                )
            ],
        )
    page.wait_for_function(
        f"() => window.strandLive.connects > {connects} && window.strandLive.ready"
    )
    expect(page.locator("#chat .msg.user")).to_have_count(2)
    session.refresh_from_db()
    live = page.evaluate("window.strandLive")
    assert live["duplicates"] == 0
    assert live["lastSeq"] == session.last_seq
    assert live["received"] == sorted(set(live["received"]))
    screenshot(page, "10-caught-up-after-reconnect")


def test_import_a_pi_file_and_see_its_tree(signed_in: Page, db_access: None) -> None:
    page = signed_in
    page.set_input_files(".import input[type=file]", str(demo.PI_DEMO_FILE))
    page.click(".import button[type=submit]")
    expect(page.locator(".session-head h1")).to_be_visible()
    session = Session.objects.get(id=page.url.rstrip("/").rsplit("/", 1)[-1])
    entries = Entry.objects.filter(session=session).count()
    expect(page.locator("#tree .node")).to_have_count(entries)
    expect(page.locator("#tree .chip.t-compaction").first).to_be_visible()
    expect(page.locator("#tree .label-badge").first).to_be_visible()
    screenshot(page, "11-imported-pi-tree")
    received = page.evaluate("window.strandLive.received.length")
    page.locator("#tree .node.t-compaction .node-text").last.click()
    expect(page.locator("#chat details.compaction").first).to_be_visible()
    # The move redraws the chat and the tree, then its `leaf/moved` comes back over the socket
    # and refreshes them once more; open the card once that is done, or the late swap draws it
    # closed again.
    page.wait_for_function(f"() => window.strandLive.received.length > {received}")
    page.wait_for_load_state("networkidle")
    page.locator("#chat details.compaction > summary").first.click()
    expect(page.locator("#chat details.compaction .replaced").first).to_be_visible()
    screenshot(page, "12-compaction-card")


def test_the_export_of_a_branched_file_draws_any_branch_offline(
    signed_in: Page, browser: Browser, tmp_path: Path, db_access: None
) -> None:
    page = signed_in
    page.set_input_files(".import input[type=file]", str(demo.PI_DEMO_FILE))
    page.click(".import button[type=submit]")
    expect(page.locator(".session-head h1")).to_be_visible()
    session = Session.objects.get(id=page.url.rstrip("/").rsplit("/", 1)[-1])
    response = page.request.get(page.url.split("?")[0].rstrip("/") + "/export.html")
    assert response.ok
    exported = tmp_path / "branched.html"
    exported.write_bytes(response.body())
    offline = browser.new_context(offline=True)
    reader = offline.new_page()
    reader.goto(exported.as_uri())
    # The file's script draws one row per entry and the current branch's chat.
    entries = Entry.objects.filter(session=session).count()
    expect(reader.locator("#tree .node")).to_have_count(entries)
    expect(reader.locator("#tree .node.current")).to_contain_text("a2*: skipped")
    expect(reader.locator("#chat")).to_contain_text("a2*: skipped")
    expect(reader.locator("#branch-note")).to_be_hidden()
    # Another branch, picked in the tree: its chat, with the compaction that folds it.
    reader.locator("#tree .node-text", has_text="u5': different docs").click()
    expect(reader.locator("#chat")).to_contain_text("a5': different docs added")
    expect(reader.locator("#chat")).not_to_contain_text("a2*: skipped")
    expect(reader.locator("#chat details.compaction").first).to_be_visible()
    expect(reader.locator("#branch-note")).to_be_visible()
    expect(reader.locator("#tree .node.shown-leaf")).to_contain_text("a5': different docs")
    screenshot(reader, "14-html-export-another-branch")
    reader.locator("#branch-note a").click()
    expect(reader.locator("#chat")).to_contain_text("a2*: skipped")
    expect(reader.locator("#branch-note")).to_be_hidden()
    offline.close()


def test_the_html_export_opens_offline_with_every_view(
    signed_in: Page, browser: Browser, server: Server, tmp_path: Path
) -> None:
    page = signed_in
    url = new_session(page, "Exported")
    send(page, "read README.md")
    wait_turn(page)
    send(page, "thanks")
    wait_turn(page)
    response = page.request.get(url + "export.html")
    assert response.ok and "attachment" in response.headers["content-disposition"]
    exported = tmp_path / "session.html"
    exported.write_bytes(response.body())
    offline = browser.new_context(offline=True)
    reader = offline.new_page()
    fetched: list[str] = []
    reader.on("request", lambda r: fetched.append(r.url))
    reader.goto(exported.as_uri())
    expect(reader.locator("#chat .msg.user")).to_have_count(2)
    reader.locator("[data-view-tab=trace]").click()
    expect(reader.locator(".turn-block")).to_have_count(2)
    reader.locator(".span.kind-tool .span-name").first.click()
    # Pi's `read`, which the default preset offers, of the file asked for.
    expect(reader.locator(".span.kind-tool .span-name").first).to_contain_text("read")
    expect(reader.locator("#span-detail")).to_contain_text("README.md")
    reader.keyboard.press("3")
    expect(reader.locator("#hash-badge")).to_have_attribute("data-matches", "true")
    # An earlier entry of the tree shows the branch through it.
    reader.locator("[data-view-tab=chat]").click()
    expect(reader.locator("#download-jsonl")).to_have_attribute("href", re.compile("^blob:"))
    screenshot(reader, "13-html-export-offline")
    assert [u for u in fetched if not u.startswith(("file:", "data:", "blob:"))] == []
    offline.close()


def test_the_export_of_a_pi16_file_draws_system_messages_edits_and_usage(
    signed_in: Page, browser: Browser, tmp_path: Path, db_access: None
) -> None:
    page = signed_in
    cases = Path(__file__).resolve().parents[1] / "fixtures" / "pi" / "v1.6" / "cases"
    page.set_input_files(".import input[type=file]", str(cases / "context_edits.jsonl"))
    page.click(".import button[type=submit]")
    expect(page.locator(".session-head h1")).to_be_visible()
    response = page.request.get(page.url.split("?")[0].rstrip("/") + "/export.html")
    assert response.ok
    exported = tmp_path / "pi16.html"
    exported.write_bytes(response.body())
    offline = browser.new_context(offline=True)
    reader = offline.new_page()
    reader.goto(exported.as_uri())
    chat = reader.locator("#chat")
    expect(chat.locator("details.system-message").first).to_contain_text("tools added: read")
    expect(chat).to_contain_text("C answer, unedited.")  # the file's last line is its leaf
    expect(chat).not_to_contain_text("Context edit")
    # Branch B, picked in the tree, has its own edits of the first messages.
    reader.locator("#tree .node-text", has_text="B answer.").click()
    expect(chat).to_contain_text("is replaced in later contexts by “Branch B's version of u1”")
    expect(chat).to_contain_text("Secret: hunter2. Read b.txt")  # the message as written
    # The main branch: an omitted message, and edits after a compaction.
    reader.locator("#tree .node-text", has_text="After compaction").click()
    expect(chat).to_contain_text("is left out of later contexts")
    offline.close()


def test_the_export_of_a_pi16_file_draws_its_usage_entries(
    signed_in: Page, browser: Browser, tmp_path: Path, db_access: None
) -> None:
    page = signed_in
    cases = Path(__file__).resolve().parents[1] / "fixtures" / "pi" / "v1.6" / "cases"
    page.set_input_files(".import input[type=file]", str(cases / "usage_entries.jsonl"))
    page.click(".import button[type=submit]")
    expect(page.locator(".session-head h1")).to_be_visible()
    response = page.request.get(page.url.split("?")[0].rstrip("/") + "/export.html")
    assert response.ok
    exported = tmp_path / "usage.html"
    exported.write_bytes(response.body())
    offline = browser.new_context(offline=True)
    reader = offline.new_page()
    reader.goto(exported.as_uri())
    # The file ends on the branch with the second cache warming.
    expect(reader.locator("#chat .usage-entry")).to_have_text(
        "Usage outside the conversation (cache_warm, anthropic/claude-sonnet-4-5): 20000 tokens, $0.0060"
    )
    offline.close()


def test_a_pi16_file_with_several_roots_draws_each_root_and_moves_between_them(
    signed_in: Page, db_access: None
) -> None:
    page = signed_in
    cases = Path(__file__).resolve().parents[1] / "fixtures" / "pi" / "v1.6" / "cases"
    page.set_input_files(".import input[type=file]", str(cases / "roots.jsonl"))
    page.click(".import button[type=submit]")
    expect(page.locator(".session-head h1")).to_be_visible()
    tree = page.locator("#tree")
    expect(tree.locator(".tree-count")).to_contain_text("4 roots")
    expect(tree.locator('.node[data-depth="0"]')).to_have_count(4)
    chat = page.locator("#chat")
    expect(chat).to_contain_text("uuid child")  # the file's last line is its leaf
    expect(chat).not_to_contain_text("first try")
    # Another root, by click: its branch alone is the chat.
    tree.locator(".node-text", has_text="second answer").click()
    expect(chat).to_contain_text("second try, new root")
    expect(chat).not_to_contain_text("uuid child")
    expect(tree.locator(".node.current")).to_contain_text("second answer")
    # The first root's branch starts with its system message, shown as what it is.
    page.wait_for_load_state("networkidle")
    tree.locator(".node-text", has_text="sideways answer").click()
    expect(chat.locator("details.system-message")).to_have_count(1)
    expect(chat).to_contain_text("sideways")
    expect(chat).not_to_contain_text("second try")
    page.goto(page.url.split("?")[0] + "?view=trace")
    expect(page.locator("#view")).to_contain_text("1 entry outside turns")
    expect(page.locator("#view .span.kind-system")).to_have_count(1)
