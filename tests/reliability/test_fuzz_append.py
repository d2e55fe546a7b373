"""Fuzzing the append API: whatever a client sends gets a 201 or a 4xx with a JSON error,
never a 500, and a refused request leaves the database exactly as it was."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_app import services
from sessions_app.events import EVENT_TYPES
from sessions_app.selectors.verify import verify_session
from sessions_app.services import tokens
from tests.reliability.test_fuzz_import import database_state

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from(["", "\x00", "\u202e", "<script>", "a" * 70, "\ud800"]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
entry_like = st.fixed_dictionaries(
    {"type": st.sampled_from(["message", "label", "custom", "compaction", "nope", 3])},
    optional={
        "id": json_scalars,
        "parentId": json_scalars,
        "timestamp": json_scalars,
        "message": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "assistant", "toolResult", "system", 7])},
                optional={"content": json_values},
            ),
        ),
        "targetId": json_scalars,
        "label": json_scalars,
    },
)
event_like = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(sorted(EVENT_TYPES)), st.text(max_size=12))},
    optional={
        "data": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {}, optional={"entry": entry_like, "to": json_scalars, "title": json_scalars}
            ),
        ),
        "ignorable": st.one_of(st.booleans(), json_scalars),
    },
)
# Near-valid appends, so that the accepted path is fuzzed too.
text_or_junk = st.one_of(st.text(max_size=30), json_scalars)
valid_ish = st.fixed_dictionaries(
    {
        "expected_seq": st.sampled_from([0, 0, 0, 1, -1]),
        "events": st.lists(
            st.one_of(
                st.builds(
                    lambda t, text: {
                        "type": "entry/label",
                        "data": {"entry": {"type": "label", "targetId": t, "label": text}},
                    },
                    text_or_junk,
                    text_or_junk,
                ),
                st.builds(
                    lambda c: {
                        "type": "user/message",
                        "data": {
                            "entry": {"type": "message", "message": {"role": "user", "content": c}}
                        },
                    },
                    json_values,
                ),
                st.builds(
                    lambda t: {"type": "session/renamed", "data": {"title": t}}, text_or_junk
                ),
                st.builds(lambda to: {"type": "leaf/moved", "data": {"to": to}}, json_scalars),
            ),
            min_size=1,
            max_size=4,
        ),
    }
)
bodies = st.one_of(
    valid_ish,
    valid_ish,
    st.fixed_dictionaries(
        {
            "expected_seq": st.one_of(st.integers(-3, 3), json_scalars),
            "events": st.lists(event_like, max_size=4),
        }
    ),
    json_values,
)


@pytest.fixture
def writer(alice, settings):
    # Every example appends as the same user; the append limit would refuse most of them.
    settings.STRAND_RATE_LIMITS = {"append": (0, 60)}
    _, token = tokens.token_create(alice, "fuzz")
    return alice, {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.mark.django_db
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=bodies)
def test_append_answers_201_or_a_clean_4xx_and_refusals_write_nothing(client, writer, body: Any):
    alice, auth = writer
    session = services.session_create(owner=alice, title="fuzz")
    before = database_state()
    try:
        raw = json.dumps(body)
    except (ValueError, UnicodeEncodeError):
        return
    response = client.post(
        f"/api/sessions/{session.id}/events", data=raw, content_type="application/json", **auth
    )
    assert response.status_code < 500, response.content[:500]
    if response.status_code == 201:
        session.refresh_from_db()
        assert verify_session(session) is None
        return
    assert 400 <= response.status_code < 500
    payload = response.json()
    assert set(payload) >= {"error", "detail"} and payload["detail"]
    assert database_state() == before
