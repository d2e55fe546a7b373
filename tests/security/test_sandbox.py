"""Hostile commands, run for real in the sandbox the agent's `bash` uses (runtime/sandbox.py).

Each one fails cleanly: it cannot see another workspace, the project's secret key, the host's
processes or the server's environment, cannot reach the host's network, cannot write outside
its workspace, and is stopped, with everything it started, at its limits.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from runtime import sandbox
from runtime.sandbox import SandboxLimits

pytestmark = pytest.mark.skipif(
    not sandbox.available(), reason="bubblewrap cannot run here (make sandbox-deps)"
)

QUICK = SandboxLimits(wall_s=20)


@pytest.fixture
def workspaces(tmp_path: Path) -> tuple[Path, Path]:
    alice = tmp_path / "alice"
    bob = tmp_path / "bob"
    alice.mkdir()
    bob.mkdir()
    (alice / "diary.txt").write_text("alice's secret plans\n")
    return alice, bob


def processes_mentioning(marker: str) -> list[int]:
    """The host's processes whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


def host_processes() -> int:
    return sum(1 for entry in os.listdir("/proc") if entry.isdigit())


def test_a_command_runs_in_its_workspace_and_its_writes_stay(
    workspaces: tuple[Path, Path],
) -> None:
    _, bob = workspaces
    done = sandbox.run("pwd; echo made > made.txt; mkdir -p d && echo x > d/y", bob, QUICK)
    assert done.exit_code == 0, done.output
    assert done.output.strip() == str(bob)
    assert (bob / "made.txt").read_text() == "made\n"
    assert (bob / "d" / "y").read_text() == "x\n"


def test_another_users_folder_is_not_there(workspaces: tuple[Path, Path]) -> None:
    alice, bob = workspaces
    done = sandbox.run(f"cat {alice}/diary.txt; ls {alice.parent}; ls {alice}", bob, QUICK)
    assert done.exit_code != 0
    assert "secret plans" not in done.output
    assert "diary.txt" not in done.output.splitlines()  # never listed
    # The folder above holds only the path down to bob's own workspace.
    assert "alice" not in done.output.splitlines()
    assert "No such file or directory" in done.output


def test_the_secret_key_and_the_project_folder_are_not_there(
    workspaces: tuple[Path, Path],
) -> None:
    _, bob = workspaces
    project = Path(settings.BASE_DIR)
    key = Path(settings.STATE_DIR) / "secret_key"
    assert key.is_file()  # the test means something only if the key is on the host
    secret = key.read_text().strip()
    done = sandbox.run(
        f"cat {key}; ls {key.parent}; ls {project}; cat {project}/pyproject.toml; "
        "ls /work /home /root",
        bob,
        QUICK,
    )
    assert done.exit_code != 0
    assert secret not in done.output
    assert "[project]" not in done.output
    assert "pgdata" not in done.output.splitlines()


