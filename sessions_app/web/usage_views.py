"""The Usage page and its CSV: one user's usage (staff: everyone's, or one user's), drawn
on the server as the audit desk draws its charts."""

from __future__ import annotations

import csv
from datetime import date
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from sessions_app import charts
from sessions_app.access import NotVisible
from sessions_app.bad_input import check_text
from sessions_app.selectors import usage


def _short(value: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}" if value != int(value) else f"{int(value)}"


def _money(value: float) -> str:
    return "$0" if value == 0 else f"${value:.4f}"


def _report(request: HttpRequest) -> usage.UsageReport:
    def day(name: str) -> date | None:
        value = check_text(request.GET.get(name, ""), f"the parameter {name!r}").strip()
        try:
            return date.fromisoformat(value) if value else None
        except ValueError:
            raise NotVisible(f"{name}: give a date as YYYY-MM-DD") from None

    username = check_text(request.GET.get("user", ""), "the parameter 'user'").strip()[:150]
    return usage.usage_report(
        request.user, username=username or None, since=day("since"), until=day("until")
    )


@login_required
def usage_page(request: HttpRequest) -> HttpResponse:
    try:
        report = _report(request)
    except NotVisible as exc:
        return render(request, "usage/usage.html", {"error": str(exc)}, status=400)
    days = [(d.isoformat(), t) for d, t in report.by_day]
    models = [(m.label, m, {k: v for k, v in m.percentiles().items()}) for m in report.by_model]
    context: dict[str, Any] = {
        "report": report,
        "query": request.GET.urlencode(),
        "tokens_chart": charts.column_chart(
            [(d, float(t.total_tokens)) for d, t in days], value_text=_short
        ),
        "cost_chart": charts.column_chart([(d, float(t.cost)) for d, t in days], value_text=_money),
        "model_chart": charts.bar_chart(
            [(label, float(m.totals.cost)) for label, m, _ in models], value_text=_money
        ),
        "tool_chart": charts.bar_chart(
            [(t.tool or "(none)", float(t.calls)) for t in report.tools], value_text=_short
        ),
        "days": days,
        "models": models,
    }
    return render(request, "usage/usage.html", context)


@login_required
def usage_csv(request: HttpRequest) -> HttpResponse:
    try:
        report = _report(request)
    except NotVisible as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain")
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="usage.csv"'
    writer = csv.writer(response)
    for row in usage.report_csv_rows(report):
        # A cell that a spreadsheet would read as a formula is written as text.
        writer.writerow(["'" + c if c[:1] in ("=", "+", "-", "@") else c for c in row])
    return response
