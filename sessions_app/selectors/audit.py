"""Reads of the audit desk: every session's model requests, for staff. Nothing here writes.

The rows are those of `strand_request_audit` (a `request/header` or `request/sent` event
with its owner, provider and model); the admin filters them as a queryset, and the reads
below take that filtered queryset and add what the view does not carry:

- `audit_row_facts`: for one page of rows, the request's attempt and recorded hash, the
  usage and cost of the reply that answered it, what a header changed, and whether the
  payload rebuilt from the stored facts still matches its hash;
- `header_pair`: a header and the session's header before it (for its diff);
- `integrity_report`: the same check over many requests, counted, with the first problems
  (`folded_integrity_report`: over every request, each session's log folded once);
- `usage_overview`: tokens and cost per day, per user, per provider and model;
- `audit_export_rows`: every filtered row, read through a server-side cursor.

A request's reply is the first `assistant/message` after its `request/sent` and before the
next request, step end or turn end: a failed attempt that was retried has none.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.db.models.expressions import RawSQL

from projections.header_diff import HEADER_DEFAULTS, diff_headers
from projections.records import EventRecord
from projections.request import RequestNotFound, RequestView, project_request
from sessions_app import store
from sessions_app.models import Event, RequestAudit, Session
from sessions_app.selectors import verify
from sessions_app.selectors.requests import request_context, request_view

Integrity = Literal["match", "mismatch", "unrebuildable"]


def _number(json_expr: str) -> str:
    """SQL for a JSON value as numeric, NULL when it is not a number."""
    return f"CASE WHEN jsonb_typeof({json_expr}) = 'number' THEN ({json_expr})::numeric END"


def _usage_numbers(usage: str) -> str:
    """The numbers of a reply's `usage` object (SQL `usage`): `input_tokens`,
    `output_tokens`, `total_tokens` (Pi's totalTokens, else the sum of the parts it counts)
    and `cost`."""
    return f"""
    {_number(f"{usage} -> 'input'")} AS input_tokens,
    {_number(f"{usage} -> 'output'")} AS output_tokens,
    COALESCE({_number(f"{usage} -> 'totalTokens'")},
             COALESCE({_number(f"{usage} -> 'input'")}, 0)
             + COALESCE({_number(f"{usage} -> 'output'")}, 0)
             + COALESCE({_number(f"{usage} -> 'cacheRead'")}, 0)
             + COALESCE({_number(f"{usage} -> 'cacheWrite'")}, 0)) AS total_tokens,
    {_number(f"{usage} -> 'cost' -> 'total'")} AS cost"""


# The reply to the request at p.session_id, p.seq (see the module's docstring) as numbers:
# `reply.input_tokens`, `output_tokens`, `total_tokens` and `cost` (`_usage_numbers`); all
# NULL when the request has no reply.
#
# A reply nearly always is the event right after its request (seq + 1): `next` finds
# those by the (session, seq) key, and over many requests as one hash join of the
# assistant messages, their numbers read in the same scan (in parallel workers when
# Postgres chooses them), where a lookup per request cost several times more. Only a
# request whose next event is something else (an inbox event, another attempt, nothing
# yet) is followed along the session's key to the first event of the types that end it
# (`later`), as the rule says.
_REPLY = f"""
LEFT JOIN (
    SELECT a.session_id, a.seq, {_usage_numbers("(a.data #> '{entry,message,usage}')")}
    FROM sessions_app_event a
    WHERE a.type = 'assistant/message'
) next ON p.type = 'request/sent' AND next.session_id = p.session_id AND next.seq = p.seq + 1
LEFT JOIN LATERAL (
    SELECT {_usage_numbers("u.usage")}
    FROM (
        SELECT n.type, n.data #> '{{entry,message,usage}}' AS usage
        FROM sessions_app_event n
        WHERE p.type = 'request/sent' AND next.seq IS NULL
          AND n.session_id = p.session_id AND n.seq > p.seq
          AND n.type IN ('assistant/message', 'request/sent', 'request/header', 'step/end',
                         'turn/end')
        ORDER BY n.seq
        LIMIT 1
    ) u
    WHERE u.type = 'assistant/message'
) later ON true
CROSS JOIN LATERAL (
    SELECT CASE WHEN next.seq IS NULL THEN later.input_tokens
                ELSE next.input_tokens END AS input_tokens,
           CASE WHEN next.seq IS NULL THEN later.output_tokens
                ELSE next.output_tokens END AS output_tokens,
           CASE WHEN next.seq IS NULL THEN later.total_tokens
                ELSE next.total_tokens END AS total_tokens,
           CASE WHEN next.seq IS NULL THEN later.cost ELSE next.cost END AS cost
) reply
"""
_INPUT = "reply.input_tokens"
_OUTPUT = "reply.output_tokens"
_TOTAL = "reply.total_tokens"
_COST = "reply.cost"


# --- the list ----------------------------------------------------------------------------


def audit_rows() -> QuerySet[RequestAudit]:
    """Every request header and request of every session, newest first."""
    return RequestAudit.objects.select_related("session", "owner")


def audit_count(rows: QuerySet[RequestAudit]) -> int:
    """How many rows `rows` holds. Unfiltered, that is how many request events there are
    (each joins exactly one session and at most one header), counted from the audit's own
    index rather than by joining every row."""
    if not rows.query.where:
        return Event.objects.filter(type__in=("request/header", "request/sent")).count()
    return rows.count()


def audit_page(rows: QuerySet[RequestAudit], start: int, stop: int) -> QuerySet[RequestAudit]:
    """Rows `start` to `stop` of `rows`, in its order (read when the page is read).

    The page's ids are found first, from narrow rows: a deep page skips every row before
    it, and carrying each skipped row's session, owner and header columns along (through
    parallel workers, to be merged in order) took most of a second at page 1,000. Then the
    page's own rows are read by id, with what they join; one query."""
    return rows.filter(pk__in=rows.values("pk")[start:stop])


