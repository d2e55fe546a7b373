"""A replay group: its turns' events and those of the replayed request's turn, read by
turn (at most `MAX_REPLAYS` + 1 turns), folded by `projections.replay`."""

from __future__ import annotations

from projections.replay import ReplayGroup, group_turns, project_replay_group
from sessions_app import store
from sessions_app.models import Session
from sessions_app.selectors.events import event_at
from sessions_app.selectors.turns import turn_lock_held


def replay_group(session: Session, group: int) -> ReplayGroup:
    """The replay group whose first turn is `group` (`ReplayGroupNotFound` if none)."""
    running = turn_lock_held(session.id)  # before the events: see project_replay_group
    first = store.events_of_turns(session.id, [group])
    start = next((e for e in first if e.type == "turn/start"), None)
    group, request_seq, count = group_turns(start)
    rest = store.events_of_turns(session.id, range(group + 1, group + count)) if count > 1 else []
    sent = event_at(session.id, request_seq)
    original = store.events_of_turns(session.id, [sent.turn]) if sent and sent.turn else []
    header_seq = sent.data.get("header_seq") if sent is not None else None
    if isinstance(header_seq, int) and all(e.seq != header_seq for e in original):
        header = event_at(session.id, header_seq)
        original = [*original, header] if header is not None else original
    if sent is not None and all(e.seq != sent.seq for e in original):
        original = [*original, sent]
    return project_replay_group(
        group, request_seq, count, original, [*first, *rest], running=running
    )
