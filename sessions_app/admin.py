"""Sessions, events and entries in the Django admin. Events and entries are read-only.

The request audit lists the model requests of every session (`request/header` and
`request/sent` events, through the `strand_request_audit` view) for staff, filtered by
user, provider, model and date; opening one shows the exact context that request sent,
rebuilt from the stored facts and checked against its recorded hash.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from sessions_app import access, store, workspaces
from sessions_app.models import ApiToken, Entry, Event, RequestAudit, Session, SessionDeletion
from sessions_app.presets import preset_name_of


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = (
        "title",
        "id",
        "owner",
        "updated_at",
        "last_seq",
        "message_count",
        "token_count",
    )
    list_filter = ("created_at", "owner")
    search_fields = ("title", "id", "owner__username")
    # Nothing of a session is edited here (the page is view-only): its owner, working
    # directory and preset decide whose files its agent reaches and where its model requests
    # (and keys) go, and a saved form would also write back counters the append path keeps.
    # The path is shown relative to the owner's folder, as on the pages.
    exclude = ("cwd",)
    readonly_fields = (
        "id",
        "owner",
        "working_directory",
        "preset_name",
        "preset",
        "created_at",
        "updated_at",
        "last_seq",
        "leaf_entry_id",
        "parent",
        "fork_point",
        "format_version",
        "message_count",
        "token_count",
        "title",
    )

    @admin.display(description="working directory")
    def working_directory(self, session: Session) -> str:
        return workspaces.display_cwd(session.owner, session.cwd) or "(none)"

    @admin.display(description="preset name")
    def preset_name(self, session: Session) -> str:
        return preset_name_of(session.preset)

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Sessions start through the app so that their `session/created` event exists.
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deleting goes through `session_delete` (it lifts the append-only guard).
        return False


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("session", "seq", "type", "time", "entry_id", "turn", "step")
    list_filter = ("type", "time")
    search_fields = ("session__id", "session__title", "type", "entry_id")
    list_select_related = ("session",)
    ordering = ("session", "seq")


@admin.register(Entry)
class EntryAdmin(ReadOnlyAdmin):
    list_display = ("session", "entry_id", "parent_id", "type", "timestamp", "seq", "depth")
    list_filter = ("type",)
    search_fields = ("session__id", "session__title", "entry_id", "parent_id")
    list_select_related = ("session",)
    ordering = ("session", "seq")


@admin.register(SessionDeletion)
class SessionDeletionAdmin(ReadOnlyAdmin):
    list_display = (
        "session_id",
        "title",
        "owner_username",
        "deleted_by",
        "deleted_at",
        "event_count",
    )
    search_fields = ("session_id", "title", "owner_username", "deleted_by")


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens are listed (never their secret: only a digest is stored) so that staff can
    see who has which; people make and revoke their own through the app."""

    list_display = ("name", "user", "prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at", "created_at")
    search_fields = ("name", "user__username", "prefix")
    list_select_related = ("user",)
    exclude = ("digest",)


# --- the request audit ---------------------------------------------------------------------


class _ValueFilter(admin.SimpleListFilter):
    """The distinct values of one column among the listed requests."""

    field = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = (
            RequestAudit.objects.order_by(self.field).values_list(self.field, flat=True).distinct()
        )
        return [(value, value or "(none)") for value in values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value is not None else queryset


class ProviderFilter(_ValueFilter):
    title = "provider"
    parameter_name = "provider"
    field = "provider"


class ModelFilter(_ValueFilter):
    title = "model"
    parameter_name = "model"
    field = "model"


def _staff(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_active and user.is_staff)


@admin.register(RequestAudit)
class RequestAuditAdmin(admin.ModelAdmin):
    list_display = (
        "time",
        "type",
        "session_title",
        "owner",
        "provider",
        "model",
        "seq",
        "turn",
        "step",
        "token_estimate",
    )
    list_display_links = ("time", "type")
    list_filter = (
        ("owner", admin.RelatedOnlyFieldListFilter),
        ProviderFilter,
        ModelFilter,
        ("time", admin.DateFieldListFilter),
        "type",
    )
    date_hierarchy = "time"
    search_fields = ("session__title", "owner__username", "model", "provider")
    list_select_related = ("session", "owner")
    list_per_page = 50

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

    @admin.display(description="session", ordering="session__title")
    def session_title(self, row: RequestAudit) -> str:
        return format_html("{} <small>{}</small>", str(row.session), str(row.session_id)[:8])

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """One request's exact context (a `request/sent`), or one header snapshot and the
        requests sent under it (a `request/header`)."""
        from sessions_app.selectors import request_view

        row = RequestAudit.objects.filter(pk=object_id).select_related("session", "owner").first()
        if row is None or not self.has_view_permission(request, row):
            raise Http404("no such model request")
        try:
            session = access.session_for(request.user, row.session_id)
        except access.NotVisible:
            raise Http404("no such model request") from None
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Model request {row.session_id}#{row.seq}",
            "row": row,
            "session": session,
        }
        if row.type == "request/sent":
            view = request_view(session, row.seq)
            context["view"] = view
            context["params_json"] = _pretty(view.params)
            context["tools"] = [(tool, _pretty(tool.parameters)) for tool in view.tools]
            context["messages"] = [(m, _pretty(m.message)) for m in view.messages]
            context["payload_json"] = _pretty(view.payload) if view.payload is not None else ""
        else:
            header = store.events_after(session.id, row.seq - 1, 1)[0]
            context["header"] = header.data
            context["params_json"] = _pretty(header.data.get("params") or {})
            context["tools"] = [
                (tool, _pretty(tool.get("parameters") or {}))
                for tool in header.data.get("tools") or ()
                if isinstance(tool, dict)
            ]
            context["sent"] = [
                (r, reverse("admin:sessions_app_requestaudit_change", args=[r.pk]))
                for r in RequestAudit.objects.filter(
                    session_id=row.session_id, type="request/sent", header_seq=row.seq
                ).order_by("seq")[:200]
            ]
        return TemplateResponse(request, "admin/strand/request_context.html", context)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
