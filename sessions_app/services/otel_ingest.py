"""OpenTelemetry GenAI spans in: the one service that records another agent's spans as the
facts of an observed session (`POST /v1/traces` calls it).

Spans are grouped into sessions by `gen_ai.conversation.id`, else by trace (a trace whose
spans carry no conversation id joins the session an earlier span of that trace went to),
per owner: the key of a conversation is the owner's own. A new conversation gets a new
session, `session/created` with source `observed:otlp`. Its spans are planned
(`projections.otel_ingest.plan_spans`) from the state the conversation's row keeps, and
appended through the append path, so every view, the projectors and the live channel see
them as any other facts.

One request is one transaction: what it records is all written, or nothing is. The rows of
the body's conversations are locked (in one statement, in the order of their keys) while
their spans are planned and written, so two requests for one conversation are recorded one
after the other. A span already recorded (the same trace and span id in that session) is
skipped: sending a body twice changes nothing.

The work of a body is a few statements whatever its size: its spans already recorded are
found in one query (and again, exactly, in one query under the locks), the sessions of its
new conversations are inserted together, the facts of all its conversations (each after its
`session/created`, for a new one) are one `store.append_events_many`, and its span rows and
the conversations' states are written once each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from projections.otel_ingest import (
    GEN_AI_AGENT_NAME,
    NOT_GENAI,
    OPERATIONS,
    SOURCE,
    IngestState,
    ObservedSpan,
    Plan,
    plan_spans,
    session_key,
)
from sessions_app import selectors, services, store
from sessions_app.errors import DomainError
from sessions_app.models import ObservedConversation, Session
from sessions_app.models import ObservedSpan as SpanRow
from sessions_app.store import NewEvent

TITLE_MAX = 200


class ObservedSession(DomainError):
    """A turn asked of an observed session: its agent runs elsewhere, Strand only records."""

    code = "not_allowed"


def refuse_if_observed(session: Session) -> None:
    """Refuse to run a turn in an observed session (a message, a retry): it records what
    another agent did, with that agent's tools, which Strand does not have."""
    if selectors.session_is_observed(session):
        raise ObservedSession(
            "this session is observed: it records another agent's OpenTelemetry spans, and "
            "nothing runs in it (its model requests can be replayed against a preset)"
        )


@dataclass
class IngestResult:
    """What one request recorded: spans taken (recorded now or before) and refused."""

    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)
    sessions: list[Session] = field(default_factory=list)

    @property
    def message(self) -> str:
        """OTLP's partial-success message: why spans were refused (the first few)."""
        if not self.rejected:
            return ""
        shown = "; ".join(self.reasons[:5])
        more = f" (and {len(self.reasons) - 5} more)" if len(self.reasons) > 5 else ""
        return f"{self.rejected} span(s) not recorded: {shown}{more}"


def otel_ingest(*, owner: User, spans: Sequence[ObservedSpan]) -> IngestResult:
    """Record `spans` (of one export request) in `owner`'s observed sessions."""
    result = IngestResult()
    unique = {(s.trace_id, s.span_id): s for s in spans}
    result.duplicates += len(spans) - len(unique)
    genai = []
    for span in unique.values():
        if span.operation in OPERATIONS:
            genai.append(span)
        else:  # refused here, so that no session is made for spans of no conversation
            result.rejected += 1
            result.reasons.append(f"span {span.span_id} ({span.name[:60]}): {NOT_GENAI}")
    # Spans this owner's sessions hold already, found in one query (checked again under
    # the conversations' locks below, which is what makes it exact).
    known = set(_recorded_spans(SpanRow.objects.filter(session__owner=owner), genai))
    fresh = [s for s in genai if (s.trace_id, s.span_id) not in known]
    result.duplicates += len(genai) - len(fresh)
    result.accepted += len(genai) - len(fresh)
    if not fresh:
        return result
    with transaction.atomic():
        groups = _grouped(owner, fresh)
        conversations = _conversations(owner, groups)
        recorded = _recorded(conversations.values(), fresh)
        planned = []
        for key in sorted(groups):
            group = [s for s in groups[key] if (s.trace_id, s.span_id) not in recorded]
            result.duplicates += len(groups[key]) - len(group)
            result.accepted += len(groups[key]) - len(group)
            one = _plan(conversations[key], group)
            if one is not None:
                planned.append(one)
        _append(planned)
        SpanRow.objects.bulk_create([r for one in planned for r in _recorded_rows(one, result)])
        ObservedConversation.objects.bulk_update([c.row for c in conversations.values()], ["state"])
    return result


