"""`make cluster`: several daphne processes behind HAProxy, on one machine.

One Postgres (DATABASE_URL, or the embedded one), Redis for the channel layer (REDIS_URL;
when unset, a private redis-server is started if one is installed), `STRAND_WORKERS` daphne
processes (2) on the ports after `STRAND_PORT` (8000), and HAProxy on `STRAND_PORT` with the
configuration of `deploy/haproxy.py`, written to `.strand/cluster/haproxy.cfg`. The
processes run with `STRAND_TRUSTED_PROXIES=1`: the address a request counts under is the
one HAProxy forwards.

While it runs: a process that exits is started again; `kill -HUP <pid of this command>`
restarts the processes one after another, each drained first (HAProxy sends it no new
connections; its websockets reconnect, resuming from their last seq, to the others when it
stops). Ctrl-C stops everything it started, by PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy import daphne, haproxy
from deploy.daphne import wait_for_port

ROOT = Path(__file__).resolve().parent.parent
# After a drain, how long a process may finish the HTTP requests it has before it stops.
DRAIN_S = float(os.environ.get("STRAND_DRAIN_S", "2"))
# The processes see every connection come from HAProxy, which appends the client's address
# to X-Forwarded-For (`option forwardfor`): they believe that one proxy.
PROCESS_ENV = {"STRAND_TRUSTED_PROXIES": "1"}


def _unblock() -> None:
    # Children must not inherit the blocked signals the parent waits on.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


@dataclass
class Cluster:
    """HAProxy on 127.0.0.1:`front` and `workers` daphne processes on the ports after it."""

    front: int
    workers: int
    state_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    quiet: bool = True
    processes: list[subprocess.Popen[bytes] | None] = field(default_factory=list)
    proxy: subprocess.Popen[bytes] | None = None

    @property
    def admin_socket(self) -> str:
        return str(self.state_dir / "haproxy.sock")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.front}"

    def port(self, index: int) -> int:
        return self.front + 1 + index

    def _popen(self) -> dict[str, Any]:
        out = subprocess.DEVNULL if self.quiet else None
        return {
            "cwd": ROOT,
            "env": {**os.environ, **PROCESS_ENV, **self.env},
            "stdout": out,
            "stderr": out,
            "preexec_fn": _unblock,
        }

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for port in [self.front, *(self.port(i) for i in range(self.workers))]:
            daphne.ensure_free(port)
        try:
            self.processes = [
                subprocess.Popen(daphne.command(self.port(i)), **self._popen())
                for i in range(self.workers)
            ]
            for index, process in enumerate(self.processes):
                wait_for_port(self.port(index), process)
            servers = [f"127.0.0.1:{self.port(i)}" for i in range(self.workers)]
            text = haproxy.config(
                f"127.0.0.1:{self.front}", servers, admin_socket=self.admin_socket
            )
            self.proxy = haproxy.start(self.state_dir / "haproxy.cfg", text, **self._popen())
            wait_for_port(self.front, self.proxy)
            for index in range(self.workers):
                haproxy.wait_status(self.admin_socket, index, "UP")
        except BaseException:
            self.stop()
            raise

    def _start_worker(self, index: int) -> None:
        daphne.ensure_free(self.port(index))
        process = subprocess.Popen(daphne.command(self.port(index)), **self._popen())
        self.processes[index] = process
        wait_for_port(self.port(index), process)

    def pid(self, index: int) -> int:
        process = self.processes[index]
        assert process is not None
        return process.pid

    def kill(self, index: int) -> None:
        """Kill process `index` at once (SIGKILL), as a crash would."""
        process = self.processes[index]
        if process is not None:
            process.kill()
            process.wait(10)
            self.processes[index] = None

    def respawn(self, index: int) -> None:
        """Start process `index` again and wait until HAProxy sends it connections."""
        self._start_worker(index)
        haproxy.wait_status(self.admin_socket, index, "UP")

    def restart(self, index: int) -> None:
        """Drain process `index`, stop it, start it again, open it again."""
        haproxy.drain(self.admin_socket, index)
        time.sleep(DRAIN_S)
        process = self.processes[index]
        if process is not None:
            daphne.stop(process)
            self.processes[index] = None
        self._start_worker(index)
        haproxy.ready(self.admin_socket, index)
        haproxy.wait_status(self.admin_socket, index, "UP")

    def revive_exited(self) -> None:
        for index, process in enumerate(self.processes):
            if process is not None and process.poll() is not None:
                print(f"process {index + 1} exited ({process.returncode}); starting it again")
                self.processes[index] = None
                self._start_worker(index)

    def stop(self) -> None:
        running = [p for p in [self.proxy, *self.processes] if p is not None]
        for process in running:
            if process.poll() is None:
                process.terminate()
        for process in running:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        self.proxy = None
        self.processes = []


def _redis(port: int) -> subprocess.Popen[bytes]:
    redis = shutil.which("redis-server")
    if redis is None:
        raise SystemExit("REDIS_URL is unset and redis-server is not installed")
    process = subprocess.Popen(
        [redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        preexec_fn=_unblock,
    )
    wait_for_port(port, process)
    return process


def main() -> None:
    workers = int(os.environ.get("STRAND_WORKERS", "2"))
    front = int(os.environ.get("STRAND_PORT", "8000"))
    env: dict[str, str] = {}
    redis: subprocess.Popen[bytes] | None = None
    if "REDIS_URL" not in os.environ:
        redis = _redis(front + 1000)
        env["REDIS_URL"] = f"redis://127.0.0.1:{front + 1000}/0"
    if "DATABASE_URL" not in os.environ:
        # Start (or attach to) the embedded server once, so every worker shares it.
        sys.path.insert(0, str(ROOT))
        from config.embedded_pg import embedded_database_url

        env["DATABASE_URL"] = embedded_database_url(ROOT / ".strand" / "pgdata")
    cluster = Cluster(front, workers, ROOT / ".strand" / "cluster", env, quiet=False)
    try:
        cluster.start()
        backends = ", ".join(f"127.0.0.1:{cluster.port(i)}" for i in range(workers))
        print(
            f"Strand: {cluster.url}/ → HAProxy → {workers} processes ({backends}), channel "
            f"layer {env.get('REDIS_URL') or os.environ['REDIS_URL']}; "
            f"kill -HUP {os.getpid()} restarts them one by one",
            flush=True,
        )
        while True:
            received = signal.sigtimedwait({signal.SIGINT, signal.SIGTERM, signal.SIGHUP}, 1.0)
            if received is None:
                cluster.revive_exited()
            elif received.si_signo == signal.SIGHUP:
                for index in range(workers):
                    print(f"restarting process {index + 1} (drained first)", flush=True)
                    cluster.restart(index)
            else:
                break
    finally:
        cluster.stop()
        if redis is not None:
            redis.terminate()
            redis.wait(10)


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    main()
