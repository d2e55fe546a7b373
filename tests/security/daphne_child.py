"""A daphne child process on the test database, its resident memory, and a client that
streams a large body from a generator while watching for the server's answer."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from deploy import daphne
from tests.runtime.conftest import child_database_url

BLOCK = 64 * 1024


def port_for(offset: int) -> int:
    """A port of this test process's own (from its pid), below the ephemeral range."""
    return 29_000 + os.getpid() % 1000 * 2 + offset


@contextlib.contextmanager
def serving(port: int, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    server = daphne.start(port, {"DATABASE_URL": child_database_url(), **env})
    try:
        yield server
    finally:
        daphne.stop(server)


def resident_kb(pid: int) -> int:
    """The process's resident memory (VmRSS) in KB."""
    return _status_kb(pid, "VmRSS")


def peak_kb(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM) in KB."""
    return _status_kb(pid, "VmHWM")


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def zeros(total: int) -> Iterator[bytes]:
    """`total` bytes, a block at a time: never held whole."""
    block = b"0" * BLOCK
    while total > 0:
        yield block[: min(total, BLOCK)]
        total -= BLOCK


def chunked(blocks: Iterable[bytes]) -> Iterator[bytes]:
    """The blocks framed as HTTP/1.1 chunks (without the closing empty chunk)."""
    for block in blocks:
        yield b"%x\r\n" % len(block) + block + b"\r\n"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int  # body bytes the client had sent when the answer came


class Upload:
    """One POST over its own connection: the headers, then body pieces from a generator,
    sent only while the server has not answered. A small send buffer keeps what the kernel
    takes ahead of the server's reads small."""

    def __init__(self, port: int, path: str, headers: dict[str, str]) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BLOCK)
        lines = [
            f"POST {path} HTTP/1.1",
            "Host: 127.0.0.1",
            *(f"{k}: {v}" for k, v in headers.items()),
        ]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.sent = 0

    def send(self, pieces: Iterable[bytes]) -> bool:
        """Send `pieces` until the server answers (or closes); True when all were sent."""
        for piece in pieces:
            view = memoryview(piece)
            while view:
                readable, writable, _ = select.select([self.sock], [self.sock], [], 30)
                if readable:
                    return False
                if not writable:
                    raise TimeoutError("the server neither read nor answered for 30 s")
                try:
                    n = self.sock.send(view)
                except (BrokenPipeError, ConnectionResetError):
                    return False
                self.sent += n
                view = view[n:]
        return True

    def answer(self) -> Answer:
        sent = self.sent
        data = b""
        with contextlib.suppress(ConnectionResetError):
            while True:
                piece = self.sock.recv(BLOCK)
                if not piece:
                    break
                data += piece
                head, sep, rest = data.partition(b"\r\n\r\n")
                if sep:
                    length = _header(head, "content-length")
                    if length is not None and len(rest) >= int(length):
                        break
        self.sock.close()
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        if not lines or len(lines[0].split()) < 2:
            raise AssertionError(f"no HTTP answer (after {sent} bytes sent): {data[:200]!r}")
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:])
        }
        return Answer(int(lines[0].split()[1]), headers, body, sent)


def _header(head: bytes, name: str) -> str | None:
    for line in head.decode("latin-1").split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name:
            return value.strip()
    return None
