"""What a failed model request tells the person who reads the session.

`describe_fault` turns a `ProviderError` into the `errorMessage` of the assistant message:
what failed, where, after how many attempts, and what to do about it. It names the preset
and the environment variable that holds the key, never the key. `fault_record` is the
structured form the log keeps next to it (on `assistant/message` as `fault`, and on the
next attempt's `request/sent` as `previous_fault`).
"""

from __future__ import annotations

from typing import Any

from runtime.config import AgentConfig
from runtime.providers.base import (
    AUTH,
    BAD_REQUEST,
    CONNECTION,
    CONTEXT_LENGTH,
    CUT,
    INVALID_TOOL_ARGUMENTS,
    MALFORMED,
    NOT_A_STREAM,
    OVERLOADED,
    QUOTA,
    RATE_LIMITED,
    REFUSED,
    SERVER_ERROR,
    STALL,
    ProviderError,
)

JSON = dict[str, Any]
DETAIL_LIMIT = 500


def describe_fault(
    error: ProviderError,
    config: AgentConfig,
    *,
    attempts: int,
    note: str | None = None,
) -> str:
    """The message a person reads: what failed, after how many attempts, what to do."""
    who = _where(config)
    detail = _clip(str(error))
    http = f"HTTP {error.status}" if error.status else None
    kind = error.kind
    if kind == AUTH:
        text = _auth(error, config, who, detail)
    elif kind == QUOTA:
        text = (
            f"{who} says the account behind the key in {config.api_key_env or 'the preset'} "
            f"has no quota left ({http or 'insufficient_quota'}): {detail}. Add credit or "
            f"use another key (preset {config.name!r}); retrying will not help until then."
        )
    elif kind == RATE_LIMITED:
        wait = f" and asked to wait {error.retry_after_s:g} s" if error.retry_after_s else ""
        text = (
            f"{who} is rate limiting requests ({http or 'rate limited'}){wait}: {detail}. "
            "Wait a little and retry, or raise the account's rate limits."
        )
    elif kind == OVERLOADED:
        text = f"{who} is overloaded ({http or 'overloaded_error'}): {detail}. Retry in a minute."
    elif kind == SERVER_ERROR:
        text = (
            f"{who} failed on its side ({http or 'server error'}): {detail}. Retry later; "
            "nothing in the session needs to change."
        )
    elif kind == CONNECTION:
        text = (
            f"Strand could not reach {who}: {detail}. Check the preset's base_url and that "
            "the server is up."
        )
    elif kind == CUT:
        text = (
            f"The answer from {who} was cut off: {detail}. What arrived is kept; Retry asks "
            "again. If it keeps happening, look at the network or proxy in between."
        )
    elif kind == STALL:
        text = (
            f"{who} stopped sending ({detail}). Strand waits request_timeout_s "
            f"({config.request_timeout_s:g} s in preset {config.name!r}) for the next bytes; "
            "what arrived is kept. Retry, or raise request_timeout_s for a slow model."
        )
    elif kind == MALFORMED:
        text = (
            f"{who} sent a stream Strand cannot read: {detail}. What arrived before it is "
            "kept. A proxy in between may rewrite the stream; point the preset at the "
            "provider itself or fix the proxy."
        )
    elif kind == NOT_A_STREAM:
        text = (
            f"{who} answered the streaming request with a plain body instead of an event "
            f"stream ({detail}): the server or a proxy in front of it ignores "
            '"stream": true. Use an endpoint that streams.'
        )
    elif kind == INVALID_TOOL_ARGUMENTS:
        text = f"{detail}. No tool was run; Retry asks the model again."
    elif kind == CONTEXT_LENGTH:
        text = (
            f"The conversation is too long for {config.model} ({detail}). Compact the "
            "session, or go back to an earlier entry, then retry."
        )
    elif kind == BAD_REQUEST:
        text = (
            f"{who} refused the request ({http or 'bad request'}): {detail}. Check the model "
            f"and params of preset {config.name!r}."
        )
    elif kind == REFUSED:
        text = f"The model ended its reply with an error ({detail})."
    else:
        text = f"The request to {who} failed: {detail}."
    if attempts > 1:
        text += f" All {attempts} attempts failed."
    if note:
        text += f" {note}"
    return text


def _auth(error: ProviderError, config: AgentConfig, who: str, detail: str) -> str:
    refused = (
        f"refused access ({f'HTTP {error.status}' if error.status else 'permission error'})"
        if error.status == 403 or error.code == "permission_error"
        else f"refused the API key ({f'HTTP {error.status}' if error.status else 'auth error'})"
    )
    if config.api_key_env:
        fix = (
            f"Set a valid key in the environment variable {config.api_key_env} for preset "
            f"{config.name!r} (read when a turn starts), then retry."
        )
    else:
        fix = (
            f"Preset {config.name!r} sends no key: name the environment variable that holds "
            "one in its api_key_env, then retry."
        )
    return f"{who} {refused}: {detail}. {fix}"


def _where(config: AgentConfig) -> str:
    name = config.provider or config.kind
    return f"{name} at {config.base_url}" if config.base_url else name


def _clip(text: str) -> str:
    text = " ".join(text.split()).rstrip(".")
    return text if len(text) <= DETAIL_LIMIT else text[: DETAIL_LIMIT - 1] + "…"


def fault_record(
    error: ProviderError,
    *,
    message: str,
    attempt: int,
    timing: JSON,
    received_chars: int,
) -> JSON:
    """The fault as data: kind, HTTP status, what the provider asked to wait, how long the
    attempt ran and how much of the answer had arrived."""
    record: JSON = {
        "kind": error.kind,
        "attempt": attempt,
        "retryable": error.retryable,
        "message": message,
        "detail": _clip(str(error)),
    }
    if error.status is not None:
        record["status"] = error.status
    if error.code:
        record["code"] = error.code
    if error.retry_after_s is not None:
        record["retry_after_ms"] = round(error.retry_after_s * 1000)
    record["duration_ms"] = int(timing.get("duration_ms") or 0)
    if "ttft_ms" in timing:
        record["ttft_ms"] = int(timing["ttft_ms"])
    record["received_chars"] = received_chars
    return record
