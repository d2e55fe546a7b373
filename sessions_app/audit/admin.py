"""The audit desk in the admin: what was sent to which model, what changed, what it cost.

Staff list the model requests of every session (`request/header` and `request/sent`
events, through the `strand_request_audit` view), one line a row: when, what (a header and
what it changed, or a request and its attempt), the session (linked to its context view at
that request), owner, provider and model, tokens, cost, and whether the payload rebuilt
from the stored facts still has the recorded hash. Filters: user, session, provider, model,
date, kind, and header changes only. A header opens on its diff against the session's
previous header; a request opens on its exact context. An action checks the hashes of many
requests at once; the filtered list is exported as CSV or JSON lines (streamed), and the
usage page draws tokens and cost per day, user, and provider and model.

Staff read everything here and change nothing (the action only reads). A signed-in user
who is not staff gets 404 for every one of these addresses; a visitor who is not signed in
is sent to the admin's sign-in, as for the rest of the admin. Every read goes through
`sessions_app.selectors.audit`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from functools import wraps
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters, ShowFacets
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.text import Truncator

from projections.header_diff import diff_headers
from projections.request import RequestNotFound
from sessions_app import access, charts
from sessions_app.models import RequestAudit
from sessions_app.selectors import audit, usage
from sessions_app.streaming import streamed

# Most requests one run of the integrity action checks; `manage.py verify --requests`
# checks any number.
ACTION_LIMIT = 2000
TITLE_CHARS = 40  # of a session title in the list; the full title shows on hover
# The context of the wide pages (the list and usage): without the admin's navigation
# sidebar, whose width the one-line rows and the charts need.
WIDE = {"is_nav_sidebar_enabled": False}
HEADER_KIND = '<span class="audit-kind header">header</span> {}'


def _staff(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_active and user.is_staff)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def context_url(session_id: Any, seq: int | None = None) -> str:
    """The session page's context view, at the request sent at `seq` when given."""
    url = reverse("session", args=[session_id]) + "?view=context"
    return f"{url}&request={seq}" if seq is not None else url


def money(value: Decimal | float | None) -> str:
    if value is None:
        return "—"
    return f"${value:,.4f}"


def count(value: int | float | None) -> str:
    return "—" if value is None else f"{round(value):,}"


# --- filters -----------------------------------------------------------------------------


class UserFilter(admin.SimpleListFilter):
    title = "user"
    parameter_name = "owner__id__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(pk), name) for pk, name in audit.audit_users()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        user_id = _id_of(value)
        if user_id is None:
            raise IncorrectLookupParameters(f"not a user id: {value!r}")
        return queryset.filter(owner_id=user_id)


def _id_of(value: str) -> int | None:
    """A row's id from a URL, or None. `str.isdigit` alone takes "²", which `int` refuses,
    and a bigint holds 18 digits whatever they are."""
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else None


class SessionFilter(admin.SimpleListFilter):
    """The requests of one session: the chosen user's recent sessions are offered (or
    everyone's), and any session id is accepted (a row's "this session" link)."""

    title = "session"
    parameter_name = "session"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        owner = request.GET.get(UserFilter.parameter_name, "")
        choices = audit.audit_sessions(owner_id=_id_of(owner))
        value = self.value()
        if value and value not in {sid for sid, _ in choices}:
            label = audit.audit_session_label(value)
            if label is not None:
                choices.insert(0, (value, label))
        return [(sid, Truncator(title).chars(40)) for sid, title in choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if audit.audit_session_label(value) is None:
            raise IncorrectLookupParameters(f"no session {value!r}")
        return queryset.filter(session_id=value)


class _ValueFilter(admin.SimpleListFilter):
    """One value of a column the headers hold (provider or model)."""

    values: Callable[[], list[str]] = staticmethod(list)
    field = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, value or "(none)") for value in type(self).values()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value is not None else queryset


class ProviderFilter(_ValueFilter):
    title = "provider"
    parameter_name = "provider"
    field = "provider"
    values = staticmethod(audit.audit_providers)


