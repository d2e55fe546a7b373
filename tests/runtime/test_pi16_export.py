"""Strand's own sessions, exported, open in Pi 1.6.0 with the context Strand shows: the same
messages, and the system prompt and tools of Strand's requests as Pi's system messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from projections.context import build_session_context
from sessions_app import agent, store
from sessions_app.models import Session
from sessions_app.services.pi_io import pi_export_lines
from tests.pi16 import pi16_opens
from tests.runtime.conftest import OFFLINE, wait_done

pytestmark = pytest.mark.django_db(transaction=True)


def replayed(messages: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """The prompt and tool names Pi's system messages add up to (pi-ai's replay)."""
    sections: dict[str, str] = {}
    tools: dict[str, Any] = {}
    for m in messages:
        if m["role"] != "system":
            continue
        for name, text in (m.get("sections") or {}).items():
            if text is None:
                sections.pop(name, None)
            else:
                sections[name] = text
        for tool in m.get("toolsRemoved") or []:
            tools.pop(tool["name"], None)
        for tool in m.get("toolsAdded") or []:
            tools[tool["name"]] = tool
    return "\n\n".join(sections.values()), list(tools)


def headers(session: Session) -> list[dict[str, Any]]:
    return [
        dict(e.data)
        for e in store.events_after(session.id, -1, 10_000)
        if e.type == "request/header"
    ]


def test_pi16_opens_a_strand_session_with_its_prompt_and_tools(
    make_session, serve_preset, tmp_path
):
    session = make_session(keep_recent_tokens=20)
    agent.agent_send_message(session.id, "read notes.txt and search for TODO")
    wait_done(session)
    # The operator changes the preset: the next requests go out with another prompt and tools.
    changed = {**OFFLINE, "keep_recent_tokens": 20, "system_prompt": "Be brief."}
    serve_preset(session.preset["name"], **{**changed, "tools": ["read_file", "grep"]})
    agent.agent_send_message(session.id, "read notes.txt again")
    wait_done(session)
    agent.agent_compact(session.id)
    agent.agent_send_message(session.id, "hello")
    wait_done(session)
    session.refresh_from_db()
    sent = headers(session)
    assert len(sent) >= 2 and sent[0]["system_prompt"] != sent[-1]["system_prompt"]

    path = tmp_path / "session.jsonl"
    path.write_text("".join(pi_export_lines(session)), encoding="utf-8")
    pi = pi16_opens(path)
    entries = store.entries_of(session.id)
    assert pi["rewritten"] is False
    assert pi["leafId"] == session.leaf_entry_id
    contexts = {r.get("leafId"): r["context"] for r in pi["contexts"]}
    for entry in entries:
        theirs = contexts[entry.id]
        ours = json.loads(json.dumps(build_session_context(entries, entry.id).to_pi()))
        # Pi's context is Strand's, plus the system messages that carry the prompt and tools.
        without_system = [m for m in theirs["messages"] if m["role"] != "system"]
        assert {**theirs, "messages": without_system} == ours, entry.id
    prompt, tools = replayed(contexts[session.leaf_entry_id]["messages"])
    assert prompt == sent[-1]["system_prompt"]
    assert tools == [t["name"] for t in sent[-1]["tools"]]
    # After the compaction the context starts with its checkpoint, then the summary.
    roles = [m["role"] for m in contexts[session.leaf_entry_id]["messages"]]
    assert roles[:2] == ["system", "compactionSummary"]


def test_a_strand_session_s_export_imports_and_exports_back_the_same(make_session, tmp_path):
    from sessions_app.services import pi_io

    session = make_session(keep_recent_tokens=20)
    agent.agent_send_message(session.id, "read notes.txt and search for TODO")
    wait_done(session)
    agent.agent_compact(session.id)
    session.refresh_from_db()
    path = tmp_path / "first.jsonl"
    first = "".join(pi_export_lines(session))
    path.write_text(first, encoding="utf-8")
    with path.open("rb") as source:
        again = pi_io.pi_import(source=source, owner=session.owner).session
    second = "".join(pi_export_lines(again))
    assert [json.loads(x) for x in second.splitlines()] == [
        json.loads(x) for x in first.splitlines()
    ]
    # The imported copy builds, system messages and all, the context Pi 1.6 builds.
    ours = json.loads(json.dumps(build_session_context(store.entries_of(again.id)).to_pi()))
    theirs = next(r for r in pi16_opens(path)["contexts"] if "leafId" not in r)["context"]
    assert ours == theirs and ours["messages"][0]["role"] == "system"


def test_a_fork_exports_its_copied_entries_with_the_parent_s_system_messages(
    make_session, tmp_path
):
    from sessions_app import services

    session = make_session(keep_recent_tokens=20)
    agent.agent_send_message(session.id, "read notes.txt and search for TODO")
    wait_done(session)
    agent.agent_compact(session.id)
    session.refresh_from_db()
    fork = services.session_fork(
        session=session, entry_id=session.leaf_entry_id, owner=session.owner
    )
    agent.agent_send_message(fork.id, "hello")
    wait_done(fork)
    fork.refresh_from_db()

    parent_path = tmp_path / "parent.jsonl"
    parent_path.write_text("".join(pi_export_lines(session)), encoding="utf-8")
    fork_path = tmp_path / "fork.jsonl"
    fork_path.write_text("".join(pi_export_lines(fork)), encoding="utf-8")
    parent = {r.get("leafId"): r["context"] for r in pi16_opens(parent_path)["contexts"]}
    pi = pi16_opens(fork_path)
    assert pi["rewritten"] is False and pi["leafId"] == fork.leaf_entry_id
    theirs = {r.get("leafId"): r["context"] for r in pi["contexts"]}
    entries = store.entries_of(fork.id)
    copied = [e for e in entries if e.id in parent]
    assert copied and len(copied) < len(entries)
    for entry in copied:  # the copied path reads to Pi as it did in the parent
        assert theirs[entry.id] == parent[entry.id], entry.id
    for entry in entries:
        ours = json.loads(json.dumps(build_session_context(entries, entry.id).to_pi()))
        without_system = [m for m in theirs[entry.id]["messages"] if m["role"] != "system"]
        assert {**theirs[entry.id], "messages": without_system} == ours, entry.id
    prompt, tools = replayed(theirs[fork.leaf_entry_id]["messages"])
    assert prompt == headers(fork)[-1]["system_prompt"]
    assert tools == [t["name"] for t in headers(fork)[-1]["tools"]]
    # The fork's own first request had the parent's prompt and tools: no system message anew.
    lines = [json.loads(x) for x in fork_path.read_text().splitlines()[1:]]
    systems = [e for e in lines if e.get("message", {}).get("role") == "system"]
    assert systems and all(e["id"] not in {x.id for x in entries} for e in systems)
    assert len(systems) == sum(
        1
        for e in map(json.loads, parent_path.read_text().splitlines()[1:])
        if e.get("message", {}).get("role") == "system"
    )
