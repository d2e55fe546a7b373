"""Live updates over websockets: connect storms, delivery latency, restarts, memory.

The scenarios and their viewers, which reconnect as the browser client does, are in
`tests/reliability/live_scenarios.py` (the tests run them small); here they run at full size
and their figures become rows. A scenario that fails is reported as a row instead of ending
the run.

- **storm**: `VIEWERS` viewers open their sockets at once against one daphne process, and
  `CLUSTER_VIEWERS` against the cluster (HAProxy in front of 2 processes, as `make
  cluster`): connected, dropped, refused and retried, and the time until the last `ready`.
- **latency**: with those viewers connected, a writer appends 5 events a second (100
  events); each viewer notes when its event loop read each event's frame from the socket
  (before parsing it). Latency is that moment minus the moment `append_events` returned
  (after commit), both on `time.monotonic()`.
- **restart**: on the cluster, with the writer appending, one process is killed (SIGKILL)
  and started again: the time until every viewer it held has reconnected and caught up
  (`ready`), and then every viewer must hold every event exactly once, in order.
- **memory**: resident memory of the one process before the storm and with `VIEWERS` idle
  viewers connected.
- **load**: 200 viewers over 4 sessions and 20 API writers appending with `expected_seq`
  (retrying on 409) for 60 s; every viewer must receive every event of its session exactly
  once and in order.

The viewers of the storm, latency and restart scenarios are spread over 4 client processes
(as viewers are over browsers; in one process the last viewer's frame waited for the
others' to be read and parsed), the writer runs in this process, the servers in others,
all on the same cores; figures include that contention.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from bench.common import Report, Row
from tests.reliability.live_scenarios import (
    CLUSTER_VIEWERS,
    LOAD_VIEWERS,
    RATE,
    VIEWERS,
    Delivery,
    Restart,
    Storm,
    load,
    on_cluster,
    one_process,
)


def _counts(counter: Mapping[str, int]) -> str:
    return ", ".join(f"{name} ×{n}" for name, n in sorted(counter.items()))


def storm_row(storm: Storm, group: str, where: str) -> Row:
    took = f"last `ready` after {storm.seconds:.1f} s" if storm.seconds is not None else ""
    return Row(
        group,
        f"connect storm: {storm.viewers:,} viewers at once, {where}",
        f"{storm.connected:,} connected, {storm.dropped:,} dropped" + (f"; {took}" if took else ""),
        "0 dropped",
        "met" if storm.dropped == 0 else "NOT met",
        note=f"{storm.refused:,} refusals (4503) retried"
        + (f"; failed attempts: {_counts(storm.errors)}" if storm.errors else ""),
    )


def delivery_rows(delivery: Delivery, group: str, where: str, rate: float) -> list[Row]:
    name = (
        f"delivery latency commit → client, {delivery.viewers:,} viewers, {where}, "
        f"{rate:g} events/s"
    )
    ok = delivery.p99 < 100 and delivery.missed == 0 and delivery.doubled == 0
    return [
        Row(group, f"{name}, p50", f"{delivery.p50:.1f} ms"),
        Row(
            group,
            f"{name}, p99",
            f"{delivery.p99:.1f} ms",
            "< 100 ms, 0 missed, 0 doubled",
            "met" if ok else "NOT met",
            note=f"{len(delivery.latencies_ms):,} deliveries, {delivery.missed} missed, "
            f"{delivery.doubled} doubled",
        ),
    ]


def restart_row(restart: Restart, group: str, where: str) -> Row:
    took = f"{restart.seconds:.1f} s" if restart.seconds is not None else "not all"
    ok = restart.reconnected == restart.affected and restart.missed == 0 and restart.doubled == 0
    return Row(
        group,
        f"restart under load: {where}; until every viewer caught up",
        took,
        "0 missed, 0 doubled",
        "met" if ok and restart.exact == restart.viewers else "NOT met",
        note=f"{restart.affected:,} viewers cut off, {restart.reconnected:,} back; "
        f"{restart.missed} missed, {restart.doubled} doubled, {restart.skipped} out of order; "
        f"{restart.exact:,} of {restart.viewers:,} hold every event once",
    )


def run_one_process(report: Report) -> None:
    from sessions_app import services

    result = one_process(services.user_get_or_create_local(username="bench"))
    per_1000 = (result.rss_viewers_mb - result.rss_idle_mb) * 1000 / VIEWERS
    report.add(
        storm_row(result.storm, "live", "one process"),
        *delivery_rows(result.delivery, "live", "one process", RATE),
        Row(
            "live",
            "resident memory per 1,000 idle viewers, one process",
            f"{per_1000:.0f} MB",
            note=f"{result.rss_idle_mb:.0f} MB with none → {result.rss_viewers_mb:.0f} MB "
            f"with {VIEWERS:,}; {result.exact:,} of {VIEWERS:,} viewers hold every event once",
        ),
    )


def run_cluster(report: Report) -> None:
    from sessions_app import services

    result = on_cluster(services.user_get_or_create_local(username="bench"))
    where = "cluster (HAProxy + 2 processes)"
    storm = storm_row(result.storm, "live", where)
    storm.note += f"; websockets per process: {' / '.join(f'{n:,}' for n in result.spread)}"
    report.add(
        storm,
        *delivery_rows(result.delivery, "live", where, RATE),
        restart_row(
            result.restart,
            "live",
            f"process 1 of 2 killed and started again under {CLUSTER_VIEWERS:,} viewers",
        ),
    )


def run_load(report: Report, seconds: float = 60.0) -> None:
    from sessions_app import services

    result = load(services.user_get_or_create_local(username="bench"), seconds=seconds)
    report.add(
        Row(
            "load",
            f"{LOAD_VIEWERS} viewers + 20 API writers, {seconds:.0f} s, one daphne",
            f"{result.written:,} events written ({result.written / seconds:,.0f}/s), "
            f"{result.conflicts:,} retries after 409",
            note=f"{len(result.errors)} errors",
        ),
        Row(
            "load",
            "viewers that missed, doubled or reordered an event",
            f"{result.bad_viewers} of {LOAD_VIEWERS}",
            "0",
            "met" if result.bad_viewers == 0 and not result.errors else "NOT met",
        ),
        Row(
            "load",
            "daphne resident memory, start → end",
            f"{result.rss_start_mb:.0f} MB → {result.rss_end_mb:.0f} MB",
        ),
    )


def _reported(report: Report, name: str, scenario: Callable[[Report], None]) -> None:
    """Run `scenario`; if it fails, a row says so and the run goes on."""
    try:
        scenario(report)
    except Exception as exc:
        report.add(
            Row(
                "live",
                f"{name}: did not finish",
                f"{type(exc).__name__}: {exc}"[:300],
                verdict="NOT met",
            )
        )


def run(report: Report) -> None:
    _reported(report, "one process", run_one_process)
    _reported(report, "cluster", run_cluster)
    _reported(report, "load", run_load)
