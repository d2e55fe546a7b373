"""Strand's facts as OpenTelemetry GenAI spans: the one mapping between the two.

Pinned to the GenAI semantic conventions of schema 1.42.0 (every attribute there is still
"Development", so the names are kept here, once, as constants). The shapes:

- a turn is an `invoke_agent {agent}` span, the root of a trace of its own;
- each model request (each attempt) is a `chat {model}` span under it, with its exact input
  as rebuilt from the stored facts (`projections.request`: the system prompt, the tool
  definitions and the messages the payload was built from), its output, usage (input
  counts the cached tokens too, as the conventions ask; the cache reads and writes and any
  reasoning count apart) and its timings (time to first chunk, the model's time);
- each tool call is an `execute_tool {tool}` span under the turn (call id, arguments,
  result);
- a fault is a span status ERROR with `error.type`, the fault's kind; a compaction in the
  turn, and one the request's context starts from, and a replay are attributes.

Steps have no span of their own (the conventions have none): each child says its step in
`strand.step`.

Ids are derived from the session and the seqs of the events that open each span, so the
same session exported twice (as a file, or pushed again after a crash) gives the same trace
and span ids, which tracing backends keep once.

Messages are the conventions' `{role, parts[]}`: parts `text`, `tool_call`,
`tool_call_response`, `reasoning` and `blob` (an image), serialised as JSON strings (what
the OTLP attribute of every consumer accepts). These content attributes are opt-in in the
conventions: `capture_content=False` leaves all of them out, so only structure, timings
and usage go out. A content attribute longer than `max_chars` is left out too (never cut
into JSON that does not parse) and named in `strand.content.omitted`; the request's
`strand.request.payload_sha256` still identifies the exact payload.

Output is OTLP/JSON (`ExportTraceServiceRequest`): ids in hex, times in nanoseconds as
strings, attribute values typed (`stringValue`, `intValue`…).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from projections.context import ContextFold, SessionContext, to_provider_messages
from projections.faults import fault_view
from projections.records import EventRecord
from projections.trace import TraceSpan

# --- the conventions, pinned ----------------------------------------------------------------

SEMCONV_VERSION: Final = "1.42.0"
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
SCOPE_NAME: Final = "strand"

GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_TOOL_DEFINITIONS: Final = "gen_ai.tool.definitions"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
ERROR_TYPE: Final = "error.type"
SERVICE_NAME: Final = "service.name"

# `gen_ai.operation.name` values, and the span names they head.
OP_INVOKE_AGENT: Final = "invoke_agent"
OP_CHAT: Final = "chat"
OP_EXECUTE_TOOL: Final = "execute_tool"

# The attributes that carry content: opt-in, left out when capture is off.
CONTENT_ATTRIBUTES: Final = frozenset(
    {
        GEN_AI_SYSTEM_INSTRUCTIONS,
        GEN_AI_INPUT_MESSAGES,
        GEN_AI_OUTPUT_MESSAGES,
        GEN_AI_TOOL_DEFINITIONS,
        GEN_AI_TOOL_CALL_ARGUMENTS,
        GEN_AI_TOOL_CALL_RESULT,
    }
)

# Message parts (`{role, parts[]}`), their `type` values.
PART_TEXT: Final = "text"
PART_TOOL_CALL: Final = "tool_call"
PART_TOOL_CALL_RESPONSE: Final = "tool_call_response"
PART_REASONING: Final = "reasoning"
PART_BLOB: Final = "blob"

# Pi's stopReason → the conventions' finish reason, and back.
FINISH_REASON_OF_STOP: Final[Mapping[str, str]] = {
    "stop": "stop",
    "length": "length",
    "toolUse": "tool_call",
    "error": "error",
    "aborted": "aborted",
}
STOP_OF_FINISH_REASON: Final[Mapping[str, str]] = {v: k for k, v in FINISH_REASON_OF_STOP.items()}

# Strand's provider kinds → `gen_ai.provider.name` (the built-in model is Strand's own).
PROVIDER_NAME_OF_KIND: Final[Mapping[str, str]] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "offline": "strand.offline",
}

# Strand's own attributes (outside the conventions' namespace).
STRAND_TURN: Final = "strand.turn"
STRAND_STEP: Final = "strand.step"
STRAND_STATUS: Final = "strand.status"
STRAND_SEQ: Final = "strand.seq"
STRAND_TURN_TRIGGER: Final = "strand.turn.trigger"
STRAND_TURN_END_REASON: Final = "strand.turn.end_reason"
STRAND_REPLAY_OF: Final = "strand.replay.of"
STRAND_REPLAY_GROUP: Final = "strand.replay.group"
STRAND_REPLAY_PRESET: Final = "strand.replay.preset"
STRAND_REQUEST_ATTEMPT: Final = "strand.request.attempt"
STRAND_REQUEST_HEADER_REASON: Final = "strand.request.header_reason"
STRAND_REQUEST_PAYLOAD_SHA256: Final = "strand.request.payload_sha256"
STRAND_REQUEST_LEAF: Final = "strand.request.leaf_entry_id"
STRAND_RESPONSE_ENTRY: Final = "strand.response.entry_id"
STRAND_RESPONSE_DURATION_MS: Final = "strand.response.duration_ms"
STRAND_USAGE_COST: Final = "strand.usage.cost"
STRAND_COMPACTION_COUNT: Final = "strand.compaction.count"
STRAND_COMPACTION_ENTRY_IDS: Final = "strand.compaction.entry_ids"
STRAND_CONTEXT_COMPACTION: Final = "strand.context.compaction_entry_id"
STRAND_CONTEXT_COMPACTED: Final = "strand.context.compacted"
STRAND_TOOL_ERROR_CODE: Final = "strand.tool.error_code"
STRAND_TOOL_IS_ERROR: Final = "strand.tool.is_error"
STRAND_APPROVAL_OUTCOME: Final = "strand.approval.outcome"
STRAND_CONTENT_OMITTED: Final = "strand.content.omitted"

# OTLP's enumerations.
SPAN_KIND_INTERNAL: Final = 1
SPAN_KIND_CLIENT: Final = 3
STATUS_UNSET: Final = 0
STATUS_OK: Final = 1
STATUS_ERROR: Final = 2

# Trace statuses that are failures (a span status ERROR); `ok` is OK, the rest unset.
_ERROR_STATUSES: Final = frozenset(
    {"error", "interrupted", "not_started", "aborted", "approval_timeout"}
)

DEFAULT_MAX_CHARS: Final = 256 * 1024

Span = dict[str, Any]  # one OTLP/JSON span


@dataclass(frozen=True, slots=True)
class RequestInput:
    """The input of one model request, as its payload was built: its `request/header`
    (provider kind, model, parameters, system prompt, tool schemas) and the messages of
    its leaf's context at the provider boundary (`projections.context`)."""

    header: Mapping[str, Any]
    # None: the leaf's window was past what one read gathers, and was not read.
    messages: Sequence[Mapping[str, Any]] | None
    compaction_entry_id: str | None  # the compaction the context starts from, if any

    @classmethod
    def of(cls, header: Mapping[str, Any], context: SessionContext) -> RequestInput:
        sources = context.sources or (None,) * len(context.messages)
        compaction = next(
            (
                source.entry_id if source is not None else ""
                for message, source in zip(context.messages, sources, strict=True)
                if message.get("role") == "compactionSummary"
            ),
            None,
        )
        return cls(header, tuple(to_provider_messages(context.messages)), compaction)

    @classmethod
    def of_fold(cls, header: Mapping[str, Any], fold: ContextFold) -> RequestInput:
        """The same, from the fold of the leaf's context (`ContextFold`)."""
        return cls(header, tuple(fold.messages()), fold.summary_entry_id)

    @property
    def provider(self) -> str:
        return str(self.header.get("provider") or "")

    @property
    def model(self) -> str:
        return str(self.header.get("model") or "")


