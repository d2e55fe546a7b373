"""Agent presets: the provider, model, prompt and tools a session runs with.

Presets are the server's. A session records the NAME of its preset (`preset["name"]` on the
session; the rest of that dict is a snapshot of what the preset was when the session was
made, kept for display only). Every turn, compaction and summary resolves the name again
from this module (`preset_for_turn`), so no stored value can choose a base URL or which
environment variable is sent as a key; a session whose preset the server no longer offers
is refused at its next turn (`PresetUnavailable`). A preset never holds a secret: an API
key is read, when a turn starts, from the environment variable the preset names in
`api_key_env`.

Built in:

- `offline` — the deterministic offline model (`runtime.offline`), the default, with Pi's
  tools;
- `coding` — the same (the preset imported Pi sessions are put on).

Tool names: a preset offers Pi 1.6's tools (`read`, `write`, `edit`, `bash`, `grep`, `find`,
`ls`) unless it names others. Sessions made when the default was Strand's older tools
(`read_file`, `list_files`, `grep`, `write_file`) recorded those names in their snapshot, and
their turns are offered the same names again on a preset that does not name its own
(`OLDER_TOOL_NAMES`): a conversation keeps the vocabulary its history already uses. Only
names of that fixed list are ever taken from a snapshot.

From the environment:

- `STRAND_PRESETS` — a JSON object of presets by name, for example::

      {"deepseek": {"provider": "openai", "provider_name": "deepseek",
                    "base_url": "https://api.deepseek.com", "api_key_env": "DEEPSEEK_API_KEY",
                    "model": "deepseek-chat", "context_window": 65536,
                    "pricing": {"input": 0.27, "output": 1.1, "cacheRead": 0.07}},
       "ollama":   {"provider": "openai", "base_url": "http://127.0.0.1:11434/v1",
                    "model": "qwen3:8b"}}

- `STRAND_OPENAI_BASE_URL`, `STRAND_OPENAI_API_KEY`, `STRAND_OPENAI_MODEL` (default
  `gpt-4o-mini`) — a preset named `openai` when the key or the base URL is set;
- `STRAND_ANTHROPIC_API_KEY`, `STRAND_ANTHROPIC_BASE_URL`, `STRAND_ANTHROPIC_MODEL`
  (default `claude-sonnet-4-5`) — a preset named `anthropic` when the key is set.

Preset fields (all optional but `provider` and, except offline, `model`):

    provider            offline | openai (any Chat Completions server) | anthropic
    provider_name       Pi's provider label on assistant messages (default: provider)
    model, base_url     model id; server URL (default: the SDK's)
    api_key_env         name of the environment variable that holds the API key
    system_prompt       default: the product's prompt
    tools               tool names (default: Pi's read, write, edit, bash, grep, find, ls;
                        or Strand's older read_file, list_files, grep, write_file)
    thinking_level      off | minimal | low | medium | high | xhigh (recorded in headers)
    params              extra body parameters (temperature, max_tokens, thinking…)
    context_window, reserve_tokens, keep_recent_tokens, auto_compact   compaction
    pricing             {input, output, cacheRead, cacheWrite}: dollars per million tokens
    tool_timeout_s, max_steps
    request_timeout_s   seconds without a byte from the provider before an attempt fails
    max_retries, retry_backoff_s, retry_max_wait_s   retries of a failed model request
                        (2, 1.0, 60.0; see `runtime.config`): each is recorded
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from sessions_app.errors import DomainError

OFFLINE = "offline"
CODING = "coding"
# Pi 1.6's tools (runtime/pi_tools.py); `bash` is left out where no sandbox can run.
PI_TOOL_NAMES = ["read", "write", "edit", "bash", "grep", "find", "ls"]
# The default before Pi's tools; sessions that recorded it keep it (see the module doc).
OLDER_TOOL_NAMES = ["read_file", "list_files", "grep", "write_file"]

# The built-in preset; its fields also fill in whatever a configured preset leaves out.
DEFAULT_PRESET: dict[str, Any] = {
    "name": OFFLINE,
    "provider": "offline",
    "model": "strand-offline-1",
    "system_prompt": "You are a helpful assistant working in the user's project directory.",
    "tools": list(PI_TOOL_NAMES),
    "thinking_level": "off",
}


# The offline model with Pi's tools, under the name imported Pi sessions are given.
CODING_PRESET: dict[str, Any] = {**DEFAULT_PRESET, "name": CODING, "tools": PI_TOOL_NAMES}

# The offline model with Pi's tools and `task`, which hands work to a subagent (a child
# session, `runtime.subagents`); any preset may name `task` among its tools.
DELEGATING = "delegating"
DELEGATING_TOOL_NAMES = [*PI_TOOL_NAMES, "task"]


class PresetNotFound(DomainError):
    code = "not_found"


class PresetUnavailable(DomainError):
    """A session's preset that the server no longer offers: its turns are refused."""

    code = "preset_unavailable"


