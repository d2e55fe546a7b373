"""Bounds of the domain that more than one door or service checks, written once.

The API's schemas declare them to clients, the pages and the services check them again;
all read them here, so none of them imports another door for a number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sessions_app.errors import DomainError

# The longest entry id (`Entry.entry_id`, `Session.leaf_entry_id`: 64 characters): an
# imported entry's id and parentId, a leaf, a fork point, an id in a cursor.
ENTRY_ID_MAX = 64

# The largest seq a caller may name (an `after_seq`, a replayed request's seq, a replay
# group): far below bigint's largest, so `seq + 1` and the reads built on it never overflow.
SEQ_MAX = 2**62


# How the pages name each scope when they refuse a request ("Too many …").
SCOPE_NAMES: Mapping[str, str] = {
    "message": "messages",
    "import": "imports",
    "append": "appends",
    "session": "new sessions",
    "fork": "forks",
    "summary": "branch summaries",
    "compact": "compactions",
    "replay": "replays",
    "search": "searches",
    "token": "new tokens",
    "rename": "renames",
    "navigate": "moves in the tree",
    "label": "labels",
    "approval": "approval decisions",
    "cancel": "cancels",
    "delete": "deletions",
    "revoke": "revocations",
    "share": "new share links",
    "share-view": "views of this shared session",
}


class RateLimited(DomainError):
    code = "rate_limited"

    def __init__(self, scope: str, limit: int, window: int, retry_after: int) -> None:
        super().__init__(
            f"rate limit for {scope}: at most {limit} per {window} s; try again in {retry_after} s"
        )
        self.scope = scope
        self.limit = limit
        self.window = window
        self.retry_after = retry_after

    def readable(self) -> str:
        """The refusal in words for a page: what, how many, and when to try again."""
        what = SCOPE_NAMES.get(self.scope, self.scope)
        return (
            f"Too many {what}: at most {self.limit} per {duration_words(self.window)}. "
            f"Try again in {duration_words(self.retry_after)}."
        )


def duration_words(seconds: int) -> str:
    """`3600` → "hour", `600` → "10 minutes", `130` → "3 minutes", `40` → "40 seconds"."""
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds % size == 0 or (unit == "minute" and seconds >= 120):
            n = math.ceil(seconds / size)
            return unit if n == 1 else f"{n} {unit}s"
    return "second" if seconds == 1 else f"{seconds} seconds"
