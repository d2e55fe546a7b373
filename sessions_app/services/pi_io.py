"""Pi session files in and out: the one import service and the one export service.

The command line, the API and the UI all call these. Parsing and version migration are
pure (`projections.pi_file`); this module writes what they yield through the append path.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC
from typing import IO, Any

import orjson
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from projections.pi_file import (
    PiFileError,
    PiWarning,
    export_lines,
    iter_pi_numbered,
)
from projections.pi_system import (
    ForkChain,
    LeafMove,
    PromptChange,
    fork_chain,
    with_system_messages,
)
from projections.records import EntryRecord
from sessions_app import selectors, services, store, workspaces
from sessions_app.errors import DomainError
from sessions_app.events import EventError, event_type_for_entry
from sessions_app.models import Event, Session
from sessions_app.presets import CODING
from sessions_app.store import NewEvent, StoreError
from sessions_app.store.bulk import BulkAppend


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

    The file is read line by line and written by COPY as it is read (`store.bulk`), each
    entry checked as the store checks it, so memory stays bounded whatever its size (a few
    numbers per entry id, not the entries). The current leaf ends on the last entry in file
    order, as when Pi opens it. `progress` is called every `PROGRESS_EVERY` entries and at
    the end with the bytes read and the entries written.

    `cwd` is the new session's working directory, where its agent's tools may read and
    write: by default the owner's own folder; any other must lie in one of the owner's
    folders (`workspaces`). A file's own `cwd` is never used: it names a folder on the
    machine that wrote it, and trusting it would let an uploaded file point the tools
    anywhere. The header is kept as it is for the export.
    """
    steps = pi_import_steps(
        source=source, owner=owner, name=name, cwd=cwd, strict=strict, on_warning=on_warning
    )
    while True:
        try:
            done = next(steps)
        except StopIteration as finished:
            return finished.value  # type: ignore[no-any-return]
        if progress is not None:
            progress(*done)


def pi_import_steps(
    *,
    source: IO[bytes],
    owner: User,
    name: str = "",
    cwd: str | None = None,
    strict: bool = False,
    on_warning: Callable[[PiWarning], None] | None = None,
) -> Generator[tuple[int, int], None, ImportResult]:
    """`pi_import` a step at a time: yields (bytes read, entries written) every
    `PROGRESS_EVERY` entries and once at the end, and returns the result. Its transaction
    stays open between steps (a caller that stops early, closing the generator, rolls it
    back: nothing is written), so it is driven from one thread, as a streamed response is."""
    warnings: list[PiWarning] = []

    def warn(warning: PiWarning) -> None:
        warnings.append(warning)
        if on_warning is not None:
            on_warning(warning)

    try:
        in_file = _ids_in_file(source)
        counted = _CountingLines(source)
        items = iter_pi_numbered(
            counted, strict=strict, on_warning=warn, max_depth=settings.STRAND_MAX_JSON_DEPTH
        )
        _, header = next(items)
        with transaction.atomic():
            session = services.session_create(
                owner=owner,
                title=name,
                cwd=workspaces.new_folder(owner) if cwd is None else cwd,
                source="import:pi",
                pi_header=header,
                # Pi's own tools: a Pi session continued here offers the names it used.
                preset=CODING,
            )
            writer = _EntryWriter(session, counted, in_file)
            with writer.bulk:  # batches go to Postgres while the next are read and checked
                title = yield from _write_entries(writer, items)
            if title and title != session.title:
                services.session_rename(session=session, title=title)
    except PiFileError as exc:
        raise PiImportError(str(exc)) from None
    written = writer.written
    if written >= ANALYZE_AFTER and store.statistics_outgrown(written):
        store.refresh_statistics()
    session.refresh_from_db()
    yield counted.bytes_read, written
    return ImportResult(session=session, entries=written, warnings=warnings)


# Entries written between two calls of an import's progress callback.
PROGRESS_EVERY = 1000

# An import this large changes the tables faster than autovacuum re-reads their statistics
# (when it is a tenth of them or more: `store.statistics_outgrown`).
ANALYZE_AFTER = 2_000


