"""Sessions, events, entries, the tree, the leaf, forks, context, views and Pi files through
the API, and the error shape and limits on each kind of input."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from sessions_app import services, store
from sessions_app.models import Event, Session, SessionDeletion
from tests.api.conftest import Api, body_of, content_of, tree_walk

pytestmark = pytest.mark.django_db

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "pi" / "cases"


def entry_event(text: str, **entry: Any) -> dict[str, Any]:
    return {
        "type": "user/message",
        "data": {
            "entry": {"type": "message", "message": {"role": "user", "content": text}, **entry}
        },
    }


# --- sessions ----------------------------------------------------------------------------


def test_create_returns_the_new_session(as_alice: Api) -> None:
    response = as_alice.post("/sessions", {"title": "Plans"})
    assert response.status_code == 201
    created = body_of(response)
    assert created["title"] == "Plans" and created["owner"] == "alice"
    assert created["last_seq"] == 0 and created["preset"]["provider"] == "offline"
    assert Session.objects.get(id=created["id"]).owner.username == "alice"


def test_create_accepts_only_server_presets_and_allowed_working_directories(
    as_alice: Api, workspace: Path, tmp_path: Path
) -> None:
    refused = as_alice.post("/sessions", {"preset": "my-own"})
    assert refused.status_code == 422 and body_of(refused)["error"] == "not_allowed"
    outside = as_alice.post("/sessions", {"cwd": "/etc"})
    assert outside.status_code == 403 and body_of(outside)["error"] == "workspace_not_allowed"
    escape = as_alice.post("/sessions", {"cwd": str(workspace / ".." / ".." / "x")})
    assert escape.status_code == 403
    inside = as_alice.post("/sessions", {"cwd": str(workspace), "preset": "offline"})
    assert inside.status_code == 201 and body_of(inside)["cwd"] == "~"
    assert body_of(inside)["preset_name"] == "offline"


def test_create_refuses_a_preset_given_inline(as_alice: Api) -> None:
    response = as_alice.post("/sessions", {"preset": {"provider": "openai", "base_url": "x"}})
    assert response.status_code == 422
    assert body_of(response)["error"] == "validation_error"


def test_get_includes_the_turn_status(as_alice: Api, alice_session: Session) -> None:
    got = body_of(as_alice.get(f"/sessions/{alice_session.id}"))
    assert got["turn_status"] == "idle"
    assert got["message_count"] == 3 and got["last_seq"] == alice_session.last_seq


def test_list_pages_with_a_cursor_newest_first(as_alice: Api, alice: Any) -> None:
    made = [str(services.session_create(owner=alice, title=f"s{i}").id) for i in range(7)]
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        query = "/sessions?limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = body_of(as_alice.get(query))
        seen += [s["id"] for s in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made))


def test_list_filters(as_alice: Api, alice: Any, alice_session: Session) -> None:
    services.session_create(owner=alice, title="Shopping list")
    fork = services.session_fork(
        session=alice_session, entry_id=alice_session.leaf_entry_id or "", owner=alice
    )
    titles = [s["title"] for s in body_of(as_alice.get("/sessions?q=shopping"))["items"]]
    assert titles == ["Shopping list"]
    forks = body_of(as_alice.get(f"/sessions?parent={alice_session.id}"))["items"]
    assert [s["id"] for s in forks] == [str(fork.id)]
    created = alice_session.created_at.isoformat().replace("+00:00", "Z")
    before = body_of(as_alice.get(f"/sessions?created_before={created}"))["items"]
    assert before == []
    assert len(body_of(as_alice.get(f"/sessions?created_after={created}"))["items"]) == 2


def test_list_refuses_a_forged_cursor(as_alice: Api) -> None:
    for cursor in ("nonsense", "bm90IGEgY3Vyc29y", "%00"):
        response = as_alice.get(f"/sessions?cursor={cursor}")
        assert response.status_code in (400, 422), cursor


def test_rename_appends_a_fact(as_alice: Api, alice_session: Session) -> None:
    response = as_alice.patch(f"/sessions/{alice_session.id}", {"title": "  New name "})
    assert response.status_code == 200 and body_of(response)["title"] == "New name"
    assert store.events_after(alice_session.id, alice_session.last_seq)[0].type == "session/renamed"
    assert as_alice.patch(f"/sessions/{alice_session.id}", {"title": ""}).status_code == 422
    blank = as_alice.patch(f"/sessions/{alice_session.id}", {"title": "   "})
    assert blank.status_code == 422 and body_of(blank)["error"] == "invalid"


def test_delete_is_audited(as_alice: Api, alice_session: Session) -> None:
    assert as_alice.delete(f"/sessions/{alice_session.id}").status_code == 204
    assert as_alice.get(f"/sessions/{alice_session.id}").status_code == 404
    audit = SessionDeletion.objects.get(session_id=alice_session.id)
    assert audit.deleted_by == "alice" and audit.event_count == alice_session.last_seq + 1


def test_fork_makes_a_new_session_of_the_caller(as_alice: Api, alice_session: Session) -> None:
    first = store.entries_of(alice_session.id)[0].id
    response = as_alice.post(
        f"/sessions/{alice_session.id}/fork", {"entry_id": first, "title": "F"}
    )
    assert response.status_code == 201
    fork = body_of(response)
    assert fork["parent_id"] == str(alice_session.id) and fork["fork_point"] == first
    unknown = as_alice.post(f"/sessions/{alice_session.id}/fork", {"entry_id": "nope"})
    assert unknown.status_code == 422


# --- events and entries ------------------------------------------------------------------


def test_events_page_by_seq(as_alice: Api, alice_session: Session) -> None:
    page = body_of(as_alice.get(f"/sessions/{alice_session.id}/events?after_seq=0&limit=2"))
    assert [e["seq"] for e in page["events"]] == [1, 2]
    assert page["last_seq"] == alice_session.last_seq and page["next_after_seq"] == 2
    rest = body_of(as_alice.get(f"/sessions/{alice_session.id}/events?after_seq=2&limit=100"))
    assert rest["events"][-1]["seq"] == alice_session.last_seq and rest["next_after_seq"] is None
    first = page["events"][0]
    assert first["type"] == "user/message" and first["data"]["entry"]["id"] == first["entry_id"]


def test_append_with_the_expected_seq(as_alice: Api, alice_session: Session) -> None:
    path = f"/sessions/{alice_session.id}/events"
    body = {
        "expected_seq": alice_session.last_seq,
        "events": [entry_event("one"), entry_event("two")],
    }
    response = as_alice.post(path, body)
    assert response.status_code == 201
    appended = body_of(response)
    assert appended["first_seq"] == alice_session.last_seq + 1
    assert appended["last_seq"] == alice_session.last_seq + 2
    assert appended["leaf_entry_id"] == appended["entry_ids"][1]


def test_append_with_a_stale_seq_is_a_conflict_with_the_current_seq(
    as_alice: Api, alice_session: Session
) -> None:
    path = f"/sessions/{alice_session.id}/events"
    response = as_alice.post(path, {"expected_seq": 0, "events": [entry_event("late")]})
    assert response.status_code == 409
    assert body_of(response) == {
        "error": "conflict",
        "detail": body_of(response)["detail"],
        "current_seq": alice_session.last_seq,
    }
    assert Event.objects.filter(session=alice_session).count() == alice_session.last_seq + 1


@pytest.mark.parametrize(
    "event, status, code",
    [
        ({"type": "turn/start", "data": {"turn": 0}}, 422, "not_allowed"),
        ({"type": "request/sent", "data": {}}, 422, "not_allowed"),
        ({"type": "approval/decided", "data": {}}, 422, "not_allowed"),
        ({"type": "no/such", "data": {}}, 422, "not_allowed"),
        ({"type": "user/message", "data": {"entry": {"type": "label"}}}, 422, "invalid_event"),
        (entry_event("x", id="i" * 65), 422, "invalid_event"),
        (entry_event("x", parentId="missing"), 422, "invalid_event"),
        ({"type": "session/renamed", "data": {"title": "t" * 501}}, 422, "invalid_event"),
        ({"type": "leaf/moved", "data": {"to": "nowhere"}}, 422, "invalid_event"),
    ],
)
def test_append_refuses_bad_events(
    as_alice: Api, alice_session: Session, event: dict[str, Any], status: int, code: str
) -> None:
    path = f"/sessions/{alice_session.id}/events"
    response = as_alice.post(path, {"expected_seq": alice_session.last_seq, "events": [event]})
    assert (response.status_code, body_of(response)["error"]) == (status, code)
    assert Session.objects.get(id=alice_session.id).last_seq == alice_session.last_seq


def test_append_limits(as_alice: Api, alice_session: Session, settings: Any) -> None:
    path = f"/sessions/{alice_session.id}/events"
    settings.STRAND_MAX_BATCH = 2
    batch = {"expected_seq": alice_session.last_seq, "events": [entry_event("x")] * 3}
    assert as_alice.post(path, batch).status_code == 413
    settings.STRAND_MAX_EVENT_BYTES = 1000
    big = {"expected_seq": alice_session.last_seq, "events": [entry_event("x" * 2000)]}
    response = as_alice.post(path, big)
    assert response.status_code == 413 and body_of(response)["error"] == "too_large"
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    huge = {"expected_seq": alice_session.last_seq, "events": [entry_event("x" * 20_000)]}
    response = as_alice.post(path, huge)
    assert response.status_code == 413 and body_of(response)["error"] == "too_large"
    assert as_alice.post(path, {"expected_seq": 3, "events": []}).status_code == 422


def test_entries_page_in_append_order(as_alice: Api, alice_session: Session) -> None:
    page = body_of(as_alice.get(f"/sessions/{alice_session.id}/entries?limit=2"))
    assert [e["type"] for e in page["entries"]] == ["message", "message"]
    assert page["next_after_seq"] == page["entries"][-1]["seq"]
    rest = body_of(
        as_alice.get(f"/sessions/{alice_session.id}/entries?after_seq={page['next_after_seq']}")
    )
    assert [e["type"] for e in rest["entries"]] == ["message", "label"]
    assert rest["next_after_seq"] is None
    assert rest["entries"][0]["data"]["message"]["content"] == "secret-marker-7731 on a branch"


def test_tree_shows_branches_labels_and_the_active_path(
    as_alice: Api, alice_session: Session
) -> None:
    tree = body_of(as_alice.get(f"/sessions/{alice_session.id}/tree"))
    entries = store.entries_of(alice_session.id)
    root = entries[0].id
    assert (tree["node_count"], tree["root_count"]) == (len(entries), 1)
    assert tree["leaf_id"] == alice_session.leaf_entry_id
    assert tree["next_cursor"] is None
    rows = tree["nodes"]
    assert [n["row"] for n in rows] == list(range(len(entries)))
    on_path = [n["id"] for n in rows if n["on_active_path"]]
    assert on_path[0] == root and on_path[-1] == tree["leaf_id"]
    nodes = {n["id"]: n for n in rows}
    assert nodes[root]["child_count"] == 2 and nodes[root]["label"] == "start"
    assert (rows[0]["indent"], rows[0]["connector"]) == (0, "")
    # The root forks: its two children hang from it with Pi's connectors, one indent in.
    children = [n for n in rows if n["parent_id"] == root]
    assert [n["connector"] for n in children] == ["├─", "└─"]
    assert {n["indent"] for n in children} == {1}


def test_tree_pages_around_the_leaf_with_cursors_and_refuses_a_forged_one(
    as_alice: Api, alice_session: Session
) -> None:
    path = f"/sessions/{alice_session.id}/tree"
    first = body_of(as_alice.get(path + "?limit=3"))
    assert len(first["nodes"]) == 3 and not first["partial"]
    assert [n["id"] for n in first["nodes"] if n["is_current_leaf"]] == [
        alice_session.leaf_entry_id
    ]
    assert first["rows_above"] + 3 + first["rows_below"] == first["node_count"] == 4
    rows, _ = tree_walk(as_alice, alice_session.id, limit=3)
    assert [n["row"] for n in rows] == [0, 1, 2, 3]
    forged = [
        "nope",
        "W10",  # []
        cursor_text({"k": "rows"}),
        cursor_text({"k": "sql", "as_of": 1}),
        cursor_text({"k": "rows", "as_of": True, "leaf": None, "start": 0, "stop": 1}),
        cursor_text({"k": "rows", "as_of": 1, "leaf": None, "start": -5, "stop": 1}),
        cursor_text({"k": "below", "as_of": 1, "leaf": None, "parent": "x" * 65}),
        cursor_text({"k": "path", "leaf": None, "end": "a"}),  # a chat cursor
    ]
    for bad in forged:
        refused = as_alice.get(path + f"?cursor={bad}")
        assert refused.status_code == 422, bad
        assert body_of(refused)["error"] == "invalid"
    too_many = as_alice.get(path + "?limit=2001")
    assert too_many.status_code == 422 and body_of(too_many)["error"] == "validation_error"


def cursor_text(value: Any) -> str:
    raw = json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_leaf_moves_exactly_where_asked(as_alice: Api, alice_session: Session) -> None:
    path = f"/sessions/{alice_session.id}/leaf"
    second = store.entries_of(alice_session.id)[1].id
    moved = body_of(as_alice.put(path, {"entry_id": second}))
    assert moved == {"leaf_entry_id": second, "last_seq": alice_session.last_seq + 1}
    assert body_of(as_alice.get(path))["leaf_entry_id"] == second
    assert body_of(as_alice.put(path, {"entry_id": None}))["leaf_entry_id"] is None
    assert as_alice.put(path, {"entry_id": "missing"}).status_code == 422


# --- context and views -------------------------------------------------------------------


def test_context_of_the_current_leaf_and_of_another(as_alice: Api, alice_session: Session) -> None:
    path = f"/sessions/{alice_session.id}/context"
    current = body_of(as_alice.get(path))
    assert current["format"] == "pi"
    assert [m["content"] for m in current["messages"]] == [
        "secret-marker-7731 first",
        "secret-marker-7731 on a branch",
    ]
    second = store.entries_of(alice_session.id)[1].id
    other = body_of(as_alice.get(f"{path}?leaf={second}&format=provider"))
    assert other["format"] == "provider" and other["leaf_id"] == second
    assert [m["content"] for m in other["messages"]] == ["secret-marker-7731 first", "second"]
    assert as_alice.get(f"{path}?leaf=missing").status_code == 422
    assert as_alice.get(f"{path}?format=html").status_code == 422


def test_chat_view_follows_the_leaf(as_alice: Api, alice_session: Session) -> None:
    path = f"/sessions/{alice_session.id}/views/chat"
    chat = body_of(as_alice.get(path))
    assert [(i["kind"], i["text"]) for i in chat["items"]] == [
        ("user", "secret-marker-7731 first"),
        ("user", "secret-marker-7731 on a branch"),
    ]
    second = store.entries_of(alice_session.id)[1].id
    other = body_of(as_alice.get(f"{path}?leaf={second}"))
    assert other["leaf_id"] == second and other["items"][-1]["text"] == "second"


def test_trace_and_request_views_of_a_session_without_turns(
    as_alice: Api, alice_session: Session
) -> None:
    trace = body_of(as_alice.get(f"/sessions/{alice_session.id}/views/trace"))
    assert trace["turns"] == [] and trace["spans"] == [] and trace["older_turn"] is None
    for seq in (1, -1, 10**30):
        response = as_alice.get(f"/sessions/{alice_session.id}/views/requests/{seq}")
        assert response.status_code in (404, 422), seq


# --- Pi files ----------------------------------------------------------------------------


def upload(api: Api, content: bytes, name: str | None = None) -> Any:
    data: dict[str, Any] = {"file": SimpleUploadedFile("s.jsonl", content)}
    if name is not None:
        data["name"] = name
    return api.client.post("/api/sessions/import", data)


def test_import_then_export_round_trips_the_entries(as_alice: Api) -> None:
    original = (CASES / "branching.jsonl").read_bytes()
    response = upload(as_alice, original, name="Imported")
    assert response.status_code == 201
    result = body_of(response)
    lines = [json.loads(line) for line in original.decode().splitlines() if line.strip()]
    assert result["entries"] == len(lines) - 1 and result["session"]["owner"] == "alice"
    exported = as_alice.get(f"/sessions/{result['session']['id']}/export")
    assert exported.status_code == 200
    assert exported["Content-Type"].startswith("application/x-ndjson")
    assert exported["Content-Disposition"].startswith("attachment;")
    assert exported["X-Content-Type-Options"] == "nosniff"
    back = [json.loads(line) for line in content_of(exported).decode().splitlines()]
    assert [e["id"] for e in back[1:]] == [e["id"] for e in lines[1:]]
    assert back[1:] == lines[1:]


PI16_CASES = CASES.parent / "v1.6" / "cases"


@pytest.mark.parametrize("name", ["system_messages", "context_edits", "compactions16", "roots"])
def test_the_llm_format_is_pi_s_convert_to_llm_at_every_leaf(as_alice: Api, name: str) -> None:
    """A Pi 1.6 file imported through the API: its context in the `llm` format is, for
    every entry as the leaf, what Pi 1.6.0's convertToLlm gave for that leaf."""
    response = upload(as_alice, (PI16_CASES / f"{name}.jsonl").read_bytes())
    session_id = body_of(response)["session"]["id"]
    records = json.loads((PI16_CASES / f"{name}.contexts.json").read_text("utf-8"))
    leaves = [r for r in records if isinstance(r.get("leafId"), str) and r["leafId"] != "ffffffff"]
    assert leaves
    for record in leaves:
        path = f"/sessions/{session_id}/context?format=llm&leaf={record['leafId']}"
        view = body_of(as_alice.get(path))
        assert view["format"] == "llm" and view["messages"] == record["llm"], record["leafId"]


