"""Hostile content survives the API as data: stored and returned exactly, JSON-escaped so
that no response holds markup, and written unchanged into the Pi export (a download, never a
page)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from sessions_app.api.schemas import MESSAGE_MAX
from sessions_app.models import Session
from tests.api.conftest import Api, body_of, content_of

pytestmark = pytest.mark.django_db

CORPUS = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    '<a href="javascript:alert(1)">click</a>',
    "[click](javascript:alert(1)) ![x](javascript:alert(1))",
    "<svg/onload=alert(1)>",
    "</script><script>alert(document.cookie)</script>",
    "\"><iframe srcdoc='<script>alert(1)</script>'></iframe>",
    "{{ 7*7 }} {% csrf_token %} ${7*7} #{7*7}",
    "<!-- x --><style>body{display:none}</style><base href=//evil.example/>",
    "```html\n<script>alert(1)</script>\n```\n<details open ontoggle=alert(1)>",
    "&lt;already escaped&gt; &amp; &#60;script&#62; \\u003cscript\\u003e",
    "\u202egnp.exe right-to-left override",
    "bell\u0007 escape\u001b[31mred\u001b[0m backspace\u0008 del\u007f",
    "line\u2028separator\u2029paragraph",
    "zero\u200bwidth\ufeffbom\u00adsoft hyphen",
    "\U0001f600 emoji \u0301combining \U0001d400 math",
]
LONG = "<b>" + "x" * (MESSAGE_MAX - 7) + "</b>"


def assistant(text: str, call_arg: str, call_id: str) -> dict[str, Any]:
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": text},
            {
                "type": "toolCall",
                "id": call_id,
                "name": "read_file",
                "arguments": {"path": call_arg},
            },
        ],
        "provider": "offline",
        "model": "strand-offline-1",
        "api": "offline",
        "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2},
        "stopReason": "toolUse",
        "timestamp": 1,
    }
    return {"type": "assistant/message", "data": {"entry": {"type": "message", "message": message}}}


def tool_result(text: str, call_id: str) -> dict[str, Any]:
    message = {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "read_file",
        "content": [{"type": "text", "text": text}],
        "isError": False,
        "timestamp": 2,
    }
    return {"type": "tool/result", "data": {"entry": {"type": "message", "message": message}}}


def user(text: str) -> dict[str, Any]:
    entry = {"type": "message", "message": {"role": "user", "content": text}}
    return {"type": "user/message", "data": {"entry": entry}}


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)


@pytest.fixture
def hostile_session(as_alice: Api) -> tuple[str, list[str]]:
    """A session whose title, messages, tool calls, tool results and labels are hostile."""
    title = "".join(CORPUS)[:500]
    created = body_of(as_alice.post("/sessions", {"title": title}))
    sid = created["id"]
    events: list[dict[str, Any]] = []
    for i, text in enumerate(CORPUS):
        events += [user(text), assistant(text, text, f"call-{i}"), tool_result(text, f"call-{i}")]
    events.append(user(LONG))
    response = as_alice.post(f"/sessions/{sid}/events", {"expected_seq": 0, "events": events})
    assert response.status_code == 201, response.content[:300]
    first = body_of(response)["entry_ids"][0]
    labels = [
        {
            "type": "entry/label",
            "data": {"entry": {"type": "label", "targetId": first, "label": text}},
        }
        for text in CORPUS[:3]
    ]
    info = {
        "type": "entry/session_info",
        "data": {"entry": {"type": "session_info", "name": CORPUS[1]}},
    }
    seq = body_of(response)["last_seq"]
    assert (
        as_alice.post(
            f"/sessions/{sid}/events", {"expected_seq": seq, "events": [*labels, info]}
        ).status_code
        == 201
    )
    assert as_alice.patch(f"/sessions/{sid}", {"title": CORPUS[0]}).status_code == 200
    return sid, [*CORPUS, LONG]


VIEWS = [
    "/sessions/{sid}",
    "/sessions?limit=5",
    "/sessions/{sid}/events?limit=1000",
    "/sessions/{sid}/entries",
    "/sessions/{sid}/tree",
    "/sessions/{sid}/context",
    "/sessions/{sid}/context?format=provider",
    "/sessions/{sid}/views/chat",
]


@pytest.mark.parametrize("view", VIEWS)
def test_hostile_content_comes_back_as_escaped_json(
    as_alice: Api, hostile_session: tuple[str, list[str]], view: str
) -> None:
    sid, texts = hostile_session
    response = as_alice.get(view.format(sid=sid))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    assert response["X-Content-Type-Options"] == "nosniff"
    raw = response.content
    # No markup characters at all: every <, > and & is a \u escape inside a JSON string.
    assert b"<" not in raw and b">" not in raw and b"&" not in raw
    found = set(strings_in(json.loads(raw)))
    if view.startswith("/sessions?") or view == "/sessions/{sid}":
        assert CORPUS[0] in found  # the title
        return
    expected = texts if "tree" not in view else []
    for text in expected:
        assert text in found, text[:40]
    if "tree" in view:
        tree = json.loads(raw)
        labels = {node["label"] for node in tree["nodes"] if node["label"] is not None}
        assert labels == {CORPUS[2]}  # the last label wins
        assert tree["session_name"] == CORPUS[1]


def test_chat_items_hold_the_text_exactly(
    as_alice: Api, hostile_session: tuple[str, list[str]]
) -> None:
    sid, texts = hostile_session
    chat = body_of(as_alice.get(f"/sessions/{sid}/views/chat"))
    users = [i["text"] for i in chat["items"] if i["kind"] == "user"]
    assert users == texts
    replies = [i for i in chat["items"] if i["kind"] == "assistant"]
    assert [r["text"] for r in replies] == CORPUS
    calls = [r["tool_calls"][0] for r in replies]
    assert [c["arguments"]["path"] for c in calls] == CORPUS
    assert [c["result"]["text"] for c in calls] == CORPUS


def test_the_export_holds_the_content_unchanged(
    as_alice: Api, hostile_session: tuple[str, list[str]]
) -> None:
    sid, texts = hostile_session
    response = as_alice.get(f"/sessions/{sid}/export")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/x-ndjson")
    assert response["Content-Disposition"] == f'attachment; filename="strand-{sid}.jsonl"'
    assert response["X-Content-Type-Options"] == "nosniff"
    lines = content_of(response).decode("utf-8").split("\n")
    assert lines[-1] == ""  # one JSON value per line: no raw line breaks inside a value
    entries = [json.loads(line) for line in lines[1:-1]]
    found = set(strings_in(entries))
    for text in texts:
        assert text in found, text[:40]


@pytest.mark.parametrize(
    "body, status",
    [
        ({"title": "t" * 500}, 201),
        ({"title": "t" * 501}, 422),
        ({"title": "nul \u0000 inside"}, 400),
        ({"title": "\u202e\u0007\u001b\u2028"}, 201),
    ],
)
def test_title_limits(as_alice: Api, body: dict[str, Any], status: int) -> None:
    response = as_alice.post("/sessions", body)
    assert response.status_code == status
    if status == 201:
        assert Session.objects.get(id=body_of(response)["id"]).title == body["title"]


def test_message_text_limits(as_alice: Api, alice_session: Session) -> None:
    path = f"/sessions/{alice_session.id}/messages"
    too_long = as_alice.post(path, {"text": "x" * (MESSAGE_MAX + 1)})
    assert too_long.status_code == 422 and body_of(too_long)["errors"][0]["loc"] == ["body", "text"]
    assert as_alice.post(path, {"text": ""}).status_code == 422
    assert as_alice.post(path, {"text": "a\u0000b"}).status_code == 400
