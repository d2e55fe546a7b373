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


class NothingToCompact(AgentError):
    code = "invalid"


class NotFound(AgentError):
    code = "not_found"


class ApprovalNotPending(AgentError):
    code = "conflict"
