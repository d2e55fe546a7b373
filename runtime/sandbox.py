"""One shell command run in a sandbox of its own, under bubblewrap (`bwrap`).

Strand runs the agent's commands on a server that holds many users' workspaces, its own
secret key and its database, so a command sees none of it:

- a fresh user, PID, IPC, network, UTS and cgroup namespace per command (`--unshare-all`):
  no network at all, not even the host's loopback, and no other process of the host;
- a filesystem made of the system's read-only files (`/usr` and the links into it, a few
  files of `/etc`), a new `/proc` of its own PID namespace, a minimal `/dev`, a private
  `/tmp`, and the session's workspace bound read-write at its own path: the only place a
  command can change that outlives it. Nothing else of the host is there: no other
  workspace, no project folder, no `/home`, no `/root`;
- an environment of its own (`--clearenv`): none of the server's variables;
- limits, set inside the sandbox with `prlimit` before the shell starts: CPU seconds,
  address space, processes (counted in the sandbox's own user namespace), file size and
  open files; the wall time is watched from outside, and so is the output: the first and
  the last bytes are kept, the bytes between are counted, and a command that writes past
  a total cap is stopped;
- stopped with everything it started: the command runs as its own session and process
  group, `--die-with-parent` ties the sandbox's init to bwrap, and the kernel kills every
  process of a PID namespace whose init dies. At the deadline, on cancel or past the output
  cap, bwrap's whole process group gets SIGKILL.

If bwrap is missing or cannot make its namespaces here, `available()` says so and the
`bash` tool is not offered: a command never runs unconfined.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# /etc holds the host's configuration (and, on some hosts, credentials); only what
# programs need to start and to name things is shown.
ETC_FILES = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/mime.types",
    "/etc/ssl/certs",
    "/etc/ca-certificates",
)
# The top-level names that lead into /usr on a merged-/usr system (links), or are read-only
# system folders of their own on an older one.
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
READ_CHUNK = 64 * 1024
SANDBOX_UID = 1000


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    wall_s: float = 30.0
    cpu_s: int = 30
    memory_bytes: int = 1024 * 1024 * 1024  # address space of each process
    processes: int = 128
    file_bytes: int = 256 * 1024 * 1024  # the largest file a command can write
    open_files: int = 256
    output_head_bytes: int = 16 * 1024
    output_tail_bytes: int = 16 * 1024
    # A command that writes more than this in all is stopped (like at the deadline): reading
    # `yes` forever would only burn the wall time.
    output_max_bytes: int = 64 * 1024 * 1024

    def as_dict(self) -> dict[str, float | int]:
        return {
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "memory_bytes": self.memory_bytes,
            "processes": self.processes,
            "file_bytes": self.file_bytes,
            "open_files": self.open_files,
            "output_kept_bytes": self.output_head_bytes + self.output_tail_bytes,
            "output_max_bytes": self.output_max_bytes,
        }


@dataclass(frozen=True, slots=True)
class SandboxRun:
    """What a command did: its exit code (None when it was killed by a signal: `signal`),
    whether it was stopped and why (`stopped`: "timeout", "cancelled", "output"), its
    output (stdout and stderr interleaved as written; head and tail when long, the bytes
    left out in `dropped_bytes`) and its wall time."""

    exit_code: int | None
    signal: int | None
    stopped: str | None
    output: str
    output_bytes: int
    dropped_bytes: int
    duration_s: float


class SandboxUnavailable(Exception):
    pass


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@functools.cache
def available() -> bool:
    """Whether bwrap runs here with every namespace the sandbox asks for (checked once)."""
    bwrap = bwrap_path()
    if bwrap is None:
        return False
    try:
        done = subprocess.run(
            [bwrap, *_system_args(), "--", "/bin/true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=20,
            env={},
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _system_args() -> list[str]:
    args = [
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for name in SYSTEM_DIRS:
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    for name in ETC_FILES:
        args += ["--ro-bind-try", name, name]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--hostname", "sandbox"]
    # Not root inside either (the server runs as root): no capability in its namespaces.
    args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL"]
    return args


def command_line(command: str, workspace: Path, limits: SandboxLimits) -> list[str]:
    """The bwrap command line that runs `command` with bash in `workspace`."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed")
    root = str(workspace)
    env = {
        "PATH": SANDBOX_PATH,
        "HOME": root,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "PWD": root,
    }
    args = [bwrap, *_system_args()]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += ["--bind", root, root, "--chdir", root, "--"]
    args += [
        "/usr/bin/prlimit",
        f"--cpu={limits.cpu_s}",
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.processes}",
        f"--fsize={limits.file_bytes}",
        f"--nofile={limits.open_files}",
        "--core=0",
        "/bin/bash",
        "-c",
        command,
    ]
    return args


