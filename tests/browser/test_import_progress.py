"""The import form in Chromium: it shows the upload, then the entries written as the server
reads the file, then opens the session; a file bad at its end says why on the form, as
text, and leaves nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from bench.pi import generate
from sessions_app.models import Session

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WATCH = """() => {
  const status = document.querySelector('.import-progress');
  window.importSeen = [];
  new MutationObserver((records) => records.forEach((r) =>
    r.addedNodes.forEach((n) => window.importSeen.push(n.textContent))))
    .observe(status, {childList: true, characterData: true, subtree: true});
}"""


def _file(tmp_path: Path, bad_end: bool) -> Path:
    path = tmp_path / ("bad.jsonl" if bad_end else "work.jsonl")
    generate(path, 2_500)
    if bad_end:
        with path.open("a") as out:
            out.write(
                '{"type":"message","id":"<b>x</b>","parentId":null,"timestamp":"t",'
                '"message":{"role":"oracle"}}\n'
            )
    return path


def test_the_import_shows_its_progress_then_opens_the_session(
    signed_in: Page, db_access: None, tmp_path: Path
) -> None:
    page = signed_in
    page.evaluate(WATCH)
    page.set_input_files(".import input[type=file]", str(_file(tmp_path, bad_end=False)))
    with page.expect_navigation():
        page.click(".import button[type=submit]")
    expect(page.locator(".session-head h1")).to_be_visible()
    assert Session.objects.filter(title="work").exists()


def test_a_file_bad_at_its_end_says_why_on_the_form(
    signed_in: Page, db_access: None, tmp_path: Path
) -> None:
    page = signed_in
    page.evaluate(WATCH)
    page.set_input_files(".import input[type=file]", str(_file(tmp_path, bad_end=True)))
    page.click(".import button[type=submit]")
    status = page.locator(".import-progress")
    expect(status).to_contain_text("Could not import bad.jsonl: line")
    expect(status).to_contain_text("'<b>x</b>'")  # as text, never markup
    assert page.locator(".import-progress b").count() == 0
    seen = page.evaluate("window.importSeen")
    assert any(text.startswith("Importing: 1,000 entries written") for text in seen), seen
    assert not Session.objects.filter(title="bad").exists()
    expect(page.locator(".import button[type=submit]")).to_be_enabled()
