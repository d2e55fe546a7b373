"""Page routes."""

from __future__ import annotations

from django.urls import path

from sessions_app.web import files_views, replay_views, views

urlpatterns = [
    path("", views.home, name="home"),
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
