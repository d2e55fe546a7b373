"""OpenTelemetry GenAI spans in: the one service that records another agent's spans as the
facts of an observed session (`POST /v1/traces` calls it).

Spans are grouped into sessions by `gen_ai.conversation.id`, else by trace (a trace whose
spans carry no conversation id joins the session an earlier span of that trace went to),
per owner: the key of a conversation is the owner's own. A new conversation gets a new
session, `session/created` with source `observed:otlp`. Its spans are planned
(`projections.otel_ingest.plan_spans`) from the state the conversation's row keeps, and
appended through the append path, so every view, the projectors and the live channel see
them as any other facts.

One request is one transaction: what it records is all written, or nothing is. The
conversation's row is locked while its spans are planned and written, so two requests
for one conversation are recorded one after the other. A span already recorded (the same
trace and span id in that session) is skipped: sending a body twice changes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from projections.otel_ingest import (
    GEN_AI_AGENT_NAME,
    NOT_GENAI,
    OPERATIONS,
    SOURCE,
    IngestState,
    ObservedSpan,
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
    # each conversation's lock below, which is what makes it exact).
    known = set(
        SpanRow.objects.filter(
            session__owner=owner, span_id__in=list({s.span_id for s in genai})
        ).values_list("trace_id", "span_id")
    )
    fresh = [s for s in genai if (s.trace_id, s.span_id) not in known]
    result.duplicates += len(genai) - len(fresh)
    result.accepted += len(genai) - len(fresh)
    with transaction.atomic():
        for key, group in sorted(_grouped(owner, fresh).items()):
            _record(owner, key, group, result)
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


def _record(owner: User, key: str, spans: list[ObservedSpan], result: IngestResult) -> None:
    conversation, made = _conversation(owner, key, spans)
    session = conversation.session
    seen: set[tuple[str, str]] = set()
    if not made:  # a conversation made now has no span yet
        ids = [s.span_id for s in spans]
        rows = SpanRow.objects.filter(session=session, span_id__in=ids)
        seen = set(rows.values_list("trace_id", "span_id"))
    fresh = [s for s in spans if (s.trace_id, s.span_id) not in seen]
    result.duplicates += len(spans) - len(fresh)
    result.accepted += len(spans) - len(fresh)
    if not fresh:
        return
    plan = plan_spans(
        IngestState.from_json(conversation.state),
        fresh,
        first_seq=session.last_seq + 1,
        max_event_bytes=settings.STRAND_MAX_EVENT_BYTES,
    )
    for span, why in plan.rejected:
        result.rejected += 1
        result.reasons.append(f"span {span.span_id} ({span.name[:60]}): {why}")
    events = [NewEvent(f.type, f.data, turn=f.turn, step=f.step) for f in plan.facts]
    expected = session.last_seq
    first_of_span: dict[str, int] = {}
    batch = settings.STRAND_MAX_BATCH
    for start in range(0, len(events), batch):
        appended = store.append_events(session.id, expected, events[start : start + batch])
        expected = appended.last_seq
    for offset, fact in enumerate(plan.facts):
        observed = fact.data.get("observed") or {}
        span_id = observed.get("span_id")
        if isinstance(span_id, str):
            first_of_span.setdefault(span_id, session.last_seq + 1 + offset)
    SpanRow.objects.bulk_create(
        [
            SpanRow(
                session=session,
                trace_id=s.trace_id,
                span_id=s.span_id,
                seq=first_of_span.get(s.span_id, 0),
            )
            for s in plan.recorded_spans
        ]
    )
    conversation.state = plan.state.to_json()
    conversation.save(update_fields=["state"])
    result.accepted += len(plan.recorded_spans)
    if session not in result.sessions:
        result.sessions.append(session)


def _conversation(
    owner: User, key: str, spans: list[ObservedSpan]
) -> tuple[ObservedConversation, bool]:
    """The conversation's row, locked, and whether it was made now (with its session). Two
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
            return found, False
        try:
            with transaction.atomic():
                session = services.session_create(owner=owner, title=_title(spans), source=SOURCE)
                made = ObservedConversation.objects.create(
                    owner=owner, key=key, session=session, state={}
                )
                return made, True
        except IntegrityError:
            continue
    raise RuntimeError(f"the conversation {key!r} could not be made or found")


def _title(spans: list[ObservedSpan]) -> str:
    for span in spans:
        name = span.attributes.get(GEN_AI_AGENT_NAME)
        if isinstance(name, str) and name.strip():
            return name.strip()[:TITLE_MAX]
    return "Observed agent"