def presets(environ: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Every preset by name: the built-in one, then those from the environment."""
    env = os.environ if environ is None else environ
    found: dict[str, dict[str, Any]] = {
        OFFLINE: {**DEFAULT_PRESET, "tools": list(PI_TOOL_NAMES)},
        CODING: {**CODING_PRESET, "tools": list(PI_TOOL_NAMES)},
        DELEGATING: {**DEFAULT_PRESET, "name": DELEGATING, "tools": list(DELEGATING_TOOL_NAMES)},
    }
    if env.get("STRAND_OPENAI_API_KEY") or env.get("STRAND_OPENAI_BASE_URL"):
        found["openai"] = {
            "provider": "openai",
            "model": env.get("STRAND_OPENAI_MODEL") or "gpt-4o-mini",
            "base_url": env.get("STRAND_OPENAI_BASE_URL") or None,
            "api_key_env": "STRAND_OPENAI_API_KEY" if env.get("STRAND_OPENAI_API_KEY") else None,
        }
    if env.get("STRAND_ANTHROPIC_API_KEY"):
        found["anthropic"] = {
            "provider": "anthropic",
            "model": env.get("STRAND_ANTHROPIC_MODEL") or "claude-sonnet-4-5",
            "base_url": env.get("STRAND_ANTHROPIC_BASE_URL") or None,
            "api_key_env": "STRAND_ANTHROPIC_API_KEY",
        }
    raw = env.get("STRAND_PRESETS")
    if raw:
        try:
            configured = json.loads(raw)
        except ValueError as exc:
            raise DomainError(f"STRAND_PRESETS is not valid JSON: {exc}") from None
        if not isinstance(configured, dict) or not all(
            isinstance(v, dict) for v in configured.values()
        ):
            raise DomainError("STRAND_PRESETS must be a JSON object of preset objects")
        found.update({str(name): dict(value) for name, value in configured.items()})
    for name, preset in found.items():
        preset["name"] = name
        if "api_key" in preset:
            raise DomainError(
                f"preset {name!r}: put the key in an environment variable and name it in "
                "api_key_env; presets are stored with sessions and must not hold secrets"
            )
    return {name: {k: v for k, v in p.items() if v is not None} for name, p in found.items()}


def preset_get(name: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The preset called `name`, as configured."""
    available = presets(environ)
    if name not in available:
        raise PresetNotFound(
            f"no preset named {name!r} (available: {', '.join(sorted(available))})"
        )
    return available[name]


def preset_resolve(name: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The preset called `name` with the defaults filled in: what a session naming it runs
    with now, and the snapshot a new session records."""
    return {**DEFAULT_PRESET, **preset_get(name, environ)}


def preset_name_of(snapshot: Mapping[str, Any] | None) -> str:
    """The preset name a session recorded (sessions made before presets had names run with
    the built-in one)."""
    name = (snapshot or {}).get("name")
    return name if isinstance(name, str) and name else OFFLINE


def preset_for_turn(snapshot: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a session's next turn runs with: the server's preset of the recorded name. Of
    the rest of the stored snapshot only older tool names are read (`older_tool_names`)."""
    name = preset_name_of(snapshot)
    try:
        preset = preset_resolve(name)
    except PresetNotFound:
        available = ", ".join(sorted(presets()))
        raise PresetUnavailable(
            f"This session's preset {name!r} is no longer offered by this server, so its agent "
            f"cannot run (offered: {available}). Start a new session with one of those, or "
            "ask an operator to restore the preset."
        ) from None
    if "tools" not in preset_get(name) or name == OFFLINE:
        older = older_tool_names(snapshot)
        if older:
            preset["tools"] = older
    return preset


def older_tool_names(snapshot: Mapping[str, Any] | None) -> list[str]:
    """The older tool names a session recorded, in their order, if it was made with them
    (any of `read_file`, `list_files`, `write_file`); else nothing. `grep` alone is both
    vocabularies' name and says nothing."""
    recorded = (snapshot or {}).get("tools")
    if not isinstance(recorded, list) or not any(
        n in recorded for n in OLDER_TOOL_NAMES if n != "grep"
    ):
        return []
    return [n for n in OLDER_TOOL_NAMES if n in recorded]
