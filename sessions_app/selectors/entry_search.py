"""Search over the entries a user may see: the message, tool call or tool result that says
it, newest first, with a cursor. Nothing here writes.

A query is words and "quoted phrases"; every one must occur (as a substring of the entry's
normalised text, `projections.search_text.normalise`), so a word finds the words it begins
(a trailing `*` is accepted and means the same), and Japanese or Chinese text, which has no
spaces, is found by any run of its characters. The index is a trigram index
(`SearchDoc.norm`, pg_trgm) that the projector fills; a term needs three characters to use
it. A page of a frequent term is first looked for among the newest `SCAN_MAX` rows in
scope, read in order (`_newest_matching`); the trigram index answers when it is not there.
A query whose terms are all shorter is answered from the viewer's newest `RECENT_MAX`
entries only, and says so (`scope: "recent"`), rather than reading every entry.

Never stale: in one snapshot (REPEATABLE READ), the index is read together with the tail of
each visible session after the search projector's checkpoint, which is matched here in
Python the same way, so an entry is found the moment its append commits. The tail read is
bounded (`TAIL_MAX` entries, newest first) while the projector catches up.

Work is bounded: at most `TERMS_MAX` terms of a query of at most `QUERY_MAX` characters, a
page of at most `LIMIT_MAX` results, and `statement_timeout` on every query.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from django.db import OperationalError, connection, transaction
from django.urls import reverse

from projections.search_text import SearchPart, entry_parts, normalise
from sessions_app import access, store
from sessions_app.errors import DomainError
from sessions_app.models import Session
from sessions_app.projectors.search import NAME as PROJECTOR
from sessions_app.projectors.search import entry_time

QUERY_MAX = 500
TERMS_MAX = 8
TERM_MIN = 3  # the shortest term the trigram index can look up
LIMIT_MAX = 100
RECENT_MAX = 20_000
TAIL_MAX = 5_000
SCAN_MAX = 5_000  # the newest rows read in order before the trigram index is asked
TIMEOUT_MS = 5_000
SNIPPET_CHARS = 200

ROLES = (
    "user",
    "assistant",
    "toolCall",
    "toolResult",
    "bashExecution",
    "custom",
    "compaction",
    "branch_summary",
)


class BadSearch(DomainError):
    code = "bad_request"


@dataclass(frozen=True, slots=True)
class SearchFilters:
    role: str | None = None
    tool: str | None = None
    errors_only: bool = False
    model: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    session_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class SearchHit:
    session_id: uuid.UUID
    session_title: str
    entry_id: str
    role: str
    snippet: str
    highlights: list[tuple[int, int]]
    timestamp: datetime
    seq: int
    part: int
    tool_name: str = ""
    is_error: bool = False
    model: str = ""


@dataclass(frozen=True, slots=True)
class SearchPage:
    hits: list[SearchHit]
    next_cursor: str | None
    scope: str  # "all", or "recent" for a query of short terms only
    terms: list[str] = field(default_factory=list)


Key = tuple[datetime, uuid.UUID, int, int]  # (time, session, seq, part): newest first

_COLUMNS = (
    "d.session_id, d.seq, d.part, d.entry_id, d.role, d.tool_name, d.is_error, d.model, "
    "d.time, d.text"
)
_ORDER = "d.time DESC, d.session_id DESC, d.seq DESC, d.part DESC"


# --- the query ---------------------------------------------------------------------------


def parse_query(q: str) -> list[str]:
    """The normalised terms of a query: "quoted phrases" and words (an unclosed quote runs
    to the end); a trailing `*` on a word is dropped (every word already matches as a prefix)."""
    if "\x00" in q:
        raise BadSearch("the query holds a NUL character")
    if len(q) > QUERY_MAX:
        raise BadSearch(f"the query is longer than {QUERY_MAX} characters")
    terms: list[str] = []
    for phrase, word in re.findall(r'"([^"]*)"?|(\S+)', q):
        term = normalise(phrase if phrase else word.rstrip("*"))
        if term and term not in terms:
            terms.append(term)
    if not terms:
        raise BadSearch('the query has no words: give a word or a "quoted phrase"')
    if len(terms) > TERMS_MAX:
        raise BadSearch(f"the query has more than {TERMS_MAX} words and phrases")
    return terms


def _like(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# --- the cursor --------------------------------------------------------------------------


def cursor_encode(key: Key) -> str:
    time, session_id, seq, part = key
    raw = json.dumps({"t": time.isoformat(), "s": str(session_id), "q": seq, "p": part})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def cursor_decode(cursor: str) -> Key:
    bad = BadSearch("the cursor is not one this search gave out")
    if len(cursor) > 300:
        raise bad
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        time = datetime.fromisoformat(raw["t"])
        key = (time, uuid.UUID(raw["s"]), raw["q"], raw["p"])
    except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError):
        raise bad from None
    if time.tzinfo is None or not all(isinstance(n, int) and 0 <= n < 2**62 for n in key[2:]):
        raise bad
    return key


# --- the search --------------------------------------------------------------------------


def entries_search(
    user: Any,
    *,
    q: str,
    filters: SearchFilters = SearchFilters(),
    cursor: str | None = None,
    limit: int = 20,
) -> SearchPage:
    """A page of the entries `user` may see that match `q` and `filters`, newest first."""
    user = access.signed_in(user)
    terms = parse_query(q)
    if filters.role is not None and filters.role not in ROLES:
        raise BadSearch(f"role must be one of {', '.join(ROLES)}")
    if filters.session_id is not None:
        access.session_for(user, filters.session_id)  # 404 for a session one may not see
    after = cursor_decode(cursor) if cursor else None
    limit = max(1, min(limit, LIMIT_MAX))
    owner = None if user.is_staff else int(user.pk)
    recent = all(len(term) < TERM_MIN for term in terms)
    try:
        with transaction.atomic():
            with connection.cursor() as cur:
                if not connection.savepoint_ids:
                    cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                cur.execute("SET LOCAL statement_timeout = %s", [TIMEOUT_MS])
            found = _indexed(terms, filters, owner, after, limit + 1, recent)
            found += _tail(terms, filters, owner, after)
    except OperationalError as exc:
        if "statement timeout" in str(exc):
            raise BadSearch(
                "the search took too long: add words, or narrow it by session, role or date"
            ) from None
        raise
    unique = {(h.session_id, h.seq, h.part): h for h in found}
    ordered = sorted(unique.values(), key=_key, reverse=True)
    page, more = ordered[:limit], len(ordered) > limit
    titles = _titles({h.session_id for h in page})
    hits = [_titled(h, titles) for h in page if h.session_id in titles]
    next_cursor = cursor_encode(_key(page[-1])) if more and page else None
    return SearchPage(hits, next_cursor, "recent" if recent else "all", terms)


def _key(hit: SearchHit) -> Key:
    return (hit.timestamp, hit.session_id, hit.seq, hit.part)


def _indexed(
    terms: Sequence[str],
    filters: SearchFilters,
    owner: int | None,
    after: Key | None,
    limit: int,
    recent: bool,
) -> list[SearchHit]:
    # The entry's own conditions: its text and its facts.
    match = ["d.norm LIKE %s" for _ in terms]
    match_params: list[Any] = [_like(term) for term in terms]
    for column, value in (
        ("d.role", filters.role),
        ("d.tool_name", filters.tool),
        ("d.model", filters.model),
    ):
        if value is not None:
            match.append(f"{column} = %s")
            match_params.append(value)
    if filters.errors_only:
        match.append("d.is_error")
    # Which rows are looked at: the viewer's, of the session, in the dates, past the cursor.
    scope: list[str] = []
    scope_params: list[Any] = []
    if owner is not None:
        scope.append("d.owner_id = %s")
        scope_params.append(owner)
    if filters.session_id is not None:
        scope.append("d.session_id = %s")
        scope_params.append(filters.session_id)
    bounds: list[str] = []
    bounds_params: list[Any] = []
    if filters.since is not None:
        bounds.append("d.time >= %s")
        bounds_params.append(filters.since)
    if filters.until is not None:
        bounds.append("d.time < %s")
        bounds_params.append(filters.until)
    if after is not None:
        bounds.append("(d.time, d.session_id, d.seq, d.part) < (%s, %s, %s, %s)")
        bounds_params.extend(after)
    rows = None
    if recent:
        # Short terms only: the newest RECENT_MAX entries in scope, read in order.
        bound = " AND ".join(s.replace("d.", "r.") for s in scope) or "true"
        bounds.append(
            f"d.time >= COALESCE((SELECT r.time FROM sessions_app_searchdoc r WHERE {bound} "
            f"ORDER BY r.time DESC OFFSET {RECENT_MAX - 1} LIMIT 1), '-infinity')"
        )
        bounds_params.extend(scope_params)
    else:
        rows = _newest_matching(
            scope + bounds, [*scope_params, *bounds_params], match, match_params, limit
        )
    if rows is None:
        sql = f"""
            SELECT {_COLUMNS}
            FROM sessions_app_searchdoc d
            WHERE {" AND ".join(scope + bounds + match)}
            ORDER BY {_ORDER}
            LIMIT %s
        """
        with connection.cursor() as cur:
            cur.execute(sql, [*scope_params, *bounds_params, *match_params, limit])
            rows = cur.fetchall()
    return [
        _hit(sid, seq, part, eid, SearchPart(part, role, text, tool, err, model), time, terms)
        for sid, seq, part, eid, role, tool, err, model, time, text in rows
    ]


def _newest_matching(
    scope: Sequence[str],
    scope_params: Sequence[Any],
    match: Sequence[str],
    match_params: Sequence[Any],
    limit: int,
) -> list[tuple[Any, ...]] | None:
    """The first `limit` rows that `match` among the newest `SCAN_MAX` rows in `scope`,
    read in the results' order by the ordered index; None when fewer match there, and the
    trigram index must find them (a rare term, a narrow filter).

    Exact either way: the newest rows are read in the results' order, so `limit` matches
    among them are the first `limit` of all. A frequent term is found this way in a few
    thousand rows at most, where the trigram index would read and recheck every one of its
    matches before the newest are sorted out."""
    sql = f"""
        SELECT {_COLUMNS}
        FROM (
            SELECT * FROM sessions_app_searchdoc d
            WHERE {" AND ".join(scope) or "true"}
            ORDER BY {_ORDER}
            LIMIT {SCAN_MAX}
        ) d
        WHERE {" AND ".join(match)}
        ORDER BY {_ORDER}
        LIMIT %s
    """
    with connection.cursor() as cur:
        cur.execute(sql, [*scope_params, *match_params, limit])
        rows = cur.fetchall()
    return rows if len(rows) == limit else None


def _tail(
    terms: Sequence[str], filters: SearchFilters, owner: int | None, after: Key | None
) -> list[SearchHit]:
    """The entries after the search projector's checkpoint of each session in scope that
    match, found as the index would find them."""
    scope = ["s.last_seq > COALESCE(c.seq, -1)"]
    params: list[Any] = [PROJECTOR]
    if owner is not None:
        scope.append("s.owner_id = %s")
        params.append(owner)
    if filters.session_id is not None:
        scope.append("s.id = %s")
        params.append(filters.session_id)
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT e.session_id, e.seq, e.entry_id, e.data
            FROM sessions_app_session s
            LEFT JOIN sessions_app_projectorcheckpoint c
              ON c.projector = %s AND c.session_id = s.id
            JOIN LATERAL (
                SELECT e.session_id, e.seq, e.entry_id, e.data FROM sessions_app_entry e
                WHERE e.session_id = s.id AND e.seq > COALESCE(c.seq, -1)
                ORDER BY e.seq DESC LIMIT {TAIL_MAX}
            ) e ON true
            WHERE {" AND ".join(scope)}
            LIMIT {TAIL_MAX}
            """,
            params,
        )
        rows = cur.fetchall()
    hits = []
    fallback = datetime.now(UTC)
    for sid, seq, entry_id, data in rows:
        entry = store.decode_json(data)
        time = entry_time(entry.get("timestamp"), fallback)
        for part in entry_parts(entry):
            if _matches(part, time, terms, filters):
                hit = _hit(sid, seq, part.part, entry_id, part, time, terms)
                if after is None or _key(hit) < after:
                    hits.append(hit)
    return hits


