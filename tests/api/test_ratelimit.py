"""The fixed-window counter: per user and scope, opened by the user's first hit, shared by
every process (it is a row)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from sessions_app.models import RateCounter
from sessions_app.services import ratelimit

T0 = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def two_per_minute(settings: Any) -> None:
    settings.STRAND_RATE_LIMITS = {"message": (2, 60)}


@pytest.mark.django_db
def test_the_window_allows_the_limit_then_refuses(alice: Any, two_per_minute: None) -> None:
    assert ratelimit.rate_hit(alice, "message", now=T0) == 1
    assert ratelimit.rate_hit(alice, "message", now=T0 + timedelta(seconds=10)) == 2
    with pytest.raises(ratelimit.RateLimited) as refused:
        ratelimit.rate_hit(alice, "message", now=T0 + timedelta(seconds=20))
    assert refused.value.retry_after == 40
    # The next window starts afresh, and the old window's row goes.
    assert ratelimit.rate_hit(alice, "message", now=T0 + timedelta(seconds=61)) == 1
    assert RateCounter.objects.filter(user=alice).count() == 1


@pytest.mark.django_db
def test_a_window_opens_at_the_first_hit_not_on_the_clock(alice: Any, two_per_minute: None) -> None:
    """Two hits a second apart across a minute of the clock are in one window: the limit
    holds for a client whose requests happen to straddle it."""
    first = T0 + timedelta(seconds=59)
    ratelimit.rate_hit(alice, "message", now=first)
    assert ratelimit.rate_hit(alice, "message", now=first + timedelta(seconds=2)) == 2
    with pytest.raises(ratelimit.RateLimited) as refused:
        ratelimit.rate_hit(alice, "message", now=first + timedelta(seconds=3))
    assert refused.value.retry_after == 57
    # The window is over exactly a window length after its first hit.
    assert ratelimit.rate_hit(alice, "message", now=first + timedelta(seconds=60)) == 1


@pytest.mark.django_db(transaction=True)
def test_first_hits_at_once_open_one_window(alice: Any, settings: Any) -> None:
    """Concurrent first hits at slightly different times share the window the first opens."""
    settings.STRAND_RATE_LIMITS = {"message": (3, 60)}
    outcomes: list[str] = []
    gate = threading.Barrier(6)

    def hit(offset: int) -> None:
        try:
            gate.wait()
            ratelimit.rate_hit(alice, "message", now=T0 + timedelta(milliseconds=offset))
            outcomes.append("allowed")
        except ratelimit.RateLimited:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=hit, args=(offset,)) for offset in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["allowed"] * 3 + ["refused"] * 3
    assert RateCounter.objects.filter(user=alice).count() == 1


@pytest.mark.django_db
def test_users_and_scopes_count_apart(alice: Any, bob: Any, settings: Any) -> None:
    settings.STRAND_RATE_LIMITS = {"message": (1, 60), "import": (1, 60)}
    ratelimit.rate_hit(alice, "message", now=T0)
    ratelimit.rate_hit(alice, "import", now=T0)
    ratelimit.rate_hit(bob, "message", now=T0)
    with pytest.raises(ratelimit.RateLimited):
        ratelimit.rate_hit(bob, "message", now=T0)


@pytest.mark.django_db
def test_a_zero_limit_turns_the_scope_off(alice: Any, settings: Any) -> None:
    settings.STRAND_RATE_LIMITS = {"message": (0, 60)}
    for _ in range(5):
        assert ratelimit.rate_hit(alice, "message", now=T0) == 0
    assert not RateCounter.objects.exists()


def test_defaults_apply_without_settings(settings: Any) -> None:
    del settings.STRAND_RATE_LIMITS
    assert ratelimit.limit_for("message") == ratelimit.DEFAULT_LIMITS["message"]
    assert ratelimit.limit_for("import") == ratelimit.DEFAULT_LIMITS["import"]


@pytest.mark.django_db(transaction=True)
def test_connections_share_one_count(alice: Any, settings: Any) -> None:
    """Hits from many connections at once (as from many server processes) add up exactly."""
    settings.STRAND_RATE_LIMITS = {"message": (10, 60)}
    allowed: list[int] = []
    refused: list[int] = []

    def hit() -> None:
        try:
            for _ in range(3):
                try:
                    allowed.append(ratelimit.rate_hit(alice, "message", now=T0))
                except ratelimit.RateLimited:
                    refused.append(1)
        finally:
            connection.close()

    threads = [threading.Thread(target=hit) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(allowed) == list(range(1, 11)) and len(refused) == 8
    assert RateCounter.objects.get(user=alice).count == 18
