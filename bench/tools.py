"""A catastrophic regular expression in one session; another user's requests meanwhile.

- **other user**: one daphne process serves Strand. Alice's agent (the offline model, asked to
  `search for regex …` three times in one message) greps her folder, 32 files of 1 MiB made of
  lines of 999 a's ending in '!', with `(a+)+$`, `(a|aa)+$` and `(.*a){25}$` at once, while Bob
  lists his sessions over HTTP in a loop. Bob's latency is measured while the tools run (from
  the first `tool/call` to the last `tool/result`) and with nothing running; three rounds.
- **engines**, in this process: the share of a pure-Python loop's throughput that is left
  while another thread runs the pattern, with Python's `re` (grep's engine before RE2) on one
  line of 20 a's and a '!', and with the grep tool (RE2) over the same 32 MiB; and how long
  each takes. Every further 'a' doubles `re`'s time; the tool's bounds keep RE2's linear.

Bob's client, Alice's client and daphne share the machine's two cores with Postgres.
"""

from __future__ import annotations

import re
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Report, Row
from deploy import daphne

PORT = 18_760
PATTERNS = [r"(a+)+$", r"(a|aa)+$", r"(.*a){25}$"]
ROUNDS = 3
TRAP_FILES = 32


def fill_with_traps(folder: Path, files: int = TRAP_FILES) -> int:
    """`files` files of 1 MiB: lines of 999 a's ending in '!'. Bytes written."""
    line = b"a" * 999 + b"!\n"
    body = line * (1024 * 1024 // len(line))
    for index in range(files):
        (folder / f"trap-{index:02}.txt").write_bytes(body)
    return files * len(body)


def run(report: Report) -> None:
    with tempfile.TemporaryDirectory(prefix="strand-bench-tools-") as scratch:
        _other_user(report, Path(scratch))
        _engines(report, Path(scratch))


def _other_user(report: Report, scratch: Path) -> None:
    import requests

    from sessions_app import services
    from sessions_app.models import Session
    from sessions_app.services import tokens

    roots = scratch / "workspaces"
    roots.mkdir()
    alice = services.user_get_or_create_local(username="bench-alice")
    bob = services.user_get_or_create_local(username="bench-bob")
    alice_http, bob_http = requests.Session(), requests.Session()
    alice_http.headers["Authorization"] = f"Bearer {tokens.token_create(alice, 'bench')[1]}"
    bob_http.headers["Authorization"] = f"Bearer {tokens.token_create(bob, 'bench')[1]}"
    server = daphne.start(
        PORT,
        {
            "STRAND_WORKSPACE_ROOTS": str(roots),
            "STRAND_OFFLINE_CHUNK_DELAY_MS": "0",
            "STRAND_TOOL_DELAY_MS": "0",
            "STRAND_RECOVER_AT_START": "0",
        },
    )
    base = f"http://127.0.0.1:{PORT}"
    idle: list[float] = []
    during: list[float] = []
    windows: list[float] = []
    failures = 0
    try:
        created = alice_http.post(f"{base}/api/sessions", json={"title": "traps"}, timeout=60)
        created.raise_for_status()
        session = Session.objects.get(id=created.json()["id"])
        fill_with_traps(Path(session.cwd))
        bob_http.post(f"{base}/api/sessions", json={"title": "Bob's"}, timeout=60)
        for _ in range(ROUNDS):
            answered: list[tuple[float, float, int]] = []
            stop = threading.Event()

            def bob_lists(answered: list[tuple[float, float, int]], stop: threading.Event) -> None:
                while not stop.is_set():
                    started = time.time()
                    status = bob_http.get(f"{base}/api/sessions", timeout=120).status_code
                    answered.append((started, time.time(), status))

            thread = threading.Thread(target=bob_lists, args=(answered, stop))
            thread.start()
            try:
                time.sleep(1.0)
                after = _last(session)
                text = " and ".join(f"search for regex '{p}'" for p in PATTERNS)
                sent = alice_http.post(
                    f"{base}/api/sessions/{session.id}/messages", json={"text": text}, timeout=60
                )
                sent.raise_for_status()
                events = _wait_turn_end(session.id, after)
                time.sleep(0.5)
            finally:
                stop.set()
                thread.join(120)
            calls = [e.time.timestamp() for e in events if e.type == "tool/call"]
            results = [e for e in events if e.type == "tool/result"]
            failures += sum(1 for e in results if e.data["entry"]["message"]["isError"])
            failures += sum(1 for *_, status in answered if status != 200)
            start, end = min(calls), max(e.time.timestamp() for e in results)
            windows.append(end - start)
            during += [b - a for a, b, _ in answered if start <= a and b <= end]
            idle += [b - a for a, b, _ in answered if b < start]
    finally:
        daphne.stop(server)
    worst = max(during) if during else float("nan")
    report.add(
        Row(
            "tools",
            f"another user's request while 3 catastrophic greps run ({len(during)} requests)",
            f"median {statistics.median(during) * 1000:.0f} ms, max {worst * 1000:.0f} ms"
            if during
            else "none overlapped",
            "answered, max < 1 s",
            "ok" if during and worst < 1 and not failures else "over",
            f"nothing running: median {statistics.median(idle) * 1000:.0f} ms; "
            f"errors or non-200 answers: {failures}",
        ),
        Row(
            "tools",
            "3 greps of 32 MiB at once in the server, first call to last result",
            f"{statistics.median(windows):.2f} s",
            "",
            "",
            f"median of {ROUNDS} rounds",
        ),
    )


def _last(session: Any) -> int:
    from sessions_app.models import Session

    return int(Session.objects.get(id=session.id).last_seq)


def _wait_turn_end(session_id: Any, after: int, timeout: float = 300) -> list[Any]:
    from sessions_app import store

    deadline = time.monotonic() + timeout
    while True:
        events = store.events_after(session_id, after, 10_000)
        if any(e.type == "turn/end" for e in events):
            return events
        if time.monotonic() > deadline:
            raise RuntimeError("the turn did not end")
        time.sleep(0.05)


def _share_left(work: Callable[[], Any], rounds: int = 5) -> tuple[float, float]:
    """(the speed a pure-Python loop keeps while `work` runs over and over in another thread,
    relative to the loop alone, medians over `rounds` short spans measured before, during and
    after; the median time of one `work`)."""

    def spin(duration: float = 0.3) -> float:
        count, end = 0, time.perf_counter() + duration
        while time.perf_counter() < end:
            count += 1
        return count / duration

    alone = [spin() for _ in range(rounds)]
    stop = threading.Event()
    took: list[float] = []

    def loop() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            work()
            took.append(time.perf_counter() - started)

    thread = threading.Thread(target=loop)
    thread.start()
    shared = [spin() for _ in range(rounds)]
    stop.set()
    thread.join()
    alone += [spin() for _ in range(rounds)]
    return statistics.median(shared) / statistics.median(alone), statistics.median(took)


def _engines(report: Report, scratch: Path) -> None:
    from runtime import tools

    folder = scratch / "engines"
    folder.mkdir()
    fill_with_traps(folder)
    ws = tools.Workspace.at(str(folder))
    line = "a" * 20 + "!"
    re_left, re_took = _share_left(lambda: re.search(r"(a+)+$", line))
    grep = tools.BUILTIN_TOOLS["grep"]
    re2_left, re2_took = _share_left(lambda: grep.run(ws, {"pattern": r"(a+)+$", "regex": True}))
    report.add(
        Row(
            "tools",
            "Python's re, (a+)+$ on one line of 20 a's and '!' (grep's engine before)",
            f"{re_took:.2f} s",
            "",
            "",
            f"a pure-Python thread meanwhile keeps {re_left * 100:.0f}% of its speed; "
            "each further 'a' doubles the time",
        ),
        Row(
            "tools",
            "grep tool (RE2), (a+)+$ over 32 files of 1 MiB",
            f"{re2_took:.2f} s",
            "",
            "",
            f"a pure-Python thread meanwhile keeps {re2_left * 100:.0f}% of its speed",
        ),
    )
