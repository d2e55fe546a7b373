"""Usage and failures read from the projector's rollups (`UsageCount`): tokens and cost per
day, model and session, tool calls and errors per tool, how turns ended, provider faults by
kind, and latency percentiles per model. Nothing here reads the event log, so a report costs
the same at 1 or 1,000,000 sessions; the events after the projector's checkpoints are
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
    with transaction.atomic():
        with connection.cursor() as cur:
            if not connection.savepoint_ids:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            cur.execute(
                f"""
                SELECT owner_id, day, session_id, provider, model, metric, label, sum(value)
                FROM sessions_app_usagecount WHERE {" AND ".join(where)}
                GROUP BY owner_id, day, session_id, provider, model, metric, label
                """,
                params,
            )
            rows = cur.fetchall()
        rows += _tail_rows(owner_id, since, until)
    return _report(shown, rows, everyone=owner_id is None)


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


def _report(shown: str | None, rows: list[tuple[Any, ...]], *, everyone: bool) -> UsageReport:
    total = Totals()
    days: dict[date, Totals] = defaultdict(Totals)
    models: dict[str, ModelUsage] = {}
    sessions: dict[uuid.UUID, Totals] = defaultdict(Totals)
    owners: dict[int, Totals] = defaultdict(Totals)
    tools: dict[str, ToolUsage] = {}
    turns: dict[str, int] = defaultdict(int)
    faults: dict[str, int] = defaultdict(int)
    requests = 0
    for owner_id, day, session_id, provider, model, metric, label, value in rows:
        value = Decimal(value)
        if metric == "tool_calls" or metric == "tool_errors":
            tool = tools.setdefault(label, ToolUsage(label))
            if metric == "tool_calls":
                tool.calls += int(value)
            else:
                tool.errors += int(value)
        elif metric == "turns":
            turns[label] += int(value)
        elif metric == "faults":
            faults[label] += int(value)
        elif metric == "requests":
            requests += int(value)
        elif metric in ("ttft_ms", "duration_ms"):
            usage = models.setdefault(_model(provider, model), ModelUsage(_model(provider, model)))
            histogram = usage.ttft if metric == "ttft_ms" else usage.duration
            histogram[label] = histogram.get(label, 0) + int(value)
        else:
            for totals in (
                total,
                days[day],
                sessions[session_id],
                owners[owner_id],
                models.setdefault(
                    _model(provider, model), ModelUsage(_model(provider, model))
                ).totals,
            ):
                totals.add(metric, value)
    costly = sorted(sessions.items(), key=lambda kv: (-kv[1].cost, -kv[1].total_tokens))
    costly = costly[:TOP_SESSIONS]
    titles = {s.id: str(s) for s in Session.objects.filter(id__in=[sid for sid, _ in costly])}
    names = dict(get_user_model().objects.filter(pk__in=list(owners)).values_list("pk", "username"))
    by_cost = lambda kv: (-kv[1].cost, -kv[1].total_tokens, kv[0])  # noqa: E731
    return UsageReport(
        user=shown,
        total=total,
        by_day=sorted(days.items()),
        by_model=sorted(models.values(), key=lambda m: (-m.totals.cost, -m.totals.total_tokens)),
        by_session=[(sid, titles.get(sid, "(deleted)"), t) for sid, t in costly],
        by_user=sorted(((names.get(o, str(o)), t) for o, t in owners.items()), key=by_cost)
        if everyone
        else [],
        tools=sorted(tools.values(), key=lambda t: (-t.calls, t.tool)),
        turns=dict(sorted(turns.items())),
        faults=dict(sorted(faults.items())),
        requests=requests,
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