def test_import_refusals(as_alice: Api, settings: Any) -> None:
    broken = upload(as_alice, b"this is not a pi file\n")
    assert broken.status_code == 422 and body_of(broken)["error"] == "invalid_pi_file"
    not_multipart = as_alice.post("/sessions/import", {"file": "x"})
    assert not_multipart.status_code == 400
    missing = as_alice.client.post("/api/sessions/import", {"name": "no file"})
    assert missing.status_code == 400 and body_of(missing)["error"] == "bad_request"
    long_name = upload(as_alice, (CASES / "basic_linear.jsonl").read_bytes(), name="n" * 501)
    assert long_name.status_code == 422
    settings.STRAND_MAX_IMPORT_BYTES = 100
    too_big = upload(as_alice, (CASES / "basic_linear.jsonl").read_bytes())
    assert too_big.status_code == 413 and body_of(too_big)["error"] == "too_large"
    assert Session.objects.count() == 0


def test_import_is_rate_limited_per_user(as_alice: Api, as_bob: Api, settings: Any) -> None:
    settings.STRAND_RATE_LIMITS = {"import": (1, 3600)}
    pi_file = (CASES / "basic_linear.jsonl").read_bytes()
    assert upload(as_alice, pi_file).status_code == 201
    limited = upload(as_alice, pi_file)
    assert limited.status_code == 429
    assert body_of(limited)["error"] == "rate_limited"
    assert int(limited["Retry-After"]) == body_of(limited)["retry_after"] > 0
    assert upload(as_bob, pi_file).status_code == 201


