"""Demo data for `make run`: a small session so that every view has something to show."""

from __future__ import annotations

from pathlib import Path

from django.db import transaction

from sessions_app import pi_io, services, store
from sessions_app.models import Session
from sessions_app.store import NewEvent

DEMO_TITLE = "Demo: a first look around"
PI_DEMO_TITLE = "Demo: an imported Pi session with branches and compactions"
PI_DEMO_FILE = Path(__file__).resolve().parent / "demo_data" / "pi-compactions-and-branches.jsonl"


def _message(role: str, **fields: object) -> dict[str, object]:
    return {"type": "message", "message": {"role": role, **fields}}


def demo_load() -> list[Session]:
    """Create the demo sessions for the local account unless they already exist."""
    owner = services.user_get_or_create_local()
    if Session.objects.filter(owner=owner, title=DEMO_TITLE).exists():
        return []
    with transaction.atomic():
        session = services.session_create(owner=owner, title=DEMO_TITLE, cwd=".")
        call = {
            "type": "toolCall",
            "id": "call_demo_1",
            "name": "list_files",
            "arguments": {"path": "."},
        }
        usage = {
            "input": 120,
            "output": 30,
            "cacheRead": 0,
            "cacheWrite": 0,
            "totalTokens": 150,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
        }
        entries = [
            _message("user", content="What is in this project?", timestamp=1764403200000),
            _message(
                "assistant",
                content=[{"type": "text", "text": "Let me look."}, call],
                api="offline",
                provider="offline",
                model="strand-offline-1",
                usage=usage,
                stopReason="toolUse",
                timestamp=1764403201000,
            ),
            _message(
                "toolResult",
                toolCallId="call_demo_1",
                toolName="list_files",
                content=[{"type": "text", "text": "README.md\nmanage.py\nsessions_app/"}],
                isError=False,
                timestamp=1764403201500,
            ),
            _message(
                "assistant",
                content=[
                    {
                        "type": "text",
                        "text": "A Django project: `manage.py`, a README and the `sessions_app` package.",
                    }
                ],
                api="offline",
                provider="offline",
                model="strand-offline-1",
                usage=usage,
                stopReason="stop",
                timestamp=1764403202000,
            ),
        ]
        roles = {
            "user": "user/message",
            "assistant": "assistant/message",
            "toolResult": "tool/result",
        }
        events = [NewEvent(roles[e["message"]["role"]], {"entry": e}) for e in entries]  # type: ignore[index]
        store.append_events(session.id, session.last_seq, events)
        with PI_DEMO_FILE.open("rb") as source:
            imported = pi_io.pi_import(source=source, owner=owner, name=PI_DEMO_TITLE).session
    return [session, imported]
