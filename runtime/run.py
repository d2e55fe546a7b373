"""What a run of a session's turns shares with the outside: the handle a caller holds
(`Run`, with its cancel), the pieces of a streaming reply and the notices it hands out, and
how its turns and steps end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from runtime.ports import TurnLock

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of a streaming reply; never stored (the final assistant message is)."""

    session_id: str
    turn: int
    step: int
    kind: str  # text, thinking, tool_call; restart: a retry begins, drop what was shown
    block: str  # identifies the content block within the reply
    text: str
    name: str | None = None  # the tool's name, on the first delta of a tool call


@dataclass(frozen=True, slots=True)
class Notice:
    """Something a foreground caller may want to tell its user (the CLI prints these)."""

    session_id: str
    kind: str  # approval_waiting, turn_started, turn_ended
    turn: int
    text: str
    data: Mapping[str, Any] = field(default_factory=dict)


DeltaSink = Callable[[Delta], None]
NoticeSink = Callable[[Notice], None]


@dataclass(frozen=True, slots=True)
class TurnEnded:
    turn: int
    reason: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class StepResult:
    kind: str  # continue, retry, done, aborted, error, max_tokens, approval_timeout
    error: str | None = None


class Cancelled(Exception):
    """The run was asked to stop while waiting on something."""


@dataclass
class Run:
    """This process's handle on a session whose turns it is running."""

    session_id: str
    lock: TurnLock
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[list[TurnEnded]] | None = None
    ended: list[TurnEnded] = field(default_factory=list)
    current_turn: int | None = None

    def cancel(self) -> None:
        self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    async def guarded(self, work: Awaitable[T]) -> T:
        """Await `work` unless the run is cancelled first (then `Cancelled`)."""
        if self.cancelled:
            if asyncio.iscoroutine(work):
                work.close()
            raise Cancelled()
        task = asyncio.ensure_future(work)
        cancel_wait = asyncio.ensure_future(self.cancel_event.wait())
        try:
            await asyncio.wait({task, cancel_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancel_wait.cancel()
        if task.done():
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise Cancelled()