class ModelFilter(_ValueFilter):
    title = "model"
    parameter_name = "model"
    field = "model"
    values = staticmethod(audit.audit_models)


class KindFilter(admin.SimpleListFilter):
    title = "kind"
    parameter_name = "type__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("request/header", "headers"), ("request/sent", "requests")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if value not in ("request/header", "request/sent"):
            raise IncorrectLookupParameters(f"no kind {value!r}")
        return queryset.filter(type=value)


class HeaderChangesFilter(admin.SimpleListFilter):
    title = "header changes"
    parameter_name = "changes"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("header", "header changes only")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() is None:
            return queryset
        if self.value() != "header":
            raise IncorrectLookupParameters(f"no such choice {self.value()!r}")
        return audit.only_header_changes(queryset)


# --- the admin ---------------------------------------------------------------------------


class AuditPaginator(Paginator):
    """Counts the list's rows through `audit_count` (cheaper when nothing is filtered) and
    reads a page through `audit_page` (its ids first, then its rows)."""

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        return audit.audit_count(rows) if isinstance(rows, QuerySet) else len(rows)

    def page(self, number: Any) -> Page:
        rows = self.object_list
        if not isinstance(rows, QuerySet):
            return super().page(number)
        number = self.validate_number(number)
        start = (number - 1) * self.per_page
        stop = start + self.per_page
        if stop + self.orphans >= self.count:
            stop = self.count
        return Page(audit.audit_page(rows, start, stop), number, self)


@dataclass(frozen=True)
class UsageTable:
    """One chart of the usage page and the table of the same numbers beside it."""

    title: str
    chart: charts.Chart
    headings: tuple[str, ...]
    rows: list[tuple[str, ...]]


def _usage_table(
    title: str, unit: str, rows: list[tuple[str, audit.UsageRow]], measure: str
) -> UsageTable:
    """Tokens or cost (`measure`) per day, week or month (columns) or per user or model."""
    if measure == "tokens":
        points = [(label, float(row.total_tokens)) for label, row in rows]
        headings: tuple[str, ...] = (unit, "requests", "in", "out", "tokens")
        cells: list[tuple[str, ...]] = [
            (
                label,
                count(r.requests),
                count(r.input_tokens),
                count(r.output_tokens),
                count(r.total_tokens),
            )
            for label, r in rows
        ]
        text = _short
    else:
        points = [(label, float(row.cost)) for label, row in rows]
        headings = (unit, "requests", "cost")
        cells = [(label, count(r.requests), money(r.cost)) for label, r in rows]
        text = _short_money
    over_time = unit in ("day", "week", "month")
    chart = (
        charts.column_chart(points, value_text=text)
        if over_time
        else charts.bar_chart(points, value_text=text)
    )
    return UsageTable(title, chart, headings, cells)


