"""Agent presets: the provider, model, prompt and tools a new session runs with.

A preset is a plain dict, copied onto the session when it is created (so a session keeps
running with what it was created with). It never holds a secret: an API key is read, when a
turn starts, from the environment variable the preset names in `api_key_env`.

Built in:

- `offline` — the deterministic offline model (`runtime.offline`), the default.

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
    tools               tool names (default: read_file, list_files, grep, write_file)
    thinking_level      off | minimal | low | medium | high | xhigh (recorded in headers)
    params              extra body parameters (temperature, max_tokens, thinking…)
    context_window, reserve_tokens, keep_recent_tokens, auto_compact   compaction
    pricing             {input, output, cacheRead, cacheWrite}: dollars per million tokens
    tool_timeout_s, max_steps, max_retries, request_timeout_s
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from sessions_app.services import DEFAULT_PRESET
from sessions_app.store import StoreError


class PresetNotFound(StoreError):
    code = "not_found"


def presets(environ: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Every preset by name: the built-in one, then those from the environment."""
    env = os.environ if environ is None else environ
    found: dict[str, dict[str, Any]] = {"offline": dict(DEFAULT_PRESET)}
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
            raise StoreError(f"STRAND_PRESETS is not valid JSON: {exc}") from None
        if not isinstance(configured, dict) or not all(
            isinstance(v, dict) for v in configured.values()
        ):
            raise StoreError("STRAND_PRESETS must be a JSON object of preset objects")
        found.update({str(name): dict(value) for name, value in configured.items()})
    for name, preset in found.items():
        preset["name"] = name
        if "api_key" in preset:
            raise StoreError(
                f"preset {name!r}: put the key in an environment variable and name it in "
                "api_key_env; presets are stored with sessions and must not hold secrets"
            )
    return {name: {k: v for k, v in p.items() if v is not None} for name, p in found.items()}


def preset_get(name: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The preset called `name`, ready for `session_create(preset=...)`."""
    available = presets(environ)
    if name not in available:
        raise PresetNotFound(
            f"no preset named {name!r} (available: {', '.join(sorted(available))})"
        )
    return available[name]