def _grouped(owner: User, spans: list[ObservedSpan]) -> dict[str, list[ObservedSpan]]:
    by_trace: dict[str, list[ObservedSpan]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    # A trace without a conversation id: the session an earlier span of it was recorded in.
    unnamed = [t for t, members in by_trace.items() if not any(s.conversation_id for s in members)]
    earlier: dict[str, Any] = {}
    keys_of: dict[Any, str] = {}
    if unnamed:
        earlier = dict(
            SpanRow.objects.filter(session__owner=owner, trace_id__in=unnamed)
            .values_list("trace_id", "session_id")
            .distinct()
        )
        keys_of = dict(
            ObservedConversation.objects.filter(session_id__in=set(earlier.values())).values_list(
                "session_id", "key"
            )
        )
    groups: dict[str, list[ObservedSpan]] = defaultdict(list)
    for trace_id, members in by_trace.items():
        conversation = next((s.conversation_id for s in members if s.conversation_id), None)
        if conversation is None and trace_id in earlier:
            key = keys_of[earlier[trace_id]]
        else:
            key = session_key(members[0], conversation)
        groups[key].extend(members)
    return groups


@dataclass
class _Conversation:
    """A conversation's row, locked, and, when this request made its session, the
    `session/created` event still to append before its facts."""

    row: ObservedConversation
    created: NewEvent | None = None


def _conversations(owner: User, groups: dict[str, list[ObservedSpan]]) -> dict[str, _Conversation]:
    """The rows of the conversations `groups` names, locked, those missing made (with their
    sessions) in one insert each."""
    keys = sorted(groups)
    found = {
        row.key: _Conversation(row)
        for row in ObservedConversation.objects.select_for_update(of=("self",))
        .select_related("session")
        .filter(owner=owner, key__in=keys)
        .order_by("key")
    }
    missing = [key for key in keys if key not in found]
    if not missing:
        return found
    try:
        with transaction.atomic():
            found.update(_make(owner, missing, groups))
    except IntegrityError:
        # Another request made one of them meanwhile: take them one at a time, waiting for
        # that request where it holds one.
        for key in missing:
            found[key] = _conversation_one(owner, key, groups[key])
    return found


def _make(
    owner: User, keys: list[str], groups: dict[str, list[ObservedSpan]]
) -> dict[str, _Conversation]:
    built = {
        key: services.session_build(owner=owner, title=_title(groups[key]), source=SOURCE)
        for key in keys
    }
    Session.objects.bulk_create([session for session, _ in built.values()])
    rows = ObservedConversation.objects.bulk_create(
        [
            ObservedConversation(owner=owner, key=key, session=session, state={})
            for key, (session, _) in built.items()
        ]
    )
    return {row.key: _Conversation(row, built[row.key][1]) for row in rows}


def _conversation_one(owner: User, key: str, spans: list[ObservedSpan]) -> _Conversation:
    """One conversation's row, locked, made now (with its session) when missing. Two
    requests that make the same one at once: the second waits for the first and takes its
    row."""
    for _ in range(2):
        found = (
            ObservedConversation.objects.select_for_update(of=("self",))
            .select_related("session")
            .filter(owner=owner, key=key)
            .first()
        )
        if found is not None:
            return _Conversation(found)
        try:
            with transaction.atomic():
                session = services.session_create(owner=owner, title=_title(spans), source=SOURCE)
                made = ObservedConversation.objects.create(
                    owner=owner, key=key, session=session, state={}
                )
                return _Conversation(made)
        except IntegrityError:
            continue
    raise RuntimeError(f"the conversation {key!r} could not be made or found")


def _recorded(
    conversations: Iterable[_Conversation], spans: list[ObservedSpan]
) -> set[tuple[str, str]]:
    """The spans among `spans` the conversations' sessions hold already (under their locks,
    so exact). A span is looked for in every session of the body: its trace and span ids
    name one span, wherever the body's grouping puts it."""
    sessions = [c.row.session_id for c in conversations if c.created is None]
    if not sessions:
        return set()
    return set(_recorded_spans(SpanRow.objects.filter(session_id__in=sessions), spans))


def _recorded_spans(rows: QuerySet[SpanRow], spans: list[ObservedSpan]) -> list[tuple[str, str]]:
    """The (trace id, span id) of `rows` that are among `spans`, found through the trace id's
    index: the work is the rows of the body's traces, not of the whole table."""
    found = rows.filter(
        trace_id__in=list({s.trace_id for s in spans}),
        span_id__in=list({s.span_id for s in spans}),
    )
    return list(found.values_list("trace_id", "span_id"))


@dataclass
class _Planned:
    """A conversation's spans planned: the events to append (its `session/created` first,
    for a session made now) and the seq its first planned fact takes."""

    conversation: _Conversation
    plan: Plan
    events: list[NewEvent]
    first_seq: int


def _plan(conversation: _Conversation, spans: list[ObservedSpan]) -> _Planned | None:
    row, session = conversation.row, conversation.row.session
    head = [conversation.created] if conversation.created is not None else []
    if not spans and not head:
        return None
    first_seq = session.last_seq + 1 + len(head)
    plan = plan_spans(
        IngestState.from_json(row.state),
        spans,
        first_seq=first_seq,
        max_event_bytes=settings.STRAND_MAX_EVENT_BYTES,
    )
    events = head + [NewEvent(f.type, f.data, turn=f.turn, step=f.step) for f in plan.facts]
    return _Planned(conversation, plan, events, first_seq)


def _append(planned: list[_Planned]) -> None:
    """Append every conversation's events in one statement (a conversation of more than
    `STRAND_MAX_BATCH` events in several batches of it, one after the other)."""
    appends = []
    batch = settings.STRAND_MAX_BATCH
    for one in planned:
        session = one.conversation.row.session
        for start in range(0, len(one.events), batch):
            appends.append(
                (session.id, session.last_seq + start, one.events[start : start + batch])
            )
        session.last_seq += len(one.events)
    store.append_events_many(appends)


def _recorded_rows(one: _Planned, result: IngestResult) -> list[SpanRow]:
    """The span rows of what `one` recorded (the caller inserts them, with every other
    conversation's), counted in `result`; the conversation's new state is set, not saved."""
    row, session, plan = one.conversation.row, one.conversation.row.session, one.plan
    for span, why in plan.rejected:
        result.rejected += 1
        result.reasons.append(f"span {span.span_id} ({span.name[:60]}): {why}")
    first_of_span: dict[str, int] = {}
    for offset, fact in enumerate(plan.facts):
        observed = fact.data.get("observed") or {}
        span_id = observed.get("span_id")
        if isinstance(span_id, str):
            first_of_span.setdefault(span_id, one.first_seq + offset)
    row.state = plan.state.to_json()
    result.accepted += len(plan.recorded_spans)
    result.sessions.append(session)  # once: a body's spans are grouped by conversation
    return [
        SpanRow(
            session=session,
            trace_id=s.trace_id,
            span_id=s.span_id,
            seq=first_of_span.get(s.span_id, 0),
        )
        for s in plan.recorded_spans
    ]


def _title(spans: list[ObservedSpan]) -> str:
    for span in spans:
        name = span.attributes.get(GEN_AI_AGENT_NAME)
        if isinstance(name, str) and name.strip():
            return name.strip()[:TITLE_MAX]
    return "Observed agent"
