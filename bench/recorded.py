"""Benchmark sessions made of turns the runtime really ran.

`record` runs four turns of the offline model through the agent, as `manage.py send` does
(a file written after an approval, two tool calls at once, a search, a question without
tools), then one manual compaction, in a session of its own; it keeps what the runtime
wrote. `grow` repeats those turns in another session as the runtime would have written
them there: turns renumbered, fresh entry ids chained to the leaf, fresh tool-call and
approval ids, the recorded `request/header` once, and every `request/sent` naming it, with
the leaf its context was built for, the sha256 of the payload built from that context (the
runtime's own `build_payload` over the kept window, as `verify` rebuilds it) and Pi's token
estimate. Every COMPACT_EVERY entries a compaction (the recorded one's shape) keeps the
last KEEP_TURNS turns, so contexts stay the size a long session's are.
"""

from __future__ import annotations

import copy
import json
import os
import random
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from projections.context import PathSettings, build_context_from_window, to_provider_messages
from projections.payload import build_payload, payload_sha256
from projections.records import EntryRecord, EventRecord
from projections.tokens import estimate_tokens

PRESET = "bench-recorder"
# The offline model's grammar (`runtime.offline`); `\n` in a write is a line break.
NOTES = "\\n".join(
    f"{n}. Strand keeps every fact of a session in Postgres and builds each view from them: "
    "the chat, the trace of turns and tool calls, and the exact context of each request."
    for n in range(1, 9)
)
TEXTS = (
    f"write notes.md: {NOTES}",
    "read notes.md and list files",
    "search for Postgres",
    "How far have we got? Summarize what the notes say about the views, and what is left "
    "to check before we rely on them: the chat, the trace and the context of a request.",
)
COMPACT_EVERY = 150  # entries
KEEP_TURNS = 4
BATCH = 900
TURN_EVENTS = {
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "user/message",
    "assistant/message",
    "request/header",
    "request/sent",
    "approval/asked",
    "approval/decided",
    "tool/call",
    "tool/result",
}


@dataclass(frozen=True)
class Recording:
    turns: tuple[tuple[EventRecord, ...], ...]
    header: Mapping[str, Any]  # the recorded request/header's data
    compaction: Mapping[str, Any]  # the recorded compaction entry

    @property
    def events_per_repeat(self) -> int:
        return sum(len(turn) for turn in self.turns)


def record(owner: Any) -> Recording:
    """Run the turns and the compaction; what the runtime wrote."""
    from django.test import override_settings

    from sessions_app import agent, services, store, workspaces

    preset = {"provider": "offline", "keep_recent_tokens": 150, "auto_compact": False}
    with (
        tempfile.TemporaryDirectory(prefix="strand-bench-recording-") as roots,
        override_settings(STRAND_WORKSPACE_ROOTS=[roots]),
        _environ(
            STRAND_PRESETS=json.dumps({PRESET: preset}),
            STRAND_OFFLINE_CHUNK_DELAY_MS="0",
            STRAND_TOOL_DELAY_MS="0",
        ),
    ):
        session = services.session_create(
            owner=owner,
            title="recorded turns",
            preset=PRESET,
            cwd=workspaces.default_cwd(owner),
        )
        try:
            for text in TEXTS:
                ended = agent.agent_run_foreground(session.id, text, auto_approve=True)
                if [e.reason for e in ended] != ["completed"]:
                    raise RuntimeError(f"a recorded turn did not complete: {ended}")
            agent.agent_compact(session.id)
        finally:
            agent.agent_shutdown()
    events = store.events_after(session.id, 0, 10_000)
    turns: dict[int, list[EventRecord]] = {}
    header: Mapping[str, Any] | None = None
    compaction: Mapping[str, Any] | None = None
    for event in events:
        if event.type == "entry/compaction":
            compaction = event.data["entry"]
        elif event.type == "workspace/snapshot":
            # What a write did to the folder: its contents are the recording session's
            # blobs, and the views these benchmarks measure do not read files.
            continue
        elif event.type in TURN_EVENTS and event.turn is not None:
            turns.setdefault(event.turn, []).append(event)
            if event.type == "request/header":
                header = event.data
        else:
            raise RuntimeError(f"the recording holds an event it cannot repeat: {event.type}")
    if header is None or compaction is None or len(turns) != len(TEXTS):
        raise RuntimeError("the recording lacks its header, its compaction or a turn")
    return Recording(tuple(tuple(t) for _, t in sorted(turns.items())), header, compaction)


