"""One message cannot make the agent fill the disk.

The offline model turns every `write PATH: TEXT` line of a message into a `write_file` call
of one reply (parallel tool calls); Alice sends such messages through the API and approves
every write she is asked about, as a user who clicks "allow" on everything would. Then:

- one reply makes at most `STRAND_MAX_TOOL_CALLS_PER_REPLY` tool calls (32): the calls past
  it get an error result saying so, are never asked about, and write nothing, and a reply
  of 1,500 calls still ends its turn;
- the folder the writes land in holds at most `STRAND_WORKSPACE_MAX_FILES` files and
  directories and `STRAND_WORKSPACE_MAX_BYTES` bytes, one write is at most
  `STRAND_WORKSPACE_MAX_WRITE_BYTES` and `STRAND_WORKSPACE_MAX_DEPTH` components deep: the
  worst shapes (many small files, one huge file, deep directories) are each refused at the
  bound with an error result naming it, and what is refused leaves nothing on the disk;
- parallel writes of one reply, which run at once, never get past a bound together.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from projections.records import EventRecord
from runtime.tools import MAX_WRITE_BYTES, Toolbox, WorkspaceQuota
from sessions_app import services, store
from sessions_app.models import Session
from tests.api.conftest import OFFLINE_PRESET, Api, body_of
from tests.api.conftest import converse as turn_events

pytestmark = pytest.mark.django_db(transaction=True)


def session_in(owner: User, cwd: Path, title: str = "writes") -> Session:
    return services.session_create(owner=owner, title=title, cwd=str(cwd), preset=OFFLINE_PRESET)


def converse(api: Api, session: Session, text: str) -> list[EventRecord]:
    """Send `text` and allow every write the turn asks about; the turn's tool results, in
    model order."""
    return [e for e in turn_events(api, session, text) if e.type == "tool/result"]


def outcome(result: EventRecord) -> tuple[str | None, str]:
    """(error code or None, the result's text)."""
    message = result.data["entry"]["message"]
    text = "".join(part.get("text", "") for part in message["content"])
    return result.data.get("error_code"), text


def codes(results: list[EventRecord]) -> list[str | None]:
    return [outcome(r)[0] for r in results]


def asked(session: Session) -> int:
    return sum(1 for e in store.events_after(session.id, -1, 100_000) if e.type == "approval/asked")


def entries_under(folder: Path) -> int:
    return sum(1 for _ in folder.rglob("*"))


# --- the cap on tool calls of one reply ----------------------------------------------------


def test_a_reply_runs_at_most_the_capped_number_of_tool_calls(
    as_alice: Api, alice: User, workspace: Path
) -> None:
    session = session_in(alice, workspace)
    lines = "\n".join(f"write f{n:02}.txt: file {n}" for n in range(40))
    results = converse(as_alice, session, lines)
    assert len(results) == 40  # every call has its result
    assert codes(results)[:32] == [None] * 32
    assert codes(results)[32:] == ["TOO_MANY_TOOL_CALLS"] * 8
    code, text = outcome(results[-1])
    assert "at most 32 tool calls" in text and "made 40" in text
    assert asked(session) == 32  # the calls past the cap were never put to Alice
    assert sorted(p.name for p in workspace.glob("f*.txt")) == [f"f{n:02}.txt" for n in range(32)]
    ended = [e for e in store.events_after(session.id, -1, 100_000) if e.type == "turn/end"]
    assert ended[-1].data["reason"] == "completed"


def test_a_reply_of_fifteen_hundred_calls_ends_its_turn(
    as_alice: Api, alice: User, workspace: Path
) -> None:
    # 21 KB of message; before the cap, the 1,500 tool/call events of the step passed the
    # store's batch limit, the turn failed, and so did closing it: it was left open.
    session = session_in(alice, workspace)
    results = converse(as_alice, session, "read notes.txt\n" * 1_500)
    assert len(results) == 1_500
    assert codes(results) == [None] * 32 + ["TOO_MANY_TOOL_CALLS"] * 1_468
    calls = [e for e in store.events_after(session.id, -1, 100_000) if e.type == "tool/call"]
    assert len(calls) == 1_500
    ended = [e for e in store.events_after(session.id, -1, 100_000) if e.type == "turn/end"]
    assert len(ended) == 1
    assert body_of(as_alice.get(f"/sessions/{session.id}"))["turn_status"] == "idle"


def test_the_cap_is_a_setting(as_alice: Api, alice: User, workspace: Path, settings: Any) -> None:
    settings.STRAND_MAX_TOOL_CALLS_PER_REPLY = 2
    session = session_in(alice, workspace)
    results = converse(as_alice, session, "read notes.txt\nlist files\nwrite x.txt: never")
    assert codes(results) == [None, None, "TOO_MANY_TOOL_CALLS"]
    assert asked(session) == 0 and not (workspace / "x.txt").exists()


# --- the workspace quota: the worst shapes ---------------------------------------------------


def test_many_small_files_stop_at_the_file_count(
    as_alice: Api, alice: User, workspace: Path, settings: Any
) -> None:
    settings.STRAND_WORKSPACE_MAX_FILES = 10  # notes.txt is one already
    session = session_in(alice, workspace)
    lines = "\n".join(f"write s{n:02}.txt: small" for n in range(14))
    results = converse(as_alice, session, lines)
    # The 14 writes ran at once; exactly 9 found room, whichever they were.
    assert codes(results).count(None) == 9
    assert codes(results).count("QUOTA_EXCEEDED") == 5
    refused = [text for code, text in map(outcome, results) if code]
    assert all("quota is 10 files and directories" in text for text in refused)
    assert entries_under(workspace) == 10
    # Overwriting makes no new file: still allowed when full.
    kept = next(workspace.glob("s*.txt")).name
    again = converse(as_alice, session, f"write {kept}: changed")
    assert codes(again) == [None] and (workspace / kept).read_text() == "changed"


def test_bytes_stop_at_the_workspace_quota(
    as_alice: Api, alice: User, workspace: Path, settings: Any
) -> None:
    settings.STRAND_WORKSPACE_MAX_BYTES = 5_000  # notes.txt holds 12
    session = session_in(alice, workspace)
    lines = "\n".join(f"write b{n}.txt: {'x' * 1_000}" for n in range(7))
    results = converse(as_alice, session, lines)
    assert codes(results).count(None) == 4  # 12 + 4 × 1000 fit, a fifth would not
    assert codes(results).count("QUOTA_EXCEEDED") == 3
    refused = [text for code, text in map(outcome, results) if code]
    assert all("quota is 5000 bytes in all its files" in text for text in refused)
    assert sum(p.stat().st_size for p in workspace.rglob("*") if p.is_file()) == 4_012
    # A write that makes a file smaller is always welcome.
    shrink = converse(as_alice, session, f"write {next(workspace.glob('b*.txt')).name}: tiny")
    assert codes(shrink) == [None]


def test_one_huge_file_is_refused_whole(
    as_alice: Api, alice: User, workspace: Path, settings: Any
) -> None:
    settings.STRAND_WORKSPACE_MAX_WRITE_BYTES = 50_000
    session = session_in(alice, workspace)
    results = converse(as_alice, session, f"write huge.txt: {'h' * 60_000}")
    code, text = outcome(results[0])
    assert code == "TOO_LARGE" and "60000 bytes; one write is at most 50000 bytes" in text
    assert not (workspace / "huge.txt").exists()


def test_the_default_write_bound_holds_for_content_past_a_message(workspace: Path) -> None:
    # A message holds at most 100,000 characters, so a real model's larger arguments are
    # tried on the toolbox itself, with the defaults.
    toolbox = Toolbox.for_session(["write_file"], str(workspace), quota=WorkspaceQuota())
    huge = "z" * (MAX_WRITE_BYTES + 1)
    result = asyncio.run(toolbox.run("write_file", {"path": "huge.txt", "content": huge}))
    assert result.is_error and result.error_code == "TOO_LARGE"
    assert not (workspace / "huge.txt").exists()


def test_deep_directories_are_refused_before_any_is_made(
    as_alice: Api, alice: User, workspace: Path, settings: Any
) -> None:
    settings.STRAND_WORKSPACE_MAX_FILES = 20
    session = session_in(alice, workspace)
    too_deep = "/".join(["d"] * 40) + "/leaf.txt"  # deeper than the default 32
    many_dirs = "/".join(["e"] * 25) + "/leaf.txt"  # 26 new entries: more than 20
    results = converse(as_alice, session, f"write {too_deep}: x\nwrite {many_dirs}: y")
    (deep_code, deep_text), (many_code, many_text) = map(outcome, results)
    assert deep_code == "PATH_TOO_DEEP" and "41 components deep" in deep_text
    assert "at most 32 deep" in deep_text
    assert many_code == "QUOTA_EXCEEDED" and "would add 26" in many_text
    assert sorted(p.name for p in workspace.iterdir()) == ["notes.txt"]  # not one directory
    within = "/".join(["f"] * 5) + "/leaf.txt"
    assert codes(converse(as_alice, session, f"write {within}: fine")) == [None]
    assert (workspace / within).read_text() == "fine"


def test_sessions_in_the_owners_folder_share_its_quota(
    as_alice: Api, alice: User, workspace: Path, settings: Any
) -> None:
    settings.STRAND_WORKSPACE_MAX_FILES = 6  # notes.txt, and the folder `sub` below
    sub = workspace / "sub"
    sub.mkdir()
    in_sub = session_in(alice, sub, "in a subfolder")
    at_top = session_in(alice, workspace, "at the top")
    assert codes(converse(as_alice, at_top, "write a.txt: 1\nwrite b.txt: 2")) == [None, None]
    # The subfolder's session counts the whole folder: two more entries fit, not six.
    results = converse(as_alice, in_sub, "\n".join(f"write c{n}.txt: 3" for n in range(4)))
    assert codes(results).count(None) == 2
    assert codes(results).count("QUOTA_EXCEEDED") == 2
    assert entries_under(workspace) == 6


def test_links_count_once_and_are_never_followed(workspace: Path, tmp_path: Path) -> None:
    # A link back to the folder itself and one to a large folder elsewhere: the measure
    # neither loops nor counts what the links point at.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for n in range(50):
        (elsewhere / f"e{n}.txt").write_text("x" * 1_000)
    (workspace / "loop").symlink_to(workspace)
    (workspace / "far").symlink_to(elsewhere)
    quota = WorkspaceQuota(max_entries=4, max_bytes=1_000)  # notes.txt and the two links
    toolbox = Toolbox.for_session(["write_file"], str(workspace), quota=quota)

    def write(name: str) -> tuple[str | None, str]:
        done = asyncio.run(toolbox.run("write_file", {"path": name, "content": "hi"}))
        return done.error_code, done.text

    assert write("one.txt")[0] is None
    code, text = write("two.txt")
    assert code == "QUOTA_EXCEEDED" and "quota is 4 files and directories; it holds 4" in text
