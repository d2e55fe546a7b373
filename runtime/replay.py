"""Replaying a recorded model request: the same context, sent again with a preset (the
same or another) and, optionally, another system prompt and other parameters.

A replay is an ordinary turn (trigger `replay`) that moves the leaf back to the leaf the
recorded request was built for and calls the model from there, with no new user message,
so that its answer is a sibling of the original answer. Its first request writes a
`request/header` (reason `replay`) that names the replayed request (`replay_of`, the seq
of its `request/sent`), the preset it ran with and the fields the user overrode.

The header of a replay is the recorded one with the chosen preset's provider, model,
parameters and thinking level, then the user's overrides. The system prompt and the tool
schemas stay the recorded ones (unless the prompt is overridden): the question a replay
answers is what another model would have said at exactly that point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.config import AgentConfig
from runtime.header import request_params

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReplaySource:
    """The recorded request to replay, as checked by the caller (its payload rebuilt and its
    hash compared with the manifest's)."""

    request_seq: int
    leaf_entry_id: str
    header: Mapping[str, Any]  # the fields of the `request/header` it was sent under
    # False for a request another agent sent (an observed session): the model is offered
    # the recorded tools' definitions, but none of them runs here (a call is answered as
    # an unknown tool), whatever its name.
    run_tools: bool = True


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """One replay: the preset it runs with (the server's, resolved) and the overrides."""

    preset: Mapping[str, Any]
    system_prompt: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    thinking_level: str | None = None


@dataclass(frozen=True, slots=True)
class Replayed:
    """What a replay action started: its turns, one after another (the first names the
    group)."""

    group: int
    turns: tuple[int, ...]


def replay_tool_names(source: ReplaySource) -> tuple[str, ...]:
    """The tools the recorded request offered the model (the replay offers the same)."""
    names = []
    for tool in source.header.get("tools") or ():
        if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
            names.append(tool["name"])
    return tuple(names)


def replay_header(source: ReplaySource, config: AgentConfig, plan: ReplayPlan) -> JSON:
    """The header fields (without `reason`) a replay's requests are sent under, with
    `replay_of`, `replay_preset` and `overrides` (the fields the user chose, sorted)."""
    recorded = source.header
    params = request_params(config)
    params.update(plan.params)
    overrides = [f"params.{name}" for name in sorted(plan.params)]
    system_prompt = str(recorded.get("system_prompt") or "")
    if plan.system_prompt is not None:
        system_prompt = plan.system_prompt
        overrides.append("system_prompt")
    thinking_level = config.thinking_level
    if plan.thinking_level is not None:
        thinking_level = plan.thinking_level
        overrides.append("thinking_level")
    return {
        "provider": config.kind,
        "model": config.model,
        "params": params,
        "system_prompt": system_prompt,
        "tools": [dict(tool) for tool in recorded.get("tools") or ()],
        "thinking_level": thinking_level,
        "replay_of": source.request_seq,
        "replay_preset": config.name,
        "overrides": sorted(overrides),
    }
