"""Pi's tools as the pages show them: a command like a terminal (prompt, output, exit code,
time, bytes dropped), an edit as its diff, and each command's sandbox limits in the trace;
all of it escaped."""

from __future__ import annotations

import html as html_lib
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from runtime import sandbox
from sessions_app import services, workspaces
from sessions_app.agent import agent_wait
from sessions_app.models import Event, Session
from tests.web.conftest import client_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fast_offline_model", "agent_shutdown"),
]


@pytest.fixture
def session(tmp_path: Path, settings: Any, alice: User) -> Session:
    settings.STRAND_WORKSPACE_ROOTS = [str(tmp_path)]
    folder = Path(workspaces.default_cwd(alice))
    (folder / "notes.txt").write_text("one\n<b>two</b>\nthree\n")
    return services.session_create(owner=alice, title="Tools", cwd=str(folder))


def allowed_turn(client: Client, session: Session, text: str) -> None:
    """Send `text`, allow the call it asks for, wait for the turn to end."""
    before = Event.objects.filter(session=session, type="approval/asked").count()
    client.post(reverse("session-send", args=[session.id]), {"text": text, "mode": "message"})
    deadline = time.monotonic() + 20
    while Event.objects.filter(session=session, type="approval/asked").count() == before:
        assert time.monotonic() < deadline, "no approval was asked"
        time.sleep(0.05)
    asked = Event.objects.filter(session=session, type="approval/asked").order_by("-seq")[0]
    client.post(
        reverse("session-approval", args=[session.id, asked.data["approval_id"]]),
        {"outcome": "allowed"},
    )
    agent_wait(session.id, timeout=30)


def test_an_edit_shows_as_its_diff_escaped(session: Session) -> None:
    client = client_for(session.owner)
    allowed_turn(client, session, "edit notes.txt: <b>two</b> => <i>2</i>")
    page = client.get(reverse("session", args=[session.id])).content.decode()
    assert '<pre class="output diff">' in page
    assert '<span class="diff-del">-2 &lt;b&gt;two&lt;/b&gt;</span>' in page
    assert '<span class="diff-add">+2 &lt;i&gt;2&lt;/i&gt;</span>' in page
    assert '<span class="diff-ctx"> 1 one</span>' in page
    assert "<i>2</i>" not in page


@pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here")
def test_a_command_shows_like_a_terminal_and_the_trace_its_limits(session: Session) -> None:
    client = client_for(session.owner)
    allowed_turn(client, session, "run echo '<script>x</script>'; exit 3")
    page = client.get(reverse("session", args=[session.id])).content.decode()
    command = html_lib.escape("echo '<script>x</script>'; exit 3", quote=True)
    assert f'<span class="prompt">$ </span><span class="cmd">{command}</span>' in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "<script>x</script>" not in page
    assert '<span class="exit failed">exit 3</span>' in page
    assert " s</p>" in page  # the wall time
    call = Event.objects.get(session=session, type="tool/call")
    span = client.get(
        reverse("session", args=[session.id])
        + f"?view=trace&span=tool-{call.data['call_id']}&turn=1&fragment=span",
        headers={"HX-Request": "true", "HX-Target": "span-detail"},
    ).content.decode()
    for limit in ("wall_s", "cpu_s", "memory_bytes", "processes", "output_max_bytes"):
        assert f"<dt>limit {limit}</dt>" in span
    assert "<dt>exit_code</dt><dd>3</dd>" in span


@pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot run here")
def test_a_long_output_says_how_many_bytes_were_dropped(session: Session) -> None:
    client = client_for(session.owner)
    allowed_turn(client, session, "run head -c 100000 /dev/zero | tr '\\0' x")
    page = client.get(reverse("session", args=[session.id])).content.decode()
    dropped = 100_000 - sandbox.SandboxLimits().output_head_bytes * 2
    assert f'<span class="dropped">{dropped:,} bytes dropped</span>' in page
