"""`make test` from a clean clone: its wall time, what it ran, and its slowest ten tests.

The commit checked out (`HEAD`, so changes not committed are not in it) is cloned into a
temporary folder and `make test` runs there as CI runs it: the environment made from
nothing (packages from pip's and npm's caches when they hold them), its own embedded
Postgres (the benchmark's `DATABASE_URL` is not passed on), lint, every test and mypy.
`PYTEST_ADDOPTS=--durations=10` makes both pytest runs (the tests without a browser and
the browser tests beside them) print their ten slowest phases; the ten slowest of the two
lists are rows.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, ROOT, Report, Row

GOAL_SECONDS = 600
LIMIT_SECONDS = 3600  # a run past an hour is reported as such, not waited for
_DURATION = re.compile(r"^\s*([\d.]+)s (call|setup|teardown)\s+(\S+)\s*$")
_SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed).*? in [\d.]+s)")


def run(report: Report) -> None:
    folder = Path(tempfile.mkdtemp(prefix="strand-suite-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "STRAND_"))}
    env["PYTEST_ADDOPTS"] = "--durations=10"
    try:
        started = time.perf_counter()
        subprocess.run(
            ["git", "clone", "-q", str(ROOT), str(folder / "strand")], check=True, env=env
        )
        try:
            done = subprocess.run(
                ["make", "test"],
                cwd=folder / "strand",
                env=env,
                capture_output=True,
                text=True,
                timeout=LIMIT_SECONDS,
            )
        except subprocess.TimeoutExpired:
            report.add(Row("suite", "`make test` from a clean clone", f"over {LIMIT_SECONDS} s"))
            return
        took = time.perf_counter() - started
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    output = done.stdout + done.stderr
    summaries = [m.group(1) for line in output.splitlines() if (m := _SUMMARY.match(line))]
    slowest = sorted(
        (
            (float(m.group(1)), m.group(2), m.group(3))
            for line in output.splitlines()
            if (m := _DURATION.match(line))
        ),
        reverse=True,
    )[:10]
    failed = [
        line.split()[1] for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "suite-output.txt").write_text(output)  # the whole of it, to read a failure
    minutes, seconds = divmod(round(took), 60)
    report.add(
        Row(
            "suite",
            "`make test` from a clean clone (set-up, lint, every test, mypy), 2 cores",
            f"{minutes} min {seconds:02d} s, exit status {done.returncode}",
            "≤ 10 min, exit status 0",
            "met" if took <= GOAL_SECONDS and done.returncode == 0 else "NOT met",
            "; ".join(
                f"{part}: {summary}"
                for part, summary in zip(("without a browser", "browser"), summaries, strict=False)
            ),
        ),
        *(
            Row("suite", "failed", f"`{test}`", note="bench/results/suite-output.txt")
            for test in failed
        ),
        *(
            Row("suite", f"slowest {n}: `{test}` ({phase})", f"{secs:.1f} s")
            for n, (secs, phase, test) in enumerate(slowest, start=1)
        ),
    )
