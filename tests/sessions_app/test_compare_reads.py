"""The compare selector reads a window of rows, aggregates for the totals and the two kept
windows; what it answers must be what the pure fold answers from the whole paths and every
event of the branches' turns."""

from __future__ import annotations

import time
from typing import Any

import pytest

from projections.chat import OUTCOME_UNKNOWN
from projections.compare import BranchComparison, compare_branches
from sessions_app import selectors, services, store
from sessions_app.models import Session
from sessions_app.selectors import compare as compare_reads
from sessions_app.selectors.turns import turns_of_entries
from sessions_app.store import NewEvent

pytestmark = pytest.mark.django_db

SHA = "0" * 64


def entry(role: str, turn: int, step: int | None = None, **message: Any) -> NewEvent:
    kind = {"user": "user/message", "assistant": "assistant/message", "toolResult": "tool/result"}
    extra = {"error_code": message.pop("error_code")} if "error_code" in message else {}
    body = {"type": "message", "message": {"role": role, **message}}
    return NewEvent(kind[role], {"entry": body, **extra}, turn=turn, step=step)


def usage(total: int | None, cost: float) -> dict[str, Any]:
    found: dict[str, Any] = {"input": 7, "output": 3, "cost": {"total": cost}}
    if total is not None:
        found["totalTokens"] = total
    return found


def sent(turn: int, step: int, attempt: int = 1) -> NewEvent:
    manifest = {"header_seq": 0, "leaf_entry_id": None, "payload_sha256": SHA}
    return NewEvent(
        "request/sent", {**manifest, "token_estimate": 5, "attempt": attempt}, turn=turn, step=step
    )


def tool_turn(n: int, *, fails: bool, retried: bool) -> list[NewEvent]:
    """A turn that asks, calls a tool (which fails or not), and answers; its first request
    tried twice when `retried`."""
    call = {"type": "toolCall", "id": f"c{n}", "name": "read", "arguments": {}}
    result = {"toolCallId": f"c{n}", "toolName": "read", "isError": fails}
    return [
        NewEvent("turn/start", {"turn": n}, turn=n),
        entry("user", n, content=f"question {n}"),
        NewEvent("step/start", {"turn": n, "step": 0}, turn=n, step=0),
        sent(n, 0),
        *([sent(n, 0, attempt=2)] if retried else []),
        entry("assistant", n, 0, content=[call], usage=usage(None, 0.25)),
        entry("toolResult", n, 0, content=[{"type": "text", "text": "out"}], **result),
        NewEvent("step/end", {"turn": n, "step": 0}, turn=n, step=0),
        NewEvent("step/start", {"turn": n, "step": 1}, turn=n, step=1),
        sent(n, 1),
        entry("assistant", n, 1, content=[{"type": "text", "text": "done"}], usage=usage(40, 0.5)),
        NewEvent("step/end", {"turn": n, "step": 1}, turn=n, step=1),
        NewEvent("turn/end", {"turn": n, "reason": "completed"}, turn=n),
    ]


def cut_turn(n: int) -> tuple[list[NewEvent], list[NewEvent]]:
    """A turn whose process died with a tool running; then what recovery wrote to close it."""
    call = {"type": "toolCall", "id": f"c{n}", "name": "bash", "arguments": {}}
    return [
        NewEvent("turn/start", {"turn": n}, turn=n),
        entry("user", n, content="run it"),
        NewEvent("step/start", {"turn": n, "step": 0}, turn=n, step=0),
        sent(n, 0),
        entry("assistant", n, 0, content=[call, {**call, "id": "x"}], usage=usage(90, 1.0)),
    ], [
        entry(
            "toolResult",
            n,
            0,
            toolCallId=f"c{n}",
            toolName="bash",
            isError=True,
            content=[{"type": "text", "text": "unknown"}],
            error_code=OUTCOME_UNKNOWN,
        ),
        NewEvent("step/end", {"turn": n, "step": 0}, turn=n, step=0),
        NewEvent("turn/end", {"turn": n, "reason": "interrupted"}, turn=n),
    ]


def append(session: Session, events: list[NewEvent]) -> list[str]:
    session.refresh_from_db()
    ids = store.append_events(session.id, session.last_seq, events).entry_ids
    session.refresh_from_db()
    return list(ids)


def moved(to: str | None) -> NewEvent:
    return NewEvent("leaf/moved", {"to": to, "reason": "navigate"})


