"""The OpenTelemetry GenAI spans of finished turns, read through the store
(`projections.otel_genai` maps them): what the OTLP projector pushes and the file export
streams.

The turns are read together, whether they are a projector batch's turns of many sessions or
a run of one session's turns for the file: their events by the (session, turn) key, the
headers their requests name, their requests' leaves and the settings entries those leaves
name, each in one query for all the turns. Then the input of each model request is built
again from its `request/header` and the kept window of its leaf
(`projections.kept_window`), as the context view builds it, a session at a time: the
requests of a session's turns have their leaves on one path, so that path is read once for
the deepest of them, and each message of it is converted to the conventions' form once.
"""

from __future__ import annotations

import itertools
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from projections.context import (
    EMPTY_CONTEXT,
    ContextFold,
    PathSettings,
    build_context_from_window,
)
from projections.kept_window import LeafFacts, window_top
from projections.otel_genai import (
    InputMessages,
    RequestInput,
    Span,
    TurnFacts,
    is_finished,
    turn_spans,
)
from projections.records import EntryRecord, EventRecord
from projections.trace import TraceSpan, project_trace
from sessions_app import store
from sessions_app.store.windows import StoredEntries, entry_facts, path_bytes

# The file export reads a session's turns this many at a time: its memory is that of these
# turns and of the path their requests share.
TURNS_PER_READ = 20
# And keeps at most this many entries of the path, and bytes of their stored data, between
# two reads (`KeptPaths`).
EXPORT_KEPT_ENTRIES = 50_000
EXPORT_KEPT_BYTES = 256 * 1024 * 1024


class KeptPaths:
    """The path each session's requests were last read along, kept from one projector batch
    to the next (entries are never changed, so a kept one stays true): a session's next
    requests have their leaves below the last one, so only the entries added since are
    read, not the whole path again; with it the fold of the last context built along it
    (`ContextFold`), so that the next request's context costs only its new entries. At most
    `max_entries` entries and `max_bytes` of their stored data are kept, those of the
    sessions read most recently; a path larger than that is not kept at all.

    A window is read only when its entries hold at most the `budget` a read is given (their
    stored size, summed in the database first); past it `path` answers None, and the
    requests' inputs are left out of their spans rather than read whole."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        # (session, the compaction its window starts from) → (the window's top, the path,
        # its entries' stored bytes)
        self._paths: OrderedDict[tuple[str, str | None], tuple[int, list[EntryRecord], int]] = (
            OrderedDict()
        )
        self._folds: dict[tuple[str, str | None], ContextFold] = {}
        # Each session's messages converted for its spans (by session), kept with its paths.
        self._messages: dict[str, InputMessages] = {}
        self._size = 0
        self._bytes = 0

    def path(
        self, reader: StoredEntries, compaction: str | None, leaf_id: str, top: int, budget: int
    ) -> list[EntryRecord] | None:
        """The path from depth `top` down to `leaf_id` (as `reader.path` reads it), read
        from the kept path's last entry down when the leaf is below it; None when it holds
        more than `budget` bytes of stored data (then nothing of it is read)."""
        key = (str(reader.session_id), compaction)
        kept = self._paths.get(key)
        found: tuple[list[EntryRecord], int] | None = None
        if kept is not None and kept[0] == top and kept[1]:
            _, kept_path, kept_bytes = kept
            last = kept_path[-1]
            if leaf_id == last.id:
                found = kept_path, kept_bytes
            elif (depth := reader.depth(last.id)) is not None:
                cap = budget - kept_bytes
                below = path_bytes(
                    reader.session_id, leaf_id, min_depth=depth + 1, cap=cap, measure="stored"
                )
                tail = reader.path(leaf_id, depth + 1) if below <= cap else []
                if tail and tail[0].parent_id == last.id:
                    found = kept_path + tail, kept_bytes + below
        if found is None:
            found = _read_within(reader, leaf_id, top, budget)
            if found is None:
                return None
        self._keep(key, top, *found)
        return found[0]

    def fold(self, session_id: str, compaction: str | None) -> ContextFold | None:
        """The fold last kept along the session's kept path (its leaf may be off the path
        read since: the caller looks for it there)."""
        return self._folds.get((session_id, compaction))

    def keep_fold(self, session_id: str, compaction: str | None, fold: ContextFold) -> None:
        key = (session_id, compaction)
        if key in self._paths:  # only beside a kept path, and forgotten with it
            self._folds[key] = fold

    def messages(self, session_id: str) -> InputMessages:
        """The session's messages already converted, kept while one of its paths is (and
        begun again once they outnumber the entries kept)."""
        found = self._messages.pop(session_id, None)
        if found is None or len(found) > self.max_entries:
            found = InputMessages()
        if any(key[0] == session_id for key in self._paths):
            self._messages[session_id] = found
        return found

    def forget(self, session_id: uuid.UUID | str) -> None:
        for key in [k for k in self._paths if k[0] == str(session_id)]:
            self._drop(key)
        self._messages.pop(str(session_id), None)

    def _keep(
        self, key: tuple[str, str | None], top: int, path: list[EntryRecord], size: int
    ) -> None:
        if key in self._paths:
            self._drop(key, fold=False)
        if len(path) > self.max_entries or size > self.max_bytes:
            self._folds.pop(key, None)
            return
        self._paths[key] = (top, path, size)
        self._size += len(path)
        self._bytes += size
        while self._size > self.max_entries or self._bytes > self.max_bytes:
            dropped = next(iter(self._paths))
            self._drop(dropped)
            if not any(k[0] == dropped[0] for k in self._paths):
                self._messages.pop(dropped[0], None)

    def _drop(self, key: tuple[str, str | None], *, fold: bool = True) -> None:
        _, path, size = self._paths.pop(key)
        self._size -= len(path)
        self._bytes -= size
        if fold:
            self._folds.pop(key, None)


def read_window(
    reader: StoredEntries, leaf_id: str, top: int, budget: int
) -> list[EntryRecord] | None:
    """The path from depth `top` down to `leaf_id`, or None (nothing read) when its entries
    hold more than `budget` bytes of stored data."""
    found = _read_within(reader, leaf_id, top, budget)
    return found[0] if found is not None else None


def _read_within(
    reader: StoredEntries, leaf_id: str, top: int, budget: int
) -> tuple[list[EntryRecord], int] | None:
    """`read_window`'s path and its stored bytes, summed in the database before it is read."""
    size = path_bytes(reader.session_id, leaf_id, min_depth=top, cap=budget, measure="stored")
    return (reader.path(leaf_id, top), size) if size <= budget else None