@dataclass(frozen=True, slots=True)
class TurnFacts:
    """What the spans of one finished turn are made of: its trace span
    (`projections.trace`), its events by seq (and the headers its requests name), and the
    input of each of its requests (by the seq of the `request/sent`; missing when it could
    not be read)."""

    session_id: str
    agent: str
    span: TraceSpan
    events: Mapping[int, EventRecord]
    requests: Mapping[int, RequestInput]


def is_finished(span: TraceSpan) -> bool:
    """Whether a turn's spans can go out: its `turn/end` is written (only finished spans
    are exported; a running turn's go when it ends)."""
    return span.kind == "turn" and span.end_seq is not None


# --- ids ----------------------------------------------------------------------------------


def trace_id(session_id: str, turn_start_seq: int) -> str:
    """The trace of a turn: 16 bytes (hex) from the session and the seq of its first event."""
    return _digest(f"strand/{session_id}/trace/{turn_start_seq}", 16)


def span_id(session_id: str, kind: str, start_seq: int) -> str:
    """A span: 8 bytes (hex) from the session, its kind and the seq of its first event."""
    return _digest(f"strand/{session_id}/{kind}/{start_seq}", 8)


def _digest(text: str, size: int) -> str:
    raw = hashlib.sha256(text.encode()).digest()[:size]
    # An all-zero id is invalid in OTLP; a digest that gives one (never, in practice) is nudged.
    return (raw if any(raw) else b"\x01" * size).hex()