@pytest.fixture
def tree(alice: Any) -> tuple[Session, dict[str, str]]:
    """A shared turn; A: three tool turns (one failing, one retried); B: a cut turn and a
    tool turn; C: a second root."""
    session = services.session_create(owner=alice, title="tries", cwd="")
    shared = append(session, tool_turn(1, fails=False, retried=False))
    # One append per turn (and recovery's closers after the cut turn's own events), so
    # that the turns' times differ as they would.
    a = [
        entry_id
        for n, fails, retried in ((2, True, False), (3, False, True), (4, False, False))
        for entry_id in append(session, tool_turn(n, fails=fails, retried=retried))
    ]
    alive, closers = cut_turn(5)
    b = append(session, [moved(shared[-1]), *alive])
    b += append(session, closers)
    # B's last turn ends a while after its last entry, past the range of the entries.
    last = tool_turn(6, fails=True, retried=True)
    b += append(session, last[:-2])
    time.sleep(0.05)
    b += append(session, last[-2:])
    c = append(session, [moved(None), entry("user", 7, content="elsewhere")])
    return session, {
        "root": shared[0],
        "fork": shared[-1],
        "a": a[-1],
        "a_mid": a[4],
        "b": b[-1],
    } | {
        "b_first": b[0],
        "c": c[0],
    }


def reference(session: Session, a: str, b: str, *, offset: int, limit: int) -> BranchComparison:
    path_a = store.path_to_root(session.id, a)
    path_b = store.path_to_root(session.id, b)
    shared = {e.id for e in path_a} & {e.id for e in path_b}

    def events(path: list[Any]) -> list[Any]:
        turns = turns_of_entries(session, [e for e in path if e.id not in shared])
        return store.events_of_turns(session.id, turns) if turns else []

    return compare_branches(
        path_a, path_b, events_a=events(path_a), events_b=events(path_b), offset=offset, limit=limit
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("a", "b"),  # two branches from a shared turn
        ("b", "a"),
        ("fork", "a"),  # one an ancestor of the other
        ("a", "a_mid"),
        ("a", "a"),  # the same entry
        ("a", "c"),  # no common root
        ("b_first", "b"),
        ("root", "c"),
    ],
)
@pytest.mark.parametrize(("offset", "limit"), [(0, 50), (0, 3), (4, 3), (12, 5), (99, 2)])
def test_the_selector_answers_what_the_fold_does_over_the_whole_paths(
    tree: tuple[Session, dict[str, str]], a: str, b: str, offset: int, limit: int
) -> None:
    session, ids = tree

    read = selectors.branch_comparison(session, ids[a], ids[b], offset=offset, limit=limit)
    folded = reference(session, ids[a], ids[b], offset=offset, limit=limit)

    assert read == folded


@pytest.mark.parametrize(("a", "b"), [("a", "b"), ("a", "c"), ("fork", "a"), ("b_first", "b")])
def test_the_range_back_to_the_ancestor_is_read_a_chunk_at_a_time(
    tree: tuple[Session, dict[str, str]], monkeypatch: pytest.MonkeyPatch, a: str, b: str
) -> None:
    session, ids = tree
    monkeypatch.setattr(compare_reads, "FIRST_CHUNK", 1)  # 1, 2, 4, 8… seqs

    read = selectors.branch_comparison(session, ids[a], ids[b], limit=4)

    assert read == reference(session, ids[a], ids[b], offset=0, limit=4)


def test_the_totals_count_what_each_branch_did(tree: tuple[Session, dict[str, str]]) -> None:
    session, ids = tree

    view = selectors.branch_comparison(session, ids["a"], ids["b"])

    a, b = view.totals_a, view.totals_b
    # A: three turns of a tool call and an answer; one failed tool, one retried request.
    assert (a.responses, a.tool_calls, a.tool_errors, a.model_requests) == (6, 3, 1, 7)
    assert a.tokens == 3 * (10 + 40) and round(a.cost, 6) == 2.25
    assert a.interrupted_turns == 0 and a.wall_time_ms >= 0
    # B: the cut turn (two calls asked, one result written by recovery) and a tool turn.
    assert (b.responses, b.tool_calls, b.tool_errors, b.model_requests) == (3, 3, 2, 4)
    assert b.interrupted_turns == 1
    assert b.wall_time_ms >= 50  # to turn 6's turn/end, read past the last entry
