"""A session, or the branch to one of its entries, as an OTLP/JSON file of GenAI spans
(`projections.otel_genai`), made a turn at a time."""

from __future__ import annotations

from collections.abc import Iterator

from projections.otel_genai import document_chunks
from sessions_app.models import Session
from sessions_app.projectors.otel_spans import agent_name, session_turn_spans
from sessions_app.selectors.turns import all_turns, path_turns

SCOPE_VERSION = "1"


def otlp_export_chunks(
    session: Session, *, leaf: str | None, capture_content: bool, max_chars: int
) -> Iterator[str]:
    """The file's text, a span at a time: every finished turn of the session, or (with
    `leaf`) those that added entries on the path to it."""
    turns = path_turns(session, leaf) if leaf is not None else all_turns(session)
    batches = session_turn_spans(
        session.id,
        turns,
        agent=agent_name(session.preset),
        capture_content=capture_content,
        max_chars=max_chars,
    )
    return document_chunks(
        (span for batch in batches for span in batch), scope_version=SCOPE_VERSION
    )
