"""Running the agent: messages, steering and follow-ups, cancel, retry, replays, approvals,
compaction."""

from __future__ import annotations

import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from django.urls import reverse
from ninja import Router
from ninja.responses import Status

from sessions_app import access, agent, selectors
from sessions_app.api.base import ERRORS, auth_user
from sessions_app.api.schemas import (
    ApprovalDecisionIn,
    ApprovalOut,
    CancelOut,
    CompactIn,
    CompactOut,
    ErrorOut,
    MessageIn,
    ReplayIn,
    ReplayOut,
    RetryIn,
    SentOut,
    plain,
)
from sessions_app.errors import DomainError
from sessions_app.presets import preset_name_of
from sessions_app.services import otel_ingest, ratelimit, replay

router = Router(tags=["sessions"])


def _send(request: HttpRequest, session_id: uuid.UUID, text: str, mode: str) -> Any:
    user = auth_user(request)
    session = access.session_for(user, session_id, write=True)
    otel_ingest.refuse_if_observed(session)
    ratelimit.rate_hit(user, "message")
    sent = agent.agent_send_message(session, text, mode=mode)
    return Status(202, plain(sent))


@router.post("/sessions/{session_id}/messages", response={202: SentOut, ERRORS: ErrorOut})
def message_send(request: HttpRequest, session_id: uuid.UUID, body: MessageIn) -> Any:
    """Start a turn with this message; returns its turn number (409 while a turn runs)."""
    return _send(request, session_id, body.text, "message")


@router.post("/sessions/{session_id}/steer", response={202: SentOut, ERRORS: ErrorOut})
def message_steer(request: HttpRequest, session_id: uuid.UUID, body: MessageIn) -> Any:
    """Input for the running turn's next step (with no turn running: starts one)."""
    return _send(request, session_id, body.text, "steer")


@router.post("/sessions/{session_id}/follow-up", response={202: SentOut, ERRORS: ErrorOut})
def message_follow_up(request: HttpRequest, session_id: uuid.UUID, body: MessageIn) -> Any:
    """Input that starts the turn after the running one (with none running: starts one)."""
    return _send(request, session_id, body.text, "follow_up")


@router.post("/sessions/{session_id}/cancel", response={202: CancelOut, ERRORS: ErrorOut})
def turn_cancel(request: HttpRequest, session_id: uuid.UUID) -> Any:
    user = auth_user(request)
    session = access.session_for(user, session_id, write=True)
    ratelimit.rate_hit(user, "cancel")
    return Status(202, {"running": agent.agent_cancel(session)})


@router.post("/sessions/{session_id}/retry", response={202: SentOut, ERRORS: ErrorOut})
def turn_retry(request: HttpRequest, session_id: uuid.UUID, body: RetryIn) -> Any:
    """Start a turn that asks the model again from where a failed reply was asked (409
    while a turn runs; 422 for a reply that did not fail)."""
    user = auth_user(request)
    session = access.session_for(user, session_id, write=True)
    otel_ingest.refuse_if_observed(session)
    ratelimit.rate_hit(user, "message")
    return Status(202, plain(agent.agent_retry(session, body.entry_id)))


@router.post(
    "/sessions/{session_id}/requests/{seq}/replay", response={202: ReplayOut, ERRORS: ErrorOut}
)
def request_replay(request: HttpRequest, session_id: uuid.UUID, seq: int, body: ReplayIn) -> Any:
    """Send the model request recorded at `seq` (a `request/sent`) again from its leaf, with
    a preset the server offers (default: the session's) and optional overrides; several
    replays (`presets`, `count`: at most five) run one after another. Each answer becomes a
    sibling of the original answer. 404 for an unknown request, 409 while a turn runs or
    when the recorded payload no longer matches its hash, 422 for an unknown preset or a
    bad override; staff may read but not replay (403)."""
    user = auth_user(request)
    session = access.session_for(user, session_id, write=True)
    names = body.presets or [body.preset or preset_name_of(session.preset)]
    plans = replay.replay_plans(
        preset_names=names,
        count=body.count,
        system_prompt=body.system_prompt,
        params=body.params,
        thinking_level=body.thinking_level,
    )
    ratelimit.rate_hit(user, "replay")
    started = replay.replay_start(session, seq, plans)
    group_url = reverse("session-replay-group", args=[session.id, started.group])
    return Status(
        202,
        {
            "group": started.group,
            "turns": list(started.turns),
            "request_seq": seq,
            "group_url": group_url,
            "compare_url": f"{group_url}?then=compare",
        },
    )


@router.get("/sessions/{session_id}/approvals", response={200: list[ApprovalOut], ERRORS: ErrorOut})
def approval_list(request: HttpRequest, session_id: uuid.UUID) -> Any:
    session = access.session_for(auth_user(request), session_id)
    return [plain(a) for a in selectors.open_turn_approvals(session)]


@router.post(
    "/sessions/{session_id}/approvals/{approval_id}", response={204: None, ERRORS: ErrorOut}
)
def approval_decide(
    request: HttpRequest, session_id: uuid.UUID, approval_id: str, body: ApprovalDecisionIn
) -> Any:
    user = auth_user(request)
    session = access.session_for(user, session_id, write=True)
    if len(approval_id) > 64:
        raise DomainError("an approval id is at most 64 characters")
    ratelimit.rate_hit(user, "approval")
    agent.agent_decide_approval(session, approval_id, outcome=body.outcome, by=user.get_username())
    return Status(204, None)


@router.post("/sessions/{session_id}/compact", response={200: CompactOut, ERRORS: ErrorOut})
async def compact(request: HttpRequest, session_id: uuid.UUID, body: CompactIn) -> Any:
    """Compact the current path now. (Async: the summary waits for the model.)"""
    session = await sync_to_async(access.session_for)(auth_user(request), session_id, write=True)
    await sync_to_async(ratelimit.rate_hit)(auth_user(request), "compact")
    return plain(await agent.aagent_compact(session, instructions=body.instructions))
