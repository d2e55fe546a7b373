"""The asynchronous projector on a real Postgres: off the append path, killed with SIGKILL in
the middle of its work and resumed without a gap or a duplicate, one at a time per database,
and a deleted session's output gone with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from projections.search_text import entry_parts
from sessions_app import services, store
from sessions_app.models import Entry, Event, ProjectorCheckpoint, SearchDoc, UsageCount
from sessions_app.projectors import project_pending, projector_lag
from tests.api.conftest import user_msg
from tests.api.test_search import assistant_msg, session_with
from tests.runtime.conftest import child_database_url

ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": child_database_url()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.django_db
def test_the_append_path_does_no_indexing_work(alice: Any) -> None:
    session_with(alice, user_msg("an appended note"), assistant_msg("a reply"))
    assert SearchDoc.objects.count() == 0 and UsageCount.objects.count() == 0
    assert projector_lag("search").events == 3  # session/created and the two messages
    assert project_pending() == 6  # each of the two projectors read the three
    assert SearchDoc.objects.count() == 2 and projector_lag("usage").events == 0


@pytest.mark.django_db(transaction=True)
def test_a_projector_killed_with_sigkill_resumes_without_a_gap_or_a_duplicate(
    alice: Any,
) -> None:
    sessions = [
        session_with(alice, *[assistant_msg(f"reply {k}.{n}") for n in range(400)])
        for k in range(8)
    ]
    process = manage("project")
    try:
        # Killed as soon as its first batch has committed: the next one is under way.
        while not ProjectorCheckpoint.objects.exists():
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(10)
    partial = SearchDoc.objects.count()
    assert partial < 8 * 400  # it was stopped midway
    # Its connection (and the projector's lock) went with it; another run finishes.
    done = manage("project", "--once")
    out, err = done.communicate(timeout=120)
    assert done.returncode == 0, err
    expected = {
        (e.session_id, e.seq, p.part)
        for e in Entry.objects.filter(session__in=sessions)
        for p in entry_parts(e.data)
    }
    stored = list(SearchDoc.objects.values_list("session_id", "seq", "part"))
    assert len(stored) == len(set(stored)) == len(expected) == 8 * 400
    assert set(stored) == expected
    replies = UsageCount.objects.filter(metric="replies").values_list("value", flat=True)
    assert sum(replies) == Event.objects.filter(type="assistant/message").count()
    assert projector_lag("search").events == projector_lag("usage").events == 0


@pytest.mark.django_db(transaction=True)
def test_one_projector_works_per_database(alice: Any) -> None:
    from sessions_app.projectors.runner import LOCK_KEY

    session_with(alice, user_msg("held"))
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
        try:
            waiting = manage("project", "--once")
            # It waits for the lock (and would give up after 30 s with one line).
            time.sleep(1)
            assert waiting.poll() is None and SearchDoc.objects.count() == 0
        finally:
            cur.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert SearchDoc.objects.count() == 1


@pytest.mark.django_db
def test_deleting_a_session_drops_its_index_rows_and_rollups(alice: Any) -> None:
    kept = session_with(alice, user_msg("kept words"))
    gone = session_with(alice, user_msg("gone words"), assistant_msg("a reply"))
    project_pending()
    services.session_delete(session=gone, by=alice)
    assert set(SearchDoc.objects.values_list("session_id", flat=True)) == {kept.id}
    assert set(UsageCount.objects.values_list("session_id", flat=True)) <= {kept.id}
    assert not ProjectorCheckpoint.objects.filter(session_id=gone.id).exists()
    store.append_events(kept.id, kept.last_seq, [user_msg("more")])
    assert project_pending() == 2
