"""How a failed model request reads in the views: a title for each fault kind, and the
fault a failed reply records (`assistant/message` data `fault`, written by the runtime)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A short name of each fault kind (`runtime.providers.base.FAULT_KINDS`).
FAULT_TITLES = {
    "cut": "Stream cut off",
    "stall": "Stream stalled",
    "rate_limited": "Rate limited",
    "quota": "Out of quota",
    "overloaded": "Provider overloaded",
    "server_error": "Provider error",
    "connection": "Provider unreachable",
    "malformed": "Unreadable stream",
    "not_a_stream": "Not a stream",
    "invalid_tool_arguments": "Invalid tool arguments",
    "auth": "API key refused",
    "context_length": "Context too long",
    "bad_request": "Request refused",
    "refused": "Reply refused",
}


def fault_title(kind: str | None) -> str:
    return FAULT_TITLES.get(kind or "", "Model request failed")


@dataclass(frozen=True, slots=True)
class FaultView:
    """A failed reply's fault. `attempts` is None for replies recorded before attempts
    were (they made one)."""

    kind: str | None
    title: str
    status: int | None
    attempts: int | None
    message: str

    @property
    def label(self) -> str:
        http = f" (HTTP {self.status})" if self.status else ""
        return f"{self.title}{http}"


def fault_view(fault: Any, error_message: Any) -> FaultView:
    """The view of a failed reply from its recorded `fault` (may be missing) and its Pi
    `errorMessage`."""
    data: Mapping[str, Any] = fault if isinstance(fault, Mapping) else {}
    kind = data.get("kind") if isinstance(data.get("kind"), str) else None
    status = data.get("status")
    attempts = data.get("attempts")
    return FaultView(
        kind=kind,
        title=fault_title(kind),
        status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        attempts=attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else None,
        message=str(error_message or data.get("message") or "unknown error"),
    )
