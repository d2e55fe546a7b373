"""Model providers behind one streaming interface (`Provider.stream(payload)`)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from runtime.config import AgentConfig, ConfigError
from runtime.providers.base import (
    Assembler,
    Provider,
    ProviderError,
    StopUpdate,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallRequest,
    UsageUpdate,
    is_context_overflow,
)

__all__ = [
    "Assembler",
    "Provider",
    "ProviderError",
    "StopUpdate",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "ToolCallRequest",
    "UsageUpdate",
    "is_context_overflow",
    "make_provider",
]


def make_provider(config: AgentConfig, environ: Mapping[str, str] | None = None) -> Provider:
    """The provider a session's preset names. Keys come from the environment variable the
    preset names; a missing key is a `ConfigError` before anything is sent. The SDKs do
    not retry: the turn loop does, recording each attempt (`max_retries`)."""
    env = os.environ if environ is None else environ
    if config.kind == "offline":
        from runtime.offline import OfflineProvider

        return OfflineProvider(
            context_window=config.context_window, stall_s=config.request_timeout_s
        )
    api_key = env.get(config.api_key_env) if config.api_key_env else None
    if not api_key:
        if config.api_key_env:
            raise ConfigError(
                f"preset {config.name!r}: the environment variable {config.api_key_env} "
                "(its API key) is not set"
            )
        if config.base_url is None:
            raise ConfigError(f"preset {config.name!r} has no api_key_env and no base_url")
        api_key = "none"  # local servers (Ollama, vLLM, LM Studio) take any key
    if config.kind == "openai":
        from runtime.providers.openai_chat import OpenAIChatProvider

        return OpenAIChatProvider(
            base_url=config.base_url, api_key=api_key, timeout_s=config.request_timeout_s
        )
    from runtime.providers.anthropic_messages import AnthropicProvider

    return AnthropicProvider(
        base_url=config.base_url, api_key=api_key, timeout_s=config.request_timeout_s
    )
