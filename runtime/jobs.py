"""Background jobs: a `bash` command that runs on while the agent goes on, as facts.

A `bash` call with `background: true` starts a job and answers at once with its id
(`bash-1`, `bash-2`, … numbered per session). The job runs in the same sandbox as any
command (`runtime.sandbox`), in the session's folder, on a thread of its own; its output is
kept as the sandbox keeps it (head and tail, the bytes between counted). Its life is two
facts: `job/started` (id, command, the call that started it, when) and `job/ended` (reason
`exited`, `killed`, `timeout`, `output` or `lost`; exit code or signal; the kept output;
whether bytes were left out; how long it ran), with a `workspace/snapshot` (reason `job`) of
what it changed in the folder, in the same append.

When a job ends its notice goes to the session's inbox (`inbox/queued` with the job's id):
a running turn takes it at its next step, as it takes steering input; when no turn runs, the
notice is queued for the next turn and a turn is started that claims it (trigger `job`), so
the model sees the outcome without the user asking. `job_output` (the output so far, or at
the end; it may wait a bounded time for the end), `job_list` and `job_kill` are ordinary
tools.

Liveness is a lock, as for turns: a job holds a lock of its own (`SessionLog.admit_job`,
with one of its owner's job places) while it runs, on its process's connection, and
Postgres drops it when that process dies. Recovery (`JobRegistry.recover`) takes the lock of
every job that has started and not ended; holding it proves the job's process is gone, and
it writes `job/ended` reason `lost` after reading again that the job is still open, so each
lost job is closed exactly once.

Bounds: at most `JobLimits.per_session` jobs run at once in a session (counted from the
log under the turn lock that a tool call runs in), at most the owner's job places across
the server (the store's cap, refused with its reason), at most `per_process` on one
process's threads; a job runs at most `wall_s` seconds, and keeps at most
`output_kept_bytes` of its output (a command writing past the sandbox's output cap is
stopped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from projections.records import EventRecord
from projections.turns import TURN_MARKERS, is_open
from runtime import sandbox
from runtime.config import JobLimits
from runtime.log_cache import new_inbox_id
from runtime.ports import JobFact, NewFact, SeqConflict, SessionLog, TurnLock
from runtime.tools import CallSite, Tool, ToolOutcome, WorkspaceQuota

log = logging.getLogger("strand.runtime")

JOB_TOOL_NAMES = ("job_output", "job_list", "job_kill")
JOBS_CAPPED = "JOBS_CAPPED"
NO_SUCH_JOB = "NO_SUCH_JOB"
# The longest `job_output` waits for a job's end (and always a second less than the tool's
# own timeout).
OUTPUT_WAIT_MAX_S = 30.0
# How much of a job's output a notice and `job_output` show (the tail; the fact keeps all
# that was kept).
NOTICE_OUTPUT_CHARS = 4000
# Jobs `job_list` names (the newest first).
LIST_MAX = 50
# A notice starts with this; the offline model answers such a message without reading it
# as a request.
NOTICE_PREFIX = "[job "


@dataclass
class _Job:
    session_id: str
    job_id: str
    command: str
    call_id: str
    turn: int | None
    started: datetime
    wall_s: float
    cancel: threading.Event = field(default_factory=threading.Event)
    killed: bool = False
    tail: bytearray = field(default_factory=bytearray)
    tail_lock: threading.Lock = field(default_factory=threading.Lock)
    ended: dict[str, Any] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def add_output(self, data: bytes) -> None:
        if not data:
            return
        with self.tail_lock:
            self.tail += data
            if len(self.tail) > NOTICE_OUTPUT_CHARS * 4:
                del self.tail[: len(self.tail) - NOTICE_OUTPUT_CHARS * 4]

    def output_so_far(self) -> str:
        with self.tail_lock:
            text = bytes(self.tail).decode("utf-8", "replace").replace("\x00", "\\0")
        return _tail(text)


Waker = Callable[[], Awaitable[None]]


class JobRegistry:
    """This process's running jobs, of every session; what it knows of the others' it
    reads from the log."""

    def __init__(self, log: SessionLog) -> None:
        self.log = log
        self.jobs: dict[tuple[str, str], _Job] = {}
        self.stopping = False

    def bind(
        self,
        session_id: str,
        cwd: str,
        limits: JobLimits,
        quota: WorkspaceQuota,
        wake: Waker | None = None,
    ) -> SessionJobs:
        return SessionJobs(self, session_id, cwd, limits, quota, wake)

    async def stop_all(self, timeout: float = 10.0) -> None:
        """Kill every job of this process and wait for their ends to be written (no turn
        is started for their notices meanwhile)."""
        self.stopping = True
        try:
            jobs = list(self.jobs.values())
            for job in jobs:
                job.killed = True
                job.cancel.set()
            tasks = [job.task for job in jobs if job.task is not None]
            if tasks:
                await asyncio.wait(tasks, timeout=timeout)
        finally:
            self.stopping = False

    # --- recovery ------------------------------------------------------------------------

    async def recover(self, session_id: str) -> int:
        """Write `job/ended` reason `lost` for each job of the session that started, has not
        ended, and whose process is gone (its lock can be taken); how many were closed."""
        lost = 0
        for job_id in await self._open_jobs(session_id):
            if (session_id, job_id) in self.jobs:
                continue  # ours, running
            lock = await self.log.try_job_lock(session_id, job_id)
            if lock is None:
                continue  # its process is alive
            try:
                lost += await self._close_lost(session_id, job_id)
            finally:
                await lock.release()
        return lost

    async def _close_lost(self, session_id: str, job_id: str) -> int:
        while True:
            head = await self.log.head(session_id)
            facts = await self.log.job_facts(session_id)
            started = next(
                (f for f in facts if f.type == "job/started" and f.job_id == job_id), None
            )
            if started is None or job_id not in open_jobs(facts):
                return 0  # closed meanwhile by someone else
            data: dict[str, Any] = {
                "job_id": job_id,
                "reason": "lost",
                "turn": started.turn,
                "output": "",
            }
            try:
                await self.log.append(session_id, head.last_seq, [NewFact("job/ended", data)])
            except SeqConflict:
                continue
            log.info("session %s: job %s lost with the process that ran it", session_id, job_id)
            return 1

    async def _open_jobs(self, session_id: str) -> list[str]:
        return open_jobs(await self.log.job_facts(session_id))


def open_jobs(facts: Sequence[JobFact]) -> list[str]:
    """The ids of the jobs started and not ended among `facts`, oldest first."""
    started: dict[str, int] = {}
    for fact in sorted(facts, key=lambda f: f.seq):
        if fact.type == "job/started":
            started[fact.job_id] = fact.seq
        elif fact.type == "job/ended":
            started.pop(fact.job_id, None)
    return list(started)


def next_job_id(facts: Sequence[JobFact]) -> str:
    """`bash-N`, N one more than the highest number a job of the session was given."""
    numbers = [0]
    for fact in facts:
        if fact.type == "job/started":
            _, _, n = fact.job_id.rpartition("-")
            if n.isdigit():
                numbers.append(int(n))
    return f"bash-{max(numbers) + 1}"


class SessionJobs:
    """One session's side of the registry, as its toolbox uses it."""

    def __init__(
        self,
        registry: JobRegistry,
        session_id: str,
        cwd: str,
        limits: JobLimits,
        quota: WorkspaceQuota,
        wake: Waker | None,
    ) -> None:
        self.registry = registry
        self.log = registry.log
        self.sid = session_id
        self.cwd = cwd
        self.limits = limits
        self.quota = quota
        self.wake = wake

    def takes(self, name: str, args: Mapping[str, Any]) -> bool:
        """Whether this call is the registry's: a job tool, or `bash` in the background."""
        return name in JOB_TOOL_NAMES or (name == "bash" and args.get("background") is True)

    async def call(
        self, name: str, args: Mapping[str, Any], site: CallSite, timeout_s: float
    ) -> ToolOutcome:
        try:
            if name == "bash":
                return await self.start(args, site)
            if name == "job_output":
                return await self.output(args, timeout_s)
            if name == "job_list":
                return await self.list()
            return await self.kill(args)
        except _Refused as exc:
            return ToolOutcome(str(exc), True, exc.code)

    # --- starting ------------------------------------------------------------------------

    async def start(self, args: Mapping[str, Any], site: CallSite) -> ToolOutcome:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise _Refused("INVALID_ARGUMENTS", "command must be a non-empty string")
        if "\x00" in command:
            raise _Refused("INVALID_ARGUMENTS", "command must not contain a NUL character")
        wall = self.limits.wall_s
        timeout = args.get("timeout")
        if timeout is not None:
            if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
                raise _Refused("INVALID_ARGUMENTS", "timeout must be a positive number of seconds")
            wall = min(float(timeout), wall)
        root = Path(self.cwd) if self.cwd else None
        if root is None or not root.is_dir():
            raise _Refused("NO_WORKSPACE", "this session has no working directory")
        if not sandbox.available():
            raise _Refused("NO_SANDBOX", "bash cannot run here: no sandbox")
        registry = self.registry
        if registry.stopping:
            raise _Refused(JOBS_CAPPED, "the server is stopping: no new background jobs")
        cap = self.limits.per_process
        if cap and len(registry.jobs) >= cap:
            raise _Refused(
                JOBS_CAPPED,
                f"this server process runs {cap} background jobs already, as many as it may; "
                "wait for one to end or kill one (job_kill)",
            )
        facts = await self.log.job_facts(self.sid)
        running = open_jobs(facts)
        cap = self.limits.per_session
        if cap and len(running) >= cap:
            raise _Refused(
                JOBS_CAPPED,
                f"at most {cap} background jobs may run at once in a session, and "
                f"{', '.join(running)} are running; wait for one (job_output with wait) or "
                "kill one (job_kill)",
            )
        job_id = next_job_id(facts)
        try:
            place = await self.log.admit_job(self.sid, job_id)
        except Exception as exc:  # the store's cap on its owner's jobs, with its reason
            raise _Refused(JOBS_CAPPED, str(exc)) from None
        try:
            job = _Job(self.sid, job_id, command, site.call_id, site.turn, datetime.now(UTC), wall)
            data = {
                "job_id": job_id,
                "command": command,
                "call_id": site.call_id,
                "turn": site.turn,
                "started": job.started.isoformat(),
                "wall_s": wall,
                "output_max_bytes": self.limits.output_kept_bytes,
            }
            await self._append_at_head(
                lambda _: [NewFact("job/started", data, turn=site.turn, step=site.step)]
            )
        except BaseException:
            await place.release()
            raise
        registry.jobs[(self.sid, job_id)] = job
        job.task = asyncio.get_running_loop().create_task(self._drive(job, root, place))
        return ToolOutcome(
            f"Started background job {job_id}: {command}\n"
            f"It runs for at most {wall:g} s. Its outcome comes to you as a message when it "
            f"ends; job_output shows its output so far, job_kill stops it.",
            details={"job_id": job_id, "background": True, "wall_s": wall},
        )

    async def _drive(self, job: _Job, root: Path, place: TurnLock) -> None:
        kept = max(self.limits.output_kept_bytes, 2)
        limits = sandbox.SandboxLimits(
            wall_s=job.wall_s, output_head_bytes=kept // 2, output_tail_bytes=kept - kept // 2
        )
        started = time.monotonic()
        try:
            try:
                done = await asyncio.get_running_loop().run_in_executor(
                    _job_threads(),
                    partial(
                        sandbox.run,
                        job.command,
                        root,
                        limits,
                        cancel=job.cancel,
                        on_output=job.add_output,
                    ),
                )
                ended = _ended_data(job, done)
            except Exception as exc:  # the sandbox could not run it: an end all the same
                ended = {
                    "job_id": job.job_id,
                    "reason": "exited",
                    "output": f"the job could not run: {type(exc).__name__}: {exc}",
                    "duration_s": round(time.monotonic() - started, 3),
                    "turn": job.turn,
                }
            await self._finish(job, ended)
        except Exception:
            log.exception("session %s: job %s: recording its end failed", self.sid, job.job_id)
        finally:
            self.registry.jobs.pop((self.sid, job.job_id), None)
            job.done.set()
            try:
                await place.release()
            except Exception:
                log.exception("session %s: releasing job %s failed", self.sid, job.job_id)

    async def _finish(self, job: _Job, ended: dict[str, Any]) -> None:
        """Append the job's end, what it changed in the folder, and its notice for the
        inbox (the running turn's next step, or the next turn, which is then started)."""
        from runtime.workspace import WorkspaceRecorder

        snapshot: NewFact | None = None
        try:
            files = WorkspaceRecorder(self.log, self.sid, self.cwd, self.quota)
            snapshot = await files.after_job(job.call_id, job.job_id)
        except Exception as exc:
            log.warning(
                "session %s: job %s: folder left to the next turn: %s", self.sid, job.job_id, exc
            )
        notice = notice_text(job.job_id, job.command, ended)
        job.ended = ended
        woke: list[bool] = []

        async def facts(_: int) -> list[NewFact]:
            marker = await self.log.last_event(self.sid, TURN_MARKERS)
            running = is_open(marker)
            turn = _turn_of(marker) if running and marker is not None else None
            woke[:] = [not running]
            out = [NewFact("job/ended", ended, turn=job.turn)]
            if snapshot is not None:
                out.append(snapshot)
            target = "next_step" if running else "next_turn"
            queued = {
                "inbox_id": new_inbox_id(),
                "target": target,
                "text": notice,
                "job_id": job.job_id,
            }
            out.append(NewFact("inbox/queued", queued, turn=turn))
            return out

        await self._append_at_head_async(facts)
        if woke and woke[0] and self.wake is not None and not self.registry.stopping:
            asyncio.get_running_loop().create_task(self._wake_quietly())

    async def _wake_quietly(self) -> None:
        assert self.wake is not None
        try:
            await self.wake()
        except Exception as exc:  # the notice stays queued for the next turn
            log.info("session %s: no turn started for a job's notice: %s", self.sid, exc)

    async def _append_at_head(self, facts: Callable[[int], list[NewFact]]) -> None:
        async def wrapped(seq: int) -> list[NewFact]:
            return facts(seq)

        await self._append_at_head_async(wrapped)

    async def _append_at_head_async(self, facts: Callable[[int], Awaitable[list[NewFact]]]) -> None:
        while True:
            head = await self.log.head(self.sid)
            batch = await facts(head.last_seq)
            try:
                await self.log.append(self.sid, head.last_seq, batch)
            except SeqConflict:
                continue
            return

    # --- the job tools -------------------------------------------------------------------

    async def output(self, args: Mapping[str, Any], timeout_s: float) -> ToolOutcome:
        job_id = _job_id(args)
        wait = args.get("wait", 0)
        if not isinstance(wait, int | float) or isinstance(wait, bool) or wait < 0:
            raise _Refused("INVALID_ARGUMENTS", "wait must be a number of seconds, 0 or more")
        wait = min(float(wait), OUTPUT_WAIT_MAX_S, max(timeout_s - 1.0, 0.0))
        job = self.registry.jobs.get((self.sid, job_id))
        if job is not None and wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(job.done.wait(), wait)
        if job is not None and job.ended is None:
            so_far = job.output_so_far()
            took = (datetime.now(UTC) - job.started).total_seconds()
            return ToolOutcome(
                f"{job_id} is running ({took:.1f} s so far): {job.command}\n"
                + (f"Output so far (its tail):\n{so_far}" if so_far else "No output yet."),
                details={"job_id": job_id, "status": "running"},
            )
        ended = job.ended if job is not None else await self._ended(job_id)
        if ended is None:
            return ToolOutcome(
                f"{job_id} is running in another server process; its output comes with its end",
                details={"job_id": job_id, "status": "running"},
            )
        return ToolOutcome(
            notice_text(job_id, "", ended, heading=False),
            details={"job_id": job_id, "status": str(ended.get("reason"))},
        )

    async def list(self) -> ToolOutcome:
        facts = await self.log.job_facts(self.sid)
        ended = {f.job_id: f for f in facts if f.type == "job/ended"}
        started = [f for f in facts if f.type == "job/started"]
        if not started:
            return ToolOutcome("No background jobs in this session.", details={"jobs": []})
        lines, rows = [], []
        for fact in sorted(started, key=lambda f: -f.seq)[:LIST_MAX]:
            end = ended.get(fact.job_id)
            status = "running" if end is None else _status(_end_data(end))
            lines.append(f"{fact.job_id}  {status}  {fact.command}")
            rows.append({"job_id": fact.job_id, "status": status})
        more = len(started) - len(rows)
        if more > 0:
            lines.append(f"[{more} older jobs not shown]")
        return ToolOutcome("\n".join(lines), details={"jobs": rows})

    async def kill(self, args: Mapping[str, Any]) -> ToolOutcome:
        job_id = _job_id(args)
        job = self.registry.jobs.get((self.sid, job_id))
        if job is None:
            ended = await self._ended(job_id)
            if ended is not None:
                return ToolOutcome(
                    f"{job_id} has already ended ({_status(ended)})",
                    details={"job_id": job_id, "status": str(ended.get("reason"))},
                )
            raise _Refused(NO_SUCH_JOB, f"{job_id} is not a running job of this server process")
        job.killed = True
        job.cancel.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(job.done.wait(), 10)
        status = _status(job.ended) if job.ended is not None else "being stopped"
        return ToolOutcome(
            f"Killed {job_id} ({status})", details={"job_id": job_id, "status": "killed"}
        )

    async def _ended(self, job_id: str) -> dict[str, Any] | None:
        """The `job/ended` data of a job of the session; `NO_SUCH_JOB` for an unknown id."""
        ended = await self.log.job_ended(self.sid, job_id)
        if ended is not None:
            return dict(ended.data)
        facts = await self.log.job_facts(self.sid)
        if not any(f.job_id == job_id for f in facts):
            raise _Refused(NO_SUCH_JOB, f"there is no job {job_id} in this session")
        return None