def agent_name(preset: Any) -> str:
    """The `gen_ai.agent.name` of a session: its preset's name."""
    name = preset.get("name") if isinstance(preset, Mapping) else None
    return str(name) if name else "strand"


def session_turn_spans(
    session_id: uuid.UUID | str,
    turns: Iterable[int],
    *,
    agent: str,
    capture_content: bool,
    max_chars: int,
) -> Iterator[list[Span]]:
    """The spans of each finished turn of `turns`, a turn at a time (a running one is left
    out: its spans go when it has ended), read `TURNS_PER_READ` turns at a time. The path
    and the fold of its contexts are kept from one read to the next (`KeptPaths`, at most
    `EXPORT_KEPT_ENTRIES` entries), so a long session's file costs its length once, not
    once a read."""
    kept = KeptPaths(EXPORT_KEPT_ENTRIES, EXPORT_KEPT_BYTES)
    remaining = iter(turns)
    while chunk := list(itertools.islice(remaining, TURNS_PER_READ)):
        yield from turns_spans(
            {str(session_id): chunk},
            agents={str(session_id): agent},
            capture_content=capture_content,
            max_chars=max_chars,
            kept=kept,
        )


@dataclass
class _Turn:
    """A finished turn as read: its trace span, its events by seq (with the headers its
    requests name) and its `request/sent` events."""

    turn: TraceSpan
    events: dict[int, EventRecord]
    sents: list[EventRecord]


