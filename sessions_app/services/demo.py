"""The first run of `make run`: the local account and demo sessions.

The local account (STRAND_LOCAL_USER, default `local`) gets a generated password the first
time, printed once with the address and the user name; there is no fixed default password.
Later runs leave the password alone. The account is staff and superuser: the install's
administrator. The demo sessions (a short session with a tool call, and an imported Pi
session with branches and compactions) are loaded once.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Any, TextIO

from django.contrib.auth.models import User
from django.db import transaction

from sessions_app import services, store, workspaces
from sessions_app.models import Session
from sessions_app.services import pi_io
from sessions_app.store import NewEvent

DEMO_TITLE = "Demo: a first look around"
PI_DEMO_TITLE = "Demo: an imported Pi session with branches and compactions"
PI_DEMO_FILE = Path(__file__).resolve().parent / "demo_data" / "pi-compactions-and-branches.jsonl"


def _message(role: str, **fields: object) -> dict[str, object]:
    return {"type": "message", "message": {"role": role, **fields}}


def server_address() -> str:
    """Where `make run` serves (STRAND_URL, else daphne's default address)."""
    return os.environ.get("STRAND_URL") or "http://127.0.0.1:8000/"


def local_account_ensure(out: TextIO | None = None) -> tuple[User, str | None]:
    """The local account, with a generated password when it has none yet.

    On a local install that account is its administrator (staff and superuser), so that the
    admin and its audit of model requests open with it. Returns the user and the new
    password (None when the account already had one). The password is printed to `out` with
    the address and the user name.
    """
    user = services.user_get_or_create_local()
    if not (user.is_staff and user.is_superuser):
        # Saved only when it changes: every change to an account re-checks its open sockets.
        user.is_staff = user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])
    if user.password and user.has_usable_password():
        return user, None
    password = secrets.token_urlsafe(12)
    user.set_password(password)
    user.save(update_fields=["password"])
    if out is not None:
        name = user.get_username()
        out.write(
            f"\nStrand: sign in at {server_address()}\n"
            f"  user name: {name}\n"
            f"  password:  {password}\n"
            f"(shown once; change it with `python manage.py changepassword {name}`)\n"
            f"The account is this install's administrator: the admin and its audit of model "
            f"requests are at {server_address().rstrip('/')}/admin/\n\n"
        )
        out.flush()
    return user, password


DEMO_FILES = {
    "README.md": "# Demo project\n\nA small folder for trying Strand's agent: ask it to\n"
    "`list files`, `read README.md`, `search for needle`, or `write notes.md: some text`\n"
    "(writes wait for your approval).\n",
    "notes.txt": "Ideas\n- a needle in a haystack\n- branch the conversation and compare\n",
    "src/app.py": "def greet(name: str) -> str:\n    return f'Hello, {name}!'\n",
}


def demo_workspace(owner: Any) -> str:
    """The owner's own folder under the first workspace root, with a few files to look at.

    Never the project folder: the agent's tools read what is under a session's working
    directory, and the project folder holds the server's secret key.
    """
    folder = workspaces.default_cwd(owner)
    if not folder:
        return ""
    for name, text in DEMO_FILES.items():
        path = Path(folder) / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return folder


def demo_load(out: TextIO | None = None) -> list[Session]:
    """Make sure the local account exists (with a generated password, printed to `out`,
    standard output by default) and holds the demo sessions; create what is missing.
    Returns the sessions created."""
    owner, _ = local_account_ensure(out if out is not None else sys.stdout)
    if Session.objects.filter(owner=owner, title=DEMO_TITLE).exists():
        return []
    with transaction.atomic():
        session = services.session_create(owner=owner, title=DEMO_TITLE, cwd=demo_workspace(owner))
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
