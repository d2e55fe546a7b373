"""`session_new --preset`, `send` and `recover`, and the presets they read."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from sessions_app import services, store, workspaces
from sessions_app.errors import DomainError
from sessions_app.models import Session
from sessions_app.presets import preset_get, presets

pytestmark = pytest.mark.django_db(transaction=True)


def test_session_new_with_a_preset_from_the_environment(monkeypatch, capsys, tmp_path, settings):
    monkeypatch.setenv(
        "STRAND_PRESETS",
        json.dumps(
            {"local": {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "qwen"}}
        ),
    )
    settings.STRAND_WORKSPACE_ROOTS = [str(tmp_path)]
    folder = Path(workspaces.default_cwd(services.user_get_or_create_local())) / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    call_command("session_new", "--preset", "local", "--cwd", ".")
    session = Session.objects.get(id=capsys.readouterr().out.strip())
    assert session.preset["name"] == "local" and session.preset["provider"] == "openai"
    assert session.preset["model"] == "qwen" and session.preset["tools"]  # defaults filled in
    assert session.cwd == str(folder)
    with pytest.raises(
        CommandError,
        match="no preset named 'nope' \\(available: coding, delegating, local, offline\\)",
    ):
        call_command("session_new", "--preset", "nope")
    # The command follows the API's rule: no folder outside the owner's own.
    with pytest.raises(CommandError, match="must be your own folder"):
        call_command("session_new", "--cwd", str(tmp_path))
    assert Session.objects.count() == 1


def test_send_prints_the_streamed_reply(make_session):
    session = make_session()
    out = io.StringIO()
    call_command("send", str(session.id), "read notes.txt", stdout=out)
    text = out.getvalue()
    assert text.startswith("On it: read_file(notes.txt).\nHere is what I found:\n")
    assert "- read_file notes.txt: hello world" in text


def test_send_fails_in_one_line_and_writes_nothing(make_session):
    session = make_session(provider="openai", model="m", api_key_env="STRAND_NO_SUCH_KEY")
    before = store.events_after(session.id)
    with pytest.raises(CommandError) as info:
        call_command("send", str(session.id), "hi")
    assert str(info.value) == (
        "preset 'test-1': the environment variable STRAND_NO_SUCH_KEY (its API key) is not set"
    )
    assert store.events_after(session.id) == before


def test_recover_with_nothing_open(make_session):
    make_session()
    out = io.StringIO()
    call_command("recover", stdout=out)
    assert out.getvalue() == "no open turns\n"


def test_presets_from_the_environment():
    env = {
        "STRAND_OPENAI_API_KEY": "sk-x",
        "STRAND_OPENAI_BASE_URL": "https://api.deepseek.com",
        "STRAND_OPENAI_MODEL": "deepseek-chat",
        "STRAND_ANTHROPIC_API_KEY": "sk-ant",
    }
    found = presets(env)
    assert sorted(found) == ["anthropic", "coding", "delegating", "offline", "openai"]
    assert found["openai"] == {
        "provider": "openai",
        "model": "deepseek-chat",
        "base_url": "https://api.deepseek.com",
        "api_key_env": "STRAND_OPENAI_API_KEY",
        "name": "openai",
    }
    assert "sk-" not in json.dumps(found)
    assert preset_get("anthropic", env)["api_key_env"] == "STRAND_ANTHROPIC_API_KEY"
    with pytest.raises(DomainError, match="must not hold secrets"):
        presets({"STRAND_PRESETS": json.dumps({"x": {"provider": "openai", "api_key": "sk"}})})
    with pytest.raises(DomainError, match="not valid JSON"):
        presets({"STRAND_PRESETS": "{"})
    assert list(presets({})) == ["offline", "coding", "delegating"]
    assert os.environ.get("STRAND_PRESETS") is None
