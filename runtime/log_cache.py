"""The log cache of a run: what a `TurnRunner` knows of its session, folded from the log.

It keeps no fact to itself: its last seq, its position in the tree, the last turn, the
header in force, the input still queued and the approval decisions are read from the log
(`load`), and kept up to date by folding what others appended (`sync`). Every fact of a run
is appended here, after the last seq it has seen; a conflict folds the new events and tries
again.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from projections.records import EventRecord
from runtime.ports import Appended, NewFact, SeqConflict, SessionLog


@dataclass(frozen=True, slots=True)
class InboxItem:
    inbox_id: str
    target: str  # next_step | next_turn
    text: str
    seq: int
    job_id: str | None = None  # a background job's notice (`runtime.jobs`)


class LogCache:
    def __init__(self, log: SessionLog, session_id: str) -> None:
        self.log = log
        self.sid = session_id
        self.last_seq = -1
        self.leaf: str | None = None
        self.last_turn = 0
        self.pending: dict[str, InboxItem] = {}
        self.decisions: dict[str, str] = {}
        self.header: Mapping[str, Any] | None = None
        self.header_seq: int | None = None
        self.resume_header = False
        self.follow_leaf = True  # until our turn starts, the user may still move the leaf

    async def load(self) -> None:
        """Read what the run needs from the log: the head, the last turn, the header in
        force and the input still queued."""
        head = await self.log.head(self.sid)
        self.last_seq, self.leaf = head.last_seq, head.leaf_entry_id
        marker = await self.log.last_event(self.sid, ("turn/start",))
        self.last_turn = _int(marker.data.get("turn")) if marker is not None else 0
        header = await self.log.last_event(self.sid, ("request/header",))
        if header is not None:
            self.header, self.header_seq = header.data, header.seq
            last_end = await self.log.last_event(self.sid, ("turn/end",))
            # The first request after a turn that a dead process left repeats the header,
            # marking where a new process took over.
            self.resume_header = (
                last_end is not None
                and last_end.data.get("reason") == "interrupted"
                and last_end.seq > header.seq
            )
        self.pending = {}
        inbox = await self.log.events_of_types(self.sid, ("inbox/queued", "inbox/claimed"))
        for event in inbox:
            self._fold(event)

    async def sync(self) -> None:
        """Fold what others appended since our last seq (input, decisions)."""
        while True:
            events = await self.log.events_after(self.sid, self.last_seq)
            if not events:
                return
            for event in events:
                self._fold(event)
                self.last_seq = max(self.last_seq, event.seq)

    def _fold(self, event: EventRecord) -> None:
        data = event.data
        if event.type == "inbox/queued":
            job = data.get("job_id")
            item = InboxItem(
                str(data.get("inbox_id")),
                str(data.get("target")),
                str(data.get("text")),
                event.seq,
                str(job) if job else None,
            )
            self.pending[item.inbox_id] = item
        elif event.type == "inbox/claimed":
            self.pending.pop(str(data.get("inbox_id")), None)
        elif event.type == "approval/decided":
            self.decisions[str(data.get("approval_id"))] = str(data.get("outcome"))
        if self.follow_leaf:
            if event.entry_id is not None:
                self.leaf = event.entry_id
            elif event.type == "leaf/moved":
                target = data.get("to")
                self.leaf = target if isinstance(target, str) else None

    async def append(
        self,
        facts: Sequence[NewFact] | Callable[[int], Sequence[NewFact]],
        *,
        unless: Callable[[], bool] | None = None,
    ) -> Appended | None:
        """Append after our last seq; on a conflict, fold the new events and try again
        (unless `unless()` now says the batch is no longer wanted: then None).

        `facts` may be a function of the seq the batch will start after, for facts that
        name seqs of their own batch. The first entry of a batch that names no parent is
        put under our own position in the tree, so that a leaf moved by someone else during
        a turn cannot split an assistant message from its tool results.
        """
        while True:
            batch = facts(self.last_seq) if callable(facts) else facts
            batch = self._anchor(batch)
            try:
                result = await self.log.append(self.sid, self.last_seq, batch)
            except SeqConflict:
                await self.sync()
                if unless is not None and unless():
                    return None
                continue
            self.last_seq = result.last_seq
            if result.entry_ids:
                self.leaf = result.entry_ids[-1]
            for fact in batch:
                if fact.type == "inbox/claimed":
                    self.pending.pop(str(fact.data.get("inbox_id")), None)
            return result

    def _anchor(self, batch: Sequence[NewFact]) -> list[NewFact]:
        out = list(batch)
        for index, fact in enumerate(out):
            entry = fact.data.get("entry")
            if isinstance(entry, Mapping):
                if "parentId" not in entry:
                    anchored = {**entry, "parentId": self.leaf}
                    out[index] = NewFact(
                        fact.type, {**fact.data, "entry": anchored}, fact.turn, fact.step
                    )
                break
        return out

    async def wait_for_events(self, timeout: float) -> None:
        """Return when events after our last seq may exist, or after `timeout` seconds."""
        await self.log.wait_for_events(self.sid, self.last_seq, timeout)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def new_inbox_id() -> str:
    return "in_" + secrets.token_hex(6)
