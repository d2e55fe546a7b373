"""Pi session files in and out: the one import service and the one export service.

The command line, the API and the UI all call these. Parsing and version migration are
pure (`projections.pi_file`); this module writes what they yield through the append path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC
from typing import IO, Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from projections.pi_file import PiFileError, PiWarning, export_lines, iter_pi_entries
from sessions_app import services, store
from sessions_app.events import UnknownEventType, event_type_for_entry
from sessions_app.models import Session
from sessions_app.store import NewEvent, StoreError


class PiImportError(StoreError):
    """A Pi file that cannot be imported; nothing was written."""

    code = "invalid_pi_file"


@dataclass
class ImportResult:
    session: Session
    entries: int
    warnings: list[PiWarning] = field(default_factory=list)


Progress = Callable[[int, int], None]  # (bytes read, entries written)


def pi_import(
    *,
    source: IO[bytes],
    owner: User,
    name: str = "",
    strict: bool = False,
    on_warning: Callable[[PiWarning], None] | None = None,
    progress: Progress | None = None,
) -> ImportResult:
    """Import one Pi file (any version) as a new session: all of it, or nothing.

    The file is read line by line and written in batches, so memory stays bounded whatever
    its size. The current leaf ends on the last entry in file order, as when Pi opens it.
    """
    warnings: list[PiWarning] = []

    def warn(warning: PiWarning) -> None:
        warnings.append(warning)
        if on_warning is not None:
            on_warning(warning)

    counted = _CountingLines(source)
    try:
        items = iter_pi_entries(counted, strict=strict, on_warning=warn)
        header = next(items)
        with transaction.atomic():
            session = services.session_create(
                owner=owner,
                title=name,
                cwd=str(header.get("cwd") or ""),
                source="import:pi",
                pi_header=header,
            )
            written, title = _write_entries(session, items, counted, progress)
            if title and title != session.title:
                services.session_rename(session=session, title=title)
    except PiFileError as exc:
        raise PiImportError(str(exc)) from None
    session.refresh_from_db()
    return ImportResult(session=session, entries=written, warnings=warnings)


def _write_entries(
    session: Session,
    items: Iterator[dict[str, Any]],
    counted: _CountingLines,
    progress: Progress | None,
) -> tuple[int, str]:
    seen: set[str] = set()
    dangling: dict[str, str] = {}  # parent id named before it appeared → the child
    batch: list[NewEvent] = []
    seq = session.last_seq
    written = 0
    title = ""
    for entry in items:
        batch.append(_entry_event(entry, seen, dangling, counted.line_no))
        if entry.get("type") == "session_info" and isinstance(entry.get("name"), str):
            title = entry["name"].strip()  # the latest in file order wins, as in Pi
        if len(batch) >= settings.STRAND_MAX_BATCH:
            seq = _flush(session, seq, batch, counted.line_no)
            written += len(batch)
            batch = []
            if progress is not None:
                progress(counted.bytes_read, written)
    if batch:
        seq = _flush(session, seq, batch, counted.line_no)
        written += len(batch)
    forward = next((p for p in dangling if p in seen), None)
    if forward is not None:
        raise PiImportError(
            f"entry {dangling[forward]!r} names parent {forward!r}, which comes later in the "
            "file; Pi writes a parent before its children (is the file reordered or cyclic?)"
        )
    if progress is not None:
        progress(counted.bytes_read, written)
    return written, title


def _entry_event(
    entry: dict[str, Any], seen: set[str], dangling: dict[str, str], line_no: int
) -> NewEvent:
    entry_id = entry.get("id")
    if not isinstance(entry_id, str) or not entry_id:
        raise PiImportError(f"line {line_no}: entry has no id")
    if entry_id in seen:
        raise PiImportError(f"line {line_no}: entry id {entry_id!r} appears twice in the file")
    parent = entry.get("parentId")
    if parent is not None and not isinstance(parent, str):
        raise PiImportError(
            f"line {line_no}: entry {entry_id!r} has a parentId that is not a string"
        )
    # Pi treats an entry whose parent is missing (or is itself) as the root of its own path.
    orphan = parent is not None and (parent == entry_id or parent not in seen)
    if orphan and parent != entry_id:
        dangling.setdefault(str(parent), entry_id)
    seen.add(entry_id)
    try:
        event_type = event_type_for_entry(entry)
    except UnknownEventType as exc:
        raise PiImportError(f"line {line_no}: {exc}") from None
    data: dict[str, Any] = {"entry": entry}
    if orphan:
        data["orphan"] = True
    return NewEvent(event_type, data)


def _flush(session: Session, seq: int, batch: list[NewEvent], line_no: int) -> int:
    try:
        return store.append_events(session.id, seq, batch).last_seq
    except StoreError as exc:
        raise PiImportError(f"near line {line_no}: {exc}") from None


class _CountingLines:
    """Lines of a binary file, counting bytes and lines for progress and error messages."""

    def __init__(self, source: IO[bytes]) -> None:
        self._source = source
        self.bytes_read = 0
        self.line_no = 0

    def __iter__(self) -> Iterator[bytes]:
        for line in self._source:
            self.bytes_read += len(line)
            self.line_no += 1
            yield line


def file_size(source: IO[bytes]) -> int:
    try:
        return os.fstat(source.fileno()).st_size
    except (OSError, AttributeError, ValueError):
        return 0


# --- export -------------------------------------------------------------------------------


def pi_export_lines(session: Session) -> Iterable[str]:
    """A v3 Pi file of the session: the header, then its entries in the order they were
    appended. A session imported from Pi keeps its original header (id, cwd, timestamp)."""
    return export_lines(_header(session), (e.data for e in store.entries_of(session.id)))


def _header(session: Session) -> dict[str, Any]:
    created = store.events_after(session.id, -1, 1)
    pi_header = created[0].data.get("pi_header") if created else None
    if isinstance(pi_header, dict):
        return {**pi_header, "version": 3}
    timestamp = session.created_at.astimezone(UTC)
    return {
        "type": "session",
        "version": 3,
        "id": str(session.id),
        "timestamp": store.js_iso(timestamp),
        "cwd": session.cwd,
        **({"parentSession": str(session.parent_id)} if session.parent_id else {}),
    }
