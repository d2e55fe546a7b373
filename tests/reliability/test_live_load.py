"""Viewers and writers against one daphne process: every viewer receives every event of its
session exactly once and in order (the full 200-viewer, 60-second run is in `make bench`)."""

from __future__ import annotations

import os

import pytest

from tests.reliability.live_scenarios import load
from tests.runtime.conftest import child_database_url

pytestmark = pytest.mark.django_db(transaction=True)


def test_viewers_miss_and_double_nothing_while_writers_race(alice):
    result = load(
        alice,
        seconds=8,
        viewers=60,
        writers=6,
        sessions=3,
        port=25_000 + os.getpid() % 1000,
        database_url=child_database_url(),
    )
    assert not result.errors, result.errors[:3]
    assert result.written > 30
    assert result.conflicts > 0, "the writers never raced: the test proves less than it says"
    assert result.bad_viewers == 0