def audit_users() -> list[tuple[int, str]]:
    """(id, user name) of the owners of sessions that sent a model request."""
    owners = Session.objects.filter(
        Exists(Event.objects.filter(session_id=OuterRef("id"), type="request/sent"))
    ).values("owner_id")
    users = get_user_model().objects.filter(pk__in=owners).order_by("username")
    return [(user.pk, user.get_username()) for user in users]


def audit_providers() -> list[str]:
    """The providers the requests ran under (from the headers, far fewer than requests)."""
    return _header_values("provider")


def audit_models() -> list[str]:
    return _header_values("model")


def _header_values(name: str) -> list[str]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT DISTINCT COALESCE(data ->> %s, '') FROM sessions_app_event "
            "WHERE type = 'request/header' ORDER BY 1",
            [name],
        )
        return [row[0] for row in cur.fetchall()]


def audit_sessions(*, owner_id: int | None = None, limit: int = 15) -> list[tuple[str, str]]:
    """(id, title) of the most recently active sessions that sent a model request (the
    owner's, when given): the choices of the session filter."""
    # One probe of the requests' index per session, newest sessions first.
    sessions = Session.objects.filter(
        Exists(Event.objects.filter(session_id=OuterRef("id"), type="request/sent"))
    )
    if owner_id is not None:
        sessions = sessions.filter(owner_id=owner_id)
    return [(str(s.id), str(s)) for s in sessions.order_by("-updated_at")[:limit]]


def audit_session_label(session_id: str) -> str | None:
    """The title of one session, for a session filter given by id; None when unknown."""
    try:
        sid = uuid.UUID(session_id)
    except ValueError:
        return None
    session = Session.objects.filter(id=sid).first()
    return str(session) if session is not None else None


def only_header_changes(rows: QuerySet[RequestAudit]) -> QuerySet[RequestAudit]:
    """The `request/header` rows that change something from the session's header before
    them (the same test as `projections.header_diff.header_changed`)."""
    compared = " OR ".join(
        f"COALESCE(NULLIF(h.data -> '{name}', 'null'::jsonb), %s::jsonb) IS DISTINCT FROM "
        f"COALESCE(NULLIF(prev.data -> '{name}', 'null'::jsonb), %s::jsonb)"
        for name in HEADER_DEFAULTS
    )
    params: list[Any] = []
    for default in HEADER_DEFAULTS.values():
        params += [_jsonb(default), _jsonb(default)]
    # Uncorrelated, so that it holds however the admin nests the list's query.
    changes = RawSQL(
        f"""
        SELECT h.id FROM sessions_app_event h
        CROSS JOIN LATERAL (
            SELECT p.data FROM sessions_app_event p
            WHERE p.session_id = h.session_id AND p.type = 'request/header' AND p.seq < h.seq
            ORDER BY p.seq DESC LIMIT 1
        ) prev
        WHERE h.type = 'request/header' AND ({compared})
        """,
        params,
    )
    return rows.filter(type="request/header", pk__in=changes)


