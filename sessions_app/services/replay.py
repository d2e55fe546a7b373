"""Replaying a recorded model request (the service the API and the pages call).

`replay_start` checks what the user asked for (presets the server offers, bounded
overrides, at most `MAX_REPLAYS` replays), rebuilds the recorded request's payload and
compares its sha256 with the manifest's, then hands the replays to the runtime
(`agent.agent_replay`), which runs them one turn after another under the session's turn
lock. Every check happens before anything is written: a refused replay leaves no trace.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from projections.request import RequestNotFound, RequestView
from runtime.replay import Replayed, ReplayPlan, ReplaySource
from sessions_app import agent, presets, selectors
from sessions_app.access import NotAllowed
from sessions_app.errors import DomainError
from sessions_app.limits import SEQ_MAX
from sessions_app.models import Session
from sessions_app.selectors.requests import request_view

MAX_REPLAYS = 5
SYSTEM_PROMPT_MAX = 100_000
THINKING_LEVELS = ("off", "minimal", "low", "medium", "high", "xhigh")

# The parameters a replay may override, with their bounds: (smallest, largest, integer).
PARAM_BOUNDS: Mapping[str, tuple[float, float, bool]] = {
    "temperature": (0.0, 2.0, False),
    "top_p": (0.0, 1.0, False),
    "max_tokens": (1, 1_000_000, True),
    "presence_penalty": (-2.0, 2.0, False),
    "frequency_penalty": (-2.0, 2.0, False),
    "seed": (0, 2**31 - 1, True),
}


class PayloadMismatch(DomainError):
    """The recorded request cannot be replayed: its payload, rebuilt from the stored facts,
    does not hash to what its manifest recorded."""

    code = "payload_mismatch"


def replay_plans(
    *,
    preset_names: Sequence[str],
    count: int = 1,
    system_prompt: str | None = None,
    params: Mapping[str, Any] | None = None,
    thinking_level: str | None = None,
) -> list[ReplayPlan]:
    """One plan per replay: each preset named, `count` times over. Refuses (422) unknown
    presets, parameters other than `PARAM_BOUNDS`' or out of their bounds, and more than
    `MAX_REPLAYS` replays in all."""
    if not preset_names:
        raise DomainError("name at least one preset to replay with")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise DomainError("count must be a whole number, 1 or more")
    total = len(preset_names) * count
    if total > MAX_REPLAYS:
        raise DomainError(f"at most {MAX_REPLAYS} replays at once (asked for {total})")
    if system_prompt is not None and len(system_prompt) > SYSTEM_PROMPT_MAX:
        raise DomainError(f"the system prompt is longer than {SYSTEM_PROMPT_MAX} characters")
    if thinking_level is not None and thinking_level not in THINKING_LEVELS:
        raise DomainError(f"thinking_level must be one of {', '.join(THINKING_LEVELS)}")
    checked = check_params(params or {})
    resolved = []
    for name in preset_names:
        try:
            resolved.append(presets.preset_resolve(name))
        except presets.PresetNotFound as exc:
            raise NotAllowed(str(exc)) from None
    return [
        ReplayPlan(preset, system_prompt, checked, thinking_level)
        for preset in resolved
        for _ in range(count)
    ]


def check_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameter overrides, each a number within its bounds."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        bounds = PARAM_BOUNDS.get(name)
        if bounds is None:
            allowed = ", ".join(PARAM_BOUNDS)
            raise DomainError(f"parameter {name!r} cannot be overridden (only {allowed})")
        low, high, integer = bounds
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or (integer and not isinstance(value, int)) or not math.isfinite(value):
            kind = "a whole number" if integer else "a number"
            raise DomainError(f"parameter {name} must be {kind}")
        if not low <= value <= high:
            raise DomainError(f"parameter {name} must be from {low:g} to {high:g}")
        out[name] = value
    return out


def replay_source(session: Session, seq: int, view: RequestView | None = None) -> ReplaySource:
    """The request recorded at `seq`, checked: its payload rebuilt from the stored facts
    must hash to what its manifest says (else `PayloadMismatch`, 409). `view`: that
    request's view when the caller has already read it (it is not read again)."""
    if view is None:
        try:
            if not 0 <= seq <= SEQ_MAX:
                raise RequestNotFound(str(seq))
            view = request_view(session, seq)
        except RequestNotFound:
            raise RequestNotFound(f"no model request (request/sent) at seq {seq}") from None
    if not view.matches:
        why = f": {view.error}" if view.error else ""
        raise PayloadMismatch(
            f"request {seq} cannot be replayed: its payload rebuilt from the stored facts does "
            f"not match the hash its manifest recorded{why}"
        )
    if view.leaf_entry_id is None:
        raise DomainError(f"request {seq} was built for no entry: there is nothing to replay")
    header = {
        "provider": view.provider,
        "model": view.model,
        "params": dict(view.params),
        "system_prompt": view.system_prompt,
        "tools": [
            {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}
            for t in view.tools
        ],
        "thinking_level": view.thinking_level or "off",
    }
    # An observed session's tools are its agent's, not Strand's: none of them runs here.
    observed = view.recorded_input is not None or selectors.session_is_observed(session)
    return ReplaySource(seq, view.leaf_entry_id, header, run_tools=not observed)


def replay_start(
    session: Session, seq: int, plans: Sequence[ReplayPlan], *, view: RequestView | None = None
) -> Replayed:
    """Check the recorded request at `seq` and start its replays (409 while a turn runs).
    `view`: the request's view if the caller has read it already."""
    return agent.agent_replay(session, replay_source(session, seq, view), plans)
