"""Background jobs over the API with the offline model: `run in background COMMAND` answers
with a job id at once and the turn ends; the job's end is a fact (`job/ended`, with its
exit code and kept output, and what it changed in the folder) and its notice reaches the
inbox, which starts a turn when none runs, or is taken by the running turn at its next
step; `kill job ID` stops one; the caps on running jobs are refused with a tool error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from projections.records import EventRecord
from runtime import sandbox
from sessions_app import services, store
from sessions_app.models import Session
from sessions_app.presets import CODING_PRESET
from tests.api.conftest import Api, body_of, converse, wait_for, wait_idle

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here"),
]

CODING = "coding-jobs"


@pytest.fixture(autouse=True)
def coding_preset(serve_preset: Any) -> None:
    serve_preset(CODING, **CODING_PRESET)


def all_events(session: Session) -> list[EventRecord]:
    return list(store.events_after(session.id, -1, 100_000))


def of_type(session: Session, kind: str) -> list[EventRecord]:
    return [e for e in all_events(session) if e.type == kind]


def results(events: list[EventRecord]) -> list[tuple[str, str | None, str]]:
    out = []
    for e in events:
        if e.type == "tool/result":
            message = e.data["entry"]["message"]
            text = "".join(part.get("text", "") for part in message["content"])
            out.append((message["toolName"], e.data.get("error_code"), text))
    return out


def new_session(owner: User, workspace: Path, title: str = "jobs") -> Session:
    return services.session_create(owner=owner, title=title, cwd=str(workspace), preset=CODING)


def kill_all(api: Api, session: Session) -> None:
    """Stop the jobs a test left running (each `kill job ID` is a turn of its own)."""
    ended = {e.data["job_id"] for e in of_type(session, "job/ended")}
    for started in of_type(session, "job/started"):
        if started.data["job_id"] not in ended:
            converse(api, session, f"kill job {started.data['job_id']}")


def test_a_background_job_answers_at_once_and_its_end_reaches_the_inbox(
    as_alice: Api, alice: User, workspace: Path
) -> None:
    session = new_session(alice, workspace)
    turn = converse(as_alice, session, "run in background sleep 1; echo done > done.txt; echo done")
    [(name, code, text)] = results(turn)
    assert (name, code) == ("bash", None)
    assert text.startswith("Started background job bash-1: sleep 1; echo done")
    [started] = [e for e in turn if e.type == "job/started"]
    assert started.data["job_id"] == "bash-1" and started.data["turn"] == 1
    # The turn ended before the job did.
    assert turn[-1].type == "turn/end" and not [e for e in turn if e.type == "job/ended"]

    # The end: a fact with the exit code and the output, what it wrote as a `job`
    # snapshot in the same append, and its notice queued for the next turn, which starts.
    wait_for(lambda: len(of_type(session, "turn/end")) == 2, timeout=30)
    wait_idle(session)
    [ended] = of_type(session, "job/ended")
    assert ended.data["reason"] == "exited" and ended.data["exit_code"] == 0
    assert ended.data["output"] == "done\n" and ended.data["truncated"] is False
    assert ended.data["duration_s"] >= 1.0 and ended.turn == 1
    events = all_events(session)
    after = [e for e in events if e.seq > ended.seq]
    snapshot, queued = after[0], after[1]
    assert snapshot.type == "workspace/snapshot" and snapshot.data["reason"] == "job"
    assert "done.txt" in snapshot.data["files"] and snapshot.data["job_id"] == "bash-1"
    assert queued.type == "inbox/queued" and queued.data["target"] == "next_turn"
    assert queued.data["job_id"] == "bash-1"
    assert queued.data["text"].startswith("[job bash-1 ended: exit 0 after ")
    woke = [e for e in events if e.type == "turn/start"][-1]
    assert woke.data == {"turn": 2, "trigger": "job"}
    claimed = [e for e in events if e.type == "inbox/claimed"]
    assert [c.data["inbox_id"] for c in claimed] == [queued.data["inbox_id"]]
    reply = [e for e in events if e.type == "assistant/message"][-1]
    said = reply.data["entry"]["message"]["content"][0]["text"]
    assert said.startswith("Noted: background job bash-1 ended: exit 0")

    # The model's tools see it too.
    listed = results(converse(as_alice, session, "list jobs, job output bash-1"))
    assert listed[0][0] == "job_list" and listed[0][2].startswith("bash-1  exit 0  sleep 1")
    assert listed[1][0] == "job_output" and "done" in listed[1][2]
    # The API's chat shows the notice as the job's, the trace the job under turn 1, from
    # its start to its end, with its output.
    chat = body_of(as_alice.get(f"/sessions/{session.id}/views/chat"))
    [notice] = [item for item in chat["items"] if item.get("job_id")]
    assert notice["job_id"] == "bash-1" and notice["text"].startswith("[job bash-1 ended")
    trace = body_of(as_alice.get(f"/sessions/{session.id}/views/trace"))
    first = trace["spans"][0]
    [job] = [span for span in first["children"] if span["kind"] == "job"]
    assert job["key"] == "job-bash-1" and job["status"] == "ok"
    assert job["start_seq"] == started.seq and job["end_seq"] == ended.seq
    assert job["end"] > first["end"]  # it ran on after its turn
    assert ["output", "done\n"] in job["outputs"] and ["exit_code", 0] in job["outputs"]


def test_a_killed_job_ends_as_killed_and_the_running_turn_reads_its_notice(
    as_alice: Api, alice: User, workspace: Path
) -> None:
    session = new_session(alice, workspace)
    converse(as_alice, session, "run in background sleep 60")
    turn = converse(as_alice, session, "kill job bash-1")
    assert results(turn)[0][:2] == ("job_kill", None)
    [ended] = [e for e in turn if e.type == "job/ended"]
    assert ended.data["reason"] == "killed" and ended.data["duration_s"] < 30
    # Ended while the turn ran: queued for its next step, which claimed it; no turn woke.
    [queued] = [e for e in turn if e.type == "inbox/queued"]
    assert queued.data["target"] == "next_step"
    assert [e.data["inbox_id"] for e in turn if e.type == "inbox/claimed"] == [
        queued.data["inbox_id"]
    ]
    wait_idle(session)
    assert [e.data["trigger"] for e in of_type(session, "turn/start")] == ["message", "message"]
    # Killing it again says it has ended; an unknown job is an error result.
    again = results(converse(as_alice, session, "kill job bash-1, kill job bash-9"))
    assert again[0] == ("job_kill", None, "bash-1 has already ended (killed)")
    assert again[1][:2] == ("job_kill", "NO_SUCH_JOB")


def test_running_jobs_are_capped_per_session_and_per_user(
    as_alice: Api, alice: User, workspace: Path, settings: Any
) -> None:
    settings.STRAND_MAX_JOBS_PER_SESSION = 1
    settings.STRAND_MAX_JOBS_PER_USER = 2
    first = new_session(alice, workspace, "first")
    second = new_session(alice, workspace, "second")
    try:
        converse(as_alice, first, "run in background sleep 60")
        refused = results(converse(as_alice, first, "run in background echo no > no.txt"))
        assert refused[0][:2] == ("bash", "JOBS_CAPPED")
        assert "at most 1 background jobs may run at once in a session" in refused[0][2]
        assert "bash-1 are running" in refused[0][2]
        converse(as_alice, second, "run in background sleep 60")
        settings.STRAND_MAX_JOBS_PER_SESSION = 4
        # Alice holds both of her job places: a third job, in either session, is refused.
        over = results(converse(as_alice, first, "run in background echo no > no.txt"))
        assert over[0][:2] == ("bash", "JOBS_CAPPED")
        assert "at most 2 per user" in over[0][2]
        assert [e.data["job_id"] for e in of_type(first, "job/started")] == ["bash-1"]
        assert not (workspace / "no.txt").exists()
    finally:
        kill_all(as_alice, first)
        kill_all(as_alice, second)
    # With a place free again, a job starts, ends, and its notice is read: by a turn it
    # starts, or by the turn that started it when the job ends first.
    assert results(converse(as_alice, first, "run in background echo yes"))[0][1] is None
    wait_for(lambda: len(of_type(first, "job/ended")) == 2)
    [notice] = [e for e in of_type(first, "inbox/queued") if e.data.get("job_id") == "bash-2"]
    wait_for(
        lambda: any(
            e.data["inbox_id"] == notice.data["inbox_id"] for e in of_type(first, "inbox/claimed")
        )
    )
    wait_idle(first)


def test_a_job_past_its_wall_time_ends_as_timeout_with_its_output_bounded(
    as_alice: Api, alice: User, workspace: Path, settings: Any
) -> None:
    settings.STRAND_JOB_WALL_S = 1
    settings.STRAND_JOB_OUTPUT_BYTES = 1000
    session = new_session(alice, workspace)
    converse(as_alice, session, "run in background yes | head -c 100000; sleep 30")
    wait_for(lambda: of_type(session, "turn/start")[-1].data["trigger"] == "job", timeout=30)
    wait_idle(session)
    [ended] = of_type(session, "job/ended")
    assert ended.data["reason"] == "timeout"
    assert ended.data["output_bytes"] == 100_000 and ended.data["truncated"] is True
    assert len(ended.data["output"]) < 1200
