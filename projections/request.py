"""The exact context of one past model request, rebuilt from stored facts and checked.

A `request/sent` event is the manifest of one request: the `request/header` in force (by
seq), the leaf entry the context was built for, and the sha256 of the provider payload. The
entries as of the request are the entries added before it (seq < the request's seq). From
those alone the context is built again (Pi's buildSessionContext, then the provider
boundary), the payload is built again, and its hash is compared with the manifest's.
`matches` is False when anything the request depended on was not stored faithfully.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from projections.chat import content_text
from projections.context import (
    PI_CONVERTED_ROLES,
    MessageSource,
    SessionContext,
    build_session_context,
    pi_llm_message,
    to_provider_messages,
)
from projections.payload import PayloadError, build_payload, payload_sha256
from projections.records import EntryRecord, EventRecord
from projections.tokens import estimate_tokens


class RequestNotFound(LookupError):
    """No `request/sent` at that seq, or its `request/header` is not among the events."""


@dataclass(frozen=True, slots=True)
class ToolSchema:
    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ContextMessage:
    """One message of the context as Pi builds it (before the provider conversion)."""

    index: int
    role: str
    message: Mapping[str, Any]
    text: str  # the readable text: content, summary, or the command of a bash execution
    tokens: int  # Pi's estimate (chars / 4)
    key: str  # identifies the message's content, for diffs
    # The entry it comes from, and the context edit (Pi 1.6) that replaced its content.
    entry_id: str | None = None
    edit_id: str | None = None

    @property
    def llm(self) -> Mapping[str, Any] | None:
        """What Pi's `convertToLlm` hands the model for this message (None: it leaves the
        message out): the message's Pi-format provider view."""
        return pi_llm_message(self.message)

    @property
    def llm_converted(self) -> bool:
        """Whether Pi sends the message as something else than it is (a user message)."""
        return self.role in PI_CONVERTED_ROLES


@dataclass(frozen=True, slots=True)
class RequestView:
    seq: int
    time: datetime
    turn: int | None
    step: int | None
    header_seq: int
    header_reason: str | None
    provider: str
    model: str
    params: Mapping[str, Any]
    system_prompt: str
    thinking_level: str | None  # the header's
    tools: tuple[ToolSchema, ...]
    leaf_entry_id: str | None
    messages: tuple[ContextMessage, ...]
    token_total: int  # the sum of the messages' estimates
    recorded_token_estimate: int | None  # what the manifest says
    provider_messages: tuple[Mapping[str, Any], ...]
    payload: Mapping[str, Any] | None  # None when it could not be built (see `error`)
    payload_sha256: str | None  # recomputed
    recorded_sha256: str
    matches: bool
    error: str | None
    response_entry_id: str | None  # the assistant message that answered, if given
    # Entries a context edit (Pi 1.6) left out of the request, each with that edit.
    omitted: tuple[MessageSource, ...] = ()
    # A request another agent sent, recorded from its OpenTelemetry spans: its exact input
    # as the spans carried it (system instructions and messages in the GenAI format). Then
    # `payload` is that input and `matches` compares its hash with the recorded one.
    recorded_input: Mapping[str, Any] | None = None


def project_request(
    events: Sequence[EventRecord],
    entries: Sequence[EntryRecord],
    request_seq: int,
    *,
    context: SessionContext | None = None,
) -> RequestView:
    """The request sent at `request_seq`.

    `events` must hold that `request/sent` event and the `request/header` it names (more
    events are fine: the first `assistant/message` of the same turn and step after the
    request is reported as the response). `entries` are the session's entries; only those
    added before the request are used. A caller that has already built the context of the
    request's leaf (say from its kept window) passes it as `context` instead; the path to
    a leaf only ever holds entries older than the leaf, so it is the same context.
    """
    sent, header = _manifest({event.seq: event for event in events}, request_seq)
    leaf_id = sent.data.get("leaf_entry_id")
    if context is None:
        before = sorted((e for e in entries if e.seq < request_seq), key=lambda e: e.seq)
        context = build_session_context(before, leaf_id if isinstance(leaf_id, str) else None)
    sources = context.sources or (None,) * len(context.messages)
    messages = tuple(
        _context_message(i, m, source)
        for i, (m, source) in enumerate(zip(context.messages, sources, strict=True))
    )
    provider_messages = tuple(to_provider_messages(context.messages))
    observed = _recorded_input(sent)
    payload: dict[str, Any] | None
    digest: str | None
    if observed is not None:
        payload, digest, error = dict(observed), payload_sha256(observed), None
    else:
        payload, digest, error = _rebuild(header.data, provider_messages)
    recorded = str(sent.data.get("payload_sha256") or "")
    return RequestView(
        seq=sent.seq,
        time=sent.time,
        turn=sent.turn,
        step=sent.step,
        header_seq=header.seq,
        header_reason=header.data.get("reason"),
        provider=str(header.data.get("provider") or ""),
        model=str(header.data.get("model") or ""),
        params=dict(header.data.get("params") or {}),
        system_prompt=str(header.data.get("system_prompt") or ""),
        thinking_level=header.data.get("thinking_level"),
        tools=tuple(_tool_schema(tool) for tool in header.data.get("tools") or ()),
        leaf_entry_id=leaf_id if isinstance(leaf_id, str) else None,
        messages=messages,
        token_total=sum(message.tokens for message in messages),
        recorded_token_estimate=_int_or_none(sent.data.get("token_estimate")),
        provider_messages=provider_messages,
        payload=payload,
        payload_sha256=digest,
        recorded_sha256=recorded,
        matches=digest is not None and digest == recorded,
        error=error,
        response_entry_id=_response_entry_id(events, sent),
        omitted=context.omitted,
        recorded_input=observed,
    )


