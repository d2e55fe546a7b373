"""Shared helpers: a dedicated benchmark database, payloads, medians, the report."""

from __future__ import annotations

import os
import platform
import random
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BENCH_DB = os.environ.get("STRAND_BENCH_DB", "strand_bench")  # on DATABASE_URL's server


def setup_django(fresh: bool = False) -> None:
    """Point Django at a database of its own (same server as the app) and migrate it;
    `fresh` drops what earlier runs left in it first, so each figure is taken at the size
    its row names rather than at whatever the runs before it have grown the tables to."""
    if "DATABASE_URL" in os.environ:
        base = os.environ["DATABASE_URL"]
    else:
        from config.embedded_pg import embedded_database_url

        base = embedded_database_url(ROOT / ".strand" / "pgdata")
    url = _with_database(base, BENCH_DB)
    _create_database(_with_database(base, "postgres"), BENCH_DB, fresh)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _with_database(url: str, name: str) -> str:
    from urllib.parse import urlparse, urlunparse

    parts = urlparse(url)
    return urlunparse(parts._replace(path=f"/{name}"))


def _create_database(admin_url: str, name: str, fresh: bool) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        if fresh:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def psycopg_url() -> str:
    from django.db import connection

    s = connection.settings_dict
    host = s["HOST"]
    if host.startswith("/"):
        return f"postgresql://{s['USER']}@/{s['NAME']}?host={host}&port={s['PORT'] or 5432}"
    return f"postgresql://{s['USER']}:{s['PASSWORD']}@{host}:{s['PORT'] or 5432}/{s['NAME']}"


def text_payload(rng: random.Random, low: int = 300, high: int = 4000) -> str:
    words = [
        "session",
        "entry",
        "tool",
        "context",
        "model",
        "branch",
        "leaf",
        "token",
        "summary",
        "request",
        "Postgres",
        "event",
        "stream",
        "result",
        "path",
    ]
    size = rng.randint(low, high)
    out: list[str] = []
    total = 0
    while total < size:
        w = rng.choice(words)
        out.append(w)
        total += len(w) + 1
    return " ".join(out)[:size]


def median_of(
    runs: int, measure: Callable[[], float], warmup: int = 1
) -> tuple[float, list[float]]:
    for _ in range(warmup):
        measure()
    values = [measure() for _ in range(runs)]
    return statistics.median(values), values


@dataclass
class Row:
    group: str
    name: str
    value: str
    target: str = ""
    verdict: str = ""
    note: str = ""


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)

    def add(self, *rows: Row) -> None:
        self.rows.extend(rows)
        for r in rows:
            note = f" ({r.note})" if r.note else ""
            print(f"  {r.group} | {r.name}: {r.value} {r.target} {r.verdict}{note}", flush=True)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SHOW server_version")
        pg = cur.fetchone()[0]
    node = ""
    try:
        node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        node = "not installed"
    return (
        f"{platform.system()} {platform.release()}, {os.cpu_count()} cores ({cpu}){mem}; "
        f"Python {platform.python_version()}; PostgreSQL {pg}; Node {node}"
    )


def resident() -> int:
    """This process's resident size in bytes (Linux: the second field of statm, in pages)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextmanager
def resident_rise() -> Iterator[Callable[[], int]]:
    """Samples the resident size every 20 ms while the block runs; yields a function that
    gives how far its peak rose above the start (read it after the block)."""
    start = peak = resident()
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, resident())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield lambda: max(0, peak - start)
    finally:
        done.set()
        sampler.join()