def _end_data(fact: JobFact) -> dict[str, Any]:
    return {"reason": fact.reason, "exit_code": fact.exit_code, "signal": fact.signal}


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _job_id(args: Mapping[str, Any]) -> str:
    job_id = args.get("job_id")
    if not isinstance(job_id, str) or not job_id.strip() or len(job_id) > 40:
        raise _Refused("INVALID_ARGUMENTS", "job_id must be a job's id, like bash-1")
    return job_id.strip()


def _ended_data(job: _Job, done: sandbox.SandboxRun) -> dict[str, Any]:
    reason = {None: "exited", "cancelled": "killed", "timeout": "timeout", "output": "output"}
    return {
        "job_id": job.job_id,
        "reason": reason.get(done.stopped, "exited") if not job.killed else "killed",
        "exit_code": done.exit_code,
        "signal": done.signal,
        "output": done.output,
        "output_bytes": done.output_bytes,
        "truncated": done.dropped_bytes > 0,
        "duration_s": round(done.duration_s, 3),
        "turn": job.turn,
    }


def _status(ended: Mapping[str, Any]) -> str:
    reason = ended.get("reason")
    if reason == "exited":
        code = ended.get("exit_code")
        return f"exit {code}" if code is not None else f"signal {ended.get('signal')}"
    return {
        "killed": "killed",
        "timeout": "timed out",
        "output": "stopped: too much output",
        "lost": "lost: the process running it stopped",
    }.get(str(reason), str(reason))


