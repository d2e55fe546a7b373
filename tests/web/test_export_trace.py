"""The export's trace turns written by its serializer are the page template's, character for
character: turns the offline agent ran (requests with usage and time to first token, tool
calls, an approval), a failed step with its card, a turn still running, entries outside
turns, and hostile text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.template.loader import render_to_string

from projections.trace_blocks import trace_blocks
from projections.trace_windows import project_trace_windows
from sessions_app import agent, selectors, services, store, workspaces
from sessions_app.models import Session
from sessions_app.store import NewEvent
from sessions_app.web.export_trace import turns_html
from sessions_app.web.html_export import TURNS
from sessions_app.web.page_query import PageQuery
from tests.web.conftest import HOSTILE

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fast_offline_model", "agent_shutdown"),
]


def _both(session: Session) -> list[tuple[str, str]]:
    """(serializer, template) for every window of the session's trace, as the export folds it."""
    base: dict[str, Any] = {
        "session": session,
        "q": PageQuery(),
        "export": True,
        "can_write": False,
    }
    pairs: list[tuple[str, str]] = []
    windows = project_trace_windows(
        selectors.log_stream(session.id), window_turns=2, window_events=50
    )
    for chunk in windows:
        blocks = trace_blocks(chunk.view)
        template = render_to_string(TURNS, {**base, "older": None, "blocks": blocks})
        pairs.append((turns_html(blocks, base), str(template)))
    return pairs


def _turn(number: int, *events: tuple[str, dict[str, Any]]) -> list[NewEvent]:
    return [
        NewEvent(kind, {"turn": number, **data} if kind.startswith(("turn/", "step/")) else data,
                 turn=number, step=None if kind.startswith("turn/") else 1)
        for kind, data in events
    ]  # fmt: skip


def _entry(role: str, **message: Any) -> dict[str, Any]:
    return {"entry": {"type": "message", "message": {"role": role, **message}}}


@pytest.fixture
def ran(alice: User, tmp_path: Path, settings: Any) -> Session:
    settings.STRAND_WORKSPACE_ROOTS = [str(tmp_path)]
    session = services.session_create(owner=alice, title="ran", cwd=workspaces.default_cwd(alice))
    for text in ("write notes.md: the views", "read notes.md and list files", "search for views"):
        agent.agent_run_foreground(session.id, text, auto_approve=True)
    session.refresh_from_db()
    failed = _turn(
        90,
        ("turn/start", {}),
        ("step/start", {"step": 1}),
        ("user/message", _entry("user", content=HOSTILE)),
        (
            "assistant/message",
            {
                **_entry("assistant", content=[], stopReason="error", errorMessage=HOSTILE),
                "fault": {"kind": "rate_limited", "status": 429, "attempts": 3},
            },
        ),
        ("step/end", {"step": 1, "reason": "error"}),
        ("turn/end", {"reason": "error"}),
    )
    running = _turn(91, ("turn/start", {}), ("step/start", {"step": 1}))
    outside = [
        NewEvent("entry/custom", {"entry": {"type": "custom", "customType": HOSTILE}}),
        NewEvent(
            "entry/thinking_level_change",
            {"entry": {"type": "thinking_level_change", "thinkingLevel": "high"}},
        ),
    ]
    store.append_events(session.id, session.last_seq, [*outside, *failed, *running])
    session.refresh_from_db()
    return session


def test_the_serializer_writes_the_template_s_turns(ran: Session) -> None:
    pairs = _both(ran)
    assert len(pairs) >= 3
    written = "".join(mine for mine, _ in pairs)
    for mine, template in pairs:
        assert mine == template
    # What the comparison covers: requests with their usage, tools, a failed step's card,
    # a running turn, hostile text escaped.
    for part in ('class="span kind-request', 'class="span kind-tool', 'class="fault-card"',
                 'status-running', "TTFT ", "&lt;script&gt;"):  # fmt: skip
        assert part in written, part
    assert "<script>" not in written