@admin.register(RequestAudit)
class RequestAuditAdmin(admin.ModelAdmin):
    change_list_template = "admin/strand/requestaudit_change_list.html"
    list_display = (
        "when",
        "what",
        "session_link",
        "owner_name",
        "model_name",
        "position",
        "tokens",
        "cost",
        "payload_hash",
    )
    list_display_links = ("when",)
    list_filter = (
        UserFilter,
        SessionFilter,
        HeaderChangesFilter,
        KindFilter,
        ProviderFilter,
        ModelFilter,
        ("time", admin.DateFieldListFilter),
    )
    search_fields = ("session__title", "owner__username", "model", "provider")
    list_select_related = ("session", "owner")
    list_per_page = 50
    # Counting every row of the view for "N total" and for each filter choice would read
    # the whole log at each page; the filtered count is enough.
    show_full_result_count = False
    show_facets = ShowFacets.NEVER
    actions = ["check_integrity"]

    # Every active staff member may read the audit, as staff may read every session.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return _staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _staff(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[RequestAudit]:
        return audit.audit_rows()

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: Any,
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> Paginator:
        return AuditPaginator(queryset, per_page, orphans, allow_empty_first_page)

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        own = [
            path(
                "export.csv",
                self.admin_site.admin_view(self.export_csv_view),
                name=f"{name}_export_csv",
            ),
            path(
                "export.jsonl",
                self.admin_site.admin_view(self.export_jsonl_view),
                name=f"{name}_export_jsonl",
            ),
            path("usage/", self.admin_site.admin_view(self.usage_view), name=f"{name}_usage"),
        ]
        return [
            URLPattern(p.pattern, _not_found_unless_staff(p.callback), p.default_args, p.name)
            for p in [*own, *super().get_urls()]
            if isinstance(p, URLPattern)
        ]

    # --- the list ------------------------------------------------------------------------

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # The admin's navigation sidebar would take the width the one-line rows need.
        response = super().changelist_view(request, {**WIDE, **(extra_context or {})})
        if isinstance(response, TemplateResponse) and response.context_data:
            cl: ChangeList | None = response.context_data.get("cl")
            if cl is not None:
                # The facts of the shown page only: one query, and a rebuild per request.
                facts = audit.audit_row_facts(list(cl.result_list))
                for row in cl.result_list:
                    setattr(row, "audit_facts", facts.get(row.pk, audit.RowFacts()))  # noqa: B010
                response.context_data["filter_query"] = _filter_query(cl)
        return response

    @admin.display(description="time", ordering="time")
    def when(self, row: RequestAudit) -> str:
        moment = timezone.localtime(row.time)
        return format_html(
            '<span title="{}">{}</span>',
            moment.isoformat(timespec="milliseconds"),
            moment.strftime("%Y-%m-%d %H:%M"),
        )

    @admin.display(description="what")
    def what(self, row: RequestAudit) -> str:
        facts = _facts(row)
        if row.type == "request/header":
            if facts.header_first:
                return format_html(HEADER_KIND, "initial")
            if not facts.header_summary:
                return format_html(HEADER_KIND, "no change")
            changed = ", ".join(facts.header_summary)
            return format_html(
                HEADER_KIND,
                format_html('<span title="{}">{}</span>', f"changed: {changed}", changed),
            )
        attempt = f" · attempt {facts.attempt}" if facts.attempt and facts.attempt > 1 else ""
        return format_html('<span class="audit-kind sent">request</span>{}', attempt)

    @admin.display(description="session", ordering="session__title")
    def session_link(self, row: RequestAudit) -> str:
        title = str(row.session)
        seq = row.seq if row.type == "request/sent" else None
        return format_html(
            '<a class="audit-title" href="{}" title="{}">{}</a>',
            context_url(row.session_id, seq),
            f"{title} — open the context view" + (f" at request {seq}" if seq else ""),
            Truncator(title).chars(TITLE_CHARS),
        )

    @admin.display(description="owner", ordering="owner__username")
    def owner_name(self, row: RequestAudit) -> str:
        name = row.owner.get_username()
        return format_html('<span title="{}">{}</span>', name, name)

    @admin.display(description="provider / model")
    def model_name(self, row: RequestAudit) -> str:
        text = f"{row.provider or '(none)'} / {row.model or '(none)'}"
        return format_html('<span title="{}">{}</span>', text, Truncator(text).chars(28))

    @admin.display(description="seq")
    def position(self, row: RequestAudit) -> str:
        where = "".join(
            f"{name}{value}"
            for name, value in (("t", row.turn), ("s", row.step))
            if value is not None
        )
        title = f"seq {row.seq}, turn {row.turn}, step {row.step}"
        return format_html(
            '<span title="{}">{}</span>', title, f"{row.seq} · {where}" if where else str(row.seq)
        )

    @admin.display(description="tokens")
    def tokens(self, row: RequestAudit) -> str:
        facts = _facts(row)
        if row.type != "request/sent":
            return "—"
        used = facts.total_tokens
        detail = (
            f"estimated {count(row.token_estimate)}; used {count(facts.input_tokens)} in, "
            f"{count(facts.output_tokens)} out"
        )
        return format_html('<span title="{}">{}</span>', detail, count(used or row.token_estimate))

    @admin.display(description="cost")
    def cost(self, row: RequestAudit) -> str:
        return money(_facts(row).cost) if row.type == "request/sent" else "—"

    @admin.display(description="hash")
    def payload_hash(self, row: RequestAudit) -> str:
        check = _facts(row).check
        if check is None:
            return "—"
        label, css = {
            "match": ("✓ ok", "ok"),
            "mismatch": ("✗ differs", "bad"),
            "unrebuildable": ("✗ broken", "bad"),
        }[check.status]
        detail = {
            "match": "the payload rebuilt from the stored facts has the recorded hash",
            "mismatch": f"the rebuilt payload's hash differs from the recorded one: {check.detail}",
            "unrebuildable": f"the payload cannot be rebuilt: {check.detail}",
        }[check.status]
        return format_html('<span class="audit-hash {}" title="{}">{}</span>', css, detail, label)

    # --- the integrity action ------------------------------------------------------------

    @admin.action(description="Check the payload hashes of the selected requests")
    def check_integrity(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse:
        report = audit.integrity_report(audit.request_keys(queryset), limit=ACTION_LIMIT)
        problems = [
            (check, audit.audit_row_at(check.session_id, check.seq)) for check in report.problems
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Payload hashes checked",
            "report": report,
            "limit": ACTION_LIMIT,
            "problems": [
                (
                    check,
                    row,
                    reverse("admin:sessions_app_requestaudit_change", args=[row.pk]) if row else "",
                    context_url(check.session_id, check.seq),
                )
                for check, row in problems
            ],
            "back": reverse("admin:sessions_app_requestaudit_changelist")
            + (request.GET.urlencode() and "?" + request.GET.urlencode()),
        }
        return TemplateResponse(request, "admin/strand/integrity.html", context)

    # --- one row -------------------------------------------------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """One request's exact context (a `request/sent`), or one header with its diff
        against the session's previous header and the requests sent under it."""
        found = _id_of(object_id)
        row = audit.audit_row(found) if found is not None else None
        if row is None or not self.has_view_permission(request, row):
            raise Http404("no such model request")
        try:
            session = access.session_for(request.user, row.session_id)
        except access.NotVisible:
            raise Http404("no such model request") from None
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": (
                f"{'Model request' if row.type == 'request/sent' else 'Request header'} "
                f"{str(row.session_id)[:8]}#{row.seq}"
            ),
            "row": row,
            "session": session,
            "can_replay": access.can_change(request.user, session),
            "context_url": context_url(
                row.session_id, row.seq if row.type == "request/sent" else None
            ),
            "session_filter_url": reverse("admin:sessions_app_requestaudit_changelist")
            + f"?session={row.session_id}",
        }
        # Named `context_messages`: `messages` is the admin's notices (django.contrib.messages).
        if row.type == "request/sent":
            view, check = audit.request_audit(session, row.seq)
            context["check"] = check
            manifest = audit.event_data(session, row.seq)
            context["manifest"] = manifest
            context["manifest_json"] = _pretty(manifest)
            if view is not None:
                context["view"] = view
                context["params_json"] = _pretty(view.params)
                context["tools"] = [(tool, _pretty(tool.parameters)) for tool in view.tools]
                context["context_messages"] = [(m, _pretty(m.message)) for m in view.messages]
                context["payload_json"] = _pretty(view.payload) if view.payload is not None else ""
        else:
            try:
                previous, header = audit.header_pair(session, row.seq)
            except RequestNotFound:
                raise Http404("no such model request") from None
            context["header"] = header.data
            context["previous"] = previous
            context["diff"] = diff_headers(previous.data if previous else None, header.data)
            context["params_json"] = _pretty(header.data.get("params") or {})
            context["tools"] = [
                (tool, _pretty(tool.get("parameters") or {}))
                for tool in header.data.get("tools") or ()
                if isinstance(tool, dict)
            ]
            if previous is not None:
                before = audit.audit_row_at(session.id, previous.seq)
                context["previous_url"] = (
                    reverse("admin:sessions_app_requestaudit_change", args=[before.pk])
                    if before
                    else ""
                )
            context["sent"] = [
                (r, reverse("admin:sessions_app_requestaudit_change", args=[r.pk]))
                for r in audit.requests_under_header(session, row.seq, limit=200)
            ]
        return TemplateResponse(request, "admin/strand/request_context.html", context)

    # --- exports -------------------------------------------------------------------------

    def export_csv_view(self, request: HttpRequest) -> HttpResponseBase:
        rows = self._filtered(request)
        if isinstance(rows, HttpResponse):
            return rows
        return _download(request, _csv_lines(audit.audit_export_rows(rows)), "text/csv", "csv")

    def export_jsonl_view(self, request: HttpRequest) -> HttpResponseBase:
        rows = self._filtered(request)
        if isinstance(rows, HttpResponse):
            return rows
        return _download(
            request, _json_lines(audit.audit_export_rows(rows)), "application/x-ndjson", "jsonl"
        )

    def _filtered(self, request: HttpRequest) -> QuerySet[RequestAudit] | HttpResponse:
        """The rows of the list with the filters and search of the request's query string."""
        try:
            return self.get_changelist_instance(request).queryset
        except IncorrectLookupParameters as exc:
            return JsonResponse({"error": "bad_filter", "detail": str(exc)}, status=400)

    # --- usage ---------------------------------------------------------------------------

    def usage_view(self, request: HttpRequest) -> HttpResponse:
        try:
            cl = self.get_changelist_instance(request)
        except IncorrectLookupParameters as exc:
            return JsonResponse({"error": "bad_filter", "detail": str(exc)}, status=400)
        overview = audit.usage_overview(cl.queryset)
        periods = _periods(overview)
        by_user = [(r.label, r) for r in overview.by_user]
        by_model = [(r.label, r) for r in overview.by_model]
        tables = [
            _usage_table(f"Tokens per {periods.unit}", periods.unit, periods.rows, "tokens"),
            _usage_table(f"Cost per {periods.unit}", periods.unit, periods.rows, "cost"),
            _usage_table("Tokens per user", "user", by_user, "tokens"),
            _usage_table("Cost per user", "user", by_user, "cost"),
            _usage_table("Tokens per provider and model", "provider / model", by_model, "tokens"),
            _usage_table("Cost per provider and model", "provider / model", by_model, "cost"),
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "cl": cl,
            **WIDE,
            "title": "Model usage",
            "summary": _usage_summary(overview.total),
            "tables": tables,
            # Tools, turns and faults from the projector's rollups (the Usage page's own
            # numbers), for the user the list is filtered to, or everyone.
            "rollups": _rollup_report(request),
            "filter_query": _filter_query(cl),
        }
        return TemplateResponse(request, "admin/strand/usage.html", context)