def _jsonb(value: Any) -> str:
    return json.dumps(value)


@dataclass(frozen=True)
class RequestCheck:
    """Whether the payload rebuilt from the stored facts has the hash the request recorded."""

    session_id: uuid.UUID
    seq: int
    status: Integrity
    detail: str = ""


@dataclass(frozen=True)
class RowFacts:
    """What one row of the list shows besides the view's columns."""

    attempt: int | None = None
    payload_sha256: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost: Decimal | None = None
    header_summary: tuple[str, ...] | None = None  # a header's changes; None for a request
    header_first: bool = False
    check: RequestCheck | None = None


def audit_row_facts(rows: Sequence[RequestAudit], *, check: bool = True) -> dict[int, RowFacts]:
    """The facts of each row of one page, by the row's id. With `check`, each request's
    payload is rebuilt and its hash compared (a bounded cost: one page of rows)."""
    if not rows:
        return {}
    found: dict[int, RowFacts] = {}
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT p.id, p.type, p.data ->> 'attempt', p.data ->> 'payload_sha256',
                   {_INPUT}, {_OUTPUT}, {_TOTAL}, {_COST},
                   CASE WHEN p.type = 'request/header' THEN p.data END, prev.data
            FROM sessions_app_event p
            {_REPLY}
            LEFT JOIN LATERAL (
                SELECT h.data FROM sessions_app_event h
                WHERE p.type = 'request/header' AND h.session_id = p.session_id
                  AND h.type = 'request/header' AND h.seq < p.seq
                ORDER BY h.seq DESC LIMIT 1
            ) prev ON true
            WHERE p.id = ANY(%s)
            """,
            [[row.pk for row in rows]],
        )
        for pk, kind, attempt, sha, tin, tout, total, cost, header, previous in cur.fetchall():
            summary: tuple[str, ...] | None = None
            first = False
            if kind == "request/header":
                diff = diff_headers(
                    store.decode_json(previous) if previous is not None else None,
                    store.decode_json(header),
                )
                summary, first = diff.summary, diff.first
            found[pk] = RowFacts(
                attempt=int(attempt) if attempt and attempt.isdigit() else None,
                payload_sha256=sha or "",
                input_tokens=_int(tin),
                output_tokens=_int(tout),
                total_tokens=_int(total),
                cost=cost,
                header_summary=summary,
                header_first=first,
            )
    if check:
        for row in rows:
            if row.type == "request/sent" and row.pk in found:
                found[row.pk] = replace(found[row.pk], check=request_check(row.session, row.seq))
    return found


def _int(value: Decimal | int | None) -> int | None:
    return int(value) if value is not None else None


# --- one row -----------------------------------------------------------------------------


def audit_row(pk: int) -> RequestAudit | None:
    return RequestAudit.objects.filter(pk=pk).select_related("session", "owner").first()


def audit_row_at(session_id: uuid.UUID, seq: int) -> RequestAudit | None:
    return RequestAudit.objects.filter(session_id=session_id, seq=seq).first()


def event_data(session: Session, seq: int) -> Mapping[str, Any] | None:
    """The data of the event at `seq` as stored (upcast), for showing a manifest as is."""
    found = store.events_after(session.id, seq - 1, 1)
    return found[0].data if found and found[0].seq == seq else None


def header_pair(session: Session, seq: int) -> tuple[EventRecord | None, EventRecord]:
    """The `request/header` at `seq` and the session's header before it (None for the
    first). Raises RequestNotFound when `seq` holds no header."""
    found = store.events_after(session.id, seq - 1, 1)
    if not found or found[0].seq != seq or found[0].type != "request/header":
        raise RequestNotFound(f"no request/header at seq {seq}")
    before = (
        Event.objects.filter(session=session, type="request/header", seq__lt=seq)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    )
    previous = store.events_after(session.id, before - 1, 1)[0] if before is not None else None
    return previous, found[0]


def requests_under_header(session: Session, header_seq: int, limit: int) -> list[RequestAudit]:
    """The requests sent under one header, oldest first."""
    return list(
        RequestAudit.objects.filter(
            session=session, type="request/sent", header_seq=header_seq
        ).order_by("seq")[:limit]
    )


# --- integrity ---------------------------------------------------------------------------


def request_check(session: Session, seq: int) -> RequestCheck:
    """Rebuild the payload of the request at `seq` and compare its hash with the recorded
    one. Reads the manifest, its header and the context's kept window: not the rest of the
    request's turn, which the full view (`request_audit`) reads for the reply."""
    return _checked(session, seq, lambda: _rebuilt(session, seq))[1]