def _matches(
    part: SearchPart, time: datetime, terms: Sequence[str], filters: SearchFilters
) -> bool:
    if filters.role is not None and part.role != filters.role:
        return False
    if filters.tool is not None and part.tool_name != filters.tool:
        return False
    if filters.model is not None and part.model != filters.model:
        return False
    if filters.errors_only and not part.is_error:
        return False
    if filters.since is not None and time < filters.since:
        return False
    if filters.until is not None and time >= filters.until:
        return False
    text = part.normalised
    return all(term in text for term in terms)


def _hit(
    session_id: uuid.UUID,
    seq: int,
    part: int,
    entry_id: str,
    found: SearchPart,
    time: datetime,
    terms: Sequence[str],
) -> SearchHit:
    snippet, highlights = make_snippet(found.text, terms)
    return SearchHit(
        session_id=session_id,
        session_title="",
        entry_id=entry_id,
        role=found.role,
        snippet=snippet,
        highlights=highlights,
        timestamp=time,
        seq=seq,
        part=part,
        tool_name=found.tool_name,
        is_error=found.is_error,
        model=found.model,
    )


def _titles(session_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
    sessions = Session.objects.filter(id__in=list(session_ids)).only("id", "title")
    return {s.id: str(s) for s in sessions}


def _titled(hit: SearchHit, titles: dict[uuid.UUID, str]) -> SearchHit:
    return replace(hit, session_title=titles[hit.session_id])


# --- snippets ----------------------------------------------------------------------------


def _pattern(terms: Sequence[str]) -> re.Pattern[str]:
    alternatives = sorted(
        (r"\s+".join(re.escape(w) for w in term.split(" ")) for term in terms),
        key=len,
        reverse=True,
    )
    return re.compile("|".join(alternatives), re.IGNORECASE)


def make_snippet(text: str, terms: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """Up to SNIPPET_CHARS of `text` around the first match, white space made single
    spaces, and the (start, end) of each match within it."""
    pattern = _pattern(terms)
    first = pattern.search(text)
    start = max(0, first.start() - SNIPPET_CHARS // 3) if first else 0
    piece = text[start : start + SNIPPET_CHARS * 2]
    snippet = re.sub(r"\s+", " ", piece).strip()[:SNIPPET_CHARS]
    if start > 0:
        snippet = "…" + snippet
    if start + len(piece) < len(text):
        snippet += "…"
    highlights = [(m.start(), m.end()) for m in pattern.finditer(snippet) if m.end() > m.start()]
    return snippet, highlights


def hit_url(hit: SearchHit) -> str:
    """The session page showing the branch through the entry, scrolled to it (the tree's
    own "Link to this entry")."""
    query = urlencode({"leaf": hit.entry_id, "entry": hit.entry_id})
    return f"{reverse('session', args=[hit.session_id])}?{query}#entry-{hit.entry_id}"
