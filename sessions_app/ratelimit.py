"""Per-user rate limits: a fixed-window counter in Postgres.

Each (user, scope, window) is one row of `RateCounter`, incremented by a single
`INSERT … ON CONFLICT DO UPDATE … RETURNING count`: atomic whatever the number of server
processes, with no Redis and no per-process cache (Django's default cache is local to a
process, so it could not enforce a limit across processes). A hit over the limit is refused
with `RateLimited`, which the API answers with 429 and `Retry-After`.

Limits come from `settings.STRAND_RATE_LIMITS`, a mapping of scope to `(requests, seconds)`;
scopes not named there use `DEFAULT_LIMITS`. A limit of 0 requests turns the scope off.

Rows of past windows are deleted when the user's next window opens, so the table holds
about one row per active user and scope.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from sessions_app.models import RateCounter
from sessions_app.store import StoreError

# scope → (requests allowed per window, window length in seconds)
DEFAULT_LIMITS: Mapping[str, tuple[int, int]] = {
    # Sending a message, steering and following up.
    "message": (30, 60),
    # Importing Pi files.
    "import": (20, 3600),
}

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class RateLimited(StoreError):
    code = "rate_limited"

    def __init__(self, scope: str, limit: int, window: int, retry_after: int) -> None:
        super().__init__(
            f"rate limit for {scope}: at most {limit} per {window} s; try again in {retry_after} s"
        )
        self.retry_after = retry_after


def limit_for(scope: str) -> tuple[int, int]:
    configured: Mapping[str, Any] = getattr(settings, "STRAND_RATE_LIMITS", {}) or {}
    requests, seconds = configured.get(scope, DEFAULT_LIMITS.get(scope, (0, 60)))
    return int(requests), max(int(seconds), 1)


def rate_hit(user: Any, scope: str, *, now: datetime | None = None) -> int:
    """Count one request of `user` in `scope`; `RateLimited` once over the limit.

    Returns the count in the current window. Refused requests count too, so that a client
    hammering the API does not get through at the window's edge more than the limit allows.
    """
    limit, window = limit_for(scope)
    if limit <= 0:
        return 0
    now = now or timezone.now()
    elapsed = (now - _EPOCH).total_seconds()
    start = _EPOCH + timedelta(seconds=(elapsed // window) * window)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {RateCounter._meta.db_table} (user_id, scope, window_start, count) "
            "VALUES (%s, %s, %s, 1) "
            "ON CONFLICT (user_id, scope, window_start) "
            "DO UPDATE SET count = EXCLUDED.count + "
            f"{RateCounter._meta.db_table}.count RETURNING count, (xmax = 0)",
            [user.pk, scope, start],
        )
        row = cur.fetchone()
        assert row is not None
        count, inserted = int(row[0]), bool(row[1])
        if inserted:  # a new window: forget the user's older ones
            RateCounter.objects.filter(
                user_id=user.pk, scope=scope, window_start__lt=start
            ).delete()
    if count > limit:
        retry = math.ceil((start + timedelta(seconds=window) - now).total_seconds())
        raise RateLimited(scope, limit, window, max(retry, 1))
    return count