def turns_spans(
    turns: Mapping[str, Sequence[int]],
    *,
    agents: Mapping[str, str],
    capture_content: bool,
    max_chars: int,
    kept: KeptPaths | None = None,
) -> Iterator[list[Span]]:
    """The spans of each finished turn of `turns` (turns by session; a running one is left
    out; sessions by their id as text), session by session, turn by turn in the order
    given. `agents`: each session's
    agent name, by session id as text ("strand" when missing); `kept`: the paths read
    before, to read only what they lack."""
    keys = [(sid, turn) for sid, session_turns in turns.items() for turn in session_turns]
    read = _finished_turns(keys)
    _add_headers(read)
    requests = _requests(read)
    found = _compactions(requests) if capture_content else {}
    by_session: dict[str, list[tuple[int, _Turn]]] = {}
    for sid, turn in keys:
        if (sid, turn) in read:
            by_session.setdefault(sid, []).append((turn, read[(sid, turn)]))
    for session_id, finished in by_session.items():
        inputs = request_inputs(
            StoredEntries(session_id),
            [request for turn, _ in finished for request in requests[(session_id, turn)]],
            found.get(session_id, {}),
            with_messages=capture_content,
            kept=kept,
        )
        agent = agents.get(session_id, "strand")
        # The session's converted messages, shared by its turns (and kept for its next ones).
        messages = kept.messages(session_id) if kept is not None else InputMessages()
        for _, read_turn in finished:
            facts = TurnFacts(session_id, agent, read_turn.turn, read_turn.events, inputs)
            yield turn_spans(
                facts, capture_content=capture_content, max_chars=max_chars, messages=messages
            )


# A model request as its input is built: its `request/sent`, its header's data, and the
# path facts of its leaf (None when the leaf names no entry, or an unknown one).
Request = tuple[EventRecord, Mapping[str, Any], LeafFacts | None]


def _finished_turns(keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], _Turn]:
    """The finished turns of `keys` (session id as text, turn), read in one query."""
    events = store.events_of_session_turns(keys)
    read: dict[tuple[str, int], _Turn] = {}
    for key in keys:
        turn_events = events.get(key, [])
        spans = [s for s in project_trace(turn_events).spans if s.kind == "turn"]
        if not spans or not is_finished(spans[0]):
            continue
        sents = [e for e in turn_events if e.type == "request/sent"]
        read[key] = _Turn(spans[0], {e.seq: e for e in turn_events}, sents)
    return read


def _add_headers(read: Mapping[tuple[str, int], _Turn]) -> None:
    """The headers the turns' requests name that were written before their turn (a header
    is written only when it changes), read in one query and added to their turn's events."""
    wanted: dict[tuple[str, int], list[_Turn]] = {}
    for (sid, _), turn in read.items():
        for sent in turn.sents:
            seq = sent.data.get("header_seq")
            if isinstance(seq, int) and seq not in turn.events:
                wanted.setdefault((sid, seq), []).append(turn)
    if not wanted:
        return
    for key, event in store.events_at(wanted).items():
        for turn in wanted[key]:
            turn.events[event.seq] = event


def _requests(read: Mapping[tuple[str, int], _Turn]) -> dict[tuple[str, int], list[Request]]:
    """Each turn's requests that have their header (a request without one goes without its
    input), with their leaves' facts read in one query for all the turns."""
    headed: dict[tuple[str, int], list[tuple[EventRecord, Mapping[str, Any]]]] = {}
    leaves: set[tuple[str, str]] = set()
    for (sid, number), turn in read.items():
        found = headed.setdefault((sid, number), [])
        for sent in turn.sents:
            header = turn.events.get(sent.data.get("header_seq"))  # type: ignore[arg-type]
            if header is None or header.type != "request/header":
                continue
            found.append((sent, header.data))
            leaf = sent.data.get("leaf_entry_id")
            if isinstance(leaf, str):
                leaves.add((sid, leaf))
    facts = entry_facts(sorted(leaves)) if leaves else {}
    out: dict[tuple[str, int], list[Request]] = {}
    for (sid, number), pairs in headed.items():
        out[(sid, number)] = [
            (sent, header, _leaf_facts(facts, sid, sent.data.get("leaf_entry_id")))
            for sent, header in pairs
        ]
    return out


def _leaf_facts(
    facts: Mapping[tuple[str, str], LeafFacts], session_id: str, leaf: Any
) -> LeafFacts | None:
    return facts.get((session_id, leaf)) if isinstance(leaf, str) else None


