"""Per-user rate limits: a fixed-window counter in Postgres.

A user's window in a scope opens at their first hit and lasts the scope's window length;
the next hit after it has ended opens the next one. Windows are the user's own, not cut
from the clock: a limit of two a minute lets two hits through in the minute after the
first, whenever that minute begins, and `Retry-After` is the time left in it.

Each (user, scope, window) is one row of `RateCounter`. Under a transaction-scoped advisory
lock on (user, scope), one `INSERT … ON CONFLICT DO UPDATE … RETURNING count` finds the
live window or opens one and counts the hit: atomic whatever the number of server
processes, with no Redis and no per-process cache (Django's default cache is local to a
process, so it could not enforce a limit across processes). A hit over the limit is refused
with `RateLimited`, which the API answers with 429 and `Retry-After`.

Limits come from `settings.STRAND_RATE_LIMITS`, a mapping of scope to `(requests, seconds)`;
scopes not named there use `DEFAULT_LIMITS`. A limit of 0 requests turns the scope off.
Every door that writes (but sign-in, throttled by django-axes, and the staff-only admin)
counts one hit before it does any work, so a refused request writes
nothing but its own counter: the API answers 429 with `Retry-After` and the JSON error,
the pages a 429 page or flash message (`sessions_app.web.limit_responses`).

Rows of ended windows are deleted when the user's next window opens, so the table holds
about one row per active user and scope.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from sessions_app.limits import RateLimited
from sessions_app.models import KeyRateCounter, RateCounter

# scope → (requests allowed per window, window length in seconds)
DEFAULT_LIMITS: Mapping[str, tuple[int, int]] = {
    # Sending a message, steering, following up and resending (each starts model calls).
    "message": (30, 60),
    # Importing Pi files.
    "import": (20, 3600),
    # Appending events through the API (a batch of up to STRAND_MAX_BATCH is one hit):
    # two a second, enough for a program recording its own agent's conversation.
    "append": (120, 60),
    # Creating an empty session (API and page).
    "session": (60, 3600),
    # Forking: a fork copies the whole path to its entry.
    "fork": (60, 3600),
    # Navigating with a summary of the branch left: one model call over that branch.
    "summary": (30, 600),
    # Compacting by hand: one model call over the path.
    "compact": (30, 600),
    # Replaying a recorded request: up to five turns, one after another.
    "replay": (20, 600),
    # Searching the session list: the page's full-text search reads every message of the
    # user's sessions; the API's title filter counts too. Typing in the search box sends
    # one search per pause.
    "search": (60, 60),
    # Uploading files or an archive into a session's workspace: each is read whole,
    # checked, stored and written into the folder.
    "upload": (30, 600),
    # Making API tokens.
    "token": (10, 3600),
    # The small writes, each an event (or a row) that every viewer of the session is sent:
    # generous for a person clicking, tight for a script looping over the door.
    # Renaming a session (page and API).
    "rename": (30, 60),
    # Moving the leaf without a summary: a click in the tree (page), PUT …/leaf and
    # POST …/navigate (API). The tree is clicked a lot, so two a second for a minute.
    "navigate": (120, 60),
    # Labelling an entry (page; the API's labels are appended events, counted as append).
    "label": (60, 60),
    # Deciding an approval: a reply may ask for up to STRAND_MAX_TOOL_CALLS_PER_REPLY.
    "approval": (120, 60),
    # Cancelling a turn.
    "cancel": (60, 60),
    # Deleting a session: its whole history goes, in one audited transaction.
    "delete": (60, 600),
    # Revoking API tokens and share links.
    "revoke": (60, 3600),
    # Making share links.
    "share": (30, 3600),
    # OTLP trace export (`POST /v1/traces`): an exporter sends a batch every few seconds,
    # one request per span at most when it exports each span as it ends.
    "otlp": (600, 60),
    # A share link's guest pages, counted per link and per client address (`rate_hit_key`).
    "share-view": (120, 60),
}


def limit_for(scope: str) -> tuple[int, int]:
    configured: Mapping[str, Any] = getattr(settings, "STRAND_RATE_LIMITS", {}) or {}
    requests, seconds = configured.get(scope, DEFAULT_LIMITS.get(scope, (0, 60)))
    return int(requests), max(int(seconds), 1)


def rate_hit(user: Any, scope: str, *, now: datetime | None = None) -> int:
    """Count one request of `user` in `scope`; `RateLimited` once over the limit.

    Returns the count in the current window. Refused requests count too, so that a client
    hammering the API does not get through at the window's edge more than the limit allows.
    """
    return _hit(RateCounter, "user_id", user.pk, scope, now)


def rate_hit_key(key: str, scope: str, *, now: datetime | None = None) -> int:
    """`rate_hit` for a caller without an account, counted by `key` (at most 100
    characters: a share link's id, a digest of a client address)."""
    return _hit(KeyRateCounter, "key", key[:100], scope, now)


def _hit(model: Any, column: str, key: Any, scope: str, now: datetime | None) -> int:
    limit, window = limit_for(scope)
    if limit <= 0:
        return 0
    now = now or timezone.now()
    ended = now - timedelta(seconds=window)
    table = model._meta.db_table
    with transaction.atomic(), connection.cursor() as cur:
        # Two first hits at once must not open two windows. The lock is a statement of its
        # own: the next one's snapshot, taken after it, sees a window a rival just opened.
        cur.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"{table}:{key}:{scope}"]
        )
        cur.execute(
            f"WITH live AS (SELECT window_start FROM {table} "
            f"WHERE {column} = %s AND scope = %s AND window_start > %s "
            "ORDER BY window_start DESC LIMIT 1) "
            f"INSERT INTO {table} ({column}, scope, window_start, count) "
            "VALUES (%s, %s, COALESCE((SELECT window_start FROM live), %s), 1) "
            f"ON CONFLICT ({column}, scope, window_start) "
            f"DO UPDATE SET count = {table}.count + 1 "
            "RETURNING count, window_start, (xmax = 0)",
            [key, scope, ended, key, scope, now],
        )
        row = cur.fetchone()
        assert row is not None
        count, start, inserted = int(row[0]), row[1], bool(row[2])
        if inserted:  # a new window: forget ended ones
            # A user's own (one row per user and scope stays); for keys, every key's: a
            # client address may never come back, and the table keeps live windows' rows.
            older = {"scope": scope, "window_start__lte": ended}
            if model is RateCounter:
                older[column] = key
            model.objects.filter(**older).delete()
    if count > limit:
        retry = math.ceil((start + timedelta(seconds=window) - now).total_seconds())
        raise RateLimited(scope, limit, window, max(retry, 1))
    return count
