"""Usage and failures read from the projector's rollups (`UsageCount`): tokens and cost per
day, model and session, tool calls and errors per tool, how turns ended, provider faults by
kind, and latency percentiles per model. Nothing here reads the event log, so a report costs
the same at 1 or 1,000,000 sessions; the rollups are summed in Postgres (one scan grouped per
day, owner and model, and the sessions that cost most ranked there), so what comes back is
only the rows the tables show; the events after the projector's checkpoints are
added from the log, in the same snapshot, so a report is never behind. Nothing here writes.

Owners see their own usage; staff everyone's, or one user's.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, transaction

from projections.usage import TOKEN_METRICS, percentile
from sessions_app import access, store
from sessions_app.models import Session
from sessions_app.projectors.usage import NAME as PROJECTOR
from sessions_app.projectors.usage import usage_sums

TOP_SESSIONS = 10
# The most events after the projector's checkpoints a report reads itself.
TAIL_EVENTS = 20_000
TOKENS = (*TOKEN_METRICS.values(), "total_tokens")


@dataclass
class Totals:
    replies: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    cost: Decimal = Decimal(0)

    def add(self, metric: str, value: Decimal) -> None:
        if metric == "cost":
            self.cost += value
        elif metric == "replies" or metric in TOKENS:
            setattr(self, metric, getattr(self, metric) + int(value))


@dataclass
class ModelUsage:
    label: str  # "provider / model"
    totals: Totals = field(default_factory=Totals)
    ttft: dict[str, int] = field(default_factory=dict)  # latency bucket → replies
    duration: dict[str, int] = field(default_factory=dict)

    def percentiles(self) -> dict[str, float | None]:
        return {
            "ttft_p50_ms": percentile(self.ttft, 0.5),
            "ttft_p95_ms": percentile(self.ttft, 0.95),
            "duration_p50_ms": percentile(self.duration, 0.5),
            "duration_p95_ms": percentile(self.duration, 0.95),
        }


@dataclass
class ToolUsage:
    tool: str
    calls: int = 0
    errors: int = 0

    @property
    def error_rate(self) -> float:
        return self.errors / self.calls if self.calls else (1.0 if self.errors else 0.0)


@dataclass
class UsageReport:
    user: str | None  # whose usage (None: everyone's, for staff)
    total: Totals
    by_day: list[tuple[date, Totals]]
    by_model: list[ModelUsage]
    by_session: list[tuple[uuid.UUID, str, Totals]]  # the sessions that cost most
    by_user: list[tuple[str, Totals]]  # staff, everyone's: per user
    tools: list[ToolUsage]
    turns: dict[str, int]  # how turns ended → count
    faults: dict[str, int]  # provider faults by kind
    requests: int


def usage_report(
    viewer: Any,
    *,
    username: str | None = None,
    since: date | None = None,
    until: date | None = None,
) -> UsageReport:
    """The usage of `viewer` (staff: of `username`, or of everyone when None) on the days
    from `since` to `until`, both included."""
    viewer = access.signed_in(viewer)
    owner_id: int | None = int(viewer.pk)
    shown: str | None = viewer.get_username()
    if viewer.is_staff:
        if username:
            found = get_user_model().objects.filter(username=username).first()
            if found is None:
                raise access.NotVisible(f"no user {username!r}")
            owner_id, shown = int(found.pk), found.get_username()
        else:
            owner_id, shown = None, None
    where: list[str] = ["true"]
    params: list[Any] = []
    if owner_id is not None:
        where.append("owner_id = %s")
        params.append(owner_id)
    if since is not None:
        where.append("day >= %s")
        params.append(since)
    if until is not None:
        where.append("day <= %s")
        params.append(until)
    scope = Scope(" AND ".join(where), params)
    with transaction.atomic():
        with connection.cursor() as cur:
            if not connection.savepoint_ids:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        tail = _tail_rows(owner_id, since, until)
        report = _Sums()
        report.add_grouped(_grouped_rows(scope))
        report.add_tail(tail)
        sessions = _costly_sessions(scope, {row[2] for row in tail}, tail)
    return report.finish(shown, sessions, everyone=owner_id is None)


def _tail_rows(owner_id: int | None, since: date | None, until: date | None) -> list[Any]:
    """The figures of the events after the usage projector's checkpoints (at most
    TAIL_EVENTS of them), as rollup rows: the report is never behind the log."""
    scope = ""
    params: list[Any] = [PROJECTOR]
    if owner_id is not None:
        scope = "AND s.owner_id = %s"
        params.append(owner_id)
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT s.id, s.owner_id, s.last_seq, COALESCE(c.seq, -1)
            FROM sessions_app_session s
            LEFT JOIN sessions_app_projectorcheckpoint c
              ON c.projector = %s AND c.session_id = s.id
            WHERE s.last_seq > COALESCE(c.seq, -1) {scope}
            ORDER BY s.last_seq - COALESCE(c.seq, -1)
            LIMIT 1000
            """,
            params,
        )
        pending = cur.fetchall()
    rows: list[Any] = []
    budget = TAIL_EVENTS
    for session_id, owner, last_seq, done in pending:
        if budget <= 0:
            break
        count = min(last_seq - done, budget)
        budget -= count
        events = [e for e in store.events_after(session_id, done, count) if e.seq <= last_seq]
        for key, value in usage_sums(session_id, owner, events).items():
            day = key[1]
            if (since is None or day >= since) and (until is None or day <= until):
                rows.append((*key, value))
    return rows


