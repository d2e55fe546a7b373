"""The base of the project's domain errors: a refusal with a message for people and a code
for programs.

Each module raises its own subclasses (`store.StoreError` for the append path and its
reads, `access.NotVisible`, `ratelimit.RateLimited`, `workspaces.WorkspaceNotAllowed`…) and
each door turns them into its own answer by `code` alone: the API into a status and a JSON
body, a page into a message, a command into one line and exit status 1. A refusal that is
none of those more precise kinds is a `DomainError` itself, code "invalid".

The runtime's `runtime.AgentError` has the same shape (a message and a `code`) but is its
own: the runtime imports nothing of `sessions_app`.
"""

from __future__ import annotations


class DomainError(ValueError):
    """A request the project refuses; the message says why, `code` says what kind."""

    code: str = "invalid"
