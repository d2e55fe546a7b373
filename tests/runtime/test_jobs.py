"""The job registry over the in-memory log: a running job's output so far, `job_kill`, and
recovery that closes a job as lost only when its lock can be taken, once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runtime import sandbox
from runtime.config import JobLimits
from runtime.jobs import JobRegistry, next_job_id, open_jobs
from runtime.ports import JobFact, NewFact
from runtime.tools import CallSite, WorkspaceQuota
from tests.runtime.fakes import FakeLog


def types(log: FakeLog, sid: str) -> list[str]:
    return [e.type for e in log.events(sid)]


def test_open_jobs_and_the_next_id_come_from_the_facts() -> None:
    facts = [
        JobFact(1, "job/started", "bash-1"),
        JobFact(2, "job/started", "bash-2"),
        JobFact(3, "job/ended", "bash-1", reason="exited", exit_code=0),
        JobFact(4, "job/started", "bash-10"),
    ]
    assert open_jobs(facts) == ["bash-2", "bash-10"]
    assert next_job_id(facts) == "bash-11"
    assert next_job_id([]) == "bash-1"


@pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here")
def test_a_running_jobs_output_so_far_then_kill(tmp_path: Path) -> None:
    log = FakeLog()
    sid = log.create({"name": "offline"}, str(tmp_path))

    async def scenario() -> tuple[str, str, str, list[tuple[str, str]]]:
        registry = JobRegistry(log)
        jobs = registry.bind(sid, str(tmp_path), JobLimits(), WorkspaceQuota())
        command = "echo tick 1; sleep 60"
        started = await jobs.call(
            "bash", {"command": command, "background": True}, CallSite("c1", 1, 1), 30
        )
        await asyncio.sleep(1.0)
        running = await jobs.call("job_output", {"job_id": "bash-1"}, CallSite("c2"), 30)
        killed = await jobs.call("job_kill", {"job_id": "bash-1"}, CallSite("c3"), 30)
        return started.text, running.text, killed.text, list(log.job_locks)

    started, running, killed, held = asyncio.run(scenario())
    assert started.startswith("Started background job bash-1")
    assert running.startswith("bash-1 is running") and "tick 1" in running
    assert killed.startswith("Killed bash-1 (killed")
    assert held == []  # its lock went with it
    [ended] = [e for e in log.events(sid) if e.type == "job/ended"]
    assert ended.data["reason"] == "killed" and ended.data["output"] == "tick 1\n"
    # No turn ran: the notice waits for the next one (no waker here).
    [queued] = [e for e in log.events(sid) if e.type == "inbox/queued"]
    assert queued.data["target"] == "next_turn" and queued.data["job_id"] == "bash-1"


def test_recovery_closes_a_job_whose_lock_is_free_once_and_leaves_a_held_one(
    tmp_path: Path,
) -> None:
    log = FakeLog()
    sid = log.create({"name": "offline"}, str(tmp_path))
    for job_id in ("bash-1", "bash-2"):
        data = {
            "job_id": job_id,
            "command": "sleep 60",
            "call_id": "c-" + job_id,
            "turn": 1,
            "started": "2026-12-02T06:00:00+00:00",
            "wall_s": 600.0,
            "output_max_bytes": 1000,
        }
        log._store(sid, [NewFact("job/started", data, turn=1)])

    async def scenario() -> tuple[int, int, int]:
        alive = await log.try_job_lock(sid, "bash-2")  # another process runs bash-2
        assert alive is not None
        registry = JobRegistry(log)
        first = await registry.recover(sid)
        second = await registry.recover(sid)
        await alive.release()  # that process dies too
        third = await registry.recover(sid)
        return first, second, third

    assert asyncio.run(scenario()) == (1, 0, 1)
    ended = [e for e in log.events(sid) if e.type == "job/ended"]
    assert [(e.data["job_id"], e.data["reason"], e.turn) for e in ended] == [
        ("bash-1", "lost", 1),
        ("bash-2", "lost", 1),
    ]
    assert not log.job_locks