# --- spans --------------------------------------------------------------------------------


def turn_spans(
    facts: TurnFacts,
    *,
    capture_content: bool = True,
    max_chars: int = DEFAULT_MAX_CHARS,
    messages: InputMessages | None = None,
) -> list[Span]:
    """The spans of one finished turn, root first: `invoke_agent`, then its `chat` and
    `execute_tool` spans in the order they started. `messages`: the input messages already
    converted for earlier turns of the session, to convert each only once."""
    turn = facts.span
    if not is_finished(turn):
        return []
    build = _Builder(
        facts, capture_content, max_chars, messages if messages is not None else InputMessages()
    )
    return build.turn()


class InputMessages:
    """Provider messages in the conventions' form, each converted once: the requests of a
    session's turns share most of their contexts' messages (the same objects, when their
    contexts are built from one read of the path), so each message is converted, counted
    and written as JSON text the first time it is seen, and taken from here after. The
    messages are kept with their form, so an identity is never taken by another object
    while this lives; one lives for the turns read together (the live export keeps a
    session's from one batch to the next, beside its path)."""

    def __init__(self) -> None:
        # id(message) → (the message, its form or None, its text's length, its JSON text)
        self._seen: dict[int, tuple[Mapping[str, Any], dict[str, Any] | None, int, list[str]]] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def json(self, messages: Sequence[Mapping[str, Any]], max_chars: int) -> str | None:
        """The messages as the JSON text of their `{role, parts[]}` list (what `_json` makes
        of that list), or None as soon as their text alone is longer than `max_chars` (the
        work stops there, whatever the context's length)."""
        texts: list[str] = []
        size = 0
        for message in messages:
            seen = self._seen.get(id(message))
            if seen is None or seen[0] is not message:
                converted = input_message(message)
                chars = sum(_part_chars(p) for p in converted["parts"]) if converted else 0
                seen = (message, converted, chars, [])
                self._seen[id(message)] = seen
            _, converted, chars, text = seen
            if converted is None:
                continue
            size += chars
            if size > max_chars:
                return None
            if not text:  # written out only once it is known to be within the bound
                text.append(_json(converted))
            texts.append(text[0])
        # json.dumps of the list: its items' texts between brackets, ", " apart.
        return "[" + ", ".join(texts) + "]"