def test_the_hosts_processes_and_the_servers_environment_are_not_there(
    workspaces: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, bob = workspaces
    canary = f"canary-{uuid.uuid4()}"
    monkeypatch.setenv("STRAND_SECRET_CANARY", canary)
    done = sandbox.run(
        "cat /proc/1/environ; cat /proc/*/environ; env; cat /proc/1/cmdline; ls /proc",
        bob,
        QUICK,
    )
    assert canary not in done.output
    assert "STRAND_SECRET_CANARY" not in done.output
    assert "DATABASE_URL" not in done.output
    pids = [w for w in done.output.split() if w.isdigit()]
    # Only the sandbox's own processes: its init, the shell and the commands it runs.
    assert pids and max(int(p) for p in pids) < 50
    assert str(os.getpid()) not in pids or os.getpid() < 50


def test_no_connection_to_the_hosts_listening_port(workspaces: tuple[Path, Path]) -> None:
    _, bob = workspaces
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        done = sandbox.run(
            f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected; "
            f"exec 4<>/dev/tcp/localhost/{port} && echo connected",
            bob,
            QUICK,
        )
        assert done.exit_code != 0
        assert "connected" not in done.output.replace("Connection", "")
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody ever knocked
    finally:
        listener.close()


def test_writes_outside_the_workspace_fail_or_vanish(
    workspaces: tuple[Path, Path], tmp_path: Path
) -> None:
    _, bob = workspaces
    marker = f"outside-{uuid.uuid4().hex}"
    done = sandbox.run(
        f"echo x > /usr/{marker}; echo x > /tmp/{marker}; echo x > {tmp_path}/{marker}; "
        f"echo x > /{marker}; echo x > /etc/{marker}; echo x > ../{marker}",
        bob,
        QUICK,
    )
    assert "Read-only file system" in done.output
    for place in (Path("/usr"), Path("/tmp"), tmp_path, Path("/"), Path("/etc"), bob.parent):
        assert not (place / marker).exists(), place
    # The private /tmp is gone with the command.
    again = sandbox.run(f"cat /tmp/{marker}", bob, QUICK)
    assert again.exit_code != 0


def test_a_fork_bomb_is_held_by_the_process_limit_and_leaves_nothing(
    workspaces: tuple[Path, Path],
) -> None:
    _, bob = workspaces
    marker = f"bomb{uuid.uuid4().hex[:12]}"
    limits = SandboxLimits(wall_s=5, processes=64)
    before = host_processes()
    most = [0]
    running = threading.Event()
    running.set()

    def watch() -> None:
        while running.is_set():
            most[0] = max(most[0], host_processes() - before)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        done = sandbox.run(f"{marker}(){{ {marker}|{marker}& }}; {marker}; sleep 60", bob, limits)
    finally:
        running.clear()
        watcher.join()
    assert done.stopped == "timeout"
    assert "Resource temporarily unavailable" in done.output
    # The host never saw many more processes than the limit (other work adds a few).
    assert most[0] <= 64 + 30
    assert processes_mentioning(marker) == []


def test_sleep_forever_is_killed_at_the_wall_time_with_its_children(
    workspaces: tuple[Path, Path],
) -> None:
    _, bob = workspaces
    marker = f"sleeper-{uuid.uuid4().hex}"
    done = sandbox.run(
        f"(sleep infinity; echo {marker}) & sleep infinity; : {marker}",
        bob,
        SandboxLimits(wall_s=1),
    )
    assert done.stopped == "timeout"
    assert done.exit_code is None
    assert processes_mentioning(marker) == []


def test_a_cancelled_command_stops_at_once(workspaces: tuple[Path, Path]) -> None:
    _, bob = workspaces
    cancel = threading.Event()
    marker = f"cancelled-{uuid.uuid4().hex}"
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    try:
        done = sandbox.run(f"sleep 600; : {marker}", bob, SandboxLimits(wall_s=600), cancel=cancel)
    finally:
        timer.cancel()
    assert done.stopped == "cancelled"
    assert processes_mentioning(marker) == []


def test_yes_is_cut_to_head_and_tail_with_the_dropped_bytes_counted(
    workspaces: tuple[Path, Path],
) -> None:
    _, bob = workspaces
    limits = SandboxLimits(
        wall_s=20, output_head_bytes=100, output_tail_bytes=100, output_max_bytes=1_000_000
    )
    done = sandbox.run("yes", bob, limits)
    assert done.stopped == "output"
    assert done.output_bytes > 1_000_000
    assert done.dropped_bytes == done.output_bytes - 200
    assert done.output.startswith("y\n" * 50)
    assert f"[... {done.dropped_bytes} bytes of output left out ...]" in done.output
    assert len(done.output) < 400


def test_a_short_output_is_kept_whole(workspaces: tuple[Path, Path]) -> None:
    _, bob = workspaces
    limits = SandboxLimits(wall_s=20, output_head_bytes=100, output_tail_bytes=100)
    done = sandbox.run("seq 1 50; echo err >&2; exit 3", bob, limits)
    assert done.exit_code == 3
    assert done.dropped_bytes == 0
    assert done.output == "".join(f"{n}\n" for n in range(1, 51)) + "err\n"


def test_cpu_memory_and_file_size_limits_hold(workspaces: tuple[Path, Path]) -> None:
    _, bob = workspaces
    spin = sandbox.run("while :; do :; done", bob, SandboxLimits(wall_s=30, cpu_s=1))
    assert spin.stopped is None  # the CPU limit ended it, not the wall time
    assert spin.exit_code != 0
    big = sandbox.run(
        "head -c 50000000 /dev/zero > big; echo $?", bob, SandboxLimits(file_bytes=1_000_000)
    )
    assert (bob / "big").stat().st_size == 1_000_000
    assert "File size limit exceeded" in big.output
    hog = sandbox.run(
        "head -c 2000000000 /dev/zero | tr '\\0' x | sort > /dev/null",
        bob,
        SandboxLimits(wall_s=30, memory_bytes=64 * 1024 * 1024),
    )
    assert hog.stopped is None
    assert hog.exit_code != 0


def test_a_link_out_of_the_workspace_leads_nowhere(workspaces: tuple[Path, Path]) -> None:
    alice, bob = workspaces
    key = Path(settings.BASE_DIR) / ".strand" / "secret_key"
    done = sandbox.run(
        f"ln -s {alice}/diary.txt diary; ln -s {key} key; ln -s / root; "
        "cat diary key; ls root/work root/home",
        bob,
        QUICK,
    )
    assert "secret plans" not in done.output
    assert key.read_text().strip() not in done.output
    assert (bob / "diary").is_symlink()


def test_no_bwrap_no_sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sandbox.available.cache_clear()
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    try:
        assert not sandbox.available()
        with pytest.raises(sandbox.SandboxUnavailable):
            sandbox.run("true", tmp_path, QUICK)
    finally:
        monkeypatch.undo()
        sandbox.available.cache_clear()


def test_processes_outlive_nothing_after_many_runs(workspaces: tuple[Path, Path]) -> None:
    """A run waits for its whole sandbox: once it returns, none of its processes is left."""
    _, bob = workspaces
    marker = f"many-{uuid.uuid4().hex}"
    for _ in range(5):
        sandbox.run(f"(sleep 30; : {marker}) & echo started", bob, SandboxLimits(wall_s=10))
    assert processes_mentioning(marker) == []
