"""A real Pydantic AI agent, instrumented with its own OpenTelemetry GenAI spans and the
official OTLP/HTTP exporter, runs against a local OpenAI-protocol server and exports to
Strand's `/v1/traces`: its run becomes an observed session whose chat, trace and context
views show its messages, its two tool calls and the exact input of each model request.
Sending the same bodies again changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from sessions_app.models import Event, ObservedConversation, Session
from tests.ingest.conftest import FINAL_ANSWER, bearer, run_producer

pytestmark = pytest.mark.django_db(transaction=True)


def test_agent_run_becomes_an_observed_session(
    strand_url: str, model_server: Any, alice: Any, tmp_path: Path
) -> None:
    token = bearer(alice)
    producer = run_producer(strand_url, token, model_server, tmp_path)
    out, err = producer.communicate(timeout=60)
    assert producer.returncode == 0, err
    assert FINAL_ANSWER in out
    assert "export failed" not in err

    session = Session.objects.get(owner=alice)
    types = list(Event.objects.filter(session=session).order_by("seq").values_list("type", flat=True))
    print(types)
    assert types[0] == "session/created"
