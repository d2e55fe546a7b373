"""`make bench`: every benchmark in one run, then BENCHMARKS.md rewritten from the results."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime

from bench.common import ROOT, Report, Row, machine, setup_django


def main(argv: list[str]) -> int:
    # The whole run starts on an empty benchmark database; one suite alone reuses it.
    setup_django(fresh=not argv)
    from bench import (
        append,
        append_cpu,
        audit,
        compare,
        entry_search,
        langgraph,
        live,
        otlp,
        otlp_ingest,
        pages,
        pi,
        projector,
        search,
        suite,
        tools,
        tree_window,
        trees,
        usage,
        workspace,
    )

    suites = {
        "append": append.run,
        "append_cpu": append_cpu.run,
        "pi": pi.run,
        "pi_files": pi.run_files,
        "langgraph": langgraph.run,
        "pages": pages.run,
        "live": live.run,
        "tools": tools.run,
        "trees": trees.run,
        "tree_window": tree_window.run,
        "audit": audit.run,
        "compare": compare.run,
        "search": search.run,
        "entry_search": entry_search.run,
        "projector": projector.run,
        "otlp": otlp.run,
        "usage": usage.run,
        "workspace": workspace.run,
        "otlp_ingest": otlp_ingest.run,
        "suite": suite.run,
    }
    chosen = argv or list(suites)
    report = Report()
    started = time.perf_counter()
    for name in chosen:
        print(f"== {name}", flush=True)
        try:
            suites[name](report)
        except Exception as exc:  # one suite's failure is a row; the file is still written
            report.add(Row(name, "suite did not finish", f"{type(exc).__name__}: {exc}"[:300]))
    took = time.perf_counter() - started
    if not argv:
        _write(report, took)
    return 0


def _write(report: Report, took: float) -> None:
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m bench`); every figure below comes from the one run",
        f"that wrote this file, on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, in {took:.0f} s. The",
        "run starts on an empty benchmark database (`strand_bench`), which each suite then fills",
        "in turn: a figure over the whole database (the audit desk's) counts what the suites",
        "before it wrote, as its row says.",
        "",
        f"Machine: {machine()}.",
        "",
        "| group | measure | value | target | verdict | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in report.rows:
        lines.append(f"| {r.group} | {r.name} | {r.value} | {r.target} | {r.verdict} | {r.note} |")
    lines += ["", "## How each figure is obtained", ""]
    lines += [
        "- **append**: `bench/append.py`. 1,500 single-event calls and 50 calls of 100 events of",
        "  `user/message` (300 B–4 KB of text each). Each such event writes an event row and an",
        "  entry row (the tree), so the baselines are raw psycopg writing the same two rows into",
        "  the same tables: one autocommit statement per event, or `executemany` of 100 events and",
        "  100 entries per transaction; and the raw transaction, statement by statement, that",
        "  locks the session row (`SELECT … FOR UPDATE`), inserts the event and the entry (or",
        "  `executemany` of 100 of each) and updates the session's `last_seq` and leaf. A single",
        "  event is measured against the raw transaction, a batch against the two rows' inserts.",
        "  The event-row-only insert is shown too, and the notes give the other ratios. Strand's",
        "  figure includes its validation and JSON encoding; the raw rows are encoded before the",
        "  clock starts. Five interleaved runs after a warm-up; each value is the median of the",
        "  per-run rates.",
        "- **append cpu**: `bench/append_cpu.py`. The single-event append and the raw",
        "  transaction, 18 interleaved blocks of 100 calls each (after 2 of warm-up), with",
        "  commits not waited for (`synchronous_commit = off`) so that a busy disk does not",
        "  hide the code's cost: wall time per call, the client's thread time and the Postgres",
        "  backend's CPU time (`/proc/<pid>/schedstat`); medians of the blocks.",
        "- **pi files**: `bench/pi.py`. Generated Pi v3 files of 2,000 and 100,000 entries (a",
        "  compaction every 200 entries keeping ~40, side branches, thinking changes). Import is",
        "  one run of `pi_import` per size; context is the median of 30 calls of",
        "  `selectors.session_context` for the session's leaf (after 3 warm-ups). Pi's figure is",
        "  `tests/fixtures/pi/bench.mjs`: the median of 30 `SessionManager.open` +",
        "  `buildSessionContext()` of the same 2,000-entry file in one warm Node process. The",
        "  branchy files (`run_files`): one import each, then each export read to its end in",
        "  this process and downloaded from one daphne process (after a warm-up download); the",
        "  HTML export's download time and bytes are set against Pi 0.73.1's `exportFromFile`",
        "  of the same file (`tests/fixtures/pi/export.mjs`, median of 3).",
        "- **langgraph**: `bench/langgraph.py`. One conversation per store is given N messages",
        "  (~1 KB each), then single messages are appended and timed (median); the bytes per",
        "  message are the growth of the store's tables (`pg_total_relation_size`, with TOAST",
        "  and indexes) over those appends divided by their number. LangGraph: `StateGraph`",
        "  `START → append → END` over `MessagesState` with `PostgresSaver` (seeded with one",
        "  `update_state` of N messages). Strand: `append_events` of one `user/message`.",
        "- **pages**: `bench/pages.py`. Sessions of 1,000 and 100,000 events made of four turns",
        "  the offline runtime ran (a file written after an approval, two tool calls at once, a",
        "  search, a question; `bench/recorded.py`), repeated with fresh ids, a compaction every",
        "  150 entries, and request manifests whose payload hashes `verify` rebuilds (it runs on",
        "  both sessions). The large one grows after an ANALYZE that saw only the small one, with",
        "  autovacuum off, and the first fetch of each of its views is taken before any ANALYZE.",
        "  Then ANALYZE, and each view of both: the median of 5 fetches after one (3 for a view",
        "  over a second). Pages with a signed-in session cookie, the API with a token, over HTTP",
        "  from one daphne process, timed from the request to the answer's last byte; a fetch",
        "  that takes over 60 s is reported as timed out.",
        "- **live**: `bench/live.py`. Viewers that reconnect as the browser does (a random wait",
        "  below a cap doubling from 0.5 s to 30 s after each close, 4503 counted as a refusal,",
        "  resuming after the last seq held), spread over 4 client processes, open their sockets",
        "  at once: 1,000 on one daphne process and 2,000 through HAProxy to the 2-process",
        "  cluster; a viewer with no `ready` within 180 s counts as dropped. A writer (in the",
        "  benchmark's own process) then appends 100 events at 5 a second; latency is the",
        "  moment a viewer's event loop read the bytes that complete the event's frame from its",
        "  socket (before websockets parses them and the JSON is decoded) minus the return of",
        "  `append_events` in the writer's thread, both on `time.monotonic()` (one clock for",
        "  every process of the machine); every viewer counts the events it missed, had twice",
        "  or had out of order. On the",
        "  cluster, while 100 more are written, process 1 is killed (SIGKILL) and started",
        "  again: the time from the kill until the last viewer it held is `ready` again, and",
        "  every viewer must then hold every event once, in order. Memory: the process's",
        "  resident size with no viewer and with 1,000 idle ones.",
        "- **tools**: `bench/tools.py`. In one daphne process, Alice's agent greps 32 MiB of",
        "  lines of a's ending in '!' with `(a+)+$`, `(a|aa)+$` and `(.*a){25}$` at once while",
        "  Bob lists his sessions over HTTP in a loop; his latency while the tools run and with",
        "  nothing running, three rounds. In-process: how long Python's `re` (grep's engine",
        "  before RE2) and the grep tool take on that pattern, and what share of a pure-Python",
        "  loop's speed another thread keeps meanwhile.",
        "- **trees**: `bench/trees.py`. Comb-shaped Pi files (a spine of messages, each with a",
        "  side leaf: every spine entry forks, so the drawn indent grows by one per entry) of",
        "  2,000, 4,000 and 8,000 entries, and the pages benchmark's 100,000-event session. The",
        "  tree API is read to its end in pages of 2,000 rows, then the whole-tree page",
        "  (`?tree=1`) and the HTML export (its stream read to the end) are fetched in-process",
        "  with Django's test client; the median of 3 fetches for the combs, one for the large",
        "  session. Bytes per entry must stay flat from 2,000 to 8,000 entries. Export memory is",
        "  the rise of the process's resident size while one export streams (sampled every",
        "  20 ms).",
        "- **tree window**: `bench/tree_window.py`. Branchy Pi files (a spine of tool turns",
        "  with a side branch of one tool turn leaving every fifth question) of 1,000 (the",
        "  largest laid out whole), 24,000 and 100,000 entries, imported, then served by one",
        "  daphne process: the whole-tree page (`?tree=1`) with a session cookie over HTTP on",
        "  loopback, then the windows its first links read on (the window above, a collapsed",
        "  branch, a run of a long line, the rows further on) as htmx asks for them; the",
        "  median of 5 fetches after one, each to the answer's last byte.",
        "- **compare**: `bench/compare.py`. A session of about 100,000 events grown as the pages",
        "  benchmark grows its own (`bench/recorded.py`), whose last 5,000-odd entries are a",
        "  branch A; the leaf then moves back to A's first entry's parent through the store and",
        "  a branch B of as many entries grows from there (whole repeats of the four turns, so",
        "  both are compacted and full of tool calls). The API (`/api/sessions/{id}/compare`,",
        "  the first rows and rows from the middle through `more_cursor`) and the page (the",
        "  first rows, `offset` in the middle, and the summary htmx redraws on a live update)",
        "  over HTTP from one daphne process, as the pages benchmark fetches: the first fetch",
        "  before ANALYZE, then the median of 5 fetches after one.",
        "- **search**: `bench/search.py`. Bob owns 200,000 user and assistant messages in 20",
        "  sessions (300–1,000 characters each), Alice one session of 6; the median of 5",
        "  searches after one through `selectors.session_rows`, the home page's selector, for",
        "  each of them. Alice's figure should not grow with Bob's data.",
        "- **otlp**: `bench/otlp.py`. `manage.py project` runs with `STRAND_OTLP_ENDPOINT` at a",
        "  local collector (an HTTP server that reads each OTLP/HTTP protobuf body and counts its",
        "  span ids) while one writer appends whole 11-event turns (two requests, one tool call:",
        "  4 spans) round-robin over 20 sessions, paced to 1,000 events/s for 30 s;",
        "  `projector_lag('otlp')` every 0.5 s, then how long the export took to catch up after",
        "  the writer stopped, and whether each span arrived once. Then the OTLP file of one",
        "  session of 500 and one of 2,000 such turns, read in this process.",
        "- **audit**: `bench/audit.py`. 100 sessions of 1,000 model requests each written to",
        "  the store (100,000 audit rows, five owners); the audit desk's list, its exports",
        "  (streamed and counted, with the server's peak resident memory against its memory",
        "  before) and usage page over HTTP from one daphne process with a staff member's",
        "  cookie; then `manage.py verify --requests` over every request.",
        "- **projector**: `bench/projector.py`. The append benchmark again while `manage.py",
        "  project` runs beside it; the lag (events not projected, age of the oldest) read",
        "  every 0.5 s while one writer appends 1,000 events/s over 20 sessions; and each",
        "  projector alone on a backlog, its events/s when it never waits.",
        "- **usage**: `bench/usage.py`. 68,000 rollup rows (1,000,000 events' worth, 1,000",
        "  sessions, COPY) and the Usage page, its JSON and CSV through daphne, interleaved.",
        "- **entry search**: `bench/entry_search.py`. 1,000,000 search rows in 1,000 sessions",
        "  (COPY, trigram index built after); rare, medium, two-word, phrase, Chinese and",
        "  common queries through `GET /api/search` on one daphne process; median and p99.",
        "- **otlp ingest**: `bench/otlp_ingest.py`. Four-span GenAI agent runs posted to",
        "  `POST /v1/traces` as protobuf + gzip on one keep-alive connection, one span, one",
        "  run and 512 spans per body, then the same bodies again (every span already held);",
        "  spans accepted per second of the client's wall time.",
        "- **workspace**: `bench/workspace.py`. A session's folder of 5,000 files of 40 KB (200 MB)",
        "  made by hand and recorded by its first turn. Through one daphne process (the offline",
        "  model, no delays): a branch switch is a turn from an entry whose workspace differs in",
        "  500 files, timed from the POST of the message to its `turn/end` against the same turn",
        "  with nothing to restore (median of 6 switches, 3 of the other); the file list API and",
        "  the tar download at the leaf (median of 5 and 3). In-process on that folder: a scan",
        "  that finds nothing changed (median of 5), a snapshot after a one-file write (scan, blob,",
        "  append; median of 64), the tables' growth per one-line edit over those 64; and",
        "  `workspace_at` at the leaf of a 10,000-entry path holding 10,000 snapshots (median",
        "  of 10 after one).",
        "- **suite**: `bench/suite.py`. The commit checked out is cloned into a temporary",
        "  folder and `make test` runs there, as CI runs it, with its own embedded Postgres:",
        "  the wall time from the clone to the end (set-up, lint, the tests without a browser",
        "  on two workers and the browser tests beside them, mypy), what each pytest run",
        "  reported, each test that failed (the whole output is kept in",
        "  `bench/results/suite-output.txt`), and the ten slowest test phases of the two",
        "  (`--durations=10`).",
    ]
    (ROOT / "BENCHMARKS.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