def _compactions(
    requests: Mapping[tuple[str, int], list[Request]],
) -> dict[str, dict[str, EntryRecord]]:
    """The latest compaction each request's leaf has on its path (the input's messages
    start there; the entries that set the thinking level and the model change none of
    them), by session and entry id, read in one query."""
    wanted: set[tuple[str, str]] = set()
    for (sid, _), turn_requests in requests.items():
        for _, _, facts in turn_requests:
            if facts is None:
                continue
            if facts.compaction:
                wanted.add((sid, facts.compaction))
    found: dict[str, dict[str, EntryRecord]] = {}
    for (sid, entry_id), entry in (store.entries_by_keys(sorted(wanted)) if wanted else {}).items():
        found.setdefault(sid, {})[entry_id] = entry
    return found


def request_inputs(
    reader: StoredEntries,
    requests: Sequence[Request],
    found: Mapping[str, EntryRecord],
    *,
    with_messages: bool = True,
    kept: KeptPaths | None = None,
) -> dict[int, RequestInput]:
    """The input of each request of one session (in seq order): its header and its leaf's
    context, with `found` the compactions its leaf's facts name. The requests have their
    leaves on one path (unless the session branched between them), so the kept window is
    read once for the deepest of those that share a compaction, and the contexts are folded
    along it (`ContextFold`): each request's costs the entries after the one before it. A
    leaf not on that path, or below a window past `STRAND_WHOLE_READ_BYTES` of stored data,
    has its own window read, within that budget; past it the input holds no messages (None)
    and its span names it left out."""
    if not with_messages:
        return {
            sent.seq: RequestInput(header, (), facts.compaction if facts else None)
            for sent, header, facts in requests
        }
    session_id = str(reader.session_id)
    budget = int(settings.STRAND_WHOLE_READ_BYTES)  # as the context view's reads
    # Each window's top and path (None: past the budget, not read), its entries by id.
    paths: dict[str | None, tuple[int, list[EntryRecord] | None, dict[str, int]]] = {}
    for _, _, facts in reversed(requests):  # the deepest leaf of each window first
        if facts is None or facts.compaction in paths:
            continue
        compaction = found.get(facts.compaction) if facts.compaction else None
        top = window_top(reader, compaction)
        if kept is not None:
            path = kept.path(reader, facts.compaction, facts.id, top, budget)
        else:
            path = read_window(reader, facts.id, top, budget)
        index = {e.id: i for i, e in enumerate(path)} if path is not None else {}
        paths[facts.compaction] = (top, path, index)
    folds: dict[str | None, ContextFold] = {}
    inputs: dict[int, RequestInput] = {}
    for sent, header, facts in requests:
        if facts is None:
            # A leaf that names no entry (Pi's fallback, the last entry before the request,
            # is not read whole here): the input holds no messages.
            inputs[sent.seq] = RequestInput.of(header, EMPTY_CONTEXT)
            continue
        compaction = found.get(facts.compaction) if facts.compaction else None
        top, path, index = paths[facts.compaction]
        at = index.get(facts.id)
        if path is None or at is None:
            # A leaf off the path read, or of a window too large to read whole: its own
            # window, read only within the budget; past it the input is left out of the
            # span (and named there).
            window = read_window(reader, facts.id, top, budget)
            if window is None:
                inputs[sent.seq] = RequestInput(header, None, facts.compaction)
            else:
                context = build_context_from_window(window, PathSettings(None, None, compaction))
                inputs[sent.seq] = RequestInput.of(header, context)
            continue
        fold = folds.get(facts.compaction)
        if fold is None and kept is not None:
            fold = kept.fold(session_id, facts.compaction)
        last = index.get(fold.leaf_id) if fold is not None and fold.leaf_id else None
        if fold is None or last is None or last > at or not fold.extend(path[last + 1 : at + 1]):
            fold = ContextFold(path[: at + 1], compaction)
        folds[facts.compaction] = fold
        inputs[sent.seq] = RequestInput.of_fold(header, fold)
    if kept is not None:
        for compaction_id, fold in folds.items():
            kept.keep_fold(session_id, compaction_id, fold)
    return inputs
