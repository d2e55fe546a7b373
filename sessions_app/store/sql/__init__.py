"""SQL that migrations install (server-side functions), one file per version.

A migration reads its file with `pinned(name, sha256)`, which refuses a file that is no
longer the one the migration was written for: a database migrated today must get the same
function as one migrated when the migration was new. To change a function, add the next
version's file and a migration that installs it (and reinstalls the previous version when
migrating back); never edit a file that a migration pins.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent


class ChangedSql(RuntimeError):
    """A pinned SQL file whose text changed since its migration was written."""


def digest(name: str) -> str:
    """The sha256 of a file's text, with its line endings made `\\n` (so that a checkout
    that converts them does not change it)."""
    return hashlib.sha256(_text(name).encode("utf-8")).hexdigest()


def pinned(name: str, sha256: str) -> str:
    """The text of `name`, provided it is still the text whose sha256 a migration pinned."""
    found = digest(name)
    if found != sha256:
        raise ChangedSql(
            f"sessions_app/store/sql/{name} changed after a migration pinned it (sha256 {found}, "
            f"pinned {sha256}): restore it, and put the change in a new version's file "
            "with a migration that installs it"
        )
    return _text(name)


def _text(name: str) -> str:
    return (SQL_DIR / name).read_text(encoding="utf-8").replace("\r\n", "\n")
