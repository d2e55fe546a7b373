"""Refusals of the runtime's services. Each has a `code` an API maps to a status."""

from __future__ import annotations


class AgentError(ValueError):
    code = "invalid"


class TurnRunning(AgentError):
    """A turn is running in the session (here or in another process)."""

    code = "conflict"


class SessionBusy(AgentError):
    """Someone holds the session's turn lock for something else (compaction, navigation)."""

    code = "conflict"


def lock_refusal(turn_open: bool) -> AgentError:
    """Why work that needs the session to itself (a leaf move, a compaction, a navigation)
    cannot have its turn lock: a turn holds it, or other such work does. Every door that
    moves the leaf refuses with this one answer."""
    if turn_open:
        return TurnRunning("a turn is running in this session: wait for it or cancel it first")
    return SessionBusy("the session is busy (a compaction or navigation is running)")


class NothingToCompact(AgentError):
    code = "invalid"


class NotFound(AgentError):
    code = "not_found"


class ApprovalNotPending(AgentError):
    code = "conflict"
