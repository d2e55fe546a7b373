from __future__ import annotations

import pytest

from sessions_app import events as vocab

SAMPLES = {
    "session/created": {"title": "t", "cwd": "/tmp", "preset": {}, "source": "new"},
    "session/renamed": {"title": "t"},
    "user/message": {"entry": {"type": "message", "message": {"role": "user", "content": "hi"}}},
    "assistant/message": {
        "entry": {"type": "message", "message": {"role": "assistant", "content": []}},
        "timing": {"ttft_ms": 12, "duration_ms": 40},
    },
    "tool/result": {
        "entry": {"type": "message", "message": {"role": "toolResult", "toolCallId": "c1"}},
        "error_code": None,
    },
    "entry/message": {"entry": {"type": "message", "message": {"role": "bashExecution"}}},
    "entry/model_change": {"entry": {"type": "model_change", "provider": "p", "modelId": "m"}},
    "entry/thinking_level_change": {
        "entry": {"type": "thinking_level_change", "thinkingLevel": "high"}
    },
    "entry/compaction": {
        "entry": {"type": "compaction", "summary": "s", "firstKeptEntryId": "a", "tokensBefore": 9}
    },
    "entry/branch_summary": {"entry": {"type": "branch_summary", "fromId": "a", "summary": "s"}},
    "entry/custom": {"entry": {"type": "custom", "customType": "x"}},
    "entry/custom_message": {
        "entry": {"type": "custom_message", "customType": "x", "content": "c", "display": False}
    },
    "entry/label": {"entry": {"type": "label", "targetId": "a", "label": "l"}},
    "entry/session_info": {"entry": {"type": "session_info", "name": "n"}},
    "entry/usage": {
        "entry": {"type": "usage", "kind": "a-kind-pi-never-defined", "usage": {"input": 1}}
    },
    "entry/context_edit": {"entry": {"type": "context_edit", "targetId": "a", "replacement": None}},
    "leaf/moved": {"from": None, "to": "a", "reason": "navigate"},
    "turn/start": {"turn": 0},
    "turn/end": {"turn": 0, "reason": "interrupted"},
    "turn/observed": {"turn": 0, "reason": "error", "error": "the agent failed"},
    "step/start": {"turn": 0, "step": 0},
    "step/end": {"turn": 0, "step": 0},
    "request/header": {"reason": "initial", "provider": "offline", "model": "m"},
    "request/sent": {
        "header_seq": 3,
        "leaf_entry_id": "a",
        "payload_sha256": "0" * 64,
        "token_estimate": 5,
    },
    "tool/call": {"call_id": "c1", "tool": "read_file", "arguments": "{}"},
    "approval/asked": {"approval_id": "p1", "tool": "write_file", "call_id": "c1"},
    "approval/decided": {"approval_id": "p1", "outcome": "rejected"},
    "inbox/queued": {"inbox_id": "i1", "target": "next_step", "text": "steer"},
    "inbox/claimed": {"inbox_id": "i1"},
    "workspace/snapshot": {
        "at": "e1",
        "reason": "tool",
        "files": {"notes.txt": {"sha256": "a" * 64, "size": 3, "mode": 0o644}},
        "deleted": ["old.txt"],
    },
    "subagent/started": {"call_id": "c1", "child_session": "s2", "prompt": "p", "tools": ["read"]},
    "subagent/descriptor": {
        "parent_session": "s1",
        "parent_call_id": "c1",
        "prompt": "p",
        "delegation_depth": 1,
    },
    "job/started": {
        "job_id": "bash-1",
        "command": "sleep 1",
        "call_id": "c1",
        "turn": 1,
        "started": "2026-12-02T06:00:00+00:00",
        "wall_s": 600.0,
        "output_max_bytes": 32768,
    },
    "job/ended": {"job_id": "bash-1", "reason": "exited", "exit_code": 0, "output": "done\n"},
}


def test_every_event_type_has_a_sample():
    assert set(SAMPLES) == set(vocab.EVENT_TYPES)


@pytest.mark.parametrize("event_type", sorted(SAMPLES))
def test_every_event_type_validates_its_sample(event_type):
    model = vocab.validate_event(event_type, SAMPLES[event_type])
    assert model is not None and model.type == event_type


