"""Sessions, events and entries in the Django admin. Events and entries are read-only.

The audit of model requests (what was sent to which model, what changed, what it cost) is
in `sessions_app.audit.admin`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from sessions_app import workspaces
from sessions_app.models import ApiToken, Entry, Event, Session, SessionDeletion, ShareLink
from sessions_app.presets import preset_name_of
from sessions_app.services import shares


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


class LiveShareFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("live", "live"), ("ended", "revoked or expired"), ("all", "all")]

    def value(self) -> Any:
        # Live links unless another state is asked for: what staff look for here.
        return super().value() or "live"

    def choices(self, changelist: Any) -> Any:
        for choice in super().choices(changelist):
            if choice.get("display") != "All":  # "all" is one of the lookups
                yield choice

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        live = shares.live_shares().values("pk")
        if self.value() == "live":
            return queryset.filter(pk__in=live)
        if self.value() == "ended":
            return queryset.exclude(pk__in=live)
        return queryset


@admin.register(ShareLink)
class ShareLinkAdmin(ReadOnlyAdmin):
    """Share links, live ones first (`?state=live`); staff revoke any of them with the
    action, which closes its guests' open views at once. Owners make and revoke their own
    through the app; the token is never stored (only its digest, not shown)."""

    list_display = (
        "session",
        "created_by",
        "branch",
        "created_at",
        "expires_at",
        "revoked_at",
        "view_count",
    )
    list_filter = (LiveShareFilter, "created_at")
    search_fields = ("session__id", "session__title", "created_by__username")
    list_select_related = ("session", "created_by")
    exclude = ("digest",)
    actions = ["revoke"]

    @admin.action(description="Revoke the selected links")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        count = shares.shares_revoke_rows(queryset)
        self.message_user(request, f"Revoked {count} link(s); their open views were closed.")


# The request audit (the audit desk) registers itself.
from sessions_app.audit import admin as admin_audit  # noqa: E402, F401