@dataclass
class Scope:
    """The WHERE clause over `sessions_app_usagecount` of one report, and its parameters."""

    where: str
    params: list[Any]


# The metrics summed into a `Totals`; the others are counts by label or latency buckets.
TOTAL_METRICS = ("replies", *TOKENS, "cost")


def _grouped_rows(scope: Scope) -> list[tuple[Any, ...]]:
    """The rollups summed in Postgres, in one scan, per (metric, day), per (metric, owner)
    and per (metric, provider, model, label): a few hundred rows whatever the number of
    sessions. Each row is (grouping, day, owner_id, provider, model, metric, label, sum),
    where `grouping` says which of the three it is (`GROUPING(day, owner_id, provider)`)."""
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT GROUPING(day, owner_id, provider), day, owner_id, provider, model,
                   metric, label, sum(value)
            FROM sessions_app_usagecount WHERE {scope.where}
            GROUP BY GROUPING SETS (
                (metric, day), (metric, owner_id), (metric, provider, model, label)
            )
            """,
            scope.params,
        )
        return cur.fetchall()


_BY_DAY, _BY_OWNER, _BY_MODEL = 0b011, 0b101, 0b110


def _costly_sessions(
    scope: Scope, touched: set[uuid.UUID], tail: list[tuple[Any, ...]]
) -> list[tuple[uuid.UUID, Totals]]:
    """The TOP_SESSIONS sessions that cost most (then: most tokens). Ranked in Postgres among
    the sessions the tail does not touch (their rollups are their whole figures), beside the
    sessions it touches (rollups and tail added), so only those sessions' rows are read."""
    totals = list(TOTAL_METRICS)
    with connection.cursor() as cur:
        cur.execute(
            f"""
            SELECT session_id FROM sessions_app_usagecount
            WHERE {scope.where} AND metric = ANY(%s) AND NOT (session_id = ANY(%s))
            GROUP BY session_id
            ORDER BY COALESCE(sum(value) FILTER (WHERE metric = 'cost'), 0) DESC,
                     COALESCE(sum(value) FILTER (WHERE metric = 'total_tokens'), 0) DESC,
                     session_id
            LIMIT %s
            """,
            [*scope.params, totals, list(touched), TOP_SESSIONS],
        )
        candidates = [row[0] for row in cur.fetchall()] + list(touched)
        cur.execute(
            f"""
            SELECT session_id, metric, sum(value) FROM sessions_app_usagecount
            WHERE {scope.where} AND metric = ANY(%s) AND session_id = ANY(%s)
            GROUP BY session_id, metric
            """,
            [*scope.params, totals, candidates],
        )
        rows = cur.fetchall()
    sessions: dict[uuid.UUID, Totals] = defaultdict(Totals)
    for session_id, metric, value in rows:
        sessions[session_id].add(metric, Decimal(value))
    for _owner, _day, session_id, _provider, _model, metric, _label, value in tail:
        sessions[session_id].add(metric, Decimal(value))
    ranked = sorted(sessions.items(), key=lambda kv: (-kv[1].cost, -kv[1].total_tokens, kv[0]))
    return ranked[:TOP_SESSIONS]