@pytest.mark.parametrize(
    "event_type, data, message",
    [
        ("turn/end", {"turn": 0, "reason": "bored"}, "reason"),
        ("turn/start", {"turn": -1}, "turn"),
        (
            "request/sent",
            {"header_seq": 1, "leaf_entry_id": None, "payload_sha256": "xyz", "token_estimate": 1},
            "payload_sha256",
        ),
        ("entry/label", {"entry": {"type": "custom"}}, "entry type must be 'label'"),
        ("tool/result", {"entry": {"type": "message", "message": {"role": "user"}}}, "role"),
        (
            "user/message",
            {"entry": {"type": "message", "id": 5, "message": {"role": "user"}}},
            "id must be a string",
        ),
        ("user/message", [], "JSON object"),
        (
            "entry/message",
            {"entry": {"type": "message", "message": {"role": "system", "sections": []}}},
            "sections must map names",
        ),
        (
            "entry/message",
            {"entry": {"type": "message", "message": {"role": "system", "toolsAdded": [{}]}}},
            "toolsAdded must be a list of tools with names",
        ),
        ("entry/usage", {"entry": {"type": "usage", "usage": {}}}, "string kind"),
        (
            "entry/context_edit",
            {"entry": {"type": "context_edit", "targetId": "a"}},
            "needs a replacement",
        ),
        (
            "entry/context_edit",
            {"entry": {"type": "context_edit", "targetId": "a", "replacement": {"content": 3}}},
            "replacement must be null or",
        ),
        (
            "entry/compaction",
            {"entry": {"type": "compaction", "systemMessage": {"role": "user"}}},
            "systemMessage must be a message",
        ),
    ],
)
def test_invalid_data_is_a_clear_error(event_type, data, message):
    with pytest.raises(vocab.EventError, match=message):
        vocab.validate_event(event_type, data)


def test_unknown_type_is_an_error_unless_ignorable():
    with pytest.raises(vocab.UnknownEventType, match="unknown event type 'x/y'"):
        vocab.load_event("x/y", 1, {})
    assert vocab.load_event("x/y", 1, {}, ignorable=True) is None


def test_newer_schema_than_the_code_is_refused():
    with pytest.raises(vocab.EventError, match="newer than this code"):
        vocab.load_event("turn/start", 9, {"turn": 0})


def test_upcasters_run_in_a_chain_on_read(monkeypatch):
    monkeypatch.setattr(vocab.TurnStart, "version", 3)
    monkeypatch.setitem(vocab.UPCASTERS, ("turn/start", 1), lambda d: {**d, "n": d["turn"]})
    monkeypatch.setitem(
        vocab.UPCASTERS, ("turn/start", 2), lambda d: {**d, "trigger": "message", "v3": True}
    )
    assert vocab.load_event("turn/start", 1, {"turn": 4}) == {
        "turn": 4,
        "n": 4,
        "trigger": "message",
        "v3": True,
    }
    assert vocab.load_event("turn/start", 3, {"turn": 4}) == {"turn": 4}


def test_missing_upcaster_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(vocab.TurnStart, "version", 2)
    with pytest.raises(vocab.EventError, match="no upcaster from schema version 1"):
        vocab.load_event("turn/start", 1, {"turn": 0})


@pytest.mark.parametrize(
    "entry, expected",
    [
        ({"type": "message", "message": {"role": "user"}}, "user/message"),
        ({"type": "message", "message": {"role": "assistant"}}, "assistant/message"),
        ({"type": "message", "message": {"role": "toolResult"}}, "tool/result"),
        ({"type": "message", "message": {"role": "bashExecution"}}, "entry/message"),
        ({"type": "compaction"}, "entry/compaction"),
        ({"type": "message", "message": {"role": "system"}}, "entry/message"),
        ({"type": "usage"}, "entry/usage"),
        ({"type": "context_edit"}, "entry/context_edit"),
    ],
)
def test_event_type_for_each_pi_entry(entry, expected):
    assert vocab.event_type_for_entry(entry) == expected


def test_unknown_pi_entry_type_has_no_event():
    with pytest.raises(vocab.UnknownEventType):
        vocab.event_type_for_entry({"type": "mystery"})


@pytest.mark.parametrize("key", ["id", "parentId", "timestamp"])
def test_entry_keys_longer_than_the_store_keeps_are_refused(key):
    entry = {"type": "message", "message": {"role": "user", "content": "x"}, key: "x" * 65}
    with pytest.raises(vocab.EventError, match="longer than 64"):
        vocab.validate_event("user/message", {"entry": entry})


def test_request_sent_version_1_reads_as_a_first_attempt():
    data = {"header_seq": 3, "leaf_entry_id": "a1", "payload_sha256": "0" * 64}
    assert vocab.load_event("request/sent", 1, dict(data)) == {
        **data,
        "attempt": 1,
        "previous_fault": None,
    }
    assert vocab.load_event("request/sent", 2, {**data, "attempt": 3}) == {**data, "attempt": 3}


def test_a_job_ends_for_one_of_its_reasons_only():
    for reason in ("exited", "killed", "timeout", "output", "lost"):
        vocab.validate_event("job/ended", {"job_id": "bash-1", "reason": reason})
    with pytest.raises(vocab.EventError, match="reason"):
        vocab.validate_event("job/ended", {"job_id": "bash-1", "reason": "forgotten"})
    with pytest.raises(vocab.EventError, match="job_id"):
        vocab.validate_event("job/ended", {"job_id": "x" * 41, "reason": "lost"})
