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
from projections.records import EntryRecord
from sessions_app import services, store, workspaces
from sessions_app.errors import DomainError
from sessions_app.events import UnknownEventType, event_type_for_entry
from sessions_app.models import Session
from sessions_app.store import NewEvent, StoreError


class PiImportError(DomainError):
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
    cwd: str | None = None,
    strict: bool = False,
    on_warning: Callable[[PiWarning], None] | None = None,
    progress: Progress | None = None,
) -> ImportResult:
    """Import one Pi file (any version) as a new session: all of it, or nothing.

    The file is read line by line and written in batches, so memory stays bounded whatever
    its size. The current leaf ends on the last entry in file order, as when Pi opens it.

    `cwd` is the new session's working directory, where its agent's tools may read and
    write: by default the owner's own folder; any other must lie in one of the owner's
    folders (`workspaces`). A file's own `cwd` is never used: it names a folder on the
    machine that wrote it, and trusting it would let an uploaded file point the tools
    anywhere. The header is kept as it is for the export.
    """
    warnings: list[PiWarning] = []

    def warn(warning: PiWarning) -> None:
        warnings.append(warning)
        if on_warning is not None:
            on_warning(warning)

    try:
        in_file = _ids_in_file(source)
        counted = _CountingLines(source)
        items = iter_pi_entries(counted, strict=strict, on_warning=warn)
        header = next(items)
        with transaction.atomic():
            session = services.session_create(
                owner=owner,
                title=name,
                cwd=workspaces.default_cwd(owner) if cwd is None else cwd,
                source="import:pi",
                pi_header=header,
            )
            written, title = _write_entries(session, items, counted, in_file, progress)
            if title and title != session.title:
                services.session_rename(session=session, title=title)
    except PiFileError as exc:
        raise PiImportError(str(exc)) from None
    if written >= ANALYZE_AFTER:
        store.refresh_statistics()
    session.refresh_from_db()
    return ImportResult(session=session, entries=written, warnings=warnings)


# An import this large changes the tables faster than autovacuum re-reads their statistics.
ANALYZE_AFTER = 2_000


def _ids_in_file(source: IO[bytes]) -> set[str] | None:
    """Every entry id of a v2/v3 file (a first, quiet pass), to tell an entry whose parent
    comes later from one whose parent is missing. None when the file cannot be read twice."""
    if not source.seekable():
        return None
    start = source.tell()
    ids = {
        entry["id"]
        for entry in iter_pi_entries(source)
        if entry.get("type") != "session" and isinstance(entry.get("id"), str)
    }
    source.seek(start)
    return ids


def _write_entries(
    session: Session,
    items: Iterator[dict[str, Any]],
    counted: _CountingLines,
    in_file: set[str] | None,
    progress: Progress | None,
) -> tuple[int, str]:
    writer = _EntryWriter(session, counted, in_file, progress)
    title = ""
    last_id: str | None = None
    for entry in items:
        last_id = writer.add(entry)
        if entry.get("type") == "session_info" and isinstance(entry.get("name"), str):
            title = entry["name"].strip()  # the latest in file order wins, as in Pi
    writer.finish(last_id)
    return writer.written, title


class _EntryWriter:
    """Appends entries in file order, in batches.

    Pi writes a parent before its children, but it reads any order: an entry whose parent
    comes later in the file waits here (with its own children) until the parent is written.
    An entry whose parent the file lacks (or that names itself) is the root of its own path,
    as Pi treats it. Entries still waiting at the end sit on a parent cycle: the first of
    each becomes a root. The leaf ends on the last entry in file order.
    """

    def __init__(
        self,
        session: Session,
        counted: _CountingLines,
        in_file: set[str] | None,
        progress: Progress | None,
    ):
        self.session = session
        self.in_file = in_file
        self.counted = counted
        self.progress = progress
        self.seq = session.last_seq
        self.written = 0
        self.seen: set[str] = set()  # every id read so far
        self.appended: set[str] = set()
        self.waiting: dict[str, list[dict[str, Any]]] = {}  # missing parent → entries
        self.batch: list[NewEvent] = []

    def add(self, entry: dict[str, Any]) -> str:
        line_no = self.counted.line_no
        entry_id = entry.get("id")
        if not isinstance(entry_id, str) or not entry_id:
            raise PiImportError(f"line {line_no}: entry has no id")
        if entry_id in self.seen:
            raise PiImportError(f"line {line_no}: entry id {entry_id!r} appears twice in the file")
        parent = entry.get("parentId")
        if parent is not None and not isinstance(parent, str):
            raise PiImportError(
                f"line {line_no}: entry {entry_id!r} has a parentId that is not a string"
            )
        self.seen.add(entry_id)
        if parent is None or parent in self.appended:
            self._append(entry, orphan=False)
        elif parent == entry_id or (self.in_file is not None and parent not in self.in_file):
            self._append(entry, orphan=True)
        else:
            self.waiting.setdefault(parent, []).append(entry)
        return entry_id

    def _append(self, entry: dict[str, Any], *, orphan: bool) -> None:
        pending = [(entry, orphan)]
        while pending:
            current, is_orphan = pending.pop(0)
            self.batch.append(_entry_event(current, is_orphan, self.counted.line_no))
            self.appended.add(current["id"])
            pending.extend((child, False) for child in self.waiting.pop(current["id"], []))
            if len(self.batch) >= settings.STRAND_MAX_BATCH:
                self._flush()

    def finish(self, last_id: str | None) -> None:
        # Whatever still waits names a parent the file does not have (or a cycle).
        while self.waiting:
            parent = next(iter(self.waiting))
            entries = self.waiting.pop(parent)
            for entry in entries:
                self._append(entry, orphan=True)
        if self.batch:
            self._flush()
        if last_id is not None and self.session_leaf() != last_id:
            self.batch.append(NewEvent("leaf/moved", {"to": last_id, "reason": "import"}))
            self._flush()

    def session_leaf(self) -> str | None:
        self.session.refresh_from_db(fields=["leaf_entry_id"])
        return self.session.leaf_entry_id

    def _flush(self) -> None:
        try:
            self.seq = store.append_events(self.session.id, self.seq, self.batch).last_seq
        except StoreError as exc:
            raise PiImportError(f"near line {self.counted.line_no}: {exc}") from None
        self.written += sum(1 for e in self.batch if e.type != "leaf/moved")
        self.batch = []
        if self.progress is not None:
            self.progress(self.counted.bytes_read, self.written)


def _entry_event(entry: dict[str, Any], orphan: bool, line_no: int) -> NewEvent:
    try:
        event_type = event_type_for_entry(entry)
    except UnknownEventType as exc:
        raise PiImportError(f"line {line_no}: {exc}") from None
    data: dict[str, Any] = {"entry": entry}
    if orphan:
        data["orphan"] = True
    return NewEvent(event_type, data)


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


def pi_export_lines(
    session: Session, entries: Iterable[EntryRecord] | None = None
) -> Iterable[str]:
    """A v3 Pi file of the session: the header, then its entries in the order they were
    appended. A session imported from Pi keeps its original header (id, cwd, timestamp).
    `entries`: all of the session's entries, when the caller has read them already."""
    found = store.entries_of(session.id) if entries is None else entries
    return export_lines(_header(session), (e.data for e in found))


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
        # As its users see it (`~/project`): never the server's own path.
        "cwd": workspaces.display_cwd(session.owner, session.cwd),
        **({"parentSession": str(session.parent_id)} if session.parent_id else {}),
    }
