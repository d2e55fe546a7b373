"""Sessions, events and entries in the Django admin. Events and entries are read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from sessions_app.models import Entry, Event, Session, SessionDeletion


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
    readonly_fields = (
        "id",
        "owner",
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Sessions start through the app so that their `session/created` event exists.
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
