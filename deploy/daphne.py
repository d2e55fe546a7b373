"""Starting and stopping daphne processes: for `make cluster`, the benchmarks and the tests
that need real server processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def wait_for_port(
    port: int, process: subprocess.Popen[Any] | None = None, timeout: float = 30
) -> None:
    """Return once something listens on 127.0.0.1:`port`; fail if `process` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the process for port {port} exited with {process.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


# A burst of viewers (a restart, a deploy) opens many TCP connections at once: with Twisted's
# default listen backlog of 50 the kernel drops the rest of the SYNs, and each such client
# waits a second or more for its retransmission before daphne even sees it.
BACKLOG = 2048
# Handshakes are kept few by admission (`sessions_app.live.admission`), so this is a
# backstop: daphne's default, 5 s, dropped admitted sockets on a busy machine.
CONNECT_TIMEOUT_S = 30
# The live feed is one-way (the server sends; what a browser sends is ignored), so a
# websocket message or frame from a client needs no more than a few KB; daphne's default
# lets each socket send 1 MiB messages. Request bodies have their limits in the application
# (config/body_limits.py), which daphne has no option for.
WS_MAX_MESSAGE_BYTES = 16 * 1024


def command(port: int, host: str = "127.0.0.1") -> list[str]:
    """The daphne command line serving Strand on `host`:`port`."""
    daphne = str(Path(sys.executable).with_name("daphne"))
    return [
        daphne,
        "-e",
        f"tcp:port={port}:interface={host}:backlog={BACKLOG}",
        "--websocket_connect_timeout",
        str(CONNECT_TIMEOUT_S),
        "--websocket-max-message-size",
        str(WS_MAX_MESSAGE_BYTES),
        "--websocket-max-frame-size",
        str(WS_MAX_MESSAGE_BYTES),
        "config.asgi:application",
    ]


def ensure_free(port: int) -> None:
    """Fail now if something already listens on 127.0.0.1:`port`: waiting for the port would
    otherwise take that other server for the one being started."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            raise RuntimeError(f"127.0.0.1:{port} is already in use")


def start(port: int, env: Mapping[str, str] | None = None, **popen: Any) -> subprocess.Popen[bytes]:
    """daphne serving Strand on 127.0.0.1:`port`, started and listening."""
    ensure_free(port)
    popen.setdefault("stdout", subprocess.DEVNULL)
    popen.setdefault("stderr", subprocess.DEVNULL)
    process = subprocess.Popen(
        command(port),
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        **popen,
    )
    try:
        wait_for_port(port, process)
    except RuntimeError:
        stop(process)
        raise
    return process


def stop(process: subprocess.Popen[Any], timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL if it has not gone after `timeout` seconds."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout)


def free_port() -> int:
    """A free port on 127.0.0.1 below the kernel's ephemeral range (32768 up, where clients'
    own ports come from), for a server a test or a benchmark starts."""
    import random

    for port in random.sample(range(18_000, 32_000), 200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below 32768")