class _Builder:
    def __init__(
        self, facts: TurnFacts, capture: bool, max_chars: int, messages: InputMessages
    ) -> None:
        self.facts = facts
        self.capture = capture
        self.max_chars = max_chars
        self.messages = messages
        self.sid = facts.session_id
        self.trace = trace_id(self.sid, facts.span.start_seq)
        self.root = span_id(self.sid, "turn", facts.span.start_seq)
        self.end = facts.span.end or facts.span.start

    def turn(self) -> list[Span]:
        turn = self.facts.span
        children = [s for s in _descendants(turn) if s.kind in ("request", "tool")]
        marks = [s for s in _descendants(turn) if s.kind == "compaction"]
        start = self.facts.events.get(turn.start_seq)
        data = start.data if start is not None and start.type == "turn/start" else {}
        attrs: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: OP_INVOKE_AGENT,
            GEN_AI_AGENT_NAME: self.facts.agent,
            GEN_AI_CONVERSATION_ID: self.sid,
            STRAND_TURN: turn.turn,
            STRAND_STATUS: turn.status,
            STRAND_SEQ: turn.start_seq,
            STRAND_TURN_TRIGGER: data.get("trigger"),
            STRAND_TURN_END_REASON: dict(turn.outputs).get("reason"),
            STRAND_REPLAY_OF: data.get("replay_of"),
            STRAND_REPLAY_GROUP: data.get("replay_group"),
        }
        providers = {self._provider(s) for s in children if s.kind == "request"} - {None}
        if len(providers) == 1:
            attrs[GEN_AI_PROVIDER_NAME] = providers.pop()
        if turn.usage is not None:
            attrs.update(_usage_attributes(turn.usage))
        if marks:
            attrs[STRAND_COMPACTION_COUNT] = len(marks)
            attrs[STRAND_COMPACTION_ENTRY_IDS] = [
                str(dict(m.outputs).get("entry_id") or "") for m in marks
            ]
        root = self._span(
            span_id_=self.root,
            parent=None,
            name=f"{OP_INVOKE_AGENT} {self.facts.agent}",
            kind=SPAN_KIND_INTERNAL,
            span=turn,
            attrs=attrs,
            error_type=turn.status if turn.status in _ERROR_STATUSES else None,
        )
        out = [root]
        for child in sorted(children, key=lambda s: (s.start_seq, s.key)):
            out.append(self.request(child) if child.kind == "request" else self.tool(child))
        return out

    # -- chat ------------------------------------------------------------------------------

    def _provider(self, span: TraceSpan) -> str | None:
        """The provider of a request: its header's kind, else what its span says."""
        sent_seq = dict(span.inputs).get("request_seq")
        view = self.facts.requests.get(sent_seq) if isinstance(sent_seq, int) else None
        kind = (view.provider if view is not None else None) or dict(span.inputs).get("provider")
        kind = kind or dict(span.outputs).get("provider")
        return PROVIDER_NAME_OF_KIND.get(str(kind), str(kind)) if kind else None

    def request(self, span: TraceSpan) -> Span:
        inputs, outputs = dict(span.inputs), dict(span.outputs)
        sent_seq = inputs.get("request_seq")
        view = self.facts.requests.get(sent_seq) if isinstance(sent_seq, int) else None
        response = self._response(span)
        message = _message(response)
        model = str(
            (view.model if view is not None else None) or inputs.get("model") or span.name or ""
        )
        attrs: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: OP_CHAT,
            GEN_AI_PROVIDER_NAME: self._provider(span),
            GEN_AI_CONVERSATION_ID: self.sid,
            GEN_AI_REQUEST_MODEL: model or None,
            GEN_AI_RESPONSE_MODEL: message.get("model") or None,
            GEN_AI_RESPONSE_ID: message.get("responseId") or None,
            STRAND_TURN: span.turn,
            STRAND_STEP: span.step,
            STRAND_STATUS: span.status,
            STRAND_SEQ: span.start_seq,
            STRAND_REQUEST_ATTEMPT: inputs.get("attempt"),
            STRAND_REQUEST_LEAF: inputs.get("leaf_entry_id"),
            STRAND_REQUEST_PAYLOAD_SHA256: inputs.get("payload_sha256"),
            STRAND_RESPONSE_ENTRY: outputs.get("entry_id"),
            STRAND_RESPONSE_DURATION_MS: outputs.get("model_ms"),
        }
        stop = message.get("stopReason")
        if isinstance(stop, str):
            attrs[GEN_AI_RESPONSE_FINISH_REASONS] = [FINISH_REASON_OF_STOP.get(stop, stop)]
        if span.usage is not None:
            attrs.update(_usage_attributes(span.usage, message.get("usage")))
        if span.ttft_ms is not None:
            attrs[GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = span.ttft_ms / 1000
        content: dict[str, str | None] = {}  # JSON text, None for one over the bound
        if view is not None:
            header = view.header
            attrs.update(_request_parameters(header.get("params")))
            attrs[STRAND_REQUEST_HEADER_REASON] = header.get("reason")
            if header.get("reason") == "replay":
                attrs[STRAND_REPLAY_OF] = header.get("replay_of")
                attrs[STRAND_REPLAY_PRESET] = header.get("replay_preset")
            if view.compaction_entry_id is not None:
                attrs[STRAND_CONTEXT_COMPACTED] = True
                attrs[STRAND_CONTEXT_COMPACTION] = view.compaction_entry_id
            system_prompt = str(header.get("system_prompt") or "")
            if system_prompt:
                content[GEN_AI_SYSTEM_INSTRUCTIONS] = _json(
                    [{"type": PART_TEXT, "content": system_prompt}]
                )
            if self.capture:
                # Past the bound the messages are not even converted: left out, and named.
                content[GEN_AI_INPUT_MESSAGES] = (
                    None
                    if view.messages is None
                    else self.messages.json(view.messages, self.max_chars)
                )
            tools = [t for t in header.get("tools") or () if isinstance(t, Mapping)]
            if tools:
                content[GEN_AI_TOOL_DEFINITIONS] = _json(
                    [
                        {
                            "type": "function",
                            "name": str(tool.get("name") or ""),
                            "description": str(tool.get("description") or ""),
                            "parameters": tool.get("parameters") or {},
                        }
                        for tool in tools
                    ]
                )
        if response is not None:
            content[GEN_AI_OUTPUT_MESSAGES] = _json([output_message(message)])
        error_type = None
        if span.status in _ERROR_STATUSES:
            error_type = self._fault_kind(span, response) or span.status
        return self._span(
            span_id_=span_id(self.sid, "request", span.start_seq),
            parent=self.root,
            name=f"{OP_CHAT} {model}".rstrip(),
            kind=SPAN_KIND_CLIENT,
            span=span,
            attrs=attrs,
            content=content if self.capture else None,
            error_type=error_type,
        )

    def _response(self, span: TraceSpan) -> EventRecord | None:
        if span.end_seq is None:
            return None
        event = self.facts.events.get(span.end_seq)
        return event if event is not None and event.type == "assistant/message" else None

    def _fault_kind(self, span: TraceSpan, response: EventRecord | None) -> str | None:
        if response is not None:
            message = _message(response)
            kind = fault_view(response.data.get("fault"), message.get("errorMessage")).kind
            if kind:
                return kind
        retried = dict(span.outputs).get("kind")
        return str(retried) if retried else None

    # -- execute_tool ----------------------------------------------------------------------

    def tool(self, span: TraceSpan) -> Span:
        inputs, outputs = dict(span.inputs), dict(span.outputs)
        attrs: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: OP_EXECUTE_TOOL,
            GEN_AI_CONVERSATION_ID: self.sid,
            GEN_AI_TOOL_NAME: span.name,
            GEN_AI_TOOL_TYPE: "function",
            GEN_AI_TOOL_CALL_ID: inputs.get("call_id"),
            STRAND_TURN: span.turn,
            STRAND_STEP: span.step,
            STRAND_STATUS: span.status,
            STRAND_SEQ: span.start_seq,
            STRAND_TOOL_IS_ERROR: outputs.get("is_error"),
            STRAND_TOOL_ERROR_CODE: outputs.get("error_code"),
        }
        approvals = [c for c in span.children if c.kind == "approval"]
        if approvals:
            attrs[STRAND_APPROVAL_OUTCOME] = dict(approvals[-1].outputs).get("outcome")
        content: dict[str, str] = {}
        if inputs.get("arguments"):
            content[GEN_AI_TOOL_CALL_ARGUMENTS] = str(inputs["arguments"])
        if outputs.get("text") is not None:
            content[GEN_AI_TOOL_CALL_RESULT] = str(outputs["text"])
        failed = span.status in _ERROR_STATUSES or span.status in ("rejected", "cancelled")
        return self._span(
            span_id_=span_id(self.sid, "tool", span.start_seq),
            parent=self.root,
            name=f"{OP_EXECUTE_TOOL} {span.name}",
            kind=SPAN_KIND_INTERNAL,
            span=span,
            attrs=attrs,
            content=content,
            error_type=(outputs.get("error_code") or span.status) if failed else None,
        )

    # -- common ----------------------------------------------------------------------------

    def _span(
        self,
        *,
        span_id_: str,
        parent: str | None,
        name: str,
        kind: int,
        span: TraceSpan,
        attrs: dict[str, Any],
        content: Mapping[str, str | None] | None = None,
        error_type: str | None = None,
    ) -> Span:
        # A span cut by a crash has no end of its own: it ends where its turn does.
        end = span.end or self.end
        end = max(end, span.start)
        if error_type:
            attrs[ERROR_TYPE] = error_type
        omitted: list[str] = []
        if self.capture:
            for key, text in (content or {}).items():
                if text is None or len(text) > self.max_chars:
                    omitted.append(key)
                else:
                    attrs[key] = text
            if omitted:
                attrs[STRAND_CONTENT_OMITTED] = omitted
        out: Span = {
            "traceId": self.trace,
            "spanId": span_id_,
            "name": name,
            "kind": kind,
            "startTimeUnixNano": str(unix_nanos(span.start)),
            "endTimeUnixNano": str(unix_nanos(end)),
            "attributes": attributes(attrs),
            "status": _status(span, error_type),
        }
        if parent is not None:
            out["parentSpanId"] = parent
        return out


