"""`make cluster`: several daphne processes behind the round-robin proxy, on one machine.

One Postgres (DATABASE_URL, or the embedded one), Redis for the channel layer (REDIS_URL;
when unset, a private redis-server is started if one is installed), N daphne processes on
consecutive ports and the proxy on STRAND_PORT (default 8000). Ctrl-C stops everything it
started, by PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from deploy.daphne import wait_for_port

ROOT = Path(__file__).resolve().parent.parent


def _unblock() -> None:
    # Children must not inherit the blocked signals the parent waits on.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def main() -> None:
    processes: list[subprocess.Popen[bytes]] = []
    workers = int(os.environ.get("STRAND_WORKERS", "2"))
    front = int(os.environ.get("STRAND_PORT", "8000"))
    env = dict(os.environ)
    if "REDIS_URL" not in env:
        redis = shutil.which("redis-server")
        if redis is None:
            raise SystemExit("REDIS_URL is unset and redis-server is not installed")
        port = front + 1000
        processes.append(
            subprocess.Popen(
                [
                    redis,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                stdout=subprocess.DEVNULL,
                preexec_fn=_unblock,
            )
        )
        env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
        wait_for_port(port)
    if "DATABASE_URL" not in env:
        # Start (or attach to) the embedded server once, so every worker shares it.
        sys.path.insert(0, str(ROOT))
        from config.embedded_pg import embedded_database_url

        env["DATABASE_URL"] = embedded_database_url(ROOT / ".strand" / "pgdata")
    daphne = str(Path(sys.executable).with_name("daphne"))
    ports = [front + 1 + i for i in range(workers)]
    try:
        for port in ports:
            processes.append(
                subprocess.Popen(
                    [daphne, "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
                    cwd=ROOT,
                    env=env,
                    preexec_fn=_unblock,
                )
            )
        for port in ports:
            wait_for_port(port)
        backends = [f"127.0.0.1:{p}" for p in ports]
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "deploy.proxy", "--listen", f"127.0.0.1:{front}", *backends],
                cwd=ROOT,
                env=env,
                preexec_fn=_unblock,
            )
        )
        wait_for_port(front)
        print(
            f"Strand: http://127.0.0.1:{front}/ → {workers} processes ({', '.join(backends)}), "
            f"channel layer {env['REDIS_URL']}",
            flush=True,
        )
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    main()
