"""Reading and writing Pi session files (JSONL), line by line.

`iter_pi_entries` reads a file of any version the way Pi 0.73.1 loads it and yields the
header and then the entries, migrated to version 3 as Pi migrates them. It holds one line
at a time (plus, for a version 1 file, the list of ids it gave out), so a file of any size
reads in bounded memory. `export_lines` writes a version 3 file.

Where Pi silently drops a line, we drop it too but say so: each such line is reported as a
`PiWarning` (or, with `strict=True`, raised as a `PiFileError`). Unlike Pi, a missing or
broken header is an error, never an empty session, and invalid UTF-8 is an error rather than
being replaced. An object without a type, which Pi keeps in its tree, is also reported, and
kept as a `custom` entry so that the tree and every context stay as Pi has them.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from projections.nesting import nested_past
from projections.tokens import escape_lone_surrogates

CURRENT_VERSION: Final = 3

# The customType of the `custom` entry that stands in for an object without a type.
UNTYPED_CUSTOM_TYPE: Final = "untyped-entry"

# JavaScript's String.prototype.trim() removes these (WhiteSpace and LineTerminator); Pi
# trims the whole file with it and skips lines that trim to nothing.
JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


class PiFileError(ValueError):
    """A Pi file that cannot be read. The message starts with the line number."""

    def __init__(self, line_no: int | None, message: str) -> None:
        self.line_no = line_no
        self.reason = message
        super().__init__(f"line {line_no}: {message}" if line_no is not None else message)


@dataclass(frozen=True, slots=True)
class PiWarning:
    """A line that Pi skips and so do we; `str(warning)` reads "line N: ..."."""

    line_no: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line_no}: {self.message}"


WarningHandler = Callable[[PiWarning], None]


# --- the header ----------------------------------------------------------------------


def parse_header(line: str | bytes, line_no: int = 1) -> dict[str, Any]:
    """The header object of a Pi file from its first line.

    Raises PiFileError unless the line is a JSON object with `type: "session"` and a string
    `id` (Pi's own test). The header is returned as written, not migrated.
    """
    text = _decode(line, line_no).strip(JS_WHITESPACE)
    if not text:
        raise PiFileError(line_no, "missing session header (the line is blank)")
    try:
        value = _loads(text)
    except ValueError as error:
        raise PiFileError(line_no, f"session header is not valid JSON ({error})") from None
    return check_header(value, line_no)


def check_header(value: object, line_no: int | None = None) -> dict[str, Any]:
    """`value` itself if it is a valid Pi header; PiFileError otherwise."""
    if not isinstance(value, dict):
        raise PiFileError(line_no, "session header is not a JSON object")
    if value.get("type") != "session":
        raise PiFileError(
            line_no, f'session header must have type "session", got {value.get("type")!r}'
        )
    if not isinstance(value.get("id"), str):
        raise PiFileError(line_no, "session header has no string id")
    return value


def header_version(header: Mapping[str, Any], line_no: int | None = None) -> float:
    """The file's format version; a header without one is version 1, as in Pi."""
    version = header.get("version")
    if version is None:
        return 1
    # Pi compares the value with < and >=; anything but a plain number would be compared by
    # JavaScript's coercion rules, so we refuse it rather than guess.
    if isinstance(version, bool) or not isinstance(version, int | float):
        raise PiFileError(line_no, f"session header has an unreadable version {version!r}")
    return version


# --- reading -------------------------------------------------------------------------


def iter_pi_entries(
    lines: Iterable[str | bytes],
    *,
    strict: bool = False,
    on_warning: WarningHandler | None = None,
    max_depth: int | None = None,
) -> Iterator[dict[str, Any]]:
    """The header (migrated to version 3), then every entry as a version 3 entry, in order.

    `lines` are the file's lines, with or without their line ends (a binary file object
    works and is best: it splits on "\\n" only, as Pi does). Lines Pi skips or cannot use
    — not JSON, not an object, a second header, an object without a type — are reported to
    `on_warning`; with `strict=True` they raise PiFileError instead. A line of invalid UTF-8
    always raises.

    An object without a type stays in Pi's tree, so it comes out as a `custom` entry (see
    `UNTYPED_CUSTOM_TYPE`) with the original object under `data`.

    With `max_depth`, a line whose JSON nests objects and arrays deeper than that (or too
    deep for the parser) is an error, never a skip: the file is refused at that line.
    """
    for _line_no, entry in iter_pi_numbered(
        lines, strict=strict, on_warning=on_warning, max_depth=max_depth
    ):
        yield entry


def iter_pi_numbered(
    lines: Iterable[str | bytes],
    *,
    strict: bool = False,
    on_warning: WarningHandler | None = None,
    max_depth: int | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """`iter_pi_entries`, each item with the number of the line it came from."""
    report = _Reporter(strict, on_warning)
    values = _json_values(lines, report, max_depth)
    line_no, first = next(values, (None, None))
    if line_no is None:
        raise PiFileError(None, "missing session header (the file has no JSON lines)")
    header = check_header(first, line_no)
    version = header_version(header, line_no)
    if version > CURRENT_VERSION:
        report.warn(line_no, f"version {version} is newer than {CURRENT_VERSION}; read as is")
    yield line_no, _migrate_header(header, version)
    if version < 2:
        yield from _v1_entries(values, report)
    else:
        yield from _v2_entries(values, report, rename_hook_messages=version < 3)


class _Reporter:
    def __init__(self, strict: bool, on_warning: WarningHandler | None) -> None:
        self._strict = strict
        self._on_warning = on_warning

    def flag(self, line_no: int, message: str) -> None:
        """A line Pi skips or keeps oddly: an error in strict mode, a warning otherwise."""
        if self._strict:
            raise PiFileError(line_no, message)
        self.warn(line_no, message)

    def warn(self, line_no: int, message: str) -> None:
        if self._on_warning is not None:
            self._on_warning(PiWarning(line_no, message))


def _json_values(
    lines: Iterable[str | bytes], report: _Reporter, max_depth: int | None = None
) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every line that holds JSON; other lines reported.
    With `max_depth`, a line nested deeper is an error (see `iter_pi_entries`)."""
    for line_no, text in _content_lines(lines):
        try:
            value = _loads(text)
        except _NumberOutOfRange as error:
            raise PiFileError(line_no, str(error)) from None
        except _TooDeep:
            if max_depth is not None:
                raise PiFileError(
                    line_no, f"nests objects and arrays deeper than the limit of {max_depth}"
                ) from None
            report.flag(line_no, "not valid JSON (nested too deeply); skipped")
            continue
        except ValueError as error:
            report.flag(line_no, f"not valid JSON ({error}); skipped")
            continue
        if (
            max_depth is not None
            and _openings(text) > max_depth
            and (where := nested_past(value, max_depth)) is not None
        ):
            raise PiFileError(
                line_no,
                f"nests objects and arrays deeper than the limit of {max_depth}, at {where}",
            )
        yield line_no, value


def _content_lines(lines: Iterable[str | bytes]) -> Iterator[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers, trimmed the way Pi trims the file.

    Pi trims the whole file before splitting it, so the first line loses its leading
    whitespace (a byte-order mark, say) and the last its trailing whitespace. Holding one
    line back lets us know which is the last.
    """
    held: tuple[int, str] | None = None
    first = True
    for line_no, raw in enumerate(lines, start=1):
        text = _decode(raw, line_no)
        if not text.strip(JS_WHITESPACE):
            continue
        if first:
            text = text.lstrip(JS_WHITESPACE)
            first = False
        if held is not None:
            yield held
        held = (line_no, text)
    if held is not None:
        yield held[0], held[1].rstrip(JS_WHITESPACE)


def _decode(raw: str | bytes, line_no: int) -> str:
    if isinstance(raw, str):
        return raw.removesuffix("\n")
    try:
        return raw.removesuffix(b"\n").decode("utf-8")
    except UnicodeDecodeError as error:
        raise PiFileError(
            line_no, f"invalid UTF-8 at byte {error.start} of the line ({error.reason})"
        ) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _NumberOutOfRange(ValueError):
    pass


def _finite_float(literal: str) -> float:
    # JSON.parse reads 1e999 as Infinity; no column holds it and `int()` cannot take it, so
    # such a line is refused (with its number) rather than skipped: what follows it may
    # hang from it.
    value = float(literal)
    if not math.isfinite(value):
        raise _NumberOutOfRange(f"the number {literal[:40]} is out of range")
    return value


class _TooDeep(ValueError):
    pass


def _openings(text: str) -> int:
    """The brackets that open objects and arrays in a JSON text, or more (those in its
    strings too): never less than its depth, so a line with few needs no walk of its value."""
    return text.count("{") + text.count("[")


def _loads(text: str) -> Any:
    """json.loads with JavaScript's JSON.parse limits (no NaN or Infinity), and numbers
    that stay finite.

    orjson reads the line (several times faster; like JSON.parse, it reads an integer past
    64 bits as a double); json reads what orjson refuses (a lone surrogate, which JSON.parse
    takes, and the errors, which it names as it always has)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise _TooDeep("nested too deeply") from None


def _entry_or_none(
    value: Any, line_no: int, report: _Reporter, *, needs_id: bool
) -> dict[str, Any] | None:
    """The entry a parsed line gives, or None (and a report) for a line we leave out.

    Pi keeps every parsed object in its tree, typed or not. An object without a type never
    reaches a context, but it can be a parent, a leaf or a `firstKeptEntryId`, so we keep
    it as a `custom` entry (which never reaches a context either) holding the original
    object. One without an id (`needs_id`: v2 and later) can be nobody's parent: dropped.
    """
    if not isinstance(value, dict):
        report.flag(line_no, f"not a JSON object (a JSON {_json_kind(value)}); skipped")
        return None
    kind = value.get("type")
    if kind == "session":
        # Pi keeps a second header in its array but leaves it out of the session's entries.
        report.flag(line_no, "a second session header; skipped")
        return None
    if isinstance(kind, str) and kind:
        return value
    if needs_id and not isinstance(value.get("id"), str):
        report.flag(line_no, "entry has no type and no id; skipped")
        return None
    report.flag(line_no, f'entry has no type; kept as a "custom" entry ({UNTYPED_CUSTOM_TYPE})')
    return _untyped_as_custom(value)


def _untyped_as_custom(value: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "custom"}
    if isinstance(value.get("id"), str):
        entry["id"] = value["id"]
        parent = value.get("parentId")
        # Pi follows only a truthy parentId; anything else makes the entry a root.
        entry["parentId"] = parent if isinstance(parent, str) and parent else None
    if isinstance(value.get("timestamp"), str):
        entry["timestamp"] = value["timestamp"]
    entry["customType"] = UNTYPED_CUSTOM_TYPE
    entry["data"] = value
    return entry


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    return "null" if value is None else "number"


# --- migration -----------------------------------------------------------------------


def _migrate_header(header: dict[str, Any], version: float) -> dict[str, Any]:
    # Pi sets the version on the header object: an existing key keeps its place, a missing
    # one goes last.
    if version < CURRENT_VERSION:
        header["version"] = CURRENT_VERSION
    return header


def _v2_entries(
    values: Iterator[tuple[int, Any]], report: _Reporter, *, rename_hook_messages: bool
) -> Iterator[tuple[int, dict[str, Any]]]:
    for line_no, value in values:
        entry = _entry_or_none(value, line_no, report, needs_id=True)
        if entry is None:
            continue
        if rename_hook_messages:
            _rename_hook_message(entry)
        yield line_no, entry


def _rename_hook_message(entry: dict[str, Any]) -> None:
    """v2 → v3: the message role `hookMessage` is now called `custom`."""
    message = entry.get("message")
    if entry["type"] != "message" or not isinstance(message, dict):
        return
    if message.get("role") == "hookMessage":
        message["role"] = "custom"


def _v1_entries(
    values: Iterator[tuple[int, Any]], report: _Reporter
) -> Iterator[tuple[int, dict[str, Any]]]:
    """v1 → v2 → v3: give each entry an id and chain it to the one before."""
    ids = _V1Ids()
    for line_no, value in values:
        entry = _entry_or_none(value, line_no, report, needs_id=False)
        if entry is None:
            ids.skip(is_header=isinstance(value, dict) and value.get("type") == "session")
            continue
        ids.assign(entry)
        if entry["type"] == "compaction":
            ids.convert_first_kept(entry)
        _rename_hook_message(entry)
        yield line_no, entry


class _V1Ids:
    """The ids a version 1 file's entries get, by their index in Pi's entry array.

    Pi indexes the array of parsed lines with the header at 0: `firstKeptEntryIndex` points
    into it, always backwards, so keeping the ids given so far is enough.
    """

    def __init__(self) -> None:
        self._by_index: list[str | None] = [None]  # index 0 is the header
        self._used: set[str] = set()
        self._previous: str | None = None
        # Indexes of left-out lines other than headers (JSON values that are not objects;
        # Pi itself fails on those). An index naming one stands for the next entry.
        self._waiting: list[int] = []

    def skip(self, *, is_header: bool) -> None:
        self._by_index.append(None)
        if not is_header:
            self._waiting.append(len(self._by_index) - 1)

    def assign(self, entry: dict[str, Any]) -> None:
        # Assigning keeps an existing key's place and adds a missing one last, as in Pi.
        entry_id = self._new_id()
        entry["id"] = entry_id
        entry["parentId"] = self._previous
        self._previous = entry_id
        self._by_index.append(entry_id)
        for index in self._waiting:
            self._by_index[index] = entry_id
        self._waiting.clear()

    def convert_first_kept(self, entry: dict[str, Any]) -> None:
        """`firstKeptEntryIndex` (an index into the file) → `firstKeptEntryId`."""
        index = entry.get("firstKeptEntryIndex")
        if isinstance(index, bool) or not isinstance(index, int | float):
            return  # Pi converts only numbers and leaves anything else as it is
        position = _array_index(index)
        if position is not None and position < len(self._by_index):
            target = self._by_index[position]
            if target is not None:
                entry["firstKeptEntryId"] = target
        elif position is not None:
            # A forward index: Pi reads the id of an entry it has not migrated yet, which is
            # undefined, and so writes no firstKeptEntryId.
            entry.pop("firstKeptEntryId", None)
        del entry["firstKeptEntryIndex"]

    def _new_id(self) -> str:
        # Pi takes the first 8 hex digits of a random UUID. It means to avoid collisions
        # but its v1 migration never records the ids it gave; we do.
        while True:
            candidate = secrets.token_hex(4)
            if candidate not in self._used:
                self._used.add(candidate)
                return candidate


def _array_index(number: float) -> int | None:
    """The array position a JavaScript number names, or None (negative, fractional)."""
    if isinstance(number, int):  # exact however long (a float of it would overflow)
        return number if number >= 0 else None
    if not math.isfinite(number) or number < 0 or number != int(number):
        return None
    return int(number)


# --- writing -------------------------------------------------------------------------


def export_lines(header: Mapping[str, Any], entries: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """A version 3 Pi file, one line at a time (each ends with "\\n").

    Every line is compact JSON as `JSON.stringify` writes it, with non-ASCII text kept as is
    (encode the lines as UTF-8).
    """
    written = dict(check_header(dict(header)))
    written["version"] = CURRENT_VERSION
    yield _dumps(written)
    for entry in entries:
        yield _dumps(entry)


def _dumps(value: Mapping[str, Any]) -> str:
    try:
        # Compact, non-ASCII kept as is, as json below writes it (and numbers as
        # JSON.stringify does); what orjson cannot write (a lone surrogate, an integer past
        # 64 bits, a read-only mapping) goes the long way.
        return orjson.dumps(value, default=_plain).decode() + "\n"
    except TypeError:
        pass
    text = json.dumps(
        value,
        ensure_ascii=False,
        separators=(",", ":"),
        allow_nan=False,
        default=_plain,
    )
    return escape_lone_surrogates(text) + "\n"


def _plain(value: object) -> object:
    # Records hand out read-only mappings and tuples; JSON sees them as objects and arrays.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON")
