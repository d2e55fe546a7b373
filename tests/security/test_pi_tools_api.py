"""Pi's tools over the API with the offline model: `run COMMAND` runs `bash` in the sandbox
and `edit PATH: OLD => NEW` runs `edit`, each only once the user allows it; a command the
user denies never runs; a session on the older tool names keeps calling them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from projections.context import build_session_context
from projections.records import EventRecord
from runtime import sandbox
from sessions_app import services, store
from sessions_app.models import Session
from sessions_app.presets import CODING_PRESET, OLDER_TOOL_NAMES, PI_TOOL_NAMES
from sessions_app.services.pi_io import pi_export_lines, pi_import
from tests.api.conftest import Api, converse
from tests.pi16 import pi16_opens

pytestmark = pytest.mark.django_db(transaction=True)

CODING = "coding-small"
# A preset that names no tools: it offers the default ones, Pi's.
DEFAULT_TOOLS = "default-tools"


@pytest.fixture(autouse=True)
def coding_preset(serve_preset: Any) -> None:
    serve_preset(CODING, **CODING_PRESET)
    serve_preset(DEFAULT_TOOLS, **{k: v for k, v in CODING_PRESET.items() if k != "tools"})


def results_of(events: list[EventRecord]) -> list[tuple[str, str | None, str, Any]]:
    """(tool name, error code, text, details) of each tool result."""
    out = []
    for e in events:
        if e.type != "tool/result":
            continue
        message = e.data["entry"]["message"]
        text = "".join(part.get("text", "") for part in message["content"])
        out.append((message["toolName"], e.data.get("error_code"), text, message.get("details")))
    return out


@pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here")
def test_run_calls_bash_in_the_sandbox_once_allowed(
    as_alice: Api, alice: User, workspace: Path
) -> None:
    session = services.session_create(owner=alice, title="run", cwd=str(workspace), preset=CODING)
    events = converse(
        as_alice, session, "run cat notes.txt; echo made > made.txt; cat /proc/1/environ; ls /home"
    )
    [(name, code, text, details)] = results_of(events)
    assert name == "bash"
    assert "hello world" in text
    # The environment of the sandbox's init holds nothing of the server, not even its folder
    # (and its NUL separators are shown, not stored).
    assert str(settings.BASE_DIR) not in text and "DATABASE_URL" not in text
    assert "Command exited with code 2" in text  # ls /home: there is no /home
    assert code == "COMMAND_FAILED"
    assert details["exit_code"] == 2 and details["limits"]["wall_s"] > 0
    assert (workspace / "made.txt").read_text() == "made\n"
    asked = [e for e in events if e.type == "approval/asked"]
    assert len(asked) == 1


@pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here")
def test_a_denied_command_never_runs(as_alice: Api, alice: User, workspace: Path) -> None:
    session = services.session_create(owner=alice, title="deny", cwd=str(workspace), preset=CODING)
    events = converse(as_alice, session, "run echo no > denied.txt", decision="rejected")
    [(name, code, _text, _details)] = results_of(events)
    assert name == "bash" and code is not None
    assert not (workspace / "denied.txt").exists()


def test_edit_replaces_text_once_allowed_and_returns_a_diff_and_a_patch(
    as_alice: Api, alice: User, workspace: Path
) -> None:
    session = services.session_create(owner=alice, title="edit", cwd=str(workspace), preset=CODING)
    events = converse(as_alice, session, "edit notes.txt: hello => goodbye")
    [(name, code, text, details)] = results_of(events)
    assert (name, code) == ("edit", None)
    assert text == "Successfully replaced 1 block(s) in notes.txt."
    assert (workspace / "notes.txt").read_text() == "goodbye world\n"
    assert "-1 hello world" in details["diff"] and "+1 goodbye world" in details["diff"]
    assert "-hello world\n+goodbye world\n" in details["patch"]
    assert details["firstChangedLine"] == 1
    # Text that is not there is an error result, and the file stays as it was.
    again = results_of(converse(as_alice, session, "edit notes.txt: hello => again"))
    assert again[0][1] == "EDIT_NOT_FOUND"
    assert (workspace / "notes.txt").read_text() == "goodbye world\n"


def test_a_denied_edit_changes_nothing(as_alice: Api, alice: User, workspace: Path) -> None:
    session = services.session_create(owner=alice, title="deny", cwd=str(workspace), preset=CODING)
    converse(as_alice, session, "edit notes.txt: hello => nope", decision="rejected")
    assert (workspace / "notes.txt").read_text() == "hello world\n"


def test_the_older_phrases_call_pis_tools_on_pis_preset(
    as_alice: Api, alice: User, workspace: Path
) -> None:
    session = services.session_create(owner=alice, title="pi", cwd=str(workspace), preset=CODING)
    events = converse(as_alice, session, "read notes.txt, list files, search for world")
    results = results_of(events)
    assert [(r[0], r[1]) for r in results] == [("read", None), ("ls", None), ("grep", None)]
    assert results[0][2] == "hello world\n"
    assert results[1][2] == "notes.txt"
    assert "notes.txt:1" in results[2][2]


def test_a_session_on_the_older_names_keeps_them(
    as_alice: Api, alice: User, workspace: Path
) -> None:
    session = services.session_create(
        owner=alice, title="old", cwd=str(workspace), preset=DEFAULT_TOOLS
    )
    # Made when the offline preset offered Strand's older tools: its snapshot names them.
    Session.objects.filter(pk=session.pk).update(
        preset={**session.preset, "tools": OLDER_TOOL_NAMES}
    )
    events = converse(as_alice, session, "read notes.txt, list files, write x.txt: y")
    assert [r[0] for r in results_of(events)] == ["read_file", "list_files", "write_file"]
    assert all(r[1] is None for r in results_of(events))
    header = store.events_after(session.id, -1, 1000)
    offered = [e.data["tools"] for e in header if e.type == "request/header"]
    assert [t["name"] for t in offered[-1]] == OLDER_TOOL_NAMES


def test_a_new_session_on_the_default_preset_offers_pis_tools(
    as_alice: Api, alice: User, workspace: Path
) -> None:
    session = services.session_create(
        owner=alice, title="new", cwd=str(workspace), preset=DEFAULT_TOOLS
    )
    assert session.preset["tools"] == PI_TOOL_NAMES
    events = converse(as_alice, session, "read notes.txt, list files, write x.txt: y")
    assert [r[0] for r in results_of(events)] == ["read", "ls", "write"]


@pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here")
def test_a_pi_session_imported_and_continued_offers_pis_tools(
    as_alice: Api, alice: User, workspace: Path
) -> None:
    case = Path(__file__).resolve().parents[1] / "fixtures/pi/v1.6/cases/context_edits.jsonl"
    assert '"name":"read"' in case.read_text()  # its history calls Pi's read
    with case.open("rb") as source:
        session = pi_import(source=source, owner=alice, cwd=str(workspace)).session
    assert session.preset["name"] == "coding"
    events = converse(as_alice, session, "run echo from-pi > out.txt")
    events += converse(as_alice, session, "edit out.txt: from-pi => continued")
    events += converse(as_alice, session, "read out.txt")
    results = results_of(events)
    assert [(r[0], r[1]) for r in results] == [("bash", None), ("edit", None), ("read", None)]
    assert results[-1][2] == "continued\n"


@pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here")
def test_a_pi_session_continued_with_bash_and_edit_opens_in_pi_with_the_same_context(
    as_alice: Api, alice: User, workspace: Path, tmp_path: Path
) -> None:
    case = Path(__file__).resolve().parents[1] / "fixtures/pi/v1.6/cases/context_edits.jsonl"
    with case.open("rb") as source:
        session = pi_import(source=source, owner=alice, cwd=str(workspace)).session
    converse(as_alice, session, "run printf 'a\\nb\\n' > f.txt; cat f.txt")
    converse(as_alice, session, "edit f.txt: b => c")
    session.refresh_from_db()
    path = tmp_path / "continued.jsonl"
    path.write_text("".join(pi_export_lines(session)), encoding="utf-8")
    pi = pi16_opens(path)
    entries = store.entries_of(session.id)
    assert pi["leafId"] == session.leaf_entry_id
    contexts = {r.get("leafId"): r["context"] for r in pi["contexts"]}
    for entry in entries:
        ours = json.loads(json.dumps(build_session_context(entries, entry.id).to_pi()))
        theirs = contexts[entry.id]

        # Pi's context is Strand's, plus the system messages that carry Strand's prompt and
        # tools (the file's own system messages are in both).
        def plain(context: dict[str, Any]) -> dict[str, Any]:
            return {
                **context,
                "messages": [m for m in context["messages"] if m["role"] != "system"],
            }

        assert plain(theirs) == plain(ours), entry.id
        systems = [m for m in theirs["messages"] if m["role"] == "system"]
        assert all(m in systems for m in ours["messages"] if m["role"] == "system"), entry.id
    results = [m for m in contexts[session.leaf_entry_id]["messages"] if m["role"] == "toolResult"]
    bash, edit = results[-2:]
    assert bash["toolName"] == "bash" and bash["content"][0]["text"] == "a\nb\n"
    assert edit["toolName"] == "edit" and edit["details"]["diff"] == " 1 a\n-2 b\n+2 c"
    assert "@@ -1,2 +1,2 @@" in edit["details"]["patch"]
