"""Page routes."""

from __future__ import annotations

from django.urls import path

from sessions_app.web import (
    files_views,
    replay_views,
    search_views,
    share_views,
    usage_views,
    views,
    workspace_views,
)

urlpatterns = [
    path("", views.home, name="home"),
    path("search", search_views.search_page, name="search"),
    path("usage", usage_views.usage_page, name="usage"),
    path("usage.csv", usage_views.usage_csv, name="usage-csv"),
    path("sessions/new", views.session_new, name="session-new"),
    path("sessions/import", views.session_import, name="session-import"),
    path("sessions/<uuid:session_id>/", views.session_page, name="session"),
    path("sessions/<uuid:session_id>/rename", views.session_rename, name="session-rename"),
    path("sessions/<uuid:session_id>/delete", views.session_delete, name="session-delete"),
    path("sessions/<uuid:session_id>/leaf", views.session_leaf, name="session-leaf"),
    path(
        "sessions/<uuid:session_id>/leaf/summary",
        views.session_leaf_summary,
        name="session-leaf-summary",
    ),
    path("sessions/<uuid:session_id>/label", views.session_label, name="session-label"),
    path("sessions/<uuid:session_id>/compare", views.session_compare, name="session-compare"),
    path(
        "sessions/<uuid:session_id>/requests/<int:seq>/replay",
        replay_views.request_replay,
        name="session-request-replay",
    ),
    path(
        "sessions/<uuid:session_id>/replays/<int:group>",
        replay_views.replay_group,
        name="session-replay-group",
    ),
    path(
        "sessions/<uuid:session_id>/files/<path:file_path>",
        files_views.session_file_download,
        name="session-file",
    ),
    path("sessions/<uuid:session_id>/fork", views.session_fork, name="session-fork"),
    path("sessions/<uuid:session_id>/shares", share_views.session_shares, name="session-shares"),
    path(
        "sessions/<uuid:session_id>/shares/<int:share_id>/revoke",
        share_views.session_share_revoke,
        name="session-share-revoke",
    ),
    # A share link's guest page (the token is the credential; `share_views`).
    path("s/<str:token>/", share_views.shared_session, name="shared-session"),
    path("sessions/<uuid:session_id>/messages", views.session_send, name="session-send"),
    path("sessions/<uuid:session_id>/resend", views.session_resend, name="session-resend"),
    path("sessions/<uuid:session_id>/cancel", views.session_cancel, name="session-cancel"),
    path("sessions/<uuid:session_id>/retry", views.session_retry, name="session-retry"),
    path("sessions/<uuid:session_id>/compact", views.session_compact, name="session-compact"),
    path(
        "sessions/<uuid:session_id>/approvals/<str:approval_id>",
        views.session_approval,
        name="session-approval",
    ),
    path(
        "sessions/<uuid:session_id>/workspace.tar",
        workspace_views.session_workspace_tar,
        name="session-workspace-tar",
    ),
    path(
        "sessions/<uuid:session_id>/workspace/upload",
        workspace_views.session_workspace_upload,
        name="session-workspace-upload",
    ),
    path(
        "sessions/<uuid:session_id>/export.html",
        views.session_export_html,
        name="session-export-html",
    ),
    path(
        "sessions/<uuid:session_id>/export.jsonl",
        views.session_export_jsonl,
        name="session-export-jsonl",
    ),
]
