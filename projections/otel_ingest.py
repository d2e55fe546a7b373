"""OpenTelemetry GenAI spans in: OTLP trace data read, and planned as Strand's facts.

Pinned to the GenAI semantic conventions `SEMCONV_VERSION` (every attribute still
"Development" there): the attribute names are the constants below, named after the
attribute, and nothing else in Strand spells them.

Two pure steps, no Django:

1. `parse_otlp_json` reads an `ExportTraceServiceRequest` in its OTLP/JSON form (the
   protobuf form is turned into the same dict by the door) into `ObservedSpan`s: ids in
   hex, times in Unix nanoseconds, attributes flattened to plain values. Anything that is
   not that shape raises `OtlpError`, naming where.
2. `plan_spans` turns the GenAI spans of one conversation, with the conversation's
   `IngestState` (what earlier requests recorded), into the facts Strand records for any
   session — `turn/start`, `step/start`, `request/header`, `request/sent`, the messages,
   `tool/call`, `step/end`, `turn/end` — and the state after them.

How spans map:

- `invoke_agent` is a turn. Its end closes the turn (`turn/end`, `error` when the span
  failed) after the spans of the same request that belong to it.
- `chat` (and `text_completion`, `generate_content`) is a step with one model request: the
  system instructions, tool definitions, model and request parameters are its
  `request/header` (written again only when they change), the input messages not yet on the
  path are added as entries before it, the recorded input (and its sha256) is kept in its
  `request/sent`, and the output messages are the assistant's reply, with usage and finish
  reason. A failed span without output is a reply with stopReason `error`.
- `execute_tool` is a tool call (`tool/call`) and its result, in the step whose reply asked
  for it; a result already recorded from a later request's input is not added twice.

Order: spans are planned in the order of their start times within one request; a request
appends after whatever earlier requests recorded (live, as spans arrive).

A late span — one of a trace whose turn is closed already (its invoke_agent arrived and
ended it in an earlier request, or a span of another trace closed it) — is recorded as a
late fact of that turn: its facts carry that turn's number (a chat is a new step of it, a
tool call joins the step whose reply asked for it), with no new `turn/start` or `turn/end`,
so the trace draws it inside its own turn at its own times and the turn open meanwhile, if
any, stays open. A late invoke_agent, whose turn was closed without it, is that turn's
`turn/observed`: the trace takes the turn's status, end and attributes from it. The state
remembers the last `CLOSED_KEPT` turns closed; a span of an older one starts a turn of its
own. Every fact keeps
its span's own time (`observed.time`), which is the time the views show. Every fact also
keeps the span's ids and, on the span's main fact, the attributes not mapped here
(`observed.attributes`), so nothing the producer sent is lost.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from projections.payload import canonical_json

SEMCONV_VERSION = "1.42.0"
SOURCE = "observed:otlp"

# --- attribute names (semconv-genai 1.42.0) ---------------------------------------------------

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_SYSTEM = "gen_ai.system"  # the provider's name before `gen_ai.provider.name`
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_TOOL_DEFINITIONS = "gen_ai.tool.definitions"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_REQUEST_PREFIX = "gen_ai.request."  # every request parameter but the model
ERROR_TYPE = "error.type"

OP_INVOKE_AGENT = "invoke_agent"
OP_CHAT = "chat"
OP_EXECUTE_TOOL = "execute_tool"
MODEL_OPERATIONS = frozenset({OP_CHAT, "text_completion", "generate_content"})
OPERATIONS = MODEL_OPERATIONS | {OP_INVOKE_AGENT, OP_EXECUTE_TOOL}

# Attributes this module maps to facts; every other one is kept as it came.
MAPPED = frozenset(
    {
        GEN_AI_OPERATION_NAME,
        GEN_AI_PROVIDER_NAME,
        GEN_AI_SYSTEM,
        GEN_AI_CONVERSATION_ID,
        GEN_AI_REQUEST_MODEL,
        GEN_AI_RESPONSE_MODEL,
        GEN_AI_USAGE_INPUT_TOKENS,
        GEN_AI_USAGE_OUTPUT_TOKENS,
        GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
        GEN_AI_SYSTEM_INSTRUCTIONS,
        GEN_AI_INPUT_MESSAGES,
        GEN_AI_OUTPUT_MESSAGES,
        GEN_AI_TOOL_DEFINITIONS,
        GEN_AI_TOOL_NAME,
        GEN_AI_TOOL_CALL_ID,
        GEN_AI_TOOL_CALL_ARGUMENTS,
        GEN_AI_TOOL_CALL_RESULT,
        GEN_AI_RESPONSE_FINISH_REASONS,
    }
)

STATUS_ERROR = 2  # OTLP's STATUS_CODE_ERROR
CLOSED_KEPT = 64  # closed turns a late span can still be placed in
MAX_ATTRIBUTE_DEPTH = 16  # nested arrays and key-value lists in one attribute value


class OtlpError(ValueError):
    """A body that is not OTLP trace data; the message says where."""


# --- reading OTLP/JSON ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObservedSpan:
    trace_id: str  # 32 hex
    span_id: str  # 16 hex
    parent_span_id: str | None
    name: str
    start_ns: int
    end_ns: int
    status_code: int
    status_message: str
    attributes: Mapping[str, Any]
    resource: Mapping[str, Any] = field(default_factory=dict)
    scope: str = ""

    @property
    def operation(self) -> str | None:
        """The GenAI operation: the attribute, or the name's first word as semconv names
        spans (`chat gpt-4o`, `execute_tool get_weather`)."""
        named = self.attributes.get(GEN_AI_OPERATION_NAME)
        if isinstance(named, str) and named:
            return named
        first = self.name.split(" ", 1)[0]
        return first if first in OPERATIONS else None

    @property
    def failed(self) -> bool:
        return self.status_code == STATUS_ERROR or bool(self.attributes.get(ERROR_TYPE))

    @property
    def conversation_id(self) -> str | None:
        value = self.attributes.get(GEN_AI_CONVERSATION_ID)
        return str(value)[:200] if value not in (None, "") else None


def parse_otlp_json(body: Mapping[str, Any], *, ids: str = "hex") -> list[ObservedSpan]:
    """The spans of an `ExportTraceServiceRequest` in OTLP/JSON form. `ids="base64"` reads
    trace and span ids as protobuf's JSON mapping writes bytes (the door's protobuf path)."""
    if not isinstance(body, Mapping):
        raise OtlpError("the body must be a JSON object with resourceSpans")
    spans: list[ObservedSpan] = []
    for r, resource_spans in enumerate(_list(body, "resourceSpans", "body")):
        where = f"resourceSpans[{r}]"
        resource = _object(resource_spans.get("resource") or {}, f"{where}.resource")
        resource_attributes = _attributes(resource.get("attributes"), f"{where}.resource")
        for s, scope_spans in enumerate(_list(resource_spans, "scopeSpans", where)):
            scope_where = f"{where}.scopeSpans[{s}]"
            scope = _object(scope_spans.get("scope") or {}, f"{scope_where}.scope")
            scope_name = str(scope.get("name") or "")[:200]
            for i, span in enumerate(_list(scope_spans, "spans", scope_where)):
                spans.append(
                    _span(span, f"{scope_where}.spans[{i}]", ids, resource_attributes, scope_name)
                )
    return spans


def _list(holder: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
    value = holder.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise OtlpError(f"{where}.{key} must be a list of objects")
    return value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise OtlpError(f"{where} must be an object")
    return value


def _span(
    span: Mapping[str, Any], where: str, ids: str, resource: Mapping[str, Any], scope: str
) -> ObservedSpan:
    trace_id = _id(span.get("traceId"), 16, f"{where}.traceId", ids)
    span_id = _id(span.get("spanId"), 8, f"{where}.spanId", ids)
    parent = span.get("parentSpanId")
    parent_id = _id(parent, 8, f"{where}.parentSpanId", ids) if parent else None
    start = _nanos(span.get("startTimeUnixNano"), f"{where}.startTimeUnixNano")
    end = _nanos(span.get("endTimeUnixNano"), f"{where}.endTimeUnixNano")
    if end < start:
        raise OtlpError(f"{where}: endTimeUnixNano is before startTimeUnixNano")
    status = _object(span.get("status") or {}, f"{where}.status")
    code = status.get("code", 0)
    if isinstance(code, str):  # protobuf's JSON mapping writes enum names
        code = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}.get(code)
    if not isinstance(code, int) or isinstance(code, bool):
        raise OtlpError(f"{where}.status.code must be an integer")
    return ObservedSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_id,
        name=str(span.get("name") or "")[:500],
        start_ns=start,
        end_ns=end,
        status_code=code,
        status_message=str(status.get("message") or "")[:10_000],
        attributes=_attributes(span.get("attributes"), where),
        resource=resource,
        scope=scope,
    )


def _id(value: Any, size: int, where: str, ids: str) -> str:
    if not isinstance(value, str) or not value:
        raise OtlpError(f"{where} is missing")
    try:
        raw = base64.b64decode(value, validate=True) if ids == "base64" else bytes.fromhex(value)
    except (ValueError, binascii.Error):
        raise OtlpError(f"{where} is not a {size}-byte id") from None
    if len(raw) != size or raw == bytes(size):
        raise OtlpError(f"{where} is not a valid {size}-byte id")
    return raw.hex()


def _nanos(value: Any, where: str) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**63:
        raise OtlpError(f"{where} must be a positive number of nanoseconds")
    return value


def _attributes(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, list):
        raise OtlpError(f"{where}.attributes must be a list")
    out: dict[str, Any] = {}
    for pair in value:
        if not isinstance(pair, Mapping) or not isinstance(pair.get("key"), str):
            raise OtlpError(f"{where}.attributes: each must be an object with a string key")
        out[pair["key"][:500]] = _any_value(pair.get("value"), f"{where}.{pair['key'][:80]}", 0)
    return out


def _any_value(value: Any, where: str, depth: int) -> Any:
    if value is None:
        return None
    if depth > MAX_ATTRIBUTE_DEPTH:
        raise OtlpError(f"{where}: attribute values nest deeper than {MAX_ATTRIBUTE_DEPTH}")
    if not isinstance(value, Mapping):
        raise OtlpError(f"{where}: an attribute value must be an AnyValue object")
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            raise OtlpError(f"{where}: intValue is not an integer") from None
    if "doubleValue" in value:
        number = value["doubleValue"]
        if not isinstance(number, int | float) or isinstance(number, bool):
            raise OtlpError(f"{where}: doubleValue is not a number")
        return float(number) if number == number and abs(number) != float("inf") else None
    if "arrayValue" in value:
        items = _object(value["arrayValue"], where).get("values") or []
        if not isinstance(items, list):
            raise OtlpError(f"{where}: arrayValue.values must be a list")
        return [_any_value(item, where, depth + 1) for item in items]
    if "kvlistValue" in value:
        pairs = _object(value["kvlistValue"], where).get("values") or []
        if not isinstance(pairs, list):
            raise OtlpError(f"{where}: kvlistValue.values must be a list")
        nested: dict[str, Any] = {}
        for pair in pairs:
            if not isinstance(pair, Mapping) or not isinstance(pair.get("key"), str):
                raise OtlpError(f"{where}: each kvlist entry must have a string key")
            nested[pair["key"][:500]] = _any_value(pair.get("value"), where, depth + 1)
        return nested
    if "bytesValue" in value:
        return str(value["bytesValue"])  # kept as the base64 (or hex) text it came as
    return None


NOT_GENAI = "not a GenAI span (no known gen_ai.operation.name)"


def session_key(span: ObservedSpan, conversation: str | None) -> str:
    """The key that groups spans into one session of an owner: the conversation id, else
    the trace id."""
    return f"conversation:{conversation}" if conversation else f"trace:{span.trace_id}"


# --- the state a conversation's session keeps between requests --------------------------------


@dataclass(slots=True)
class IngestState:
    """What the planner must know of what earlier requests recorded (kept as JSON)."""

    turn: int = -1  # the last turn number used
    open_trace: str | None = None  # the trace whose turn is open
    open_root: dict[str, Any] | None = None  # its invoke_agent span, once seen
    step: int | None = None  # the open step of the open turn
    next_step: int = 0
    header_seq: int | None = None
    header_sha: str | None = None
    leaf: str | None = None  # the last entry recorded
    path: list[str] = field(default_factory=list)  # keys of the messages on the path
    calls: list[str] = field(default_factory=list)  # tool call ids dispatched (tool/call)
    tool_names: dict[str, str] = field(default_factory=dict)  # call id → tool name
    last_time: str | None = None  # the time of the last fact
    call_steps: dict[str, int] = field(default_factory=dict)  # the open turn's call id → step
    # The last CLOSED_KEPT turns closed, by trace: {"turn", "next_step", "call_steps"}.
    closed: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}  # type: ignore[attr-defined]

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> IngestState:
        state = cls()
        for name in cls.__slots__:  # type: ignore[attr-defined]
            if data and name in data:
                setattr(state, name, data[name])
        return state.copy()

    def copy(self) -> IngestState:
        """A copy that shares nothing that planning changes (a refused span's changes are
        undone by going back to a copy taken before it)."""
        state = IngestState(**{name: getattr(self, name) for name in self.__slots__})  # type: ignore[attr-defined]
        state.open_root = dict(self.open_root) if self.open_root is not None else None
        state.path, state.calls = list(self.path), list(self.calls)
        state.tool_names, state.call_steps = dict(self.tool_names), dict(self.call_steps)
        state.closed = {
            trace: {**turn, "call_steps": dict(turn.get("call_steps") or {})}
            for trace, turn in self.closed.items()
        }
        return state


@dataclass(frozen=True, slots=True)
class Fact:
    """One event to append: its type, data, and turn and step columns."""

    type: str
    data: Mapping[str, Any]
    turn: int | None = None
    step: int | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    facts: tuple[Fact, ...]
    state: IngestState
    recorded_spans: tuple[ObservedSpan, ...]
    rejected: tuple[tuple[ObservedSpan, str], ...]  # (span, why) not recorded


def plan_spans(
    state: IngestState, spans: Sequence[ObservedSpan], *, first_seq: int, max_event_bytes: int
) -> Plan:
    """The facts that record `spans` (of one conversation, none recorded before) after the
    facts `state` describes. `first_seq` is the seq the first fact will take (header seqs
    are named by later requests); a span whose facts would be over `max_event_bytes` is
    rejected, not cut."""
    planner = _Planner(state.copy(), first_seq, max_event_bytes)
    ordered = sorted(spans, key=lambda s: (s.start_ns, -s.end_ns, s.span_id))
    for span in ordered:
        planner.add(span)
    planner.finish()
    return Plan(
        tuple(planner.facts), planner.state, tuple(planner.recorded), tuple(planner.rejected)
    )


class _Planner:
    def __init__(self, state: IngestState, first_seq: int, max_event_bytes: int) -> None:
        self.state = state
        self.first_seq = first_seq
        self.max_event_bytes = max_event_bytes
        self.facts: list[Fact] = []
        self.recorded: list[ObservedSpan] = []
        self.rejected: list[tuple[ObservedSpan, str]] = []
        self.entries_of: dict[str, int] = {}

    # one span --------------------------------------------------------------------------

    def add(self, span: ObservedSpan) -> None:
        operation = span.operation
        if operation not in OPERATIONS:
            self.rejected.append((span, NOT_GENAI))
            return
        mark = (len(self.facts), self.state.copy())
        try:
            if operation == OP_INVOKE_AGENT and self._closed_elsewhere(span):
                self._late_agent(span)
            elif operation == OP_INVOKE_AGENT:
                self._agent(span)
            elif self._closed_elsewhere(span):
                self._late(span, operation)
            elif operation == OP_EXECUTE_TOOL:
                self._tool(span)
            else:
                self._chat(span)
            self._check_sizes(mark[0])
        except _Refused as refused:
            del self.facts[mark[0] :]
            self.state = mark[1]
            self.rejected.append((span, str(refused)))
            return
        self.recorded.append(span)

    def finish(self) -> None:
        """Close the open turn if its invoke_agent span has been seen."""
        if self.state.open_root is not None:
            self._close_turn()

    def _check_sizes(self, start: int) -> None:
        for fact in self.facts[start:]:
            # As the store measures an event: its data's compact JSON, in UTF-8.
            size = len(json.dumps(fact.data, ensure_ascii=False, separators=(",", ":")).encode())
            if size > self.max_event_bytes:
                raise _Refused(
                    f"its {fact.type} would be {size} bytes, over the {self.max_event_bytes} "
                    "an event may hold"
                )

    # turns and steps -------------------------------------------------------------------

    def _ensure_turn(self, span: ObservedSpan) -> int:
        state = self.state
        if state.open_trace is not None and state.open_trace != span.trace_id:
            self._close_turn()
        if state.open_trace is None:
            state.turn += 1
            state.open_trace = span.trace_id
            state.open_root = None
            state.step = None
            state.next_step = 0
            state.call_steps = {}
            self._emit(
                "turn/start",
                {"turn": state.turn, "trigger": "message"},
                span,
                span.start_ns,
                turn=state.turn,
                main=False,
            )
        return state.turn

    def _close_step(self, when_ns: int | None = None) -> None:
        state = self.state
        if state.step is None:
            return
        self.facts.append(
            Fact(
                "step/end",
                {
                    "turn": state.turn,
                    "step": state.step,
                    "reason": "completed",
                    "observed": {"time": state.last_time},
                },
                state.turn,
                state.step,
            )
        )
        state.step = None

    def _close_turn(self) -> None:
        state = self.state
        if state.open_trace is None:
            return
        self._close_step()
        root = state.open_root or {}
        data: dict[str, Any] = {
            "turn": state.turn,
            "reason": "error" if root.get("failed") else "completed",
        }
        if root.get("failed"):
            data["error"] = root.get("error") or "the agent's span ended with an error"
        data["observed"] = root.get("observed") or {"time": state.last_time}
        self.facts.append(Fact("turn/end", data, state.turn))
        if root.get("end"):
            state.last_time = root["end"]
        self._remember_closed(state.open_trace, state.turn, state.next_step, state.call_steps)
        state.open_trace = None
        state.open_root = None
        state.call_steps = {}

    def _remember_closed(
        self, trace: str, turn: int, next_step: int, call_steps: dict[str, int]
    ) -> None:
        closed = self.state.closed
        closed.pop(trace, None)
        closed[trace] = {"turn": turn, "next_step": next_step, "call_steps": call_steps}
        while len(closed) > CLOSED_KEPT:
            del closed[next(iter(closed))]

    def _late(self, span: ObservedSpan, operation: str) -> None:
        """Record a chat or execute_tool span in its trace's closed turn: the open turn's
        place is set aside, the closed turn's taken, the span recorded as in any turn (a
        chat's step closed again at once), and the open turn's place given back."""
        state = self.state
        held = (state.turn, state.open_trace, state.open_root, state.step, state.next_step)
        held_calls = state.call_steps
        closed = state.closed[span.trace_id]
        state.turn, state.open_trace, state.open_root = closed["turn"], span.trace_id, None
        state.step, state.next_step = None, closed["next_step"]
        state.call_steps = closed["call_steps"]
        if operation == OP_EXECUTE_TOOL:
            self._tool(span)
        else:
            self._chat(span)
        self._close_step()
        closed["next_step"], closed["call_steps"] = state.next_step, state.call_steps
        state.turn, state.open_trace, state.open_root, state.step, state.next_step = held
        state.call_steps = held_calls

    def _closed_elsewhere(self, span: ObservedSpan) -> bool:
        """Whether the span's trace is a turn closed already (not the one open now)."""
        return span.trace_id in self.state.closed and span.trace_id != self.state.open_trace

    def _late_agent(self, span: ObservedSpan) -> None:
        """An invoke_agent span whose turn was closed before it came (a span of another
        trace closed it): what it says of the turn — its status, its end, its ids and its
        unmapped attributes — is recorded as that turn's `turn/observed`, and the turn is
        drawn with it. The turn open meanwhile, if any, is left as it is."""
        turn = self.state.closed[span.trace_id]["turn"]
        data: dict[str, Any] = {"turn": turn, "reason": "error" if span.failed else "completed"}
        if span.failed:
            data["error"] = _error_text(span) or "the agent's span ended with an error"
        last_time = self.state.last_time
        self._emit("turn/observed", data, span, span.end_ns, turn=turn, main=True)
        self.state.last_time = last_time

    def _open_step(self, span: ObservedSpan) -> int:
        state = self.state
        self._close_step()
        state.step = state.next_step
        state.next_step += 1
        self._emit(
            "step/start",
            {"turn": state.turn, "step": state.step},
            span,
            span.start_ns,
            turn=state.turn,
            step=state.step,
            main=False,
        )
        return state.step

    # the three operations ---------------------------------------------------------------

    def _agent(self, span: ObservedSpan) -> None:
        self._ensure_turn(span)
        # Closed after the spans of this request that it holds: its facts (ids, times and
        # unmapped attributes) ride on the turn's `turn/end`.
        self.state.open_root = {
            "failed": span.failed,
            "error": _error_text(span),
            "end": _iso(span.end_ns),
            "observed": _observed(span, span.end_ns, main=True),
        }

    def _chat(self, span: ObservedSpan) -> None:
        turn = self._ensure_turn(span)
        attrs = span.attributes
        system_prompt, system_parts = _instructions(attrs.get(GEN_AI_SYSTEM_INSTRUCTIONS))
        inputs = _messages(attrs.get(GEN_AI_INPUT_MESSAGES), GEN_AI_INPUT_MESSAGES)
        if inputs is not None:
            # System messages inside the input are instructions too (older producers).
            kept = []
            for message in inputs:
                if message.get("role") == "system":
                    text = _parts_text(message.get("parts"))
                    system_prompt = "\n\n".join(p for p in (system_prompt, text) if p)
                    system_parts = [*system_parts, *(message.get("parts") or [])]
                else:
                    kept.append(message)
            self._add_inputs(kept, span)
        step = self._open_step(span)
        header = {
            "reason": "initial" if self.state.header_seq is None else "change",
            "provider": _provider(span),
            "model": str(attrs.get(GEN_AI_REQUEST_MODEL) or attrs.get(GEN_AI_RESPONSE_MODEL) or ""),
            "params": _params(attrs),
            "system_prompt": system_prompt,
            "tools": _tool_definitions(attrs.get(GEN_AI_TOOL_DEFINITIONS)),
            "thinking_level": "off",
        }
        header_sha = hashlib.sha256(canonical_json({**header, "reason": ""})).hexdigest()
        if header_sha != self.state.header_sha:
            self._emit("request/header", header, span, span.start_ns, turn=turn, step=step)
            self.state.header_seq = self.first_seq + len(self.facts) - 1
            self.state.header_sha = header_sha
        recorded = {
            "system_instructions": system_parts,
            "messages": inputs if inputs is not None else [],
        }
        input_tokens = _int(attrs.get(GEN_AI_USAGE_INPUT_TOKENS))
        recorded_json = canonical_json(recorded)
        self._emit(
            "request/sent",
            {
                "header_seq": self.state.header_seq,
                "leaf_entry_id": self.state.leaf,
                "payload_sha256": hashlib.sha256(recorded_json).hexdigest(),
                "token_estimate": input_tokens
                if input_tokens is not None
                else len(recorded_json) // 4,
                "attempt": 1,
                "recorded_input": recorded,
                "content_captured": inputs is not None,
            },
            span,
            span.start_ns,
            turn=turn,
            step=step,
            main=True,
        )
        self._add_reply(span, turn, step)

    def _tool(self, span: ObservedSpan) -> None:
        turn = self._ensure_turn(span)
        attrs = span.attributes
        state = self.state
        call_id = str(attrs.get(GEN_AI_TOOL_CALL_ID) or f"span-{span.span_id}")[:200]
        # The open step; for a late span, the step whose reply asked for the call.
        step = state.step if state.step is not None else state.call_steps.get(call_id)
        if step is None:
            step = self._open_step(span)
        name = str(attrs.get(GEN_AI_TOOL_NAME) or span.name.removeprefix("execute_tool ").strip())
        name = name[:200] or "tool"
        arguments = attrs.get(GEN_AI_TOOL_CALL_ARGUMENTS)
        if call_id not in state.calls:
            self._emit(
                "tool/call",
                {"call_id": call_id, "tool": name, "arguments": _text_of(arguments)},
                span,
                span.start_ns,
                turn=turn,
                step=step,
                main=True,
            )
            state.calls.append(call_id)
        state.tool_names[call_id] = name
        if f"r:{call_id}" in state.path:
            return
        result = attrs.get(GEN_AI_TOOL_CALL_RESULT)
        text = _text_of(result) if result is not None else _error_text(span) or ""
        message = {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": name,
            "content": [{"type": "text", "text": text}],
            "isError": span.failed,
            "timestamp": span.end_ns // 1_000_000,
        }
        self._entry("tool/result", message, f"r:{call_id}", span, span.end_ns, turn, step)

    # messages ---------------------------------------------------------------------------

    def _add_inputs(self, inputs: list[dict[str, Any]], span: ObservedSpan) -> None:
        """Add the input messages that are not on the path yet (those after the longest
        prefix the path and the input share)."""
        converted: list[tuple[str, str, dict[str, Any]]] = []
        for message in inputs:
            converted.extend(self._pi_messages(message, span.start_ns))
        keys = [key for _, key, _ in converted]
        known = 0
        path = self.state.path
        while known < min(len(keys), len(path)) and keys[known] == path[known]:
            known += 1
        recorded_results = {k for k in path if k.startswith("r:")}
        turn, step = self.state.turn, self.state.step
        for event_type, key, message in converted[known:]:
            if key in recorded_results:
                continue
            self._entry(event_type, message, key, span, span.start_ns, turn, step)

    def _pi_messages(
        self, message: Mapping[str, Any], time_ns: int
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """One GenAI message as Pi messages (a message of tool responses is one toolResult
        each), each with its event type and its key on the path."""
        role = message.get("role")
        parts = [p for p in message.get("parts") or [] if isinstance(p, Mapping)]
        stamp = time_ns // 1_000_000
        if role == "assistant":
            content = _assistant_content(parts)
            pi = {
                "role": "assistant",
                "content": content,
                "stopReason": "toolUse" if _has_calls(content) else "stop",
                "timestamp": stamp,
            }
            return [("assistant/message", _key("a", content), pi)]
        out: list[tuple[str, str, dict[str, Any]]] = []
        texts: list[dict[str, Any]] = []
        for part in parts:
            if part.get("type") == "tool_call_response":
                call_id = str(part.get("id") or "")[:200]
                name = self.state.tool_names.get(call_id) or str(part.get("name") or "")[:200]
                # semconv names the result `response`; Pydantic AI writes `result`.
                response = part.get("response", part.get("result"))
                result = {
                    "role": "toolResult",
                    "toolCallId": call_id,
                    "toolName": name,
                    "content": [{"type": "text", "text": _text_of(response)}],
                    "isError": False,
                    "timestamp": stamp,
                }
                out.append(("tool/result", f"r:{call_id}", result))
            else:
                texts.append({"type": "text", "text": _part_text(part)})
        if texts or not out:
            user = {"role": "user", "content": texts, "timestamp": stamp}
            out.insert(0, ("user/message", _key("u", texts), user))
        return out

    def _add_reply(self, span: ObservedSpan, turn: int, step: int) -> None:
        attrs = span.attributes
        outputs = _messages(attrs.get(GEN_AI_OUTPUT_MESSAGES), GEN_AI_OUTPUT_MESSAGES)
        content: list[dict[str, Any]] = []
        finish: str | None = None
        for output in outputs or []:
            content.extend(
                _assistant_content([p for p in output.get("parts") or [] if isinstance(p, Mapping)])
            )
            finish = finish or (str(output["finish_reason"]) if "finish_reason" in output else None)
        reasons = attrs.get(GEN_AI_RESPONSE_FINISH_REASONS)
        if finish is None and isinstance(reasons, list) and reasons:
            finish = str(reasons[0])
        if span.failed and not content:
            stop = "error"
        elif _has_calls(content):
            stop = "toolUse"
        else:
            stop = {"length": "length", "error": "error"}.get(finish or "", "stop")
        for block in content:
            if block.get("type") == "toolCall":
                self.state.tool_names[str(block["id"])] = str(block.get("name") or "")
                self.state.call_steps[str(block["id"])] = step
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "api": "otel-genai",
            "provider": _provider(span),
            "model": str(attrs.get(GEN_AI_RESPONSE_MODEL) or attrs.get(GEN_AI_REQUEST_MODEL) or ""),
            "usage": _usage(attrs),
            "stopReason": stop,
            "timestamp": span.end_ns // 1_000_000,
        }
        if stop == "error":
            message["errorMessage"] = _error_text(span) or "the model request failed"
        extra: dict[str, Any] = {
            "timing": {"duration_ms": (span.end_ns - span.start_ns) // 1_000_000},
            "content_captured": outputs is not None,
        }
        if stop == "error":
            extra["fault"] = {"kind": "observed", "message": message["errorMessage"]}
        self._entry(
            "assistant/message", message, _key("a", content), span, span.end_ns, turn, step, extra
        )

    def _entry(
        self,
        event_type: str,
        message: dict[str, Any],
        key: str,
        span: ObservedSpan,
        time_ns: int,
        turn: int | None,
        step: int | None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        # Derived from the span alone, so the same span gives the same ids however the
        # exporter batched it.
        nth = self.entries_of.get(span.span_id, 0)
        self.entries_of[span.span_id] = nth + 1
        seed = f"{span.trace_id}:{span.span_id}:{key}:{nth}"
        entry_id = hashlib.sha256(seed.encode()).hexdigest()[:12]
        entry = {
            "type": "message",
            "id": entry_id,
            "parentId": self.state.leaf,
            "timestamp": _iso(time_ns),
            "message": message,
        }
        self._emit(event_type, {"entry": entry, **(extra or {})}, span, time_ns, turn, step)
        self.state.leaf = entry_id
        self.state.path.append(key)

    def _emit(
        self,
        event_type: str,
        data: Mapping[str, Any],
        span: ObservedSpan,
        time_ns: int,
        turn: int | None = None,
        step: int | None = None,
        *,
        main: bool = False,
    ) -> None:
        observed = _observed(span, time_ns, main=main)
        self.facts.append(
            Fact(
                event_type,
                {**data, "observed": observed},
                turn,
                step,
            )
        )
        self.state.last_time = observed["time"]


class _Refused(Exception):
    pass


# --- small readers ---------------------------------------------------------------------------


def _observed(span: ObservedSpan, time_ns: int, *, main: bool) -> dict[str, Any]:
    """What a fact keeps of its span: its time and ids; on the span's main fact also its
    name, operation, times, status and every attribute not mapped to the fact."""
    observed: dict[str, Any] = {"time": _iso(time_ns), **_ids(span)}
    if main:
        observed["operation"] = span.operation
        observed["name"] = span.name
        observed["start"] = _iso(span.start_ns)
        observed["end"] = _iso(span.end_ns)
        unmapped = {k: v for k, v in span.attributes.items() if k not in MAPPED}
        if unmapped:
            observed["attributes"] = unmapped
        if span.resource:
            observed["resource"] = dict(span.resource)
        if span.scope:
            observed["scope"] = span.scope
        if span.failed:
            observed["error"] = _error_text(span) or "error"
    return observed


def _ids(span: ObservedSpan) -> dict[str, Any]:
    ids: dict[str, Any] = {"trace_id": span.trace_id, "span_id": span.span_id}
    if span.parent_span_id:
        ids["parent_span_id"] = span.parent_span_id
    return ids


def _iso(nanos: int) -> str:
    moment = datetime.fromtimestamp(nanos // 1_000_000_000, UTC)
    micros = (nanos % 1_000_000_000) // 1000
    return moment.replace(microsecond=micros).isoformat(timespec="microseconds")[:-6] + "Z"


def observed_time(data: Mapping[str, Any]) -> datetime | None:
    """The span time a fact recorded from OpenTelemetry keeps (None for other facts)."""
    observed = data.get("observed")
    if not isinstance(observed, Mapping):
        return None
    text = observed.get("time")
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def with_late_agent(
    end: Mapping[str, Any], observed: Mapping[str, Any] | None
) -> Mapping[str, Any]:
    """A turn's `turn/end` data as its `turn/observed` (the turn's agent span, come after
    the turn closed) amends it: a failed agent span fails a turn closed as completed, with
    its error, as it would had the span come in time."""
    if observed is None or observed.get("reason") != "error" or end.get("reason") != "completed":
        return end
    return {**end, "reason": "error", "error": observed.get("error")}


def observed_pairs(data: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """What a trace shows of the span a fact was recorded from: its ids, and the attributes
    Strand did not map (as indented JSON, under `attributes`)."""
    observed = data.get("observed")
    if not isinstance(observed, Mapping) or "operation" not in observed:
        return ()
    pairs: list[tuple[str, Any]] = [
        ("otel_span", f"{observed.get('trace_id')}/{observed.get('span_id')}"),
        ("otel_name", observed.get("name")),
    ]
    unmapped = observed.get("attributes")
    if isinstance(unmapped, Mapping) and unmapped:
        pairs.append(("attributes", json.dumps(unmapped, indent=2, ensure_ascii=False)))
    return tuple(pairs)


def _json_value(value: Any) -> Any:
    """An attribute that semconv defines as structured: producers send it as a JSON string
    (most) or as an OTLP structure."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _messages(value: Any, name: str) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    value = _json_value(value)
    if not isinstance(value, list) or not all(isinstance(m, Mapping) for m in value):
        raise _Refused(f"{name} is not a list of messages")
    return [dict(m) for m in value]


def _instructions(value: Any) -> tuple[str, list[Any]]:
    if value is None:
        return "", []
    value = _json_value(value)
    if isinstance(value, str):
        return value, [{"type": "text", "content": value}]
    if isinstance(value, list):
        return _parts_text(value), list(value)
    raise _Refused(f"{GEN_AI_SYSTEM_INSTRUCTIONS} is not a list of parts")


def _parts_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "\n\n".join(_part_text(p) for p in parts if isinstance(p, Mapping))


def _part_text(part: Mapping[str, Any]) -> str:
    kind = part.get("type")
    if kind in ("text", "reasoning", None) and "content" in part:
        return _text_of(part.get("content"))
    return f"[{kind or 'part'}] " + _text_of({k: v for k, v in part.items() if k != "type"})


def _text_of(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _assistant_content(parts: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for part in parts:
        kind = part.get("type")
        if kind == "tool_call":
            arguments = _json_value(part.get("arguments"))
            content.append(
                {
                    "type": "toolCall",
                    "id": str(part.get("id") or "")[:200],
                    "name": str(part.get("name") or "")[:200],
                    "arguments": arguments if isinstance(arguments, dict) else {"value": arguments},
                }
            )
        elif kind == "reasoning":
            content.append({"type": "thinking", "thinking": _text_of(part.get("content"))})
        else:
            content.append({"type": "text", "text": _part_text(part)})
    return content


def _has_calls(content: Sequence[Mapping[str, Any]]) -> bool:
    return any(block.get("type") == "toolCall" for block in content)


def _key(kind: str, content: Any) -> str:
    return f"{kind}:" + hashlib.sha256(canonical_json(content)).hexdigest()[:16]


def _provider(span: ObservedSpan) -> str:
    value = span.attributes.get(GEN_AI_PROVIDER_NAME) or span.attributes.get(GEN_AI_SYSTEM)
    return str(value or "unknown")[:200]


def _params(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key.removeprefix(GEN_AI_REQUEST_PREFIX): value
        for key, value in sorted(attrs.items())
        if key.startswith(GEN_AI_REQUEST_PREFIX) and key != GEN_AI_REQUEST_MODEL
    }


def _tool_definitions(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    value = _json_value(value)
    if not isinstance(value, list):
        raise _Refused(f"{GEN_AI_TOOL_DEFINITIONS} is not a list")
    tools = []
    for tool in value:
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        inner: Mapping[str, Any] = function if isinstance(function, Mapping) else tool
        tools.append(
            {
                "name": str(inner.get("name") or ""),
                "description": str(inner.get("description") or ""),
                "parameters": inner.get("parameters") or inner.get("parameters_json_schema") or {},
            }
        )
    return tools


def _usage(attrs: Mapping[str, Any]) -> dict[str, Any]:
    read = _int(attrs.get(GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)) or 0
    write = _int(attrs.get(GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS)) or 0
    # semconv counts cached tokens inside input_tokens; Pi counts them apart.
    total_in = _int(attrs.get(GEN_AI_USAGE_INPUT_TOKENS)) or 0
    output = _int(attrs.get(GEN_AI_USAGE_OUTPUT_TOKENS)) or 0
    fresh = max(total_in - read - write, 0)
    return {
        "input": fresh,
        "output": output,
        "cacheRead": read,
        "cacheWrite": write,
        "totalTokens": fresh + read + write + output,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _error_text(span: ObservedSpan) -> str | None:
    if not span.failed:
        return None
    kind = span.attributes.get(ERROR_TYPE)
    parts = [str(kind)] if kind else []
    if span.status_message:
        parts.append(span.status_message)
    return ": ".join(parts) or None