@contextmanager
def _environ(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def grow(session: Any, events: int, recording: Recording, seed: int = 0) -> int:
    """Append repeats of the recording to `session` (new: nothing after session/created)
    until the next would pass `events` events in all; the session's last seq."""
    from sessions_app import store

    if session.last_seq != 0:
        raise ValueError("grow starts from a new session")
    grower = _Grower(recording, random.Random(seed), next_seq=1)
    expected = session.last_seq
    batch: list[store.NewEvent] = []
    while grower.next_seq + recording.events_per_repeat + 1 <= events:
        batch += grower.repeat()
        if len(batch) >= BATCH:
            expected = _append(store, session.id, expected, batch)
            batch = []
    if batch:
        expected = _append(store, session.id, expected, batch)
    if expected != grower.next_seq - 1:
        raise RuntimeError(f"the session ends at seq {expected}, not {grower.next_seq - 1}")
    session.refresh_from_db()
    return expected


@dataclass(frozen=True)
class Branches:
    ancestor: str  # the entry both branches grow from
    leaf_a: str
    leaf_b: str
    entries_a: int  # below the ancestor
    entries_b: int


def grow_branches(
    session: Any, events: int, recording: Recording, *, entries: int, seed: int = 0
) -> Branches:
    """Grow `session` (new) with repeats of the recording to about `events` events in all,
    of which two branches of at least `entries` entries each from one ancestor (whole
    repeats): A continues the trunk; then the leaf moves back to the ancestor (`leaf/moved`,
    through the store like any navigation) and B grows from there, its turns numbered on
    after A's, its ids fresh."""
    from sessions_app import store

    if session.last_seq != 0:
        raise ValueError("grow_branches starts from a new session")
    rng = random.Random(seed)
    trunk = _Grower(recording, rng, next_seq=1)
    per_entry = recording.events_per_repeat / max(1, _entries_per_repeat(recording))
    trunk_events = max(0, events - int(2 * entries * per_entry))
    sink = _Sink(session.id, session.last_seq)
    while trunk.next_seq + recording.events_per_repeat + 1 <= trunk_events:
        sink.add(trunk.repeat())
    if trunk.leaf is None:
        sink.add(trunk.repeat())  # a trunk of one repeat at least: the ancestor is an entry
    ancestor = trunk.leaf
    assert ancestor is not None
    # B starts from the trunk as it is now (its own lists; the ids used stay shared).
    fork = _Grower(
        recording,
        random.Random(seed + 1),
        next_seq=0,
        header_seq=trunk.header_seq,
        leaf=trunk.leaf,
        window=list(trunk.window),
        model=trunk.model,
        compaction=trunk.compaction,
        turn_firsts=list(trunk.turn_firsts),
        since_compaction=trunk.since_compaction,
        used=trunk.used,
    )
    entries_a = _grow_branch(trunk, entries, sink)
    fork.turn, fork.next_seq = trunk.turn, trunk.next_seq + 1
    sink.add([store.NewEvent("leaf/moved", {"to": ancestor.id, "reason": "navigate"})])
    entries_b = _grow_branch(fork, entries, sink)
    expected = sink.flush()
    if expected != fork.next_seq - 1:
        raise RuntimeError(f"the session ends at seq {expected}, not {fork.next_seq - 1}")
    session.refresh_from_db()
    assert trunk.leaf is not None and fork.leaf is not None
    return Branches(ancestor.id, trunk.leaf.id, fork.leaf.id, entries_a, entries_b)


def _entries_per_repeat(recording: Recording) -> int:
    return sum(1 for turn in recording.turns for event in turn if "entry" in event.data)


def _grow_branch(grower: _Grower, entries: int, sink: _Sink) -> int:
    """Repeats on `grower` into `sink` until `entries` entries were added; how many."""
    added = 0
    while added < entries:
        before = len(grower.used)
        sink.add(grower.repeat())
        added += len(grower.used) - before
    return added


@dataclass
class _Sink:
    """Events appended to a session BATCH at a time, in order."""

    session_id: Any
    expected: int
    batch: list[Any] = field(default_factory=list)

    def add(self, events: list[Any]) -> None:
        self.batch += events
        if len(self.batch) >= BATCH:
            self.flush()

    def flush(self) -> int:
        from sessions_app import store

        if self.batch:
            self.expected = _append(store, self.session_id, self.expected, self.batch)
            self.batch = []
        return self.expected


def _append(store: Any, session_id: Any, expected: int, batch: list[Any]) -> int:
    last = expected
    for start in range(0, len(batch), BATCH):
        last = store.append_events(session_id, last, batch[start : start + BATCH]).last_seq
    return int(last)


@dataclass
class _Grower:
    recording: Recording
    rng: random.Random
    next_seq: int
    turn: int = 0
    header_seq: int | None = None
    leaf: EntryRecord | None = None
    # The path from the kept window's top (the root before any compaction) to the leaf.
    window: list[EntryRecord] = field(default_factory=list)
    model: EntryRecord | None = None
    compaction: EntryRecord | None = None
    turn_firsts: list[EntryRecord] = field(default_factory=list)
    since_compaction: int = 0
    used: set[str] = field(default_factory=set)

    def repeat(self) -> list[Any]:
        from sessions_app.store import NewEvent

        out: list[Any] = []
        calls: dict[str, str] = {}
        approvals: dict[str, str] = {}
        for turn in self.recording.turns:
            self.turn += 1
            first = True
            for event in turn:
                new = self._event(event, calls, approvals)
                if new is None:
                    continue
                if first and "entry" in new.data:
                    assert self.leaf is not None
                    self.turn_firsts.append(self.leaf)
                    first = False
                out.append(new)
        if self.since_compaction >= COMPACT_EVERY:
            out.append(NewEvent("entry/compaction", {"entry": self._compaction()}))
            self.next_seq += 1
        return out

    def _event(self, event: EventRecord, calls: dict[str, str], approvals: dict[str, str]) -> Any:
        from sessions_app.store import NewEvent

        data = copy.deepcopy(dict(event.data))
        if "turn" in data:
            data["turn"] = self.turn
        if event.type == "request/header":
            if self.header_seq is not None:
                return None  # the same header stays in force
            self.header_seq = self.next_seq
        elif event.type == "request/sent":
            data = self._manifest()
        if "call_id" in data:
            data["call_id"] = self._call(calls, data["call_id"])
        if "approval_id" in data:
            data["approval_id"] = approvals.setdefault(
                data["approval_id"], f"ap_{self.rng.getrandbits(48):012x}"
            )
        if "entry" in data:
            data["entry"] = self._entry(data["entry"], calls)
        self.next_seq += 1
        return NewEvent(event.type, data, turn=self.turn, step=event.step)

    def _call(self, calls: dict[str, str], old: str) -> str:
        return calls.setdefault(old, f"call_{self.rng.getrandbits(64):016x}")

    def _new_id(self) -> str:
        while True:
            entry_id = f"{self.rng.getrandbits(32):08x}"
            if entry_id not in self.used:
                self.used.add(entry_id)
                return entry_id

    def _entry(self, entry: dict[str, Any], calls: dict[str, str]) -> dict[str, Any]:
        entry["id"] = self._new_id()
        entry["parentId"] = self.leaf.id if self.leaf is not None else None
        message = entry.get("message")
        if isinstance(message, dict):
            if isinstance(message.get("toolCallId"), str):
                message["toolCallId"] = self._call(calls, message["toolCallId"])
            for block in message.get("content") or ():
                if isinstance(block, dict) and block.get("type") == "toolCall":
                    block["id"] = self._call(calls, block["id"])
        self._add(entry)
        return entry

    def _add(self, entry: dict[str, Any]) -> EntryRecord:
        from sessions_app.store import path_kind

        record = EntryRecord(
            entry["id"],
            entry["parentId"],
            entry["type"],
            entry.get("timestamp") or "",
            entry,
            self.next_seq,
        )
        self.window.append(record)
        self.leaf = record
        if path_kind(entry) == "model":
            self.model = record
        self.since_compaction += 1
        return record

    def _context(self) -> Any:
        settings = PathSettings(thinking=None, model=self.model, compaction=self.compaction)
        return build_context_from_window(self.window, settings)

    def _manifest(self) -> dict[str, Any]:
        """The request/sent the runtime writes for a request from the current leaf."""
        context = self._context()
        header = self.recording.header
        payload = build_payload(
            provider=str(header.get("provider") or ""),
            model=str(header.get("model") or ""),
            params=header.get("params") or {},
            system_prompt=str(header.get("system_prompt") or ""),
            tools=header.get("tools") or (),
            messages=to_provider_messages(context.messages),
        )
        return {
            "header_seq": self.header_seq,
            "leaf_entry_id": self.leaf.id if self.leaf is not None else None,
            "payload_sha256": payload_sha256(payload),
            "token_estimate": sum(estimate_tokens(m) for m in context.messages),
            "attempt": 1,
            "previous_fault": None,
        }

    def _compaction(self) -> dict[str, Any]:
        """A compaction after the leaf that keeps the last KEEP_TURNS turns."""
        kept = self.turn_firsts[-KEEP_TURNS]
        entry = copy.deepcopy(dict(self.recording.compaction))
        entry.update(
            id=self._new_id(),
            parentId=self.leaf.id if self.leaf is not None else None,
            firstKeptEntryId=kept.id,
            tokensBefore=sum(estimate_tokens(m) for m in self._context().messages),
        )
        top = next(i for i, e in enumerate(self.window) if e.id == kept.id)
        self.window = self.window[top:]
        self.compaction = self._add(entry)
        self.since_compaction = 0
        return entry
