"""Loop logic against the in-memory log: fast, no database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from projections.records import EventRecord
from projections.request import project_request
from runtime import Runtime, TurnRunning
from runtime.ports import NewFact
from runtime.providers.base import StopUpdate, StreamEvent, TextDelta, ToolCallDelta, UsageUpdate
from runtime.recovery import closers
from tests.runtime.conftest import OFFLINE
from tests.runtime.fakes import FakeLog

Script = list[StreamEvent] | Callable[[Mapping[str, Any]], list[StreamEvent]]


class ScriptedProvider:
    """Answers each request with the next script; a callable script sees the payload."""

    def __init__(self, *scripts: Script, before: Callable[[int], Any] | None = None) -> None:
        self.scripts = list(scripts)
        self.payloads: list[Mapping[str, Any]] = []
        self.before = before

    async def stream(self, payload: Mapping[str, Any]) -> AsyncIterator[StreamEvent]:
        self.payloads.append(payload)
        if self.before is not None:
            await self.before(len(self.payloads))
        script = self.scripts.pop(0) if self.scripts else text("(no more script)")
        for event in script(payload) if callable(script) else script:
            await asyncio.sleep(0)
            yield event


def text(words: str) -> list[StreamEvent]:
    return [
        UsageUpdate(input=10, output=0),
        TextDelta("t", words),
        UsageUpdate(output=3),
        StopUpdate("stop"),
    ]


def call(call_id: str, name: str, raw: str, index: int = 0) -> list[StreamEvent]:
    return [ToolCallDelta(f"k{index}", call_id, name, raw)]


def calls(*items: list[StreamEvent]) -> list[StreamEvent]:
    return [e for item in items for e in item] + [StopUpdate("toolUse")]


def runtime(log: FakeLog, provider: ScriptedProvider) -> Runtime:
    return Runtime(log, provider_factory=lambda config: provider, busy_wait_s=0.2)


def requests_match(log: FakeLog, sid: str) -> int:
    events, entries = log.events(sid), log.entries(sid)
    sent = [e for e in events if e.type == "request/sent"]
    for event in sent:
        assert project_request(events, entries, event.seq).matches
    return len(sent)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def ws(tmp_path: Path) -> str:
    (tmp_path / "notes.txt").write_text("hello\n")
    return str(tmp_path)


def test_unknown_tools_and_bad_arguments_become_error_results(ws):
    log = FakeLog()
    sid = log.create(OFFLINE, ws)
    provider = ScriptedProvider(
        calls(
            call("c1", "launch_rockets", "{}", 0),
            call("c2", "read_file", '{"path": 5}', 1),
            call("c3", "read_file", '{"path": "notes.txt", "mode": "x"}', 2),
            call("c4", "read_file", '{"path": "notes.txt"}', 3),
        ),
        text("noted"),
    )

    async def go() -> None:
        rt = runtime(log, provider)
        await rt.send(sid, "go")
        assert [e.reason for e in await rt.wait(sid) or []] == ["completed"]

    run(go())
    results = [e for e in log.events(sid) if e.type == "tool/result"]
    assert [r.data.get("error_code") for r in results] == [
        "UNKNOWN_TOOL",
        "INVALID_ARGUMENTS",
        "INVALID_ARGUMENTS",
        None,
    ]
    arguments = [e.data["arguments"] for e in log.events(sid) if e.type == "tool/call"]
    assert arguments[1] == '{"path": 5}'
    assert requests_match(log, sid) == 2


def test_writes_by_others_during_a_turn_are_folded_in_and_the_chain_holds(ws):
    log = FakeLog()
    sid = log.create(OFFLINE, ws)

    async def interfere(n: int) -> None:
        head = await log.head(sid)
        # Someone renames the session and moves the leaf while the model streams.
        await log.append(sid, head.last_seq, [NewFact("session/renamed", {"title": f"t{n}"})])
        first = log.entries(sid)[0].id
        head = await log.head(sid)
        await log.append(
            sid, head.last_seq, [NewFact("leaf/moved", {"to": first, "reason": "navigate"})]
        )

    provider = ScriptedProvider(
        calls(call("c1", "read_file", '{"path": "notes.txt"}')), text("ok"), before=interfere
    )

    async def go() -> None:
        rt = runtime(log, provider)
        await rt.send(sid, "read it")
        await rt.wait(sid)

    run(go())
    entries = log.entries(sid)
    roles = [e.data["message"]["role"] for e in entries]
    assert roles == ["user", "assistant", "toolResult", "assistant"]
    assert all(b.parent_id == a.id for a, b in zip(entries, entries[1:], strict=False))
    assert [e.type for e in log.events(sid)].count("session/renamed") == 2
    assert requests_match(log, sid) == 2


def test_steering_that_arrives_as_the_turn_ends_gets_one_more_step(ws):
    log = FakeLog()
    sid = log.create(OFFLINE, ws)

    def answer_and_queue(payload: Mapping[str, Any]) -> list[StreamEvent]:
        last = len(log.events(sid)) - 1
        queued = NewFact(
            "inbox/queued", {"inbox_id": "in_1", "target": "next_step", "text": "wait!"}, turn=1
        )
        asyncio.get_event_loop().create_task(log.append(sid, last, [queued]))
        return text("first answer")

    provider = ScriptedProvider(answer_and_queue, text("second answer"))

    async def go() -> None:
        rt = runtime(log, provider)
        await rt.send(sid, "hi")
        assert [e.reason for e in await rt.wait(sid) or []] == ["completed"]

    run(go())
    types = [e.type for e in log.events(sid)]
    assert types.count("step/start") == 2
    step2 = types.index("step/start", types.index("step/end"))
    assert types[step2 : step2 + 3] == ["step/start", "inbox/claimed", "user/message"]
    assert requests_match(log, sid) == 2


def test_a_turn_stops_at_the_step_limit_and_at_max_tokens(ws):
    log = FakeLog()
    sid = log.create({**OFFLINE, "max_steps": 2}, ws)
    loop_call = calls(call("c", "read_file", '{"path": "notes.txt"}'))
    provider = ScriptedProvider(
        loop_call, [*loop_call[:-1]], [TextDelta("t", "cut"), StopUpdate("length")]
    )

    async def go() -> list[Any]:
        rt = runtime(log, provider)
        await rt.send(sid, "loop")
        first = await rt.wait(sid) or []
        await rt.send(sid, "long")
        return [*first, *(await rt.wait(sid) or [])]

    ended = run(go())
    assert [(e.reason, e.error) for e in ended] == [
        ("error", "stopped after 2 steps"),
        ("max_tokens", None),
    ]
    replies = [e.data["entry"]["message"] for e in log.events(sid) if e.type == "assistant/message"]
    assert replies[-1]["stopReason"] == "length"


def test_a_turn_waits_for_an_approval_at_most_its_timeout(ws):
    log = FakeLog()
    sid = log.create(OFFLINE, ws)
    provider = ScriptedProvider(
        calls(
            call("c1", "write_file", '{"path": "a.txt", "content": "x"}', 0),
            call("c2", "write_file", '{"path": "b.txt", "content": "y"}', 1),
        ),
    )

    async def go() -> None:
        rt = Runtime(log, provider_factory=lambda config: provider, approval_timeout_s=0.05)
        await rt.send(sid, "go")  # nobody decides
        assert [e.reason for e in await rt.wait(sid, 10) or []] == ["approval_timeout"]

    run(go())
    events = log.events(sid)
    asked = [e for e in events if e.type == "approval/asked"]
    assert [e.data["call_id"] for e in asked] == ["c1"]  # the second call is never asked
    decided = [e.data for e in events if e.type == "approval/decided"]
    assert decided == [
        {"approval_id": asked[0].data["approval_id"], "outcome": "cancelled", "by": "timeout"}
    ]
    results = [e.data.get("error_code") for e in events if e.type == "tool/result"]
    assert results == ["APPROVAL_TIMEOUT", "ABORTED_BEFORE_DISPATCH"]
    step_end = [e for e in events if e.type == "step/end"][-1]
    assert step_end.data["reason"] == "approval_timeout"
    assert events[-1].type == "turn/end" and events[-1].data["reason"] == "approval_timeout"
    assert len(provider.payloads) == 1  # the model is not asked again
    assert not (Path(ws) / "a.txt").exists() and not (Path(ws) / "b.txt").exists()


def test_the_turn_lock_refuses_a_second_sender_and_recovery(ws):
    log = FakeLog()
    sid = log.create(OFFLINE, ws)

    async def go() -> None:
        lock = await log.try_lock(sid)  # another process runs this session
        rt = runtime(log, ScriptedProvider())
        head = await log.head(sid)
        await log.append(sid, head.last_seq, [NewFact("turn/start", {"turn": 1}, turn=1)])
        with pytest.raises(TurnRunning):
            await rt.send(sid, "hi")
        queued = await rt.send(sid, "hi", mode="steer")
        assert queued.inbox_id and queued.turn is None
        assert (await rt.recover(sid)).status == "running"
        assert lock is not None
        await lock.release()  # the process died
        recovered = await rt.recover(sid)
        assert (recovered.status, recovered.turn) == ("closed", 1)
        assert (await rt.recover(sid)).status == "nothing"

    run(go())
    # The folder's files, which no snapshot held, are recorded as the dead turn is closed.
    events = log.events(sid)
    assert [e.type for e in events][-3:] == ["inbox/queued", "workspace/snapshot", "turn/end"]
    assert events[-2].data["reason"] == "recovery"


def event(
    seq: int, kind: str, data: dict[str, Any], entry_id: str | None = None, step: int | None = None
) -> EventRecord:
    from datetime import UTC, datetime

    return EventRecord(seq, kind, 1, datetime.now(UTC), data, entry_id, 1, step)


def test_recovery_closers_pair_every_unanswered_call():
    def assistant(*ids: str) -> dict[str, Any]:
        content = [{"type": "toolCall", "id": i, "name": "read_file", "arguments": {}} for i in ids]
        return {"entry": {"type": "message", "message": {"role": "assistant", "content": content}}}

    def result(call_id: str) -> dict[str, Any]:
        return {
            "entry": {"type": "message", "message": {"role": "toolResult", "toolCallId": call_id}}
        }

    turn = [
        event(10, "turn/start", {"turn": 1}),
        event(11, "user/message", {}, "u1"),
        event(12, "step/start", {"turn": 1, "step": 1}, step=1),
        event(13, "assistant/message", assistant("c1", "c2", "c3"), "a1", step=1),
        event(14, "tool/call", {"call_id": "c1"}, step=1),
        event(15, "tool/call", {"call_id": "c2"}, step=1),
        event(16, "tool/result", result("c1"), "r1", step=1),
    ]
    closing = closers(1, turn)
    assert [(f.type, f.data.get("error_code")) for f in closing.facts] == [
        ("tool/result", "TOOL_OUTCOME_UNKNOWN"),
        ("tool/result", "TOOL_NOT_STARTED"),
        ("step/end", None),
        ("turn/end", None),
    ]
    assert closing.facts[0].data["entry"]["parentId"] == "r1"
    assert "parentId" not in closing.facts[1].data["entry"]
    assert [f.data["entry"]["message"]["toolCallId"] for f in closing.facts[:2]] == ["c2", "c3"]
    assert closing.facts[2].data == {"turn": 1, "step": 1, "reason": "interrupted"}
    # A turn that died between steps needs only its end.
    between = [
        *turn[:2],
        event(12, "step/start", {"turn": 1, "step": 1}, step=1),
        event(13, "step/end", {"turn": 1, "step": 1}, step=1),
    ]
    assert [f.type for f in closers(1, between).facts] == ["turn/end"]


def test_a_turn_that_fails_unexpectedly_still_answers_every_call(ws):
    log = FakeLog()
    sid = log.create(OFFLINE, ws)
    original = log.append
    failed: list[bool] = []

    async def flaky(session_id: str, expected_seq: int, facts: Any) -> Any:
        if facts[0].type == "tool/result" and not failed:
            failed.append(True)
            raise RuntimeError("the store went away")
        return await original(session_id, expected_seq, facts)

    log.append = flaky  # type: ignore[method-assign]
    provider = ScriptedProvider(
        calls(
            call("c1", "read_file", '{"path": "notes.txt"}', 0), call("c2", "list_files", "{}", 1)
        )
    )

    async def go() -> list[Any]:
        rt = runtime(log, provider)
        await rt.send(sid, "go")
        return await rt.wait(sid) or []

    [ended] = run(go())
    assert (ended.reason, ended.error) == ("error", "RuntimeError: the store went away")
    tail = log.events(sid)[-4:]
    assert [e.type for e in tail] == ["tool/result", "tool/result", "step/end", "turn/end"]
    assert [e.data["error_code"] for e in tail[:2]] == ["TOOL_OUTCOME_UNKNOWN"] * 2
    assert tail[2].data["reason"] == "error" and tail[3].data["reason"] == "error"


def test_the_runtime_imports_nothing_of_django_or_sessions_app():
    import subprocess
    import sys

    code = (
        "import sys, runtime, runtime.service, runtime.offline, runtime.providers.openai_chat, "
        "runtime.providers.anthropic_messages\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'sessions_app')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "[]"