def _ids_in_file(source: IO[bytes]) -> set[str] | None:
    """Every entry id of a v2/v3 file (a first, quiet pass), to tell an entry whose parent
    comes later from one whose parent is missing. None when the file cannot be read twice.

    Only the ids are wanted, so each line is parsed and nothing more (the second pass
    checks it): a line that is not JSON, or that the second pass skips, adds at most an id
    no entry is written with, and an entry waiting for it is an orphan at the end."""
    if not source.seekable():
        return None
    start = source.tell()
    ids: set[str] = set()
    for line in source:
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict) and value.get("type") != "session":
            entry_id = value.get("id")
            if isinstance(entry_id, str):
                ids.add(entry_id)
    source.seek(start)
    return ids


def _write_entries(
    writer: _EntryWriter, items: Iterator[tuple[int, dict[str, Any]]]
) -> Generator[tuple[int, int], None, str]:
    """Write every entry; yields progress as it goes, returns the title the file names."""
    title = ""
    last_id: str | None = None
    reported = 0
    for line_no, entry in items:
        last_id = writer.add(entry, line_no)
        if entry.get("type") == "session_info" and isinstance(entry.get("name"), str):
            title = entry["name"].strip()  # the latest in file order wins, as in Pi
        if writer.written - reported >= PROGRESS_EVERY:
            reported = writer.written
            yield writer.counted.bytes_read, reported
    writer.finish(last_id)
    return title


class _EntryWriter:
    """Appends entries in file order, by COPY (`store.bulk`), each checked as it comes.

    Pi writes a parent before its children, but it reads any order: an entry whose parent
    comes later in the file waits here (with its own children) until the parent is written.
    An entry whose parent the file lacks is the root of its own path (an orphan), as Pi
    treats it. A parent cycle (an entry that names itself, or a descendant, as its parent:
    Pi itself loops forever on one) refuses the file at the line that closes it. The leaf
    ends on the last entry in file order.
    """

    def __init__(
        self,
        session: Session,
        counted: _CountingLines,
        in_file: set[str] | None,
    ):
        self.session = session
        self.in_file = in_file
        self.counted = counted
        self.bulk = BulkAppend(session.id, session.last_seq)
        self.written = 0
        self.seen: set[str] = set()  # every id read so far
        self.appended: set[str] = set()
        # missing parent → (the event that adds the entry, the entry's id, its line)
        self.waiting: dict[str, list[tuple[NewEvent, str, int]]] = {}
        # For each entry that waits, the parent it waits for: the waiting entries form
        # chains up to an id not read yet. `_top` finds an entry's (with the chains made
        # shorter as it goes, so a file in any order costs near-linear time).
        self.above: dict[str, str] = {}

    def add(self, entry: dict[str, Any], line_no: int) -> str:
        """Append (or hold back) the entry read from line `line_no`. An entry that cannot
        be taken fails, here or when its batch is written, naming that line."""
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
        if parent == entry_id:
            raise PiImportError(
                f"line {line_no}: entry {entry_id!r} names itself as its parent (a parent "
                "cycle: Pi loops forever on it)"
            )
        self.seen.add(entry_id)
        event = _entry_event(entry, line_no)
        if parent is None or parent in self.appended:
            self._append(event, entry_id, line_no, orphan=False)
        elif self.in_file is not None and parent not in self.in_file:
            self._append(event, entry_id, line_no, orphan=True)
        elif self._top(parent) == entry_id:
            raise PiImportError(
                f"line {line_no}: entry {entry_id!r} closes a parent cycle: its parent "
                f"{parent!r} descends from it (Pi loops forever on one)"
            )
        else:
            self.waiting.setdefault(parent, []).append((event, entry_id, line_no))
            self.above[entry_id] = parent
        return entry_id

    def _top(self, entry_id: str) -> str:
        """The id at the top of the chain of waiting entries above `entry_id`: one not
        read yet (the chains never loop: the entry that would close a loop is refused)."""
        top = entry_id
        while top in self.above:
            top = self.above[top]
        while entry_id in self.above and self.above[entry_id] != top:
            self.above[entry_id], entry_id = top, self.above[entry_id]
        return top

    def _append(self, event: NewEvent, entry_id: str, line_no: int, *, orphan: bool) -> None:
        pending = deque([(event, entry_id, line_no, orphan)])
        while pending:
            current, current_id, current_line, is_orphan = pending.popleft()
            if is_orphan:
                current = NewEvent(current.type, {**current.data, "orphan": True})
            self._write(current, current_line)
            self.appended.add(current_id)
            self.above.pop(current_id, None)
            waiting = self.waiting.pop(current_id, [])
            pending.extend((child, child_id, line, False) for child, child_id, line in waiting)

    def _write(self, event: NewEvent, line_no: int) -> None:
        try:
            self.bulk.add(event)
        except store.QuotaExceeded:
            raise  # not the file's fault: the owner's storage is full (413, not 422)
        except StoreError as exc:
            entry = event.data.get("entry")
            problem = _entry_problem(entry if isinstance(entry, dict) else {}, exc)
            raise PiImportError(f"line {line_no}: {problem}") from None
        self.written += 1

    def finish(self, last_id: str | None) -> None:
        # Whatever still waits hangs below a parent the file does not have (known only now
        # when the file could not be read twice): each entry that names one is an orphan,
        # and its descendants follow it.
        for parent in [p for p in self.waiting if p not in self.seen]:
            for event, entry_id, line_no in self.waiting.pop(parent, []):
                self._append(event, entry_id, line_no, orphan=True)
        try:
            result = self.bulk.finish()
        except StoreError as exc:
            raise PiImportError(f"near line {self.counted.line_no}: {exc}") from None
        if last_id is not None and result.leaf_entry_id != last_id:
            move = NewEvent("leaf/moved", {"to": last_id, "reason": "import"})
            store.append_events(self.session.id, result.last_seq, [move])