def notice_text(
    job_id: str, command: str, ended: Mapping[str, Any], *, heading: bool = True
) -> str:
    """A job's end in words: what a turn reads from the inbox, and what `job_output` says of
    an ended job (its output's tail)."""
    took = ended.get("duration_s")
    line = f"{NOTICE_PREFIX}{job_id} ended: {_status(ended)}"
    if isinstance(took, int | float):
        line += f" after {took:.1f} s"
    line += "]"
    if heading and command:
        line += f"\n$ {command[:500]}"
    output = str(ended.get("output") or "")
    if ended.get("truncated"):
        line += f"\n[output: {ended.get('output_bytes')} bytes, head and tail kept]"
    return f"{line}\n{_tail(output)}" if output else f"{line}\n(no output)"


def _tail(text: str) -> str:
    if len(text) <= NOTICE_OUTPUT_CHARS:
        return text
    return "[…]\n" + text[-NOTICE_OUTPUT_CHARS:]


def _turn_of(event: EventRecord) -> int | None:
    value = event.data.get("turn", event.turn)
    return value if isinstance(value, int) else None


# Jobs run on threads of their own, not the tools' pool: a job that runs ten minutes must not
# hold a thread that short tool calls wait for.
# More threads than the default cap on one process's jobs: a job past them would wait.
JOB_THREADS = 64
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _job_threads() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(JOB_THREADS, thread_name_prefix="strand-job")
        return _pool


