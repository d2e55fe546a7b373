"""Model requests written straight to the store, as the runtime writes them, for the audit
desk's tests and benchmark: a `request/header` when the settings change, and for each
exchange a user message, the `request/sent` manifest whose hash is that of the payload the
stored facts rebuild, and the assistant's reply with its usage and cost.

A request can be written tampered (a well-formed hash of some other payload) or with a
`header_seq` that names no header (it cannot be rebuilt), as a damaged log would hold them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any
from unittest.mock import patch

from projections.context import to_provider_messages
from projections.payload import build_payload, payload_sha256
from sessions_app import selectors, services, store
from sessions_app.models import Session
from sessions_app.store import NewEvent

HEADER: dict[str, Any] = {
    "provider": "openai",
    "model": "gpt-audit-1",
    "params": {"stream": True, "temperature": 0.2},
    "system_prompt": "You are careful.\nAnswer briefly.",
    "tools": [
        {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
    ],
    "thinking_level": "off",
}
WRONG_HASH = "0" * 64


@dataclass
class AuditLog:
    """One session being written: its current header and where the turn count stands."""

    session: Session
    header: dict[str, Any] = field(default_factory=lambda: dict(HEADER))
    header_seq: int | None = None
    turn: int = 0

    def set_header(self, reason: str = "change", **fields: Any) -> int:
        """Write a header with these fields changed (the first one is `initial`)."""
        self.header = {**self.header, **fields}
        reason = "initial" if self.header_seq is None else reason
        seq = self._append([NewEvent("request/header", {"reason": reason, **self.header})])
        self.header_seq = seq
        return seq

    def exchange(
        self,
        text: str,
        *,
        answer: str = "Done.",
        tokens: tuple[int, int] = (100, 20),
        cost: float = 0.01,
        tamper: bool = False,
        header_seq: int | None = None,
    ) -> int:
        """A user message, the request its context made, and the reply; the request's seq."""
        if self.header_seq is None:
            self.set_header()
        self.turn += 1
        self._append([_message("user/message", "user", text, turn=self.turn)])
        leaf = self.session.leaf_entry_id
        context = selectors.session_context(self.session, leaf)
        payload = build_payload(
            provider=self.header["provider"],
            model=self.header["model"],
            params=self.header["params"],
            system_prompt=self.header["system_prompt"],
            tools=self.header["tools"],
            messages=to_provider_messages(context.messages),
        )
        sent = {
            "header_seq": header_seq if header_seq is not None else self.header_seq,
            "leaf_entry_id": leaf,
            "payload_sha256": WRONG_HASH if tamper else payload_sha256(payload),
            "token_estimate": 10 * len(context.messages) + 5,
            "attempt": 1,
            "previous_fault": None,
        }
        seq = self._append([NewEvent("request/sent", sent, turn=self.turn, step=0)])
        usage = {
            "input": tokens[0],
            "output": tokens[1],
            "cacheRead": 0,
            "cacheWrite": 0,
            "totalTokens": tokens[0] + tokens[1],
            "cost": {"input": cost, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": cost},
        }
        self._append(
            [
                _message(
                    "assistant/message",
                    "assistant",
                    answer,
                    turn=self.turn,
                    provider=self.header["provider"],
                    model=self.header["model"],
                    usage=usage,
                    stopReason="stop",
                )
            ]
        )
        return seq

    def _append(self, events: list[NewEvent]) -> int:
        result = store.append_events(self.session.id, self.session.last_seq, events)
        self.session.refresh_from_db()
        return result.first_seq


def audit_log(owner: Any, title: str, **header: Any) -> AuditLog:
    session = services.session_create(owner=owner, title=title, cwd="")
    log = AuditLog(session)
    log.header = {**HEADER, **header}
    return log


def _message(event_type: str, role: str, text: str, *, turn: int, **fields: Any) -> NewEvent:
    content: Any = text if role == "user" else [{"type": "text", "text": text}]
    message: Mapping[str, Any] = {"role": role, "content": content, **fields}
    return NewEvent(event_type, {"entry": {"type": "message", "message": message}}, turn=turn)


@contextmanager
def written_on(moment: datetime) -> Iterator[None]:
    """Events appended inside are stamped `moment` (the store stamps them with its clock):
    usage per day needs requests on several days."""

    class Clock(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Clock:  # type: ignore[override]
            return cls.fromtimestamp(moment.timestamp(), tz)

    with patch.object(store, "datetime", Clock):
        yield