def _entry_event(entry: dict[str, Any], line_no: int) -> NewEvent:
    try:
        return NewEvent(event_type_for_entry(entry), {"entry": entry})
    except EventError as exc:
        raise PiImportError(f"line {line_no}: {_entry_problem(entry, exc)}") from None


def _entry_problem(entry: dict[str, Any], error: Exception) -> str:
    # validate_event says "<event type>: entry: Value error, <what>": keep the what, and
    # name the entry as the file does.
    reason = str(error)
    for noise in ("entry: ", "Value error, "):
        reason = reason.partition(noise)[2] or reason
    kind = entry.get("type")
    return f"{kind} entry {entry.get('id')!r}: {reason}" if kind else reason


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
    `entries`: all of the session's entries, when the caller has read them already.

    The system prompt and tools its own model requests were sent with go in as Pi 1.6
    writes them: system messages where they changed, and checkpoints on compactions
    (`projections.pi_system`). A session that never sent a request exports its entries
    alone, so an imported file comes back entry for entry."""
    return export_lines(_header(session), _exported_entries(session, entries))


# A fork of a fork of … reads its ancestors' exports for the system state it copied; past
# this many generations the oldest ones' prompts are left out.
FORK_GENERATIONS = 8


def _exported_entries(
    session: Session, entries: Iterable[EntryRecord] | None = None, generation: int = 0
) -> Iterable[dict[str, Any] | Any]:
    """The session's entries as its export writes them (read a page at a time when not
    given). A fork's copied entries carry the system messages and checkpoints of its
    parent's export on the path it copied."""
    found = selectors.entry_stream(session) if entries is None else entries
    changes, moves = _prompt_history(session)
    inherited = _fork_chain(session, generation)
    if not changes and not inherited:
        return (e.data for e in found)
    return with_system_messages(found, changes, moves, session.id, inherited=inherited)


def _fork_chain(session: Session, generation: int) -> ForkChain:
    parent = session.parent
    if parent is None or not session.fork_point or generation >= FORK_GENERATIONS:
        return ()
    return fork_chain(_exported_entries(parent, generation=generation + 1), session.fork_point)


def _prompt_history(session: Session) -> tuple[list[PromptChange], list[LeafMove]]:
    """The session's `request/header` events (prompt and tools) and `leaf/moved` events,
    in seq order; both are written once per change, so they are few beside the entries."""
    rows = (
        Event.objects.filter(session=session, type__in=("request/header", "leaf/moved"))
        .order_by("seq")
        .values_list("seq", "type", "time", "data")
    )
    changes: list[PromptChange] = []
    moves: list[LeafMove] = []
    for seq, kind, time, data in rows:
        if kind == "leaf/moved":
            moves.append(LeafMove(seq, data.get("to")))
            continue
        tools = data.get("tools") or []
        changes.append(
            PromptChange(
                seq=seq,
                timestamp=store.js_iso(time.astimezone(UTC)),
                system_prompt=str(data.get("system_prompt") or ""),
                tools=tuple(t for t in tools if isinstance(t, dict)),
            )
        )
    return changes, moves


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
