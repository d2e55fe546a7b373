"""Share links through the API and the guest page, on a session the offline model ran: the
owner alone makes, lists and revokes them; a guest sees one branch, redacted, and nothing
else; forged, malformed, expired and revoked tokens get the same 404; no write door takes a
share token; the owner's patterns cannot make the server work without bound."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from sessions_app import redaction, store
from sessions_app.models import Event, Session, ShareLink
from sessions_app.services import shares
from tests.api.conftest import Api, body_of, user_msg, wait_for, wait_idle

pytestmark = pytest.mark.django_db(transaction=True)

FILE_SECRET = "FILE-SECRET-4242"
HAYSTACK = "haystack-line-0815"
KEY = "sk-live-ABCDEF123456"
OFF_BRANCH = "OFF-BRANCH-7731"
# As the pages write it (escaped).
SYSTEM_PROMPT = "You are a helpful assistant working in the user&#x27;s project directory."


def new_session(api: Api) -> Session:
    response = api.post("/sessions", {"title": f"Shared {KEY}"})
    assert response.status_code == 201, response.content
    return Session.objects.get(id=body_of(response)["id"])


def say(api: Api, session: Session, text: str) -> None:
    before = Session.objects.get(id=session.id).last_seq
    response = api.post(f"/sessions/{session.id}/messages", {"text": text})
    assert response.status_code == 202, response.content
    wait_for(lambda: Session.objects.get(id=session.id).last_seq > before)
    wait_idle(session)


@dataclass
class Shared:
    session: Session
    branch: str  # the leaf of the branch shared
    off_branch: str  # an entry off it


@pytest.fixture
def shared(workspace_root: Path, as_alice: Api) -> Shared:
    """Alice's session: a read of a file, a search of it and a key in her message on one
    branch; another branch left from the first turn."""
    session = new_session(as_alice)
    folder = Path(session.cwd)
    (folder / "secret.txt").write_text(f"{FILE_SECRET}\n")
    (folder / "hay.txt").write_text(f"needle {HAYSTACK}\n")
    say(as_alice, session, "read secret.txt")
    fork_point = Session.objects.get(id=session.id).leaf_entry_id
    say(as_alice, session, "search for needle")
    say(as_alice, session, f"remember {KEY} please")
    branch = Session.objects.get(id=session.id).leaf_entry_id
    assert fork_point and branch
    moved = as_alice.put(f"/sessions/{session.id}/leaf", {"entry_id": fork_point})
    assert moved.status_code == 200, moved.content
    say(as_alice, session, f"search for {OFF_BRANCH}")
    off_branch = Session.objects.get(id=session.id).leaf_entry_id
    assert off_branch
    session.refresh_from_db()
    return Shared(session, branch, off_branch)


def make(api: Api, session: Session, **body: Any) -> Any:
    return api.post(f"/sessions/{session.id}/shares", body)


def made(api: Api, session: Session, **body: Any) -> dict[str, Any]:
    response = make(api, session, **body)
    assert response.status_code == 201, response.content
    return body_of(response)


def guest(path: str, **extra: Any) -> Any:
    return Client().get(path, **extra)


def page_text(response: Any) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


# --- the owner's doors ----------------------------------------------------------------------


def test_the_owner_makes_lists_and_revokes_a_link(as_alice: Api, alice: Any) -> None:
    session = new_session(as_alice)
    store.append_events(session.id, session.last_seq, [user_msg("hello guest")])
    link = made(as_alice, session, redact_tool_outputs=True, redact_patterns=["sk-[a-z]+"])
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", link["token"])
    assert link["url"].endswith(f"/s/{link['token']}/")
    row = ShareLink.objects.get(pk=link["id"])
    assert row.digest == shares.digest_of(link["token"]) and link["token"] not in str(
        ShareLink.objects.filter(pk=row.pk).values().first()
    )

    listed = body_of(as_alice.get(f"/sessions/{session.id}/shares"))
    assert [item["id"] for item in listed] == [link["id"]]
    assert "token" not in listed[0] and "url" not in listed[0]
    assert "hello guest" in page_text(guest(f"/s/{link['token']}/"))

    assert as_alice.delete(f"/sessions/{session.id}/shares/{link['id']}").status_code == 204
    assert guest(f"/s/{link['token']}/").status_code == 404
    assert body_of(as_alice.get(f"/sessions/{session.id}/shares"))[0]["revoked_at"]
    # Revoking again changes nothing; a link of another session is not found.
    assert as_alice.delete(f"/sessions/{session.id}/shares/{link['id']}").status_code == 204
    other = new_session(as_alice)
    assert as_alice.delete(f"/sessions/{other.id}/shares/{link['id']}").status_code == 404


def test_only_the_owner_shares_a_session(
    as_alice: Api, as_bob: Api, as_carol: Api, anonymous: Api, bob: Any, carol: Any
) -> None:
    session = new_session(as_alice)
    link = made(as_alice, session)
    base = f"/sessions/{session.id}/shares"
    for api, status in ((as_bob, 404), (as_carol, 403), (anonymous, 401)):
        assert api.get(base).status_code == status
        assert api.post(base, {}).status_code == status
        assert api.delete(f"{base}/{link['id']}").status_code == status
    assert ShareLink.objects.count() == 1 and ShareLink.objects.get().revoked_at is None
    # The pages: Bob is told nothing, staff may not share others' sessions.
    for user, status in ((bob, 404), (carol, 403)):
        client = Client()
        client.force_login(user)
        assert client.get(f"/sessions/{session.id}/shares").status_code == status
        assert (
            client.post(f"/sessions/{session.id}/shares", {"expires_days": "7"}).status_code
            == status
        )
        revoke = f"/sessions/{session.id}/shares/{link['id']}/revoke"
        assert client.post(revoke).status_code == status
    assert ShareLink.objects.count() == 1 and ShareLink.objects.get().revoked_at is None


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"branch": "no-such-entry"}, "no entry"),
        ({"branch": "nul\x00"}, ""),
        ({"branch": "b" * 65}, "branch"),
        ({"expires_in_s": 0}, "expires_in_s"),
        ({"expires_in_s": 400 * 86400}, "expires_in_s"),
        ({"redact_patterns": ["(unclosed"]}, "cannot use the pattern"),
        ({"redact_patterns": ["(a)\\1"]}, "cannot use the pattern"),
        ({"redact_patterns": ["(?=look)ahead"]}, "cannot use the pattern"),
        ({"redact_patterns": ["x" * 201]}, "at most 200 characters"),
        ({"redact_patterns": ["a*"]}, "matches empty text"),
        ({"redact_patterns": ["a"] * 21}, "redact_patterns"),
        ({"redact_patterns": ["nul\x00"]}, ""),
    ],
)
def test_a_refused_link_says_why_and_writes_nothing(
    as_alice: Api, body: dict[str, Any], says: str
) -> None:
    session = new_session(as_alice)
    response = make(as_alice, session, **body)
    assert response.status_code in (400, 422), response.content
    assert says in response.content.decode()
    assert set(body_of(response)) >= {"error", "detail"}
    assert ShareLink.objects.count() == 0


def test_the_share_page_makes_a_link_shown_once_and_revokes_it(alice: Any) -> None:
    client = Client()
    client.force_login(alice)
    session = Session.objects.create(owner=alice, title="Paged")
    page = client.get(f"/sessions/{session.id}/")
    assert f'href="/sessions/{session.id}/shares"' in page.content.decode()
    made_page = client.post(
        f"/sessions/{session.id}/shares",
        {"expires_days": "1", "tool_outputs": "on", "patterns": "sk-[a-z]+\n\nkey-[0-9]+"},
    )
    text = made_page.content.decode()
    [url] = re.findall(r'value="(http://testserver/s/[A-Za-z0-9_-]{43}/)"', text)
    link = ShareLink.objects.get()
    assert link.redact_tool_outputs and link.redact_patterns == ["sk-[a-z]+", "key-[0-9]+"]
    assert timedelta(hours=23) < link.expires_at - timezone.now() <= timedelta(days=1)
    # The list never shows the token again.
    token = url.rsplit("/", 2)[-2]
    assert token not in client.get(f"/sessions/{session.id}/shares").content.decode()
    bad = client.post(f"/sessions/{session.id}/shares", {"expires_days": "7", "patterns": "(a"})
    assert bad.status_code == 400 and "cannot use the pattern" in bad.content.decode()
    assert ShareLink.objects.count() == 1

    revoked = client.post(f"/sessions/{session.id}/shares/{link.pk}/revoke")
    assert revoked.status_code == 302
    assert guest(f"/s/{token}/").status_code == 404


# --- the guest page -------------------------------------------------------------------------


def test_a_guest_sees_the_branch_redacted_and_nothing_else(
    shared: Shared, as_alice: Api, alice: Any
) -> None:
    link = made(
        as_alice,
        shared.session,
        branch=shared.branch,
        redact_tool_outputs=True,
        redact_file_contents=True,
        redact_system_prompt=True,
        # The offline model's replies quote what its tools found: words of its own, which
        # the owner's patterns cover.
        redact_patterns=["sk-live-[A-Za-z0-9]+", "FILE-SECRET-[0-9]+", "haystack-line-[0-9]+"],
    )
    base = f"/s/{link['token']}/"
    pages = {view: page_text(guest(f"{base}?view={view}")) for view in ("chat", "trace", "context")}
    for view, text in pages.items():
        for secret in (FILE_SECRET, HAYSTACK, KEY, OFF_BRANCH, SYSTEM_PROMPT):
            assert secret not in text, (view, secret)
        assert f"/sessions/{shared.session.id}" not in text, view  # no owner's links
        assert 'id="composer"' not in text and "Sign out" not in text
        assert '<meta name="robots" content="noindex">' in text
        assert f'data-id="{shared.off_branch}"' not in text  # the tree: the path only
        assert f'data-id="{shared.branch}"' in text
    chat = pages["chat"]
    assert "[redacted: file contents]" in chat and "[redacted: tool output]" in chat
    assert "remember [redacted] please" in chat
    assert "[redacted: system prompt]" in pages["context"]
    assert "Redacted for sharing" in pages["context"]

    # Deep links off the branch show the branch all the same.
    off = guest(f"{base}?view=chat&leaf={shared.off_branch}&scope=all")
    assert OFF_BRANCH not in page_text(off)
    off_requests = [
        e.seq
        for e in Event.objects.filter(session=shared.session, type="request/sent")
        if e.data["leaf_entry_id"] is not None
    ]
    for seq in off_requests:
        text = page_text(guest(f"{base}?view=context&request={seq}"))
        assert OFF_BRANCH not in text and SYSTEM_PROMPT not in text
    trace = page_text(guest(f"{base}?view=trace&scope=all"))
    assert OFF_BRANCH not in trace
    # Every span's inputs and outputs, as the trace opens them.
    spans = set(re.findall(r'href="[^"?]*\?([^"]*span=[^"]+)"', trace.replace("&amp;", "&")))
    markers = set()
    for query in spans:
        detail = guest(f"{base}?{query}&fragment=span", HTTP_HX_REQUEST="true")
        text = page_text(detail)
        for secret in (FILE_SECRET, HAYSTACK, KEY, OFF_BRANCH, SYSTEM_PROMPT):
            assert secret not in text, (query, secret)
        markers.update(re.findall(r"\[redacted: [a-z ]+\]", text))
    assert {"[redacted: file contents]", "[redacted: tool output]"} <= markers

    response = guest(base)
    assert response["X-Robots-Tag"].startswith("noindex")
    assert response["Referrer-Policy"] == "no-referrer"
    assert ShareLink.objects.get(pk=link["id"]).view_count == 3 + 1 + len(off_requests) + 1 + 1
    # The owner's own page is unchanged.
    owner_client = Client()
    owner_client.force_login(alice)
    owner = owner_client.get(f"/sessions/{shared.session.id}/?view=context").content.decode()
    assert SYSTEM_PROMPT in owner and 'id="composer"' in owner


def test_a_whole_session_link_follows_the_current_leaf_and_keeps_its_fragments_redacted(
    shared: Shared, as_alice: Api
) -> None:
    link = made(as_alice, shared.session, redact_file_contents=True)
    base = f"/s/{link['token']}/"
    chat = page_text(guest(base))
    assert OFF_BRANCH in chat
    outputs = re.findall(r'<pre class="output">(.*?)</pre>', chat, re.S)
    assert "[redacted: file contents]" in outputs
    assert not any(FILE_SECRET in output for output in outputs)
    for fragment in ("?view=chat&fragment=live", "?view=trace&fragment=trace-older"):
        text = page_text(guest(base + fragment, HTTP_HX_REQUEST="true"))
        outputs = re.findall(r'<pre class="output">(.*?)</pre>', text, re.S)
        assert not any(FILE_SECRET in output for output in outputs)
        assert 'id="composer' not in text
    tree = page_text(guest(base + "?tree=1", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="tree"))
    assert f'data-id="{shared.branch}"' in tree and 'form="leaf-form"' not in tree
    # htmx fragments are not counted as views.
    assert ShareLink.objects.get(pk=link["id"]).view_count == 1


@pytest.mark.parametrize("case", ["forged", "malformed", "long", "expired", "revoked"])
def test_a_link_that_opens_nothing_answers_404_without_a_reason(as_alice: Api, case: str) -> None:
    session = new_session(as_alice)
    link = made(as_alice, session)
    token = link["token"]
    if case == "forged":
        token = ("A" if token[0] != "A" else "B") + token[1:]
    elif case == "malformed":
        token = "not a token!"
    elif case == "long":
        token = "A" * 5000
    elif case == "expired":
        ShareLink.objects.filter(pk=link["id"]).update(expires_at=timezone.now())
    else:
        as_alice.delete(f"/sessions/{session.id}/shares/{link['id']}")
    response = guest(f"/s/{token}/")
    nothing = guest("/s/" + "Z" * 43 + "/")
    assert response.status_code == nothing.status_code == 404
    assert response.content == nothing.content
    for word in (b"expired", b"revoked", b"forged"):
        assert word not in response.content.lower()


def test_no_write_door_takes_a_share_token(shared: Shared, as_alice: Api) -> None:
    link = made(as_alice, shared.session)
    token, sid = link["token"], shared.session.id
    before = Session.objects.get(id=sid).last_seq
    bearer = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    writes = [
        ("post", f"/api/sessions/{sid}/messages", {"text": "hi"}),
        ("put", f"/api/sessions/{sid}/leaf", {"entry_id": shared.branch}),
        ("patch", f"/api/sessions/{sid}", {"title": "taken"}),
        ("delete", f"/api/sessions/{sid}", None),
        ("post", f"/api/sessions/{sid}/events", {"expected_seq": before, "events": []}),
        ("post", f"/api/sessions/{sid}/shares", {}),
        ("get", f"/api/sessions/{sid}", None),
    ]
    for method, path, body in writes:
        response = getattr(bearer, method)(
            path,
            body if body is None else __import__("json").dumps(body),
            content_type="application/json",
        )
        assert response.status_code == 401, (method, path, response.status_code)
    # The pages' forms: no sign-in, so no write (a share token in a cookie, a query or a
    # form field is nothing to them).
    page = Client()
    page.cookies["sessionid"] = token
    for path in ("messages", "leaf", "rename", "fork", "delete", "cancel", "compact", "label"):
        response = page.post(f"/sessions/{sid}/{path}?token={token}", {"token": token, "text": "x"})
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    # The guest page itself takes no write.
    for method in ("post", "put", "delete", "patch"):
        assert getattr(Client(), method)(f"/s/{token}/").status_code == 405
    assert Session.objects.get(id=sid).last_seq == before
    assert Session.objects.get(id=sid).title.startswith("Shared")


def test_the_guest_page_is_rate_limited_per_link_and_per_address(
    as_alice: Api, settings: Any
) -> None:
    settings.STRAND_RATE_LIMITS = {"share-view": (3, 60)}
    session = new_session(as_alice)
    link = made(as_alice, session)
    url = f"/s/{link['token']}/"
    for _ in range(3):
        assert guest(url, REMOTE_ADDR="10.0.0.1").status_code == 200
    limited = guest(url, REMOTE_ADDR="10.0.0.2")  # another address: the link's own limit
    assert limited.status_code == 429 and int(limited["Retry-After"]) >= 1
    # Guessing tokens from one address runs into that address's limit.
    for _ in range(3):
        assert guest("/s/" + "Q" * 43 + "/", REMOTE_ADDR="10.0.0.3").status_code == 404
    assert guest("/s/" + "Q" * 43 + "/", REMOTE_ADDR="10.0.0.3").status_code == 429


def test_patterns_cannot_hang_the_server_on_the_worst_input(as_alice: Api) -> None:
    """Patterns that backtracking engines take exponential time on, over a long message that
    almost matches: RE2 runs in time linear in the input."""
    session = new_session(as_alice)
    worst = "a" * 200_000 + "!"
    store.append_events(session.id, session.last_seq, [user_msg(worst)])
    evil = ["(a+)+$", "(a|aa)+$", "(a*)*b", "(.*a){20}"]
    link = made(as_alice, session, redact_patterns=evil)
    text = page_text(guest(f"/s/{link['token']}/"))
    assert worst not in text and "[redacted]" in text
    # And the compiled rules alone, on a larger input.
    rules = redaction.Redaction(patterns=redaction.compile_patterns(evil))
    assert rules.text("a" * 1_000_000 + "!").startswith("[redacted]")


def test_staff_see_live_links_in_the_admin_and_revoke_them(as_alice: Api, carol: Any) -> None:
    session = new_session(as_alice)
    live = made(as_alice, session)
    ended = made(as_alice, session)
    as_alice.delete(f"/sessions/{session.id}/shares/{ended['id']}")
    staff = Client()
    staff.force_login(carol)
    carol.is_superuser = True
    carol.save()
    listing = staff.get("/admin/sessions_app/sharelink/").content.decode()
    assert f'value="{live["id"]}"' in listing and f'value="{ended["id"]}"' not in listing
    assert live["token"] not in listing
    response = staff.post(
        "/admin/sessions_app/sharelink/",
        {"action": "revoke", "_selected_action": [str(live["id"])]},
    )
    assert response.status_code == 302
    assert guest(f"/s/{live['token']}/").status_code == 404


def test_deleting_a_session_deletes_its_links(as_alice: Api) -> None:
    session = new_session(as_alice)
    link = made(as_alice, session)
    assert as_alice.delete(f"/sessions/{session.id}").status_code == 204
    assert not ShareLink.objects.exists()
    assert guest(f"/s/{link['token']}/").status_code == 404


def test_a_guest_sees_no_files_of_the_workspace(shared: Shared, as_alice: Api, alice: Any) -> None:
    """The workspace's files are no facts the link's redaction reads through: a guest gets
    no Files view (its address shows the chat) and no diffs in the trace."""
    owner = Client()
    owner.force_login(alice)
    owner_view = owner.get(
        f"/sessions/{shared.session.id}/?view=files&file=secret.txt&leaf={shared.branch}"
    )
    assert FILE_SECRET in owner_view.content.decode()  # the owner's Files view has it
    link = made(
        as_alice,
        shared.session,
        branch=shared.branch,
        redact_tool_outputs=True,
        redact_file_contents=True,
        redact_patterns=["FILE-SECRET-[0-9]+"],
    )
    base = f"/s/{link['token']}/"
    for query in ("?view=files", "?view=files&file=secret.txt", "?view=trace"):
        text = page_text(guest(base + query))
        assert FILE_SECRET not in text, query
        assert "workspace.tar" not in text and 'id="files"' not in text, query
        assert 'data-view-tab="files"' not in text, query