class _Output:
    """The head and the tail of a stream, and how much of it fell between."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_max = head
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.tail_max = tail
        self.total = 0
        self.dropped = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail.append(data)
        self.tail_len += len(data)
        while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_max:
            self.dropped += len(self.tail[0])
            self.tail_len -= len(self.tail.popleft())
        if self.tail_len > self.tail_max:  # cut the oldest chunk to size
            cut = self.tail_len - self.tail_max
            self.tail[0] = self.tail[0][cut:]
            self.tail_len -= cut
            self.dropped += cut

    def text(self) -> str:
        # NUL cannot be stored in an event (Postgres' jsonb refuses it): shown as `\0`.
        head = self.head.decode("utf-8", "replace").replace("\x00", "\\0")
        if not self.tail:
            return head
        tail = b"".join(self.tail).decode("utf-8", "replace").replace("\x00", "\\0")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes of output left out ...]\n{tail}"
        return head + tail


# Where pids cgroups are made, one a run: RLIMIT_NPROC does not hold for a server that runs
# as root (the kernel exempts root's processes, even inside a user namespace), so the
# process limit is a pids cgroup wherever one can be made.
PIDS_CGROUP_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup")


@functools.cache
def _pids_cgroup_root() -> Path | None:
    for candidate in PIDS_CGROUP_ROOTS:
        root = Path(candidate)
        if not (root / "cgroup.procs").exists():
            continue
        if root.name != "pids":
            controllers = root / "cgroup.controllers"
            if not controllers.exists() or "pids" not in controllers.read_text().split():
                continue
        probe = root / f"strand-sandbox-probe-{os.getpid()}"
        try:
            probe.mkdir()
            ok = (probe / "pids.max").exists()
            probe.rmdir()
        except OSError:
            continue
        if ok:
            return root
    return None


class _PidsCgroup:
    """A pids cgroup of its own for one run (or nothing, where none can be made)."""

    def __init__(self, processes: int) -> None:
        self.path: Path | None = None
        root = _pids_cgroup_root()
        if root is None:
            return
        path = root / f"strand-sandbox-{os.getpid()}-{threading.get_native_id()}-{time.time_ns()}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(processes))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return
        self.path = path

    def add(self, pid: int) -> bool:
        if self.path is None:
            return False
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
        except OSError:
            return False
        return True

    def kill_all(self) -> None:
        if self.path is None:
            return
        with contextlib.suppress(OSError):
            for line in (self.path / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(line), signal.SIGKILL)

    def remove(self) -> None:
        if self.path is None:
            return
        for _ in range(250):  # its processes may take a moment (up to seconds) to be reaped
            try:
                self.path.rmdir()
                return
            except OSError:
                self.kill_all()
                time.sleep(0.02)


def run(
    command: str,
    workspace: Path,
    limits: SandboxLimits = SandboxLimits(),
    *,
    cancel: threading.Event | None = None,
    deadline: float | None = None,
    on_output: Callable[[bytes], None] | None = None,
) -> SandboxRun:
    """Run `command` in the sandbox and wait for it (or for the wall time, `deadline`
    (`time.monotonic()`) if sooner, or `cancel`). `on_output` is handed each piece of
    output as it is read, and `b""` when a tenth of a second passes without any (so that
    a caller that holds pieces back can let them go)."""
    if "\x00" in command:
        raise ValueError("a command must not contain a NUL character")
    if not available():
        raise SandboxUnavailable("bubblewrap cannot make its namespaces on this machine")
    args = command_line(command, workspace, limits)
    started = time.monotonic()
    until = started + limits.wall_s
    if deadline is not None:
        until = min(until, deadline)
    output = _Output(limits.output_head_bytes, limits.output_tail_bytes)
    read_fd, write_fd = os.pipe()
    # bwrap starts only once it is in its pids cgroup: a stub waits for a line on a pipe,
    # then execs it, so no process of the command is ever outside the cgroup.
    go_read, go_write = os.pipe()
    cgroup = _PidsCgroup(limits.processes)
    try:
        proc = subprocess.Popen(
            ["/bin/bash", "-c", f'read -r _ <&{go_read}; exec "$@"', "sh", *args],
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            env={},
            cwd="/",  # the stub's shell exports PWD: not the server's folder
            start_new_session=True,  # its own process group, killed as one
            close_fds=True,
            pass_fds=(go_read,),
        )
    except OSError:
        for fd in (read_fd, write_fd, go_read, go_write):
            os.close(fd)
        cgroup.remove()
        raise
    os.close(write_fd)
    os.close(go_read)
    cgroup.add(proc.pid)
    os.write(go_write, b"go\n")
    os.close(go_write)
    stopped: str | None = None
    try:
        open_pipe = True
        while open_pipe:
            now = time.monotonic()
            if now >= until:
                stopped = "timeout"
                break
            if cancel is not None and cancel.is_set():
                stopped = "cancelled"
                break
            ready, _, _ = select.select([read_fd], [], [], min(0.1, until - now))
            if not ready:
                if on_output is not None:
                    on_output(b"")
                continue
            data = os.read(read_fd, READ_CHUNK)
            if not data:
                open_pipe = False
                break
            output.add(data)
            if on_output is not None:
                on_output(data)
            if output.total > limits.output_max_bytes:
                stopped = "output"
                break
        if stopped:
            _kill(proc)
        # The pipe closes when the last process holding it ends; bwrap itself ends soon after.
        while True:
            try:
                code = proc.wait(timeout=max(0.1, until - time.monotonic()))
                break
            except subprocess.TimeoutExpired:
                stopped = stopped or "timeout"
                _kill(proc)
    finally:
        _kill(proc)
        cgroup.kill_all()
        cgroup.remove()
        os.close(read_fd)
    exit_code: int | None = code
    sig: int | None = None
    if code < 0:
        exit_code, sig = None, -code
    elif code > 128 and stopped:
        sig = code - 128
    return SandboxRun(
        exit_code=exit_code,
        signal=sig,
        stopped=stopped,
        output=output.text(),
        output_bytes=output.total,
        dropped_bytes=output.dropped,
        duration_s=time.monotonic() - started,
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL bwrap's process group; the sandbox's init dies with bwrap, and every other
    process of its PID namespace with that init."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
