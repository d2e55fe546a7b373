"""A session's agent settings, read from its preset (the dict stored on the session).

Presets never hold secrets: an API key is read, when a run starts, from the environment
variable the preset names (`api_key_env`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.errors import AgentError
from runtime.tools import WorkspaceQuota

PROVIDER_KINDS = ("offline", "openai", "anthropic")

# Pi's compaction defaults.
DEFAULT_CONTEXT_WINDOW = 128_000
DEFAULT_RESERVE_TOKENS = 16_384
DEFAULT_KEEP_RECENT_TOKENS = 20_000
MAX_RETRIES_LIMIT = 10
# Tool calls one model reply may make unless the server sets another bound.
DEFAULT_MAX_TOOL_CALLS_PER_REPLY = 32


class ConfigError(AgentError):
    """A preset the runtime cannot run with; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class Pricing:
    """US dollars per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0


@dataclass(frozen=True, slots=True)
class JobLimits:
    """The server's bounds on a session's background jobs (`runtime.jobs`; 0 turns a
    count off)."""

    per_session: int = 4
    per_process: int = 32
    wall_s: float = 600.0
    output_kept_bytes: int = 32 * 1024


@dataclass(frozen=True, slots=True)
class RunLimits:
    """The server's bounds on a session's agent, whatever its preset says: how many tool
    calls one model reply may make (each call past it gets an error result and does not
    run; 0 turns the bound off), the quota its file tools write within, and the bounds on
    its background jobs."""

    max_tool_calls_per_reply: int = DEFAULT_MAX_TOOL_CALLS_PER_REPLY
    workspace: WorkspaceQuota = WorkspaceQuota()
    jobs: JobLimits = JobLimits()


@dataclass(frozen=True, slots=True)
class AgentConfig:
    name: str
    kind: str  # offline | openai | anthropic: the wire protocol
    provider: str  # Pi's `provider` on assistant messages: openai, deepseek, anthropic…
    model: str
    system_prompt: str
    tools: tuple[str, ...]
    thinking_level: str = "off"
    params: Mapping[str, Any] = field(default_factory=dict)
    base_url: str | None = None
    api_key_env: str | None = None
    context_window: int = DEFAULT_CONTEXT_WINDOW
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS
    auto_compact: bool = True
    pricing: Pricing = Pricing()
    tool_timeout_s: float = 30.0
    max_steps: int = 50
    # Retries of a request that failed in a way a second try may not (see
    # `runtime.providers.base.RETRYABLE`): at most `max_retries` more attempts, the n-th
    # after `retry_backoff_s * 2**(n-1)` seconds or the provider's Retry-After if longer; a
    # Retry-After above `retry_max_wait_s` is not waited for.
    max_retries: int = 2
    retry_backoff_s: float = 1.0
    retry_max_wait_s: float = 60.0
    # Also the stall limit: no bytes for this long ends the attempt.
    request_timeout_s: float = 600.0
    cwd: str = ""
    limits: RunLimits = RunLimits()

    @property
    def api(self) -> str:
        """Pi's `api` name of the wire protocol."""
        return {"openai": "openai-completions", "anthropic": "anthropic-messages"}.get(
            self.kind, "offline"
        )

    @property
    def compaction_threshold(self) -> int:
        return self.context_window - self.reserve_tokens


def config_from_preset(
    preset: Mapping[str, Any], *, cwd: str = "", limits: RunLimits = RunLimits()
) -> AgentConfig:
    kind = str(preset.get("provider") or "offline")
    if kind not in PROVIDER_KINDS:
        raise ConfigError(
            f"preset provider must be one of {', '.join(PROVIDER_KINDS)}, not {kind!r}"
        )
    model = str(preset.get("model") or ("strand-offline-1" if kind == "offline" else ""))
    if not model:
        raise ConfigError(f"preset {preset.get('name', '?')!r} names no model")
    tools = preset.get("tools")
    config = AgentConfig(
        name=str(preset.get("name") or kind),
        kind=kind,
        provider=str(preset.get("provider_name") or kind),
        model=model,
        system_prompt=str(preset.get("system_prompt") or ""),
        tools=tuple(str(t) for t in tools) if isinstance(tools, Sequence) else (),
        thinking_level=str(preset.get("thinking_level") or "off"),
        params=dict(preset.get("params") or {}),
        base_url=_str_or_none(preset.get("base_url")),
        api_key_env=_str_or_none(preset.get("api_key_env")),
        context_window=_positive(preset, "context_window", DEFAULT_CONTEXT_WINDOW),
        reserve_tokens=_positive(preset, "reserve_tokens", DEFAULT_RESERVE_TOKENS),
        keep_recent_tokens=_positive(preset, "keep_recent_tokens", DEFAULT_KEEP_RECENT_TOKENS),
        auto_compact=bool(preset.get("auto_compact", True)),
        pricing=_pricing(preset.get("pricing")),
        tool_timeout_s=float(preset.get("tool_timeout_s") or 30.0),
        max_steps=_positive(preset, "max_steps", 50),
        max_retries=_count(preset, "max_retries", 2, limit=MAX_RETRIES_LIMIT),
        retry_backoff_s=_seconds(preset, "retry_backoff_s", 1.0),
        retry_max_wait_s=_seconds(preset, "retry_max_wait_s", 60.0),
        request_timeout_s=float(preset.get("request_timeout_s") or 600.0),
        cwd=cwd,
        limits=limits,
    )
    if config.reserve_tokens >= config.context_window:
        raise ConfigError(
            f"reserve_tokens ({config.reserve_tokens}) must be below context_window "
            f"({config.context_window})"
        )
    return config


def _str_or_none(value: Any) -> str | None:
    return str(value) if value else None


def _positive(preset: Mapping[str, Any], key: str, default: int) -> int:
    value = preset.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"preset {key} must be a positive integer, got {value!r}")
    return value


def _count(preset: Mapping[str, Any], key: str, default: int, *, limit: int) -> int:
    value = preset.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= limit:
        raise ConfigError(f"preset {key} must be an integer from 0 to {limit}, got {value!r}")
    return value


def _seconds(preset: Mapping[str, Any], key: str, default: float) -> float:
    value = preset.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"preset {key} must be a number of seconds (0 or more), got {value!r}")
    return float(value)


def _pricing(value: Any) -> Pricing:
    if not isinstance(value, Mapping):
        return Pricing()

    def price(key: str) -> float:
        raw = value.get(key, 0)
        return float(raw) if isinstance(raw, int | float) else 0.0

    return Pricing(price("input"), price("output"), price("cacheRead"), price("cacheWrite"))
