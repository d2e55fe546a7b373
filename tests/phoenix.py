"""Arize Phoenix, a real OTLP tracing backend, for the tests that read Strand's export back.

`make phoenix-deps` installs it into an environment of its own (`.strand/phoenix-venv`); it
runs offline, its data in SQLite under a temporary folder. It takes a minute to start on a
busy machine, so a test module shares one (`phoenix_server`). `STRAND_TEST_PHOENIX_URL`
names one already running instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PHOENIX_PYTHON = ROOT / ".strand" / "phoenix-venv" / "bin" / "python"
PORTS = range(26600, 26700)  # this project's range (below 32768)
START_TIMEOUT_S = 240


@dataclass(frozen=True)
class Phoenix:
    url: str  # http://127.0.0.1:PORT

    @property
    def traces_url(self) -> str:
        return f"{self.url}/v1/traces"

    def spans(self, conversation_id: str) -> list[dict[str, Any]]:
        """Every span Phoenix holds of one conversation (`gen_ai.conversation.id`)."""
        found: list[dict[str, Any]] = []
        cursor = None
        while True:
            query = "limit=1000" + (f"&cursor={cursor}" if cursor else "")
            with urllib.request.urlopen(
                f"{self.url}/v1/projects/default/spans?{query}", timeout=30
            ) as answer:
                page = json.load(answer)
            found += [
                s
                for s in page["data"]
                if s["attributes"].get("gen_ai.conversation.id") == conversation_id
            ]
            cursor = page.get("next_cursor")
            if not cursor:
                return found


def free_port(ports: range = PORTS) -> int:
    for port in ports:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports}")


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def phoenix_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    if given := os.environ.get("STRAND_TEST_PHOENIX_URL"):
        yield Phoenix(given.rstrip("/"))
        return
    if not PHOENIX_PYTHON.exists():
        pytest.skip("Arize Phoenix is not installed: run `make phoenix-deps`")
    work = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    grpc = free_port(range(port + 1, PORTS.stop))
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    env.pop("DATABASE_URL", None)
    log = (work / "phoenix.log").open("wb")
    process = subprocess.Popen(
        [str(PHOENIX_PYTHON), "-m", "phoenix.server.main", "serve"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "Phoenix did not start: " + (work / "phoenix.log").read_text()[-2000:]
                )
            time.sleep(0.5)
        yield Phoenix(url)
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.close()


class Forwarder:
    """A TCP port that passes connections on to another, and that can be closed and opened
    again on the same port: a collector that is down for a while."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._server: socket.socket | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(16)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