# --- the tools' schemas ------------------------------------------------------------------

BACKGROUND_PARAMETER = {
    "type": "boolean",
    "description": (
        "Strand: run the command in the background. The call answers at once with a job "
        "id (bash-1, …); the job's outcome comes as a message when it ends. Use "
        "job_output, job_list and job_kill to follow it."
    ),
}
BACKGROUND_NOTE = (
    " Strand adds `background`: with background=true the command runs on as a job and the "
    "call returns its id at once."
)


def background_bash(pi_bash: Tool) -> Tool:
    """Pi's `bash` with Strand's `background` parameter (described in the description)."""
    parameters = dict(pi_bash.parameters)
    parameters["properties"] = {**parameters["properties"], "background": BACKGROUND_PARAMETER}
    return Tool(
        pi_bash.name,
        pi_bash.description + BACKGROUND_NOTE,
        parameters,
        pi_bash.run,
        pi_bash.needs_approval,
    )


def _not_here(name: str) -> Callable[[Any, Mapping[str, Any]], ToolOutcome]:
    def run(_: Any, __: Mapping[str, Any]) -> ToolOutcome:
        return ToolOutcome(f"{name}: background jobs are not available here", True, "NO_JOBS")

    return run


_JOB_ID = {"type": "string", "description": "The job's id, as bash returned it (bash-1, …)."}
JOB_OUTPUT = Tool(
    "job_output",
    "Show a background job's output: its tail so far while it runs, or how it ended. With "
    f"wait (seconds, at most {OUTPUT_WAIT_MAX_S:g}), first wait that long for it to end.",
    {
        "type": "object",
        "properties": {
            "job_id": _JOB_ID,
            "wait": {"type": "number", "minimum": 0, "description": "Seconds to wait."},
        },
        "required": ["job_id"],
        "additionalProperties": False,
    },
    _not_here("job_output"),
)
JOB_LIST = Tool(
    "job_list",
    "List the session's background jobs, newest first, with their status.",
    {"type": "object", "properties": {}, "additionalProperties": False},
    _not_here("job_list"),
)
JOB_KILL = Tool(
    "job_kill",
    "Stop a running background job (with everything it started).",
    {
        "type": "object",
        "properties": {"job_id": _JOB_ID},
        "required": ["job_id"],
        "additionalProperties": False,
    },
    _not_here("job_kill"),
    needs_approval=True,
)
JOB_TOOLS: dict[str, Tool] = {t.name: t for t in (JOB_OUTPUT, JOB_LIST, JOB_KILL)}
