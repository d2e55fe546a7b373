"""Fault kinds, Retry-After, redaction and the messages people read: pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from runtime.config import config_from_preset
from runtime.faults import describe_fault
from runtime.providers.base import ProviderError, fault_kind
from runtime.providers.faults import redact, retry_after_s


@pytest.mark.parametrize(
    "status, code, kind",
    [
        (401, None, "auth"),
        (403, "permission_error", "auth"),
        (429, None, "rate_limited"),
        (429, "insufficient_quota", "quota"),
        (529, None, "overloaded"),
        (500, None, "server_error"),
        (503, None, "server_error"),
        (408, None, "server_error"),
        (400, None, "bad_request"),
        (400, "context_length_exceeded", "context_length"),
        (None, "overloaded_error", "overloaded"),
        (None, "api_error", "server_error"),
        (None, None, "unknown"),
    ],
)
def test_fault_kind_of_a_status_and_code(status, code, kind):
    assert fault_kind(status, code) == kind


def test_retry_after_reads_milliseconds_seconds_and_dates():
    assert retry_after_s({"retry-after-ms": "250"}) == 0.25
    assert retry_after_s({"retry-after": "7"}) == 7.0
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 < (retry_after_s({"retry-after": later}) or 0) <= 30
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


def test_redact_removes_the_key_and_key_shaped_words():
    text = "Incorrect API key provided: sk-live-abcdef123. Also sk-proj-****wxyz and mykey42"
    clean = redact(text, "mykey42")
    assert "abcdef123" not in clean and "wxyz" not in clean and "mykey42" not in clean
    assert clean.startswith("Incorrect API key provided: [redacted]")


def test_a_401_message_names_the_preset_and_the_variable():
    config = config_from_preset(
        {"name": "work", "provider": "openai", "model": "m", "api_key_env": "WORK_KEY"}
    )
    message = describe_fault(ProviderError("bad key", status=401), config, attempts=1)
    assert "WORK_KEY" in message and "'work'" in message and "HTTP 401" in message
    local = config_from_preset({"name": "box", "provider": "openai", "model": "m"})
    assert "api_key_env" in describe_fault(ProviderError("x", status=401), local, attempts=1)


def test_the_message_says_how_many_attempts_failed():
    config = config_from_preset({"provider": "anthropic", "model": "m"})
    error = ProviderError("Overloaded", status=529)
    assert "All 3 attempts failed" in describe_fault(error, config, attempts=3)
    assert "attempts" not in describe_fault(error, config, attempts=1)