def _rollup_report(request: HttpRequest) -> usage.UsageReport:
    owner = _id_of(request.GET.get(UserFilter.parameter_name, ""))
    name = usage.username_of(owner) if owner is not None else None
    return usage.usage_report(request.user, username=name)


def _usage_summary(total: audit.UsageRow) -> str:
    requests = f"{total.requests:,} request" + ("" if total.requests == 1 else "s")
    return (
        f"{requests}, {count(total.total_tokens)} tokens ({count(total.input_tokens)} in, "
        f"{count(total.output_tokens)} out), cost {money(total.cost)}."
    )


def _facts(row: RequestAudit) -> audit.RowFacts:
    found = getattr(row, "audit_facts", None)
    return found if isinstance(found, audit.RowFacts) else audit.RowFacts()


def _filter_query(cl: ChangeList) -> str:
    """The list's filters, search and order as a query string ("" or "?…"); the ChangeList
    has already set its page aside. (Its `remove` would drop every parameter that starts
    with the name given: "o" takes `owner__id__exact` with it.)"""
    query = cl.get_query_string()
    return "" if query == "?" else query


def _not_found_unless_staff(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A signed-in user who is not staff is told there is nothing here (not that it is
    forbidden); the admin's own wrapper then sends visitors to its sign-in."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.user.is_authenticated and not _staff(request):
            raise Http404("no such page")
        return view(request, *args, **kwargs)

    return guarded


# --- usage periods and numbers -----------------------------------------------------------


@dataclass(frozen=True)
class _Periods:
    unit: str
    rows: list[tuple[str, audit.UsageRow]]


def _periods(overview: audit.UsageOverview) -> _Periods:
    """The usage per day, or per week or month over a long range, every period present."""
    if not overview.by_day:
        return _Periods("day", [])
    first, last = overview.by_day[0][0], overview.by_day[-1][0]
    period = charts.period_of(first, last)
    sums: dict[date, audit.UsageRow] = {}
    for day, row in overview.by_day:
        start = charts.period_start(day, period)
        sums[start] = _add(sums[start], row) if start in sums else row
    rows = [
        (
            charts.period_label(start, period),
            sums.get(start) or audit.UsageRow("", 0, 0, 0, 0, Decimal(0)),
        )
        for start in charts.period_starts(first, last, period)
    ]
    return _Periods(period, rows)


def _add(a: audit.UsageRow, b: audit.UsageRow) -> audit.UsageRow:
    return audit.UsageRow(
        a.label,
        a.requests + b.requests,
        a.input_tokens + b.input_tokens,
        a.output_tokens + b.output_tokens,
        a.total_tokens + b.total_tokens,
        a.cost + b.cost,
    )


def _short(value: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}" if value != int(value) else f"{int(value)}"


def _short_money(value: float) -> str:
    if value == 0:
        return "$0"
    return f"${value:.2f}" if abs(value) >= 1 else f"${value:.4f}".rstrip("0")


# --- exports -----------------------------------------------------------------------------

ROWS_PER_CHUNK = 500  # rows written into one piece of the response body


def _download(
    request: HttpRequest, lines: Generator[str, None, None], content_type: str, extension: str
) -> StreamingHttpResponse:
    """The export as a streamed download (`streamed`: each chunk made in the request's own
    thread, the one that holds its connection and the server-side cursor the rows come
    through)."""
    response = StreamingHttpResponse(
        streamed(lines, request), content_type=f"{content_type}; charset=utf-8"
    )
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="model-requests-{stamp}.{extension}"'
    response["Cache-Control"] = "no-store"
    return response


class _Line:
    """A file-like object whose write returns what was written (for csv.writer)."""

    def write(self, value: str) -> str:
        return value


# A cell a spreadsheet would read as a formula starts with one of these.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    value = audit.export_value(value)
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        # Kept as text by spreadsheets: a hostile title cannot run as a formula.
        return "'" + value
    return "" if value is None else value


def _csv_lines(rows: Generator[dict[str, Any], None, None]) -> Generator[str, None, None]:
    writer = csv.writer(_Line())
    yield writer.writerow(audit.EXPORT_FIELDS)
    yield from _chunked(
        rows, lambda row: writer.writerow([_cell(row[name]) for name in audit.EXPORT_FIELDS])
    )


def _json_lines(rows: Generator[dict[str, Any], None, None]) -> Generator[str, None, None]:
    def line(row: dict[str, Any]) -> str:
        values = {name: audit.export_value(value) for name, value in row.items()}
        return json.dumps(values, ensure_ascii=False) + "\n"

    yield from _chunked(rows, line)


def _chunked(
    rows: Generator[dict[str, Any], None, None], line: Callable[[dict[str, Any]], str]
) -> Generator[str, None, None]:
    chunk: list[str] = []
    try:
        for row in rows:
            chunk.append(line(row))
            if len(chunk) >= ROWS_PER_CHUNK:
                yield "".join(chunk)
                chunk = []
        if chunk:
            yield "".join(chunk)
    finally:
        # A download cut short closes its cursor now, not whenever the rows are collected.
        rows.close()
