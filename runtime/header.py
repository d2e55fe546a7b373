"""The `request/header` of a session's model requests: provider, model, parameters, the
rendered system prompt and the tool schemas, as one snapshot.

The params hold everything `build_payload` copies to the top of the body, including the
streaming switches, so that the payload rebuilt from the header is byte for byte the body
that was sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from projections.payload import canonical_json
from runtime.config import AgentConfig

JSON = dict[str, Any]

# The header fields that decide a request; a change in any of them writes a new header.
FIELDS = ("provider", "model", "params", "system_prompt", "tools", "thinking_level")


def request_params(config: AgentConfig) -> JSON:
    """Body parameters for the provider: the preset's own, plus streaming."""
    params: JSON = dict(config.params)
    params["stream"] = True
    if config.kind == "openai":
        params["stream_options"] = {"include_usage": True}
    return params


def render_system_prompt(config: AgentConfig) -> str:
    prompt = config.system_prompt.strip()
    if config.tools and config.cwd:
        workspace = (
            "Your tools work inside the session's working directory; give paths relative to it."
        )
        prompt = f"{prompt}\n\n{workspace}" if prompt else workspace
    return prompt


def render_header(config: AgentConfig, tool_schemas: Sequence[Mapping[str, Any]]) -> JSON:
    """The header fields (without `reason`) for the session's current settings."""
    return {
        "provider": config.kind,
        "model": config.model,
        "params": request_params(config),
        "system_prompt": render_system_prompt(config),
        "tools": [dict(schema) for schema in tool_schemas],
        "thinking_level": config.thinking_level,
    }


def same_header(stored: Mapping[str, Any] | None, rendered: Mapping[str, Any]) -> bool:
    """Whether a stored header (as read back from the log) equals a rendered one."""
    if stored is None:
        return False
    return all(
        canonical_json(stored.get(name, _DEFAULTS[name])) == canonical_json(rendered.get(name))
        for name in FIELDS
    )


_DEFAULTS: dict[str, Any] = {
    "provider": "",
    "model": "",
    "params": {},
    "system_prompt": "",
    "tools": [],
    "thinking_level": "off",
}
