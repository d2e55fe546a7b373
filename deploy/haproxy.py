"""HAProxy in front of Strand's processes: its configuration and its runtime API.

The configuration `config()` writes is the one `make cluster` runs and the one the README
shows for production (there with TLS on the front and the servers on their own hosts):

- `balance leastconn`: a websocket lives for hours, so a new one goes to the process with
  the fewest; a process that was restarted fills up first.
- health checks: `GET /healthz` every 2 s (answered by the ASGI application itself, before
  Django: no host check, no database), each given 5 s; three failures in a row take a
  process out, one success puts it back. A process busy with a storm of handshakes answers
  late, and checks of 1 s that failed twice took both processes of a 2,000-viewer storm out
  at once (360 of its attempts answered 503).
- `retries` and `option redispatch`: a connection that a dead process refuses is retried on
  another at once, before the health check has noticed.
- `timeout tunnel`: how long an upgraded websocket may stay silent (daphne pings every 20 s).
- `option forwardfor`: every request carries the client's address in `X-Forwarded-For`, so
  that sign-in throttling counts each client by its own address, not all of them as the
  proxy's; the processes believe that one proxy (`STRAND_TRUSTED_PROXIES=1`, which
  `deploy/cluster.py` sets) and nothing a client wrote to the left of it.
- `http-request deny … content-length`: a body declared larger than any route takes (a Pi
  file and its framing, `max_body_bytes()`) is answered 413 by HAProxy before a process
  sees it; each process refuses what is over its route's smaller limits, and a streamed
  (chunked) body, itself (`config/body_limits.py`).
- a runtime API socket (`stats socket`): `drain()` stops new connections to one process
  while it finishes, `ready()` opens it again (the cluster's rolling restart uses both).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BACKEND = "strand"


def executable() -> str:
    """The haproxy binary (`make cluster` installs Debian's package when it is missing)."""
    found = shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
    )
    if found is None:
        raise RuntimeError("haproxy is not installed (apt-get install haproxy)")
    return found


def fitting_maxconn() -> int:
    """The most connections this machine's open-file limit lets HAProxy hold."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    return max(1000, min(100_000, (limit - 200) // 2))


def server_name(index: int) -> str:
    return f"w{index + 1}"


def max_body_bytes() -> int:
    """The largest body any route takes: a Pi file (`STRAND_MAX_IMPORT_BYTES`, 50 MiB, as in
    config/settings.py) with its multipart framing."""
    return int(os.environ.get("STRAND_MAX_IMPORT_BYTES", str(50 * 1024 * 1024))) + 64 * 1024


def config(
    front: str,
    servers: Sequence[str],
    *,
    admin_socket: str | None = None,
    maxconn: int | None = None,
    max_body: int | None = None,
) -> str:
    """The configuration: `front` is `host:port` to listen on, `servers` the processes'
    `host:port` addresses. Each connection costs HAProxy two file descriptors, so `maxconn`
    is about half the open-file limit (`fitting_maxconn()` here)."""
    lines = [
        "global",
        f"    maxconn {maxconn or fitting_maxconn()}",
    ]
    if admin_socket:
        lines.append(f"    stats socket {admin_socket} mode 600 level admin")
    lines += [
        "",
        "defaults",
        "    mode http",
        "    timeout connect 5s",
        "    timeout client 60s",
        "    timeout server 60s",
        "    timeout http-request 10s",
        "    timeout tunnel 1h",
        "    timeout client-fin 5s",
        "    retries 3",
        "    option redispatch 1",
        "    option forwardfor",
        "",
        "frontend strand_front",
        f"    bind {front}",
        f"    http-request deny deny_status 413 if {{ req.hdr_val(content-length) gt {max_body or max_body_bytes()} }}",
        f"    default_backend {BACKEND}",
        "",
        f"backend {BACKEND}",
        "    balance leastconn",
        "    option httpchk",
        "    http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host localhost",
        "    http-check expect status 200",
        "    timeout check 5s",
        "    default-server check inter 2s fall 3 rise 1",
    ]
    lines += [f"    server {server_name(i)} {address}" for i, address in enumerate(servers)]
    return "\n".join(lines) + "\n"


def start(path: Path, text: str, **popen: Any) -> subprocess.Popen[bytes]:
    """HAProxy running `text` (written to `path`), in the foreground of its process."""
    path.write_text(text)
    check = subprocess.run([executable(), "-c", "-q", "-f", str(path)], capture_output=True)
    if check.returncode != 0:
        raise RuntimeError(f"haproxy refused {path}: {check.stderr.decode(errors='replace')}")
    return subprocess.Popen([executable(), "-db", "-f", str(path)], **popen)


def command(admin_socket: str, line: str) -> str:
    """One command to HAProxy's runtime API; its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(admin_socket)
        s.sendall(line.encode() + b"\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def drain(admin_socket: str, index: int) -> None:
    """No new connections to process `index`; the ones it has stay."""
    command(admin_socket, f"set server {BACKEND}/{server_name(index)} state drain")


def ready(admin_socket: str, index: int) -> None:
    command(admin_socket, f"set server {BACKEND}/{server_name(index)} state ready")


def server_stat(admin_socket: str, index: int) -> dict[str, str]:
    """HAProxy's statistics row for process `index` (`status`, `scur`: open connections…)."""
    out = command(admin_socket, "show stat")
    header, *rows = out.splitlines()
    names = header.lstrip("# ").split(",")
    for row in rows:
        values = dict(zip(names, row.split(","), strict=False))
        if values.get("pxname") == BACKEND and values.get("svname") == server_name(index):
            return values
    return {}


def server_status(admin_socket: str, index: int) -> str:
    """`UP`, `DOWN`, `DRAIN`, `MAINT`…: the process as HAProxy sees it now."""
    return server_stat(admin_socket, index).get("status", "")


def server_connections(admin_socket: str, index: int) -> int:
    """Connections HAProxy holds open to process `index` now (websockets included)."""
    return int(server_stat(admin_socket, index).get("scur") or 0)


def wait_status(admin_socket: str, index: int, wanted: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # The runtime API's socket may appear a moment after HAProxy listens on its front.
        with contextlib.suppress(OSError):
            if server_status(admin_socket, index).startswith(wanted):
                return
        time.sleep(0.1)
    raise RuntimeError(f"{server_name(index)} not {wanted} after {timeout:.0f} s")
