from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from sessions_app import services, store
from sessions_app.models import Session
from tests.sessions_app.test_store import user_msg

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_session_new_prints_the_id_and_defaults_to_the_local_account(capsys):
    call_command("session_new", "--title", "From the CLI")
    sid = capsys.readouterr().out.strip()
    session = Session.objects.get(id=sid)
    assert session.title == "From the CLI"
    assert session.owner.username == "local"


@pytest.mark.django_db
def test_session_new_with_unknown_owner_fails_cleanly():
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("session_new", "--owner", "ghost")
    assert Session.objects.count() == 0


@pytest.mark.django_db
def test_events_prints_one_json_object_per_line(alice, capsys):
    s = services.session_create(owner=alice)
    store.append_events(s.id, 0, [user_msg(str(i)) for i in range(5)])
    call_command("events", str(s.id), "--after", "1", "--limit", "2")
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["seq"] for line in lines] == [2, 3]
    assert set(lines[0]) == {"seq", "type", "time", "data", "entry_id", "turn", "step"}
    assert lines[0]["type"] == "user/message"
    assert lines[0]["data"]["entry"]["message"]["content"] == "1"


def test_cli_errors_are_one_line_with_status_1():
    result = subprocess.run(
        [sys.executable, "manage.py", "events", "not-a-uuid"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == "CommandError: 'not-a-uuid' is not a session id (a UUID)"
    assert result.stdout == ""


@pytest.mark.django_db
def test_demo_loads_once_into_the_local_account(capsys):
    call_command("demo")
    sessions = Session.objects.filter(owner__username="local")
    assert sessions.count() == 2
    imported = [
        s for s in sessions if s.parent_id is None and s.entries.filter(type="compaction").exists()
    ]
    assert imported, "the demo includes an imported Pi session with compactions"
    call_command("demo")
    assert Session.objects.count() == 2