def request_audit(session: Session, seq: int) -> tuple[RequestView | None, RequestCheck]:
    """The request at `seq` rebuilt (None when it cannot be) and the check of its hash."""
    return _checked(session, seq, lambda: request_view(session, seq))


def _rebuilt(session: Session, seq: int) -> RequestView:
    found = store.events_after(session.id, seq - 1, 1)
    if not found or found[0].seq != seq or found[0].type != "request/sent":
        raise RequestNotFound(f"no model request (request/sent) at seq {seq}")
    sent = found[0]
    events = [sent]
    header_seq = sent.data.get("header_seq")
    if isinstance(header_seq, int) and not isinstance(header_seq, bool):
        events += store.events_after(session.id, header_seq - 1, 1)
    return project_request(events, (), seq, context=request_context(session, sent))


def _checked(
    session: Session, seq: int, rebuild: Callable[[], RequestView]
) -> tuple[RequestView | None, RequestCheck]:
    """Facts that do not hold together (a header_seq naming no header, a manifest of the
    wrong shape) make the request unrebuildable: a finding, not a crash."""
    try:
        view = rebuild()
    except (RequestNotFound, LookupError, TypeError, ValueError) as exc:
        return None, RequestCheck(session.id, seq, "unrebuildable", str(exc))
    if view.payload_sha256 is None:
        return view, RequestCheck(session.id, seq, "unrebuildable", view.error or "no payload")
    if view.matches:
        return view, RequestCheck(session.id, seq, "match")
    detail = f"recorded {view.recorded_sha256 or '(none)'}, rebuilt {view.payload_sha256}"
    return view, RequestCheck(session.id, seq, "mismatch", detail)


@dataclass
class IntegrityReport:
    checked: int = 0
    sessions: int = 0  # how many sessions the checked requests belong to
    matched: int = 0
    mismatched: int = 0
    unrebuildable: int = 0
    problems: list[RequestCheck] = field(default_factory=list)  # the first ones, in order
    stopped_at_limit: bool = False  # more requests were selected than were checked

    @property
    def ok(self) -> bool:
        return self.mismatched == 0 and self.unrebuildable == 0


def integrity_report(
    keys: Iterable[tuple[uuid.UUID, int]], *, keep: int = 10, limit: int | None = None
) -> IntegrityReport:
    """Check every (session id, seq) of `keys` (requests, ideally grouped by session);
    count the outcomes and keep the first `keep` problems. Stops after `limit` checks."""
    report = IntegrityReport()
    session: Session | None = None
    for session_id, seq in keys:
        if limit is not None and report.checked >= limit:
            report.stopped_at_limit = True
            break
        if session is None or session.id != session_id:
            session = Session.objects.get(id=session_id)
            report.sessions += 1
        _count(report, request_check(session, seq), keep)
    return report


def folded_integrity_report(
    session_ids: Sequence[uuid.UUID] | None = None, *, keep: int = 10
) -> IntegrityReport:
    """`integrity_report` over every request (of the given sessions), by session then seq,
    each session's log read and folded once for all its requests (`verify.request_checks`)
    where `request_check` reads each request's manifest and kept window again: one
    session's log in memory at a time."""
    report = IntegrityReport()
    with_requests = Event.objects.filter(type="request/sent")
    if session_ids is not None:
        with_requests = with_requests.filter(session_id__in=list(session_ids))
    sessions = Session.objects.filter(id__in=with_requests.values("session_id")).order_by("id")
    for session in sessions.iterator(chunk_size=100):
        report.sessions += 1
        for seq, status, detail in verify.request_checks(session):
            _count(report, RequestCheck(session.id, seq, status, detail), keep)
    return report


