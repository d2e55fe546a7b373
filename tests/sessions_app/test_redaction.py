"""The redaction rules on records of each shape (`sessions_app.redaction`): what is replaced
by a marker, and what a pattern never rewrites (ids, names, images)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sessions_app import redaction
from sessions_app.redaction import Redaction, compile_patterns

ALL = Redaction(
    tool_outputs=True,
    file_contents=True,
    system_prompt=True,
    patterns=compile_patterns(["secret-[0-9]+"]),
)


def message(role: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "secret-1",
        "parentId": None,
        "message": {"role": role, **fields},
    }


@pytest.mark.parametrize(
    ("entry", "path", "shown"),
    [
        (
            message("toolResult", toolName="grep", content=[{"type": "text", "text": "x"}]),
            ("message", "content", 0, "text"),
            redaction.TOOL_OUTPUT,
        ),
        (
            message("toolResult", toolName="read", content=[{"type": "text", "text": "x"}]),
            ("message", "content", 0, "text"),
            redaction.FILE_CONTENTS,
        ),
        (
            message("bashExecution", command="ls", output="a b"),
            ("message", "output"),
            redaction.TOOL_OUTPUT,
        ),
        (
            message(
                "assistant",
                content=[
                    {
                        "type": "toolCall",
                        "id": "c",
                        "name": "write",
                        "arguments": {"path": "p", "content": "x"},
                    }
                ],
            ),
            ("message", "content", 0, "arguments", "content"),
            redaction.FILE_CONTENTS,
        ),
        (
            message("system", content="be nice", sections={"a": "x", "b": None}),
            ("message", "sections", "a"),
            redaction.SYSTEM_PROMPT,
        ),
        (
            message("user", content="my secret-42 here"),
            ("message", "content"),
            "my [redacted] here",
        ),
    ],
)
def test_each_rule_shows_a_marker(entry: dict[str, Any], path: tuple[Any, ...], shown: str) -> None:
    found: Any = ALL.entry(entry)
    for step in path:
        found = found[step]
    assert found == shown


def test_patterns_leave_ids_names_and_images_alone() -> None:
    image = {"type": "image", "mimeType": "image/png", "data": "secret-9"}
    entry = message("user", content=[{"type": "text", "text": "secret-9"}, image])
    out = ALL.entry(entry)
    assert out["id"] == "secret-1"
    assert out["message"]["content"] == [{"type": "text", "text": "[redacted]"}, image]
    assert out["message"]["role"] == "user"


def test_events_redact_raw_tool_arguments_headers_and_presets() -> None:
    call = ALL.event(
        "tool/call",
        {
            "call_id": "c",
            "tool": "edit",
            "arguments": json.dumps({"path": "p", "oldText": "a", "newText": "b"}),
        },
    )
    assert json.loads(call["arguments"]) == {
        "path": "p",
        "oldText": redaction.FILE_CONTENTS,
        "newText": redaction.FILE_CONTENTS,
    }
    broken = ALL.event("tool/call", {"call_id": "c", "tool": "write", "arguments": "{not json"})
    assert "not json" not in broken["arguments"]
    header = ALL.event("request/header", {"reason": "initial", "system_prompt": "be nice"})
    assert header["system_prompt"] == redaction.SYSTEM_PROMPT
    created = ALL.event("session/created", {"preset": {"system_prompt": "be nice", "model": "m"}})
    assert created["preset"] == {"system_prompt": redaction.SYSTEM_PROMPT, "model": "m"}


def test_without_redacting_records_pass_unchanged() -> None:
    entry = message("toolResult", toolName="grep", content=[{"type": "text", "text": "x"}])
    assert redaction.entry_data(entry) is entry
    with redaction.redacting(ALL):
        assert redaction.entry_data(entry) != entry
    with redaction.redacting(Redaction()):  # nothing to redact: nothing is copied
        assert redaction.entry_data(entry) is entry
    assert redaction.entry_data(entry) is entry
