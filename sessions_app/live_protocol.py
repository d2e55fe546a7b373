"""The shapes of the live feed (DESIGN §6): the notification payload, the channel-layer
messages and the frames a websocket sends.

`live` (the listener), `consumers` (the websockets) and `agent.deltas` (the runtime's
streaming text) all speak these shapes; they live here, importing nothing of ours, so that
none of those modules needs another to know them.

Channel-layer messages, to the group `session.<session id>` or one socket's channel:

    {"type": "session.events", "events": [[seq, frame], …], "last_seq": int}
    {"type": "session.committed", "last_seq": int | None}
    {"type": "session.delta", "session_id": str, "turn": int, "step": int,
     "kind": "text" | "thinking" | "tool_call" | "restart" | "tool_output", "block": str,
     "text": str, "name": str | None}

A `tool_output` delta is a piece of a running command's output; its block is the call id.

Frames to the client: see `sessions_app.live.consumers`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.core.serializers.json import DjangoJSONEncoder

from projections.records import EventRecord

if TYPE_CHECKING:
    from runtime import Delta


def group_name(session_id: str) -> str:
    """The channel-layer group of one session's viewers (ephemeral deltas go here)."""
    return f"session.{session_id}"


def parse_payload(payload: str) -> tuple[str, int | None] | None:
    """`<session id>:<last seq>` → (session id, seq); None for anything else."""
    session_id, sep, seq = payload.partition(":")
    if not sep or not session_id:
        return None
    try:
        return session_id, int(seq)
    except ValueError:
        return session_id, None


def committed_message(last_seq: int | None) -> dict[str, Any]:
    return {"type": "session.committed", "last_seq": last_seq}


def events_message(events: list[list[Any]], last_seq: int) -> dict[str, Any]:
    """New events as `[seq, encoded frame]` pairs, for the websockets of one session."""
    return {"type": "session.events", "events": events, "last_seq": last_seq}


def session_delta_message(delta: Delta) -> dict[str, Any]:
    """A runtime delta as the channel layer carries it to the session's group."""
    return {
        "type": "session.delta",
        "session_id": delta.session_id,
        "turn": delta.turn,
        "step": delta.step,
        "kind": delta.kind,
        "block": delta.block,
        "text": delta.text,
        "name": delta.name,
    }


def event_message(event: EventRecord) -> dict[str, Any]:
    """The client frame of one committed event."""
    return {
        "type": "event",
        "seq": event.seq,
        "event": event.type,
        "time": event.time.isoformat(),
        "turn": event.turn,
        "step": event.step,
        "entry_id": event.entry_id,
        "data": event.data,
    }


def encode_event(event: EventRecord) -> str:
    """The text frame of one event, as every viewer receives it."""
    return json.dumps(event_message(event), cls=DjangoJSONEncoder, ensure_ascii=False)


def delta_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A `session.delta` layer message as the client frame."""
    return {
        "type": "delta",
        "turn": message.get("turn"),
        "step": message.get("step"),
        "kind": message.get("kind"),
        "block": message.get("block"),
        "text": message.get("delta", message.get("text", "")),
        "name": message.get("name"),
    }