def _count(report: IntegrityReport, outcome: RequestCheck, keep: int) -> None:
    report.checked += 1
    if outcome.status == "match":
        report.matched += 1
        return
    if outcome.status == "mismatch":
        report.mismatched += 1
    else:
        report.unrebuildable += 1
    if len(report.problems) < keep:
        report.problems.append(outcome)


def request_keys(rows: QuerySet[RequestAudit]) -> Iterator[tuple[uuid.UUID, int]]:
    """(session id, seq) of the requests among `rows`, by session, read in chunks."""
    return (
        rows.filter(type="request/sent")
        .order_by("session_id", "seq")
        .values_list("session_id", "seq")
        .iterator(chunk_size=2000)
    )


# --- usage -------------------------------------------------------------------------------


@dataclass(frozen=True)
class UsageRow:
    label: str
    requests: int
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost: Decimal


@dataclass(frozen=True)
class UsageOverview:
    by_day: tuple[tuple[date, UsageRow], ...]  # days with requests, oldest first
    by_user: tuple[UsageRow, ...]  # most tokens first
    by_model: tuple[UsageRow, ...]  # "provider / model", most tokens first
    total: UsageRow


def usage_overview(rows: QuerySet[RequestAudit]) -> UsageOverview:
    """Tokens and cost of the requests among `rows` (their replies' usage), per day (in
    the server's time zone), per user and per provider and model: one pass, grouped.

    The requests are summed per day, owner, session and header first, and each header's
    provider and model read once per such group: a header holds the whole system prompt
    and tool schemas (often stored out of line, compressed), which reading its provider
    and model again for every request would unpack each time."""
    picked, params = _sql(
        rows.filter(type="request/sent").values(
            "id", "session_id", "seq", "type", "time", "owner_id", "header_seq"
        )
    )
    with transaction.atomic(), connection.cursor() as cur:
        # Compiling this one aggregate (JIT) took longer than it saves.
        cur.execute("SET LOCAL jit = off")
        cur.execute(
            f"""
            SELECT GROUPING(g.day), GROUPING(u.username), GROUPING(g.provider, g.model),
                   g.day, u.username, g.provider, g.model,
                   sum(g.requests), COALESCE(sum(g.input_tokens), 0),
                   COALESCE(sum(g.output_tokens), 0), COALESCE(sum(g.total_tokens), 0),
                   COALESCE(sum(g.cost), 0)
            FROM (
                SELECT r.*, COALESCE(h.data ->> 'provider', '') AS provider,
                       COALESCE(h.data ->> 'model', '') AS model
                FROM (
                    SELECT p.day, p.owner_id, p.session_id, p.header_seq, count(*) AS requests,
                           sum({_INPUT}) AS input_tokens, sum({_OUTPUT}) AS output_tokens,
                           sum({_TOTAL}) AS total_tokens, sum({_COST}) AS cost
                    FROM (
                        SELECT q.*, (q.time AT TIME ZONE %s)::date AS day FROM ({picked}) q
                    ) p
                    {_REPLY}
                    GROUP BY p.day, p.owner_id, p.session_id, p.header_seq
                ) r
                LEFT JOIN sessions_app_event h
                  ON h.session_id = r.session_id AND h.seq = r.header_seq
                 AND h.type = 'request/header'
            ) g
            JOIN auth_user u ON u.id = g.owner_id
            GROUP BY GROUPING SETS ((g.day), (u.username), (g.provider, g.model), ())
            """,
            [settings.TIME_ZONE, *params],
        )
        found = cur.fetchall()
    days: list[tuple[date, UsageRow]] = []
    users: list[UsageRow] = []
    models: list[UsageRow] = []
    total = UsageRow("all", 0, 0, 0, 0, Decimal(0))
    for g_day, g_user, g_model, day, user, provider, model, *sums in found:
        if not g_day:
            days.append((day, _usage(day.isoformat(), sums)))
        elif not g_user:
            users.append(_usage(user, sums))
        elif not g_model:
            models.append(_usage(f"{provider or '(none)'} / {model or '(none)'}", sums))
        else:
            total = _usage("all", sums)
    by_tokens = lambda row: (-row.total_tokens, -row.cost, row.label)  # noqa: E731
    return UsageOverview(
        by_day=tuple(sorted(days)),
        by_user=tuple(sorted(users, key=by_tokens)),
        by_model=tuple(sorted(models, key=by_tokens)),
        total=total,
    )