def _recorded_input(sent: EventRecord) -> Mapping[str, Any] | None:
    recorded = sent.data.get("recorded_input")
    return recorded if isinstance(recorded, Mapping) else None


@dataclass(frozen=True, slots=True)
class PayloadCheck:
    """The hash check of one request alone, without the rest of its view."""

    recorded_sha256: str
    payload_sha256: str | None  # recomputed; None when the payload cannot be built
    error: str | None

    @property
    def matches(self) -> bool:
        return self.payload_sha256 is not None and self.payload_sha256 == self.recorded_sha256


def check_request(
    by_seq: Mapping[int, EventRecord], request_seq: int, context: SessionContext
) -> PayloadCheck:
    """Rebuild the payload of the request at `request_seq` from `context` (its leaf's) and
    the header it names (both in `by_seq`), and compare its hash with the recorded one:
    what `project_request` says of it (`matches`, `payload_sha256`, `error`), without the
    readable messages, their keys and estimates that a view shows."""
    sent, header = _manifest(by_seq, request_seq)
    observed = _recorded_input(sent)
    if observed is not None:
        return PayloadCheck(
            str(sent.data.get("payload_sha256") or ""), payload_sha256(observed), None
        )
    provider_messages = to_provider_messages(context.messages)
    _, digest, error = _rebuild(header.data, provider_messages)
    return PayloadCheck(str(sent.data.get("payload_sha256") or ""), digest, error)


def _manifest(
    by_seq: Mapping[int, EventRecord], request_seq: int
) -> tuple[EventRecord, EventRecord]:
    """The `request/sent` at `request_seq` and the `request/header` it names."""
    sent = by_seq.get(request_seq)
    if sent is None or sent.type != "request/sent":
        raise RequestNotFound(f"no request/sent event at seq {request_seq}")
    header_seq = sent.data.get("header_seq")
    header = by_seq.get(header_seq) if isinstance(header_seq, int) else None
    if header is None or header.type != "request/header":
        raise RequestNotFound(f"request {request_seq}: no request/header at seq {header_seq}")
    return sent, header


def _rebuild(
    header: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Any] | None, str | None, str | None]:
    try:
        payload = build_payload(
            provider=str(header.get("provider") or ""),
            model=str(header.get("model") or ""),
            params=header.get("params") or {},
            system_prompt=str(header.get("system_prompt") or ""),
            tools=header.get("tools") or (),
            messages=messages,
        )
        return payload, payload_sha256(payload), None
    except (PayloadError, ValueError) as exc:
        # A view must still open for a request whose facts cannot be rebuilt; it says why.
        return None, None, str(exc)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _tool_schema(tool: Mapping[str, Any]) -> ToolSchema:
    return ToolSchema(
        name=str(tool.get("name") or ""),
        description=str(tool.get("description") or ""),
        parameters=tool.get("parameters") or {},
    )


def _context_message(
    index: int, message: Mapping[str, Any], source: MessageSource | None
) -> ContextMessage:
    return ContextMessage(
        index=index,
        role=str(message.get("role")),
        message=message,
        text=_readable(message),
        tokens=estimate_tokens(message),
        # ASCII-escaped so that even a lone surrogate in stored text gives a key.
        key=json.dumps(message, sort_keys=True, separators=(",", ":"), default=str),
        entry_id=source.entry_id if source is not None else None,
        edit_id=source.edit_id if source is not None else None,
    )


