"""schemathesis against /api/openapi.json, in process (WSGI): generated requests, valid and
invalid, to every operation; no answer may be a 500 or disagree with the schema.

Bounded: a few examples per operation and mode, so the whole run takes seconds. Requests
carry Alice's token, and about half of them name one of her real sessions instead of a
random id, so that they reach the code behind the access check.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from sessions_app import services, store
from sessions_app.services import tokens
from tests.api.conftest import user_msg

pytestmark = pytest.mark.django_db

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
EXAMPLES = 8  # per operation and generation mode


def without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    return value


@pytest.fixture
def keep_the_test_connection() -> Iterator[None]:
    """As Django's test client does: a request must not close the connection that holds the
    test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def test_generated_requests_find_no_server_error_and_no_schema_violation(
    alice: Any, keep_the_test_connection: None
) -> None:
    token_row, token = tokens.token_create(alice, "schemathesis")
    sessions = []
    for i in range(4):
        session = services.session_create(owner=alice, title=f"fuzzed {i}")
        store.append_events(session.id, 0, [user_msg("hello"), user_msg("again")])
        sessions.append(session.id)
    doomed = [services.session_create(owner=alice, title="to delete").id for _ in range(8)]
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())
    headers = {"Authorization": f"Bearer {token}"}
    failures: list[str] = []
    operations = 0

    calls = itertools.count()

    def adjust(case: Any, mode: GenerationMode) -> None:
        n = next(calls)
        params = case.path_parameters or {}
        if "session_id" in params and n % 2:
            # Deletes take sessions of their own, so that the others stay for the rest.
            pool = doomed if case.method.upper() == "DELETE" else sessions
            params["session_id"] = str(pool[n % len(pool)])
        if params.get("token_id") == token_row.pk:
            params["token_id"] = 0  # keep the token the run signs in with
        if mode is GenerationMode.POSITIVE and isinstance(case.body, dict):
            # NUL is refused before validation (400); drop it so that valid bodies get in.
            case.body = without_nul(case.body)

    def runner(operation: Any, mode: GenerationMode) -> Any:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def run(case: Any) -> None:
            adjust(case, mode)
            case.call_and_validate(headers=headers, checks=CHECKS)

        return run

    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                runner(operation, mode)()
            except Exception as exc:  # collect every operation's failure, then report
                failures.append(f"{operation.label} [{mode.value}]: {exc}"[:3000])

    assert operations >= 25
    assert not failures, "\n\n".join(failures)