def _usage(label: str, sums: Sequence[Any]) -> UsageRow:
    # With no request at all, the grand total's count is NULL (the sums are COALESCEd).
    requests, tin, tout, total, cost = sums
    return UsageRow(label, int(requests or 0), int(tin), int(tout), int(total), Decimal(cost))


# --- export ------------------------------------------------------------------------------

EXPORT_FIELDS = (
    "time",
    "session_id",
    "session_title",
    "owner",
    "type",
    "seq",
    "turn",
    "step",
    "attempt",
    "header_seq",
    "provider",
    "model",
    "token_estimate",
    "payload_sha256",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cost",
)


def audit_export_rows(
    rows: QuerySet[RequestAudit], *, chunk: int = 2000
) -> Generator[dict[str, Any], None, None]:
    """Every row of `rows`, newest first, as plain values (`EXPORT_FIELDS`).

    Read through a server-side cursor `chunk` rows at a time, so memory stays bounded
    however many rows there are; one query, so the rows are one consistent snapshot.

    The cursor lives in a transaction held while the rows are read. Outside one (in
    autocommit), the cursor would be declared WITH HOLD, and Postgres computes every row
    of a held cursor before it gives the first (2.5 s before the first byte of 128,000
    rows); inside, the rows come as the query reaches them, newest first along the
    audit's own index."""
    picked, params = _sql(
        rows.values(
            "id",
            "session_id",
            "seq",
            "type",
            "time",
            "turn",
            "step",
            "header_seq",
            "owner_id",
            "provider",
            "model",
            "token_estimate",
        )
    )
    sql = f"""
        SELECT p.time, p.session_id, s.title, u.username, p.type, p.seq, p.turn, p.step,
               e.data ->> 'attempt', p.header_seq, p.provider, p.model, p.token_estimate,
               e.data ->> 'payload_sha256', {_INPUT}, {_OUTPUT},
               {_TOTAL}, {_COST}
        FROM ({picked}) p
        JOIN sessions_app_session s ON s.id = p.session_id
        JOIN auth_user u ON u.id = p.owner_id
        JOIN sessions_app_event e ON e.id = p.id
        {_REPLY}
        ORDER BY p.time DESC, p.session_id DESC, p.seq DESC
    """
    with transaction.atomic():
        with connection.cursor() as setting:
            # Compiling the query (JIT) would hold back the first row for no gain.
            setting.execute("SET LOCAL jit = off")
        with connection.chunked_cursor() as cur:
            cur.execute(sql, params)
            while batch := cur.fetchmany(chunk):
                for values in batch:
                    row = dict(zip(EXPORT_FIELDS, values, strict=True))
                    row["attempt"] = int(row["attempt"]) if row["attempt"] else None
                    for name in ("input_tokens", "output_tokens", "total_tokens"):
                        row[name] = _int(row[name])
                    row["session_id"] = str(row["session_id"])
                    yield row


def _sql(rows: QuerySet[Any]) -> tuple[str, list[Any]]:
    """The SQL of a queryset, to be read as a subquery (its own ordering dropped)."""
    sql, params = rows.order_by().query.sql_with_params()
    return sql, list(params)


def export_value(value: Any) -> Any:
    """A value of an export row as JSON holds it."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    return value


__all__ = [
    "EXPORT_FIELDS",
    "IntegrityReport",
    "RequestCheck",
    "RowFacts",
    "UsageOverview",
    "UsageRow",
    "audit_count",
    "audit_export_rows",
    "audit_models",
    "audit_page",
    "audit_providers",
    "audit_row",
    "audit_row_at",
    "audit_row_facts",
    "audit_session_label",
    "audit_sessions",
    "audit_users",
    "event_data",
    "audit_rows",
    "export_value",
    "folded_integrity_report",
    "header_pair",
    "integrity_report",
    "only_header_changes",
    "request_audit",
    "request_check",
    "request_keys",
    "requests_under_header",
    "usage_overview",
]
