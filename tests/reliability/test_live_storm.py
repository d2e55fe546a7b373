"""Connect storms and restarts with real daphne processes, real HAProxy and real websockets.

The viewers reconnect as the browser client does (`live_scenarios.Viewer`). Counts and
correctness are asserted; times are only reported (the 1,000- and 2,000-viewer runs are in
`make bench`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.reliability.live_scenarios import on_cluster, one_process
from tests.runtime.conftest import child_database_url

pytestmark = pytest.mark.django_db(transaction=True)


def _port(offset: int) -> int:
    return 23_000 + (os.getpid() % 300) * 10 + offset


def test_a_storm_beyond_what_a_process_admits_all_connect_after_retrying(alice) -> None:
    result = one_process(
        alice,
        viewers=120,
        port=_port(0),
        database_url=child_database_url(),
        # The process takes on 25 sockets at a time: most of the 120 are refused with 4503
        # first, and must come back by themselves.
        env={"STRAND_WS_MAX_CONNECTING": "25"},
        seed=5,
        events=10,
        rate=20,
        deadline_s=120,
    )
    print(f"storm: {result.storm}; p99 {result.delivery.p99:.0f} ms")
    assert result.storm.refused > 0, "nothing was refused: the test proves less than it says"
    assert result.storm.connected == 120
    assert result.delivery.missed == 0 and result.delivery.doubled == 0
    assert result.exact == 120  # the 5 events before and the 10 after, each once, in order


@pytest.mark.skipif(
    shutil.which("haproxy") is None and not Path("/usr/sbin/haproxy").exists(),
    reason="haproxy is not installed (make haproxy-deps)",
)
def test_viewers_of_a_killed_process_come_back_through_haproxy_missing_nothing(alice) -> None:
    result = on_cluster(
        alice,
        viewers=80,
        front=_port(3),
        database_url=child_database_url(),
        seed=5,
        events=10,
        rate=10,
        restart_events=60,
        deadline_s=120,
    )
    print(f"storm: {result.storm}; spread {result.spread}; restart: {result.restart}")
    assert result.storm.connected == 80
    assert all(n > 0 for n in result.spread), "HAProxy sent every viewer to one process"
    restart = result.restart
    assert restart.affected > 0, "the kill cut no viewer off: the test proves less than it says"
    assert restart.reconnected == restart.affected
    assert restart.missed == 0 and restart.doubled == 0 and restart.skipped == 0
    assert restart.exact == 80