class _Sums:
    """A report's figures, added from the rows summed in Postgres and from the tail."""

    def __init__(self) -> None:
        self.total = Totals()
        self.days: dict[date, Totals] = defaultdict(Totals)
        self.models: dict[str, ModelUsage] = {}
        self.owners: dict[int, Totals] = defaultdict(Totals)
        self.tools: dict[str, ToolUsage] = {}
        self.turns: dict[str, int] = defaultdict(int)
        self.faults: dict[str, int] = defaultdict(int)
        self.requests = 0

    def add_grouped(self, rows: list[tuple[Any, ...]]) -> None:
        for grouping, day, owner_id, provider, model, metric, label, value in rows:
            value = Decimal(value)
            if grouping == _BY_DAY:
                self._add_day(day, metric, value)
            elif grouping == _BY_OWNER:
                self._add_owner(owner_id, metric, value)
            elif grouping == _BY_MODEL:
                self._add_model(provider, model, metric, label, value)

    def add_tail(self, rows: list[tuple[Any, ...]]) -> None:
        for owner_id, day, _session_id, provider, model, metric, label, value in rows:
            value = Decimal(value)
            self._add_day(day, metric, value)
            self._add_owner(owner_id, metric, value)
            self._add_model(provider, model, metric, label, value)

    def _add_day(self, day: date, metric: str, value: Decimal) -> None:
        if metric in TOTAL_METRICS:
            self.days[day].add(metric, value)

    def _add_owner(self, owner_id: int, metric: str, value: Decimal) -> None:
        if metric in TOTAL_METRICS:
            self.owners[owner_id].add(metric, value)

    def _add_model(
        self, provider: str, model: str, metric: str, label: str, value: Decimal
    ) -> None:
        """Everything but days and owners: the totals, per model, per tool, turns, faults,
        requests and the latency buckets."""
        if metric == "tool_calls" or metric == "tool_errors":
            tool = self.tools.setdefault(label, ToolUsage(label))
            if metric == "tool_calls":
                tool.calls += int(value)
            else:
                tool.errors += int(value)
        elif metric == "turns":
            self.turns[label] += int(value)
        elif metric == "faults":
            self.faults[label] += int(value)
        elif metric == "requests":
            self.requests += int(value)
        elif metric in ("ttft_ms", "duration_ms"):
            usage = self._model(provider, model)
            histogram = usage.ttft if metric == "ttft_ms" else usage.duration
            histogram[label] = histogram.get(label, 0) + int(value)
        else:
            self.total.add(metric, value)
            self._model(provider, model).totals.add(metric, value)

    def _model(self, provider: str, model: str) -> ModelUsage:
        label = _model(provider, model)
        return self.models.setdefault(label, ModelUsage(label))

    def finish(
        self, shown: str | None, costly: list[tuple[uuid.UUID, Totals]], *, everyone: bool
    ) -> UsageReport:
        titles = {s.id: str(s) for s in Session.objects.filter(id__in=[sid for sid, _ in costly])}
        names = dict(
            get_user_model().objects.filter(pk__in=list(self.owners)).values_list("pk", "username")
        )
        by_cost = lambda kv: (-kv[1].cost, -kv[1].total_tokens, kv[0])  # noqa: E731
        return UsageReport(
            user=shown,
            total=self.total,
            by_day=sorted(self.days.items()),
            by_model=sorted(
                self.models.values(), key=lambda m: (-m.totals.cost, -m.totals.total_tokens)
            ),
            by_session=[(sid, titles.get(sid, "(deleted)"), t) for sid, t in costly],
            by_user=sorted(((names.get(o, str(o)), t) for o, t in self.owners.items()), key=by_cost)
            if everyone
            else [],
            tools=sorted(self.tools.values(), key=lambda t: (-t.calls, t.tool)),
            turns=dict(sorted(self.turns.items())),
            faults=dict(sorted(self.faults.items())),
            requests=self.requests,
        )


def _model(provider: str, model: str) -> str:
    return f"{provider or '(none)'} / {model or '(none)'}"


def report_json(report: UsageReport) -> dict[str, Any]:
    def totals(t: Totals) -> dict[str, Any]:
        return {
            "replies": t.replies,
            "input_tokens": t.input_tokens,
            "output_tokens": t.output_tokens,
            "cache_read_tokens": t.cache_read_tokens,
            "cache_write_tokens": t.cache_write_tokens,
            "total_tokens": t.total_tokens,
            "cost": str(t.cost),
        }

    return {
        "user": report.user,
        "total": totals(report.total),
        "requests": report.requests,
        "by_day": [{"day": d.isoformat(), **totals(t)} for d, t in report.by_day],
        "by_model": [
            {"model": m.label, **totals(m.totals), **m.percentiles()} for m in report.by_model
        ],
        "by_session": [
            {"session_id": str(sid), "title": title, **totals(t)}
            for sid, title, t in report.by_session
        ],
        "by_user": [{"user": name, **totals(t)} for name, t in report.by_user],
        "tools": [
            {"tool": t.tool, "calls": t.calls, "errors": t.errors, "error_rate": t.error_rate}
            for t in report.tools
        ],
        "turns": report.turns,
        "faults": report.faults,
    }


CSV_FIELDS = (
    "day",
    "replies",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
    "cost",
)


def report_csv_rows(report: UsageReport) -> list[list[str]]:
    """One row per day: the CSV of the Usage page."""
    rows = [list(CSV_FIELDS)]
    for day, t in report.by_day:
        rows.append(
            [
                day.isoformat(),
                str(t.replies),
                str(t.input_tokens),
                str(t.output_tokens),
                str(t.cache_read_tokens),
                str(t.cache_write_tokens),
                str(t.total_tokens),
                str(t.cost),
            ]
        )
    return rows


def username_of(user_id: int) -> str | None:
    """The user name of an account, or None when there is no such account."""
    found = get_user_model().objects.filter(pk=user_id).values_list("username", flat=True)
    return found.first()