def _readable(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    if role in ("compactionSummary", "branchSummary"):
        return str(message.get("summary") or "")
    if role == "bashExecution":
        return f"$ {message.get('command') or ''}\n{message.get('output') or ''}".rstrip()
    if role == "assistant":
        return content_text(message.get("content"), "\n\n")
    return content_text(message.get("content"))


def _response_entry_id(events: Sequence[EventRecord], sent: EventRecord) -> str | None:
    later = sorted((e for e in events if e.seq > sent.seq), key=lambda e: e.seq)
    for event in later:
        if event.type == "request/sent" or event.type in ("step/end", "turn/end"):
            return None
        if event.type == "assistant/message":
            return event.entry_id
    return None


# --- diff --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessageChange:
    kind: str  # added, removed, changed
    before: ContextMessage | None
    after: ContextMessage | None


@dataclass(frozen=True, slots=True)
class FieldChange:
    """A header field that differs: `provider`, `model`, `system_prompt`,
    `thinking_level`, `params.<key>` or `tools.<name>` (None on the side that lacks it)."""

    field: str
    before: Any
    after: Any


@dataclass(frozen=True, slots=True)
class RequestDiff:
    before_seq: int
    after_seq: int
    changes: tuple[MessageChange, ...]  # in context order
    unchanged: int
    header_changes: tuple[FieldChange, ...]
    tokens_before: int
    tokens_after: int

    @property
    def added(self) -> tuple[MessageChange, ...]:
        return tuple(c for c in self.changes if c.kind == "added")

    @property
    def removed(self) -> tuple[MessageChange, ...]:
        return tuple(c for c in self.changes if c.kind == "removed")

    @property
    def changed(self) -> tuple[MessageChange, ...]:
        return tuple(c for c in self.changes if c.kind == "changed")

    @property
    def token_delta(self) -> int:
        return self.tokens_after - self.tokens_before


def diff_requests(prev: RequestView, cur: RequestView) -> RequestDiff:
    """What changed in the context from one request to another (usually the next)."""
    changes, unchanged = _message_changes(prev.messages, cur.messages)
    return RequestDiff(
        before_seq=prev.seq,
        after_seq=cur.seq,
        changes=changes,
        unchanged=unchanged,
        header_changes=_header_changes(prev, cur),
        tokens_before=prev.token_total,
        tokens_after=cur.token_total,
    )


def _message_changes(
    before: Sequence[ContextMessage], after: Sequence[ContextMessage]
) -> tuple[tuple[MessageChange, ...], int]:
    matcher = difflib.SequenceMatcher(
        a=[m.key for m in before], b=[m.key for m in after], autojunk=False
    )
    changes: list[MessageChange] = []
    unchanged = 0
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            unchanged += a1 - a0
        else:
            changes.extend(_replaced(before[a0:a1], after[b0:b1]))
    return tuple(changes), unchanged


def _replaced(
    before: Sequence[ContextMessage], after: Sequence[ContextMessage]
) -> list[MessageChange]:
    """Pair messages in place while their roles agree (an edited message); the rest were
    removed or added."""
    out: list[MessageChange] = []
    paired = 0
    while paired < min(len(before), len(after)) and before[paired].role == after[paired].role:
        out.append(MessageChange("changed", before[paired], after[paired]))
        paired += 1
    out += [MessageChange("removed", message, None) for message in before[paired:]]
    out += [MessageChange("added", None, message) for message in after[paired:]]
    return out


def _header_changes(prev: RequestView, cur: RequestView) -> tuple[FieldChange, ...]:
    changes = [
        FieldChange(name, getattr(prev, name), getattr(cur, name))
        for name in ("provider", "model", "system_prompt", "thinking_level")
        if getattr(prev, name) != getattr(cur, name)
    ]
    changes += _mapping_changes("params", prev.params, cur.params)
    changes += _mapping_changes(
        "tools",
        {tool.name: tool for tool in prev.tools},
        {tool.name: tool for tool in cur.tools},
    )
    return tuple(changes)


def _mapping_changes(
    prefix: str, before: Mapping[str, Any], after: Mapping[str, Any]
) -> list[FieldChange]:
    return [
        FieldChange(f"{prefix}.{key}", before.get(key), after.get(key))
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]