def _json(value: Any) -> str:
    """A content value as JSON text."""
    return json.dumps(value, ensure_ascii=False, default=str)


def _part_chars(part: Mapping[str, Any]) -> int:
    text = part.get("content") or part.get("response") or ""
    arguments = part.get("arguments")
    return len(text) + (len(str(arguments)) if arguments is not None else 0)


def _descendants(span: TraceSpan) -> Iterator[TraceSpan]:
    for child in span.children:
        yield child
        yield from _descendants(child)


def _status(span: TraceSpan, error_type: str | None) -> dict[str, Any]:
    if error_type:
        return {"code": STATUS_ERROR, "message": span.error or error_type}
    if span.status == "ok":
        return {"code": STATUS_OK}
    return {"code": STATUS_UNSET}


def _message(event: EventRecord | None) -> Mapping[str, Any]:
    if event is None:
        return {}
    entry = event.data.get("entry")
    message = entry.get("message") if isinstance(entry, Mapping) else None
    return message if isinstance(message, Mapping) else {}


def _usage_attributes(usage: Any, raw: Any = None) -> dict[str, Any]:
    """Pi's usage as the conventions count it: input tokens include the cache reads and
    writes (Pi counts them apart)."""
    out: dict[str, Any] = {
        GEN_AI_USAGE_INPUT_TOKENS: usage.input + usage.cache_read + usage.cache_write,
        GEN_AI_USAGE_OUTPUT_TOKENS: usage.output,
        GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: usage.cache_read,
        GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: usage.cache_write,
        STRAND_USAGE_COST: float(usage.cost),
    }
    reasoning = raw.get("reasoning") if isinstance(raw, Mapping) else None
    if isinstance(reasoning, int) and not isinstance(reasoning, bool):
        out[GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = reasoning
    return out


def _request_parameters(params: Any) -> dict[str, Any]:
    params = params if isinstance(params, Mapping) else {}
    out: dict[str, Any] = {}
    for key, name in (
        ("temperature", GEN_AI_REQUEST_TEMPERATURE),
        ("top_p", GEN_AI_REQUEST_TOP_P),
        ("max_tokens", GEN_AI_REQUEST_MAX_TOKENS),
    ):
        value = params.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    return out


# --- messages ----------------------------------------------------------------------------


def input_message(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """One provider-boundary message (`projections.context.to_provider_messages`: roles
    user, assistant, toolResult with Pi's content blocks) as `{role, parts[]}`."""
    role = message.get("role")
    if role == "toolResult":
        return {
            "role": "tool",
            "parts": [
                {
                    "type": PART_TOOL_CALL_RESPONSE,
                    "id": str(message.get("toolCallId") or ""),
                    "response": _text_of(message.get("content")),
                }
            ],
        }
    if role == "assistant":
        return {"role": "assistant", "parts": _parts(message.get("content"))}
    if role == "user":
        return {"role": "user", "parts": _parts(message.get("content"))}
    return None


def output_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """An assistant message as the conventions' output message (with its finish reason)."""
    stop = str(message.get("stopReason") or "stop")
    return {
        "role": "assistant",
        "parts": _parts(message.get("content")),
        "finish_reason": FINISH_REASON_OF_STOP.get(stop, stop),
    }


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": PART_TEXT, "content": content}]
    parts: list[dict[str, Any]] = []
    for block in content if isinstance(content, Sequence) else ():
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": PART_TEXT, "content": str(block.get("text") or "")})
        elif kind == "thinking":
            parts.append({"type": PART_REASONING, "content": str(block.get("thinking") or "")})
        elif kind == "toolCall":
            parts.append(
                {
                    "type": PART_TOOL_CALL,
                    "id": str(block.get("id") or ""),
                    "name": str(block.get("name") or ""),
                    "arguments": block.get("arguments"),
                }
            )
        elif kind == "image":
            parts.append(
                {
                    "type": PART_BLOB,
                    "modality": "image",
                    "mime_type": str(block.get("mimeType") or ""),
                    "content": str(block.get("data") or ""),
                }
            )
    return parts


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, Sequence) else ()
    return "\n".join(
        str(b.get("text") or "")
        for b in blocks
        if isinstance(b, Mapping) and b.get("type") == "text"
    )


# --- OTLP/JSON ---------------------------------------------------------------------------


def unix_nanos(moment: datetime) -> int:
    """A moment as nanoseconds since the epoch (exact to the microsecond)."""
    whole = int(moment.timestamp())
    return whole * 1_000_000_000 + moment.microsecond * 1_000


def attributes(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """OTLP's typed key-value list; a None value is left out."""
    return [{"key": key, "value": any_value(v)} for key, v in values.items() if v is not None]


def any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def resource_attributes(*, service_name: str = SCOPE_NAME) -> list[dict[str, Any]]:
    return attributes({SERVICE_NAME: service_name})


def document(spans: Iterable[Span], *, scope_version: str = "") -> dict[str, Any]:
    """An `ExportTraceServiceRequest` holding `spans` (one resource, one scope)."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": resource_attributes()},
                "scopeSpans": [
                    {
                        "scope": {"name": SCOPE_NAME, "version": scope_version},
                        "schemaUrl": SCHEMA_URL,
                        "spans": list(spans),
                    }
                ],
                "schemaUrl": SCHEMA_URL,
            }
        ]
    }


def document_chunks(spans: Iterable[Span], *, scope_version: str = "") -> Iterator[str]:
    """The same document as JSON text, a span at a time (the memory of one span)."""
    head = json.dumps(document((), scope_version=scope_version), separators=(",", ":"))
    marker = '"spans":[]'
    cut = head.index(marker) + len(marker) - 1
    yield head[:cut]
    first = True
    for span in spans:
        yield ("" if first else ",") + json.dumps(span, ensure_ascii=False, separators=(",", ":"))
        first = False
    yield head[cut:] + "\n"


def attribute_map(span: Mapping[str, Any]) -> dict[str, Any]:
    """An OTLP/JSON span's attributes as a plain dict (for readers and tests)."""
    return {a["key"]: _plain(a["value"]) for a in span.get("attributes", ())}


def _plain(value: Mapping[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [_plain(v) for v in value["arrayValue"].get("values", ())]
    return None
