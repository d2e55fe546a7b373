"""Cursors: where a window of a session goes on, as an opaque string (the API's, and the
session page's tree reading on with the same ones).

A cursor is a small JSON object, base64url without padding: its kind and the arguments of
the selector that reads the next window (entry ids, seqs, row numbers). A cursor that does
not decode to its kind's fields, with their types and sizes, is refused with 422: it can
only ever ask for a window of a session the caller may already read.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from sessions_app.errors import DomainError
from sessions_app.limits import ENTRY_ID_MAX

ID_MAX = ENTRY_ID_MAX
NUMBER_MAX = 2**62

# kind → field → "id" (an entry id), "id?" (or null) or "int" (a number ≥ -1)
KINDS: dict[str, dict[str, str]] = {
    # The chat or the entries of the path to `leaf`, the window ending at `end`.
    "path": {"leaf": "id?", "end": "id"},
    # Rows `start` to `stop` of a whole tree as it stood at `as_of` with `leaf` shown.
    "rows": {"as_of": "int", "leaf": "id?", "start": "int", "stop": "int"},
    # A partial tree: the path above, down to `end` (`below` is its child, drawn already).
    "above": {"as_of": "int", "leaf": "id?", "end": "id", "below": "id"},
    # A partial tree: the entries below `parent`.
    "below": {"as_of": "int", "leaf": "id?", "parent": "id"},
    # A partial tree: the path's last entries down to `end` (the window around an entry).
    "near": {"as_of": "int", "leaf": "id?", "end": "id?"},
    # A partial tree: the children of `parent` after seq `after`, but `skip` (drawn already).
    "children": {"as_of": "int", "leaf": "id?", "parent": "id", "after": "int", "skip": "id?"},
    # A partial tree: the roots after seq `after`, but `skip` (drawn already).
    "roots": {"as_of": "int", "leaf": "id?", "after": "int", "skip": "id?"},
    # Two branches compared, the rows from `offset` after their divergence on.
    "compare": {"a": "id", "b": "id", "offset": "int"},
    # The files of the workspace at `entry` (null: the root's), from row `offset` on.
    "files": {"entry": "id?", "offset": "int"},
}


class BadCursor(DomainError):
    code = "invalid"


def cursor_encode(kind: str, **values: Any) -> str:
    fields = KINDS[kind]
    raw = json.dumps({"k": kind, **{name: values[name] for name in fields}}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def cursor_decode(cursor: str, *kinds: str) -> tuple[str, dict[str, Any]]:
    """The kind (one of `kinds`) and the fields of a cursor this API gave out."""
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError, binascii.Error):
        raise _refused() from None
    if not isinstance(data, dict) or data.get("k") not in kinds:
        raise _refused()
    kind = data["k"]
    fields = KINDS[kind]
    if set(data) != {"k", *fields}:
        raise _refused()
    for name, shape in fields.items():
        if not _fits(data[name], shape):
            raise _refused()
    return kind, {name: data[name] for name in fields}


def _fits(value: Any, shape: str) -> bool:
    if shape == "int":
        return type(value) is int and -1 <= value <= NUMBER_MAX  # not bool, not float
    if value is None:
        return shape == "id?"
    return isinstance(value, str) and 0 < len(value) <= ID_MAX and "\x00" not in value


def _refused() -> BadCursor:
    return BadCursor("the cursor is not one this API gave out")