# --- errors ------------------------------------------------------------------------------


def test_errors_are_json_with_a_code_and_a_detail(as_alice: Api, alice_session: Session) -> None:
    cases = {
        ("GET", "/api/nothing/here", None): (404, "not_found"),
        ("GET", "/api/sessions/not-a-uuid", None): (422, "validation_error"),
        ("POST", "/api/sessions", "{not json"): (400, "bad_request"),
        ("POST", "/api/sessions", '{"title": NaN}'): (400, "bad_request"),
        ("POST", "/api/sessions", '{"title": "a\\u0000b"}'): (400, "bad_request"),
        ("POST", "/api/sessions", '{"title": "\\ud800"}'): (400, "bad_request"),
        ("POST", "/api/sessions", '{"title": 5}'): (422, "validation_error"),
        ("POST", "/api/sessions", "[]"): (400, "bad_request"),
        ("POST", "/api/sessions", '{"title": []}'): (422, "validation_error"),
        ("GET", "/api/sessions?q=%00", None): (400, "bad_request"),
        ("GET", "/api/sessions?limit=0", None): (422, "validation_error"),
        ("GET", "/api/sessions?limit=x", None): (422, "validation_error"),
    }
    for (method, path, raw), (status, code) in cases.items():
        response = as_alice.client.generic(method, path, raw or "", content_type="application/json")
        assert response.status_code == status, (method, path, raw, response.content)
        assert response["Content-Type"].startswith("application/json")
        error = body_of(response)
        assert error["error"] == code and isinstance(error["detail"], str), error


def test_validation_errors_name_the_field(as_alice: Api) -> None:
    error = body_of(as_alice.post("/sessions", {"title": "t" * 501}))
    assert error["errors"][0]["loc"] == ["body", "title"]
    assert "title" in error["detail"]


def test_unauthorized_answers_say_how_to_authenticate() -> None:
    response = Client().get("/api/sessions")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert body_of(response)["error"] == "unauthorized"


def test_openapi_and_docs_are_served() -> None:
    schema = body_of(Client().get("/api/openapi.json"))
    assert "/api/sessions/{session_id}/events" in schema["paths"]
    schemes = schema["components"]["securitySchemes"]
    assert {s["type"] for s in schemes.values()} == {"http", "apiKey"}
    assert "SessionOut" in schema["components"]["schemas"]
    docs = Client().get("/api/docs")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()
