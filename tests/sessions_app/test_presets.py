"""Which tools a session's turns are offered: Pi's by default, the older names again for a
session made with them, and never a name from a snapshot outside that fixed list."""

from __future__ import annotations

import json

import pytest

from sessions_app import presets
from sessions_app.presets import OLDER_TOOL_NAMES, PI_TOOL_NAMES, preset_for_turn


def test_a_new_session_is_offered_pis_tools() -> None:
    assert presets.preset_resolve("offline")["tools"] == PI_TOOL_NAMES
    assert preset_for_turn({"name": "offline", "tools": PI_TOOL_NAMES})["tools"] == PI_TOOL_NAMES
    assert preset_for_turn(None)["tools"] == PI_TOOL_NAMES


def test_a_session_made_with_the_older_names_keeps_them() -> None:
    snapshot = {"name": "offline", "tools": ["read_file", "list_files", "grep", "write_file"]}
    assert preset_for_turn(snapshot)["tools"] == OLDER_TOOL_NAMES
    # Only names of the fixed older list are taken from a snapshot, in their own order.
    hostile = {"name": "offline", "tools": ["write_file", "run_anything", "bash", "read_file"]}
    assert preset_for_turn(hostile)["tools"] == ["read_file", "write_file"]
    # `grep` alone belongs to both vocabularies: it says nothing.
    assert preset_for_turn({"name": "offline", "tools": ["grep"]})["tools"] == PI_TOOL_NAMES


def test_a_preset_that_names_its_tools_is_what_every_session_on_it_gets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "STRAND_PRESETS",
        json.dumps({"own": {"provider": "offline", "tools": ["read", "ls"]}, "bare": {}}),
    )
    older = {"tools": ["read_file", "write_file"]}
    assert preset_for_turn({"name": "own", **older})["tools"] == ["read", "ls"]
    assert preset_for_turn({"name": "bare", **older})["tools"] == ["read_file", "write_file"]
    assert preset_for_turn({"name": "bare"})["tools"] == PI_TOOL_NAMES
