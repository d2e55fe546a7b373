"""A session's system prompt and tools as Pi 1.6 system messages, for its export.

Strand records the prompt and the tool schemas of its model requests in `request/header`
events, outside the entry tree. Pi 1.6 keeps them in the tree: the first request persists a
system message with the whole prompt and every tool, later changes persist system messages
that patch it, and each compaction carries a `systemMessage` checkpoint (the state replayed
up to it), because its context drops the system messages before it.

`with_system_messages` weaves those into the entries, in the order things happened: a
header's system message becomes a child of the leaf the header was written at, and the
entry appended next there (the request's reply) becomes its child. A system message is
written only when the prompt or the tools change on that path, and only once an entry
follows it (a trailing one would become Pi's leaf on open). A compaction gets the state
of its path as its checkpoint. Every other entry is handed out as it is stored.

A fork copies the path to its fork point, but not the headers its parent wrote along it:
`fork_chain` reads the parent's export (woven as above) back up from the fork point, and
`with_system_messages(..., inherited=chain)` writes the parent's system messages and
checkpoints among the copied entries and continues from the state they leave.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from projections.context import js_date_ms
from projections.records import EntryRecord

# Pi's name for the prompt text when a custom prompt stands in for its own sections.
PROMPT_SECTION: Final = "preamble"


@dataclass(frozen=True, slots=True)
class PromptChange:
    """One `request/header`: the prompt and tools of the requests after `seq`."""

    seq: int
    timestamp: str  # ISO, as Pi writes entry timestamps
    system_prompt: str
    tools: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class LeafMove:
    """One `leaf/moved`: the position appends continue from after `seq`."""

    seq: int
    to: str | None


@dataclass(frozen=True, slots=True)
class _State:
    prompt: str
    tools: tuple[tuple[str, str], ...]  # (name, declaration as JSON), in declaration order
    declarations: tuple[Mapping[str, Any], ...]


_EMPTY: Final = _State("", (), ())


def _state(change: PromptChange) -> _State:
    named = [t for t in change.tools if isinstance(t.get("name"), str)]
    return _State(
        change.system_prompt,
        tuple((t["name"], json.dumps(t, sort_keys=True)) for t in named),
        tuple(named),
    )


@dataclass(slots=True)
class _Pending:
    parent: str | None
    base: _State
    state: _State
    change: PromptChange


# The root→fork point path of a parent's export: each entry's id, with its data for the
# system messages and compactions (what a fork's export takes from it), else None.
ForkChain = Sequence[tuple[str, Mapping[str, Any] | None]]


def fork_chain(parent_export: Iterable[Mapping[str, Any]], fork_point: str) -> ForkChain:
    """The path from the root to `fork_point` in the parent's exported entries. Only ids and
    parent ids are kept of the other entries, so memory grows by an id per entry."""
    links: dict[str, str | None] = {}
    kept: dict[str, Mapping[str, Any]] = {}
    for data in parent_export:
        entry_id, parent_id = data.get("id"), data.get("parentId")
        if not isinstance(entry_id, str):
            continue
        links[entry_id] = parent_id if isinstance(parent_id, str) else None
        if data.get("type") == "compaction" or _is_system(data):
            kept[entry_id] = data
    chain: list[str] = []
    current: str | None = fork_point
    while current is not None and current in links and current not in chain:
        chain.append(current)
        current = links[current]
    chain.reverse()
    return [(entry_id, kept.get(entry_id)) for entry_id in chain]


def _is_system(data: Mapping[str, Any]) -> bool:
    message = data.get("message") if data.get("type") == "message" else None
    return isinstance(message, Mapping) and message.get("role") == "system"


def _patched(state: _State, message: Mapping[str, Any]) -> _State:
    """The state after one of our own system messages (the reverse of `_system_entry`)."""
    prompt = state.prompt
    sections = message.get("sections")
    if isinstance(sections, Mapping) and PROMPT_SECTION in sections:
        prompt = str(sections[PROMPT_SECTION] or "")
    removed = {t.get("name") for t in message.get("toolsRemoved") or () if isinstance(t, Mapping)}
    added = [t for t in message.get("toolsAdded") or () if isinstance(t, Mapping)]
    replaced = removed | {t.get("name") for t in added}
    declarations = [d for d in state.declarations if d.get("name") not in replaced] + added
    return _state(PromptChange(0, "", prompt, tuple(declarations)))


def with_system_messages(
    entries: Iterable[EntryRecord],
    changes: Sequence[PromptChange],
    moves: Sequence[LeafMove],
    namespace: uuid.UUID,
    *,
    inherited: ForkChain = (),
) -> Iterator[Mapping[str, Any]]:
    """The entries' data in file order, with the system messages and compaction
    checkpoints that carry `changes` (see the module). `namespace` (the session's id) makes
    the new entries' ids, full uuids as Pi's fallback ids are, the same on every export.
    `inherited`: a fork's `fork_chain`, whose entries the fork's first entries copy."""
    entries = list(entries)
    markers: list[PromptChange | LeafMove] = sorted([*changes, *moves], key=lambda m: m.seq)
    at = 0
    leaf: str | None = None
    state_at: dict[str, _State] = {}
    pending: _Pending | None = None
    copied = _Inherited(inherited, {entry.id for entry in entries})
    for entry in entries:
        if copied.holds(entry.id):
            yield from copied.before(entry.id, leaf)
            state_at[entry.id] = copied.state_at(entry.id)
            leaf = entry.id
            yield copied.entry_data(entry)
            continue
        while at < len(markers) and markers[at].seq < entry.seq:
            marker = markers[at]
            at += 1
            if isinstance(marker, LeafMove):
                leaf, pending = marker.to, None
                continue
            base = pending.base if pending is not None else _state_of(state_at, leaf)
            new = _state(marker)
            pending = None if new == base else _Pending(leaf, base, new, marker)
        data: Mapping[str, Any] = entry.data
        if pending is not None and entry.parent_id == pending.parent:
            system = _system_entry(pending, namespace)
            state_at[system["id"]] = pending.state
            yield system
            data = {**data, "parentId": system["id"]}
        pending = None
        parent_state = _state_of(state_at, data.get("parentId"))
        if entry.type == "compaction" and "systemMessage" not in data and parent_state != _EMPTY:
            data = {**data, "systemMessage": _checkpoint(parent_state, entry.timestamp)}
        state_at[entry.id] = parent_state
        leaf = entry.id
        yield data


class _Inherited:
    """A fork's copied path with its parent's system messages: those that are not copied
    entries are written before the copied entry that follows them, chained in between."""

    def __init__(self, chain: ForkChain, entry_ids: set[str]) -> None:
        self._order = {entry_id: index for index, (entry_id, _) in enumerate(chain)}
        self._chain = chain
        self._copied = {entry_id for entry_id, _ in chain if entry_id in entry_ids}
        self._states: dict[str, _State] = {}
        self._next = 0
        self._last_written: str | None = None
        state = _EMPTY
        for entry_id, data in chain:
            if data is not None and entry_id not in self._copied and _is_system(data):
                state = _patched(state, data["message"])
            self._states[entry_id] = state

    def holds(self, entry_id: str) -> bool:
        return entry_id in self._copied

    def before(self, entry_id: str, leaf: str | None) -> Iterator[Mapping[str, Any]]:
        """The parent's own system messages between the last copied entry and this one."""
        self._last_written = leaf
        stop = self._order[entry_id]
        for entry_id_, data in self._chain[self._next : stop]:
            if data is not None and entry_id_ not in self._copied and _is_system(data):
                yield {**data, "parentId": self._last_written}
                self._last_written = entry_id_
        self._next = stop + 1

    def entry_data(self, entry: EntryRecord) -> Mapping[str, Any]:
        data: Mapping[str, Any] = entry.data
        if self._last_written != data.get("parentId"):
            data = {**data, "parentId": self._last_written}
        woven = self._chain[self._order[entry.id]][1]
        if entry.type == "compaction" and "systemMessage" not in data and woven is not None:
            checkpoint = woven.get("systemMessage")
            if checkpoint is not None:
                data = {**data, "systemMessage": checkpoint}
        return data

    def state_at(self, entry_id: str) -> _State:
        return self._states.get(entry_id, _EMPTY)


def _state_of(state_at: Mapping[str, _State], entry_id: object) -> _State:
    return state_at.get(entry_id, _EMPTY) if isinstance(entry_id, str) else _EMPTY


def _system_entry(pending: _Pending, namespace: uuid.UUID) -> dict[str, Any]:
    change = pending.change
    message: dict[str, Any] = {"role": "system", "content": ""}
    base, new = pending.base, pending.state
    if new.prompt != base.prompt:
        message["sections"] = {PROMPT_SECTION: new.prompt or None}
    # As Pi's getToolStateChanges: a changed declaration is removed and added again.
    before, after = dict(base.tools), dict(new.tools)
    added = [
        d
        for (name, text), d in zip(new.tools, new.declarations, strict=True)
        if before.get(name) != text
    ]
    removed = [{"name": name} for name, text in base.tools if after.get(name) != text]
    if added:
        message["toolsAdded"] = added
    if removed:
        message["toolsRemoved"] = removed
    message["timestamp"] = js_date_ms(change.timestamp)
    return {
        "type": "message",
        "id": str(uuid.uuid5(namespace, f"request/header {change.seq}")),
        "parentId": pending.parent,
        "timestamp": change.timestamp,
        "message": message,
    }


def _checkpoint(state: _State, timestamp: str) -> dict[str, Any]:
    """What Pi's getCurrentSystemMessage replays for the state, stamped with the
    compaction's time (as Pi's appendCompaction stamps it)."""
    message: dict[str, Any] = {"role": "system", "content": ""}
    if state.prompt:
        message["sections"] = {PROMPT_SECTION: state.prompt}
    if state.declarations:
        message["toolsAdded"] = list(state.declarations)
    message["timestamp"] = js_date_ms(timestamp)
    return message
