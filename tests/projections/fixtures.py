"""A builder for hand-written event logs: the events a session writes, and its entries.

Each method appends one event as the runtime would (seq gapless from 0, times moving
forward, turn and step columns filled while a turn or step is open). Entry events carry the
whole Pi entry under data["entry"] and also add the matching EntryRecord, as the store's
inline projection does; a new entry is a child of the current leaf and becomes the leaf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from projections.payload import build_payload, payload_sha256
from projections.records import EntryRecord, EventRecord

START = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)

READ_TOOL = {
    "name": "read",
    "description": "Read a file.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}
SYSTEM_PROMPT = "You are a careful coding agent."


def usage(input_tokens: int, output_tokens: int, cost: float) -> dict[str, Any]:
    return {
        "input": input_tokens,
        "output": output_tokens,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": input_tokens + output_tokens,
        "cost": {"input": 0.0, "output": 0.0, "cacheRead": 0, "cacheWrite": 0, "total": cost},
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_call(call_id: str, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": dict(arguments)}


class SessionLog:
    def __init__(self) -> None:
        self.events: list[EventRecord] = []
        self.entries: list[EntryRecord] = []
        self.leaf: str | None = None
        self.now = START
        self.turn: int | None = None
        self.step: int | None = None
        self.header_seq: int | None = None
        self._turns = 0
        self._steps = 0
        self._next_id = 0

    # --- plumbing ------------------------------------------------------------------------

    def at(self, ms: int) -> datetime:
        return START + timedelta(milliseconds=ms)

    def wait(self, ms: int) -> None:
        self.now += timedelta(milliseconds=ms)

    def event(
        self,
        type_: str,
        data: Mapping[str, Any],
        *,
        entry_id: str | None = None,
        after_ms: int = 10,
    ) -> EventRecord:
        self.wait(after_ms)
        record = EventRecord(
            seq=len(self.events),
            type=type_,
            version=1,
            time=self.now,
            data=dict(data),
            entry_id=entry_id,
            turn=self.turn,
            step=self.step,
        )
        self.events.append(record)
        return record

    def new_id(self) -> str:
        self._next_id += 1
        return f"e{self._next_id:07x}"

    def iso(self) -> str:
        return self.now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.now.microsecond // 1000:03d}Z"

    def epoch_ms(self) -> int:
        return int(self.now.timestamp() * 1000)

    def add_entry(
        self,
        type_: str,
        fields: Mapping[str, Any],
        *,
        event_type: str | None = None,
        extra: Mapping[str, Any] | None = None,
        entry_id: str | None = None,
        parent_id: str | None | bool = True,
        after_ms: int = 10,
    ) -> str:
        """Append an entry event; `parent_id=True` means "the current leaf"."""
        self.wait(after_ms)
        new_id = entry_id or self.new_id()
        parent = self.leaf if parent_id is True else parent_id
        entry = {
            "type": type_,
            "id": new_id,
            "parentId": parent,
            "timestamp": self.iso(),
            **fields,
        }
        data = {"entry": entry, **(extra or {})}
        event = self.event(event_type or f"entry/{type_}", data, entry_id=new_id, after_ms=0)
        self.entries.append(
            EntryRecord(
                id=new_id,
                parent_id=parent if isinstance(parent, str) else None,
                type=type_,
                timestamp=entry["timestamp"],
                data=entry,
                seq=event.seq,
            )
        )
        self.leaf = new_id
        return new_id

    # --- session and requests ------------------------------------------------------------

    def created(self) -> EventRecord:
        return self.event("session/created", {"title": "demo", "cwd": "/work", "source": "new"})

    def header(
        self,
        *,
        provider: str = "openai",
        model: str = "gpt-test",
        params: Mapping[str, Any] | None = None,
        system_prompt: str = SYSTEM_PROMPT,
        tools: Sequence[Mapping[str, Any]] = (READ_TOOL,),
        reason: str = "initial",
        thinking_level: str = "off",
    ) -> int:
        event = self.event(
            "request/header",
            {
                "reason": reason,
                "provider": provider,
                "model": model,
                "params": dict(params if params is not None else {"temperature": 0.2}),
                "system_prompt": system_prompt,
                "tools": [dict(tool) for tool in tools],
                "thinking_level": thinking_level,
            },
        )
        self.header_seq = event.seq
        return event.seq

    def request(
        self,
        expected_messages: Sequence[Mapping[str, Any]],
        *,
        token_estimate: int = 0,
        sha256: str | None = None,
    ) -> int:
        """A request/sent whose hash is that of `expected_messages` (neutral provider
        messages, written out by the test) under the current header."""
        assert self.header_seq is not None, "write a header first"
        header = self.events[self.header_seq].data
        payload = build_payload(
            provider=header["provider"],
            model=header["model"],
            params=header["params"],
            system_prompt=header["system_prompt"],
            tools=header["tools"],
            messages=expected_messages,
        )
        event = self.event(
            "request/sent",
            {
                "header_seq": self.header_seq,
                "leaf_entry_id": self.leaf,
                "payload_sha256": sha256 or payload_sha256(payload),
                "token_estimate": token_estimate,
            },
        )
        return event.seq

    # --- turns and steps -----------------------------------------------------------------

    def turn_start(self, trigger: str = "message") -> int:
        self._turns += 1
        self._steps = 0
        self.turn = self._turns
        self.event("turn/start", {"turn": self.turn, "trigger": trigger})
        return self.turn

    def turn_end(self, reason: str = "completed", error: str | None = None) -> None:
        assert self.turn is not None
        data: dict[str, Any] = {"turn": self.turn, "reason": reason}
        if error is not None:
            data["error"] = error
        self.event("turn/end", data)
        self.turn = None

    def step_start(self) -> int:
        assert self.turn is not None
        self._steps += 1
        self.step = self._steps
        self.event("step/start", {"turn": self.turn, "step": self.step})
        return self.step

    def step_end(self, reason: str = "completed") -> None:
        assert self.turn is not None and self.step is not None
        self.event("step/end", {"turn": self.turn, "step": self.step, "reason": reason})
        self.step = None

    # --- messages ------------------------------------------------------------------------

    def user(self, content: str | Sequence[Mapping[str, Any]], **kw: Any) -> str:
        message = {
            "role": "user",
            "content": content if isinstance(content, str) else [dict(b) for b in content],
            "timestamp": self.epoch_ms(),
        }
        return self.add_entry("message", {"message": message}, event_type="user/message", **kw)

    def assistant(
        self,
        content: Sequence[Mapping[str, Any]],
        *,
        stop_reason: str = "stop",
        usage_: Mapping[str, Any] | None = None,
        ttft_ms: int | None = 120,
        duration_ms: int | None = 400,
        error_message: str | None = None,
        provider: str = "openai",
        model: str = "gpt-test",
        after_ms: int = 400,
        **kw: Any,
    ) -> str:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": [dict(b) for b in content],
            "api": "openai-completions",
            "provider": provider,
            "model": model,
            "usage": dict(usage_ if usage_ is not None else usage(100, 20, 0.001)),
            "stopReason": stop_reason,
            "timestamp": self.epoch_ms(),
        }
        if error_message is not None:
            message["errorMessage"] = error_message
        timing = {k: v for k, v in (("ttft_ms", ttft_ms), ("duration_ms", duration_ms)) if v}
        return self.add_entry(
            "message",
            {"message": message},
            event_type="assistant/message",
            extra={"timing": timing},
            after_ms=after_ms,
            **kw,
        )

    def tool_call(self, call_id: str, tool: str, arguments: str) -> None:
        self.event("tool/call", {"call_id": call_id, "tool": tool, "arguments": arguments})

    def tool_result(
        self,
        call_id: str,
        tool_name: str,
        output: str,
        *,
        is_error: bool = False,
        error_code: str | None = None,
        after_ms: int = 50,
        **kw: Any,
    ) -> str:
        message = {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": tool_name,
            "content": [text(output)],
            "isError": is_error,
            "timestamp": self.epoch_ms(),
        }
        extra = {"error_code": error_code} if error_code else {}
        return self.add_entry(
            "message",
            {"message": message},
            event_type="tool/result",
            extra=extra,
            after_ms=after_ms,
            **kw,
        )

    def approval_asked(self, approval_id: str, call_id: str, tool: str) -> None:
        self.event(
            "approval/asked",
            {"approval_id": approval_id, "tool": tool, "call_id": call_id, "arguments": "{}"},
        )

    def approval_decided(self, approval_id: str, outcome: str, *, after_ms: int = 10) -> None:
        self.event(
            "approval/decided",
            {"approval_id": approval_id, "outcome": outcome, "by": "alice"},
            after_ms=after_ms,
        )

    def inbox_queued(self, inbox_id: str, target: str, message: str) -> None:
        self.event("inbox/queued", {"inbox_id": inbox_id, "target": target, "text": message})

    def inbox_claimed(self, inbox_id: str) -> None:
        self.event("inbox/claimed", {"inbox_id": inbox_id})

    # --- other entries -------------------------------------------------------------------

    def compaction(self, summary: str, first_kept: str | None, tokens_before: int) -> str:
        return self.add_entry(
            "compaction",
            {
                "summary": summary,
                "firstKeptEntryId": first_kept,
                "tokensBefore": tokens_before,
                "details": {"readFiles": [], "modifiedFiles": []},
            },
        )

    def branch_summary(self, summary: str, **kw: Any) -> str:
        return self.add_entry(
            "branch_summary", {"fromId": self.leaf or "root", "summary": summary}, **kw
        )

    def label(self, target: str, label: str | None) -> str:
        fields: dict[str, Any] = {"targetId": target}
        if label is not None:
            fields["label"] = label
        return self.add_entry("label", fields)

    def model_change(self, provider: str, model_id: str) -> str:
        return self.add_entry("model_change", {"provider": provider, "modelId": model_id})

    def thinking_level(self, level: str) -> str:
        return self.add_entry("thinking_level_change", {"thinkingLevel": level})

    def custom_message(self, custom_type: str, content: str, *, display: bool) -> str:
        return self.add_entry(
            "custom_message",
            {"customType": custom_type, "content": content, "display": display},
        )

    def session_info(self, name: str) -> str:
        return self.add_entry("session_info", {"name": name})

    def bash(self, command: str, output: str, exit_code: int = 0) -> str:
        message = {
            "role": "bashExecution",
            "command": command,
            "output": output,
            "exitCode": exit_code,
            "cancelled": False,
            "truncated": False,
            "timestamp": self.epoch_ms(),
        }
        return self.add_entry("message", {"message": message}, event_type="entry/message")

    def navigate(self, to: str | None) -> None:
        """Move the leaf (Pi's branch()): the next entry becomes a child of `to`."""
        self.event("leaf/moved", {"from": self.leaf, "to": to, "reason": "navigate"})
        self.leaf = to
