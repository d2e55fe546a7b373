"""The model context of a leaf, built from the entry tree exactly as Pi builds it.

Pi 1.6 (`@earendil-works/pi-coding-agent`) builds, on every file Pi 0.73.1 wrote, the
contexts 0.73.1 built; what it adds (system messages, compaction checkpoints, context edits)
only changes files that hold it. So one implementation, Pi 1.6's, serves both.

Two steps, as in Pi:

1. `build_session_context` is Pi's `buildSessionContext`: walk from the leaf to the root,
   read the settings (thinking level, model, latest compaction) from the path, select the
   entries (the compaction, its kept range without system messages, everything after it),
   apply the latest context edit of each selected target (`buildSessionProjection`), then
   emit the messages — a compaction gives its system checkpoint and its summary.
   Its output, through `SessionContext.to_pi()`, is the object Pi returns, key for key.
2. `convert_to_llm` is Pi 1.6's `convertToLlm`, word for word: what Pi hands its provider
   for a context (system messages included), shown as the context's Pi-format provider view.
3. `to_provider_messages` is what Strand's own requests send: `convertToLlm` in Strand's
   wording, without system messages (a Strand request carries its header's prompt and
   tools), plus pi-ai's `transformMessages`, so that every tool call is answered exactly
   once and no provider rejects the request. Recorded requests were hashed with this
   wording, so it stays as it is.

Messages are handed out as the same dicts the entries hold, as Pi does; callers must treat
them as read-only.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from projections.records import EntryRecord
from projections.tokens import js_number

Message = dict[str, Any]


class UnsetType(enum.Enum):
    """The type of `UNSET`: "no leaf given", which Pi treats unlike an explicit null."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = UnsetType.UNSET


@dataclass(frozen=True, slots=True)
class MessageSource:
    """The entry a context message comes from, and the context edit that replaced its
    content (or, among `SessionContext.omitted`, left it out), if one did."""

    entry_id: str
    edit_id: str | None = None


@dataclass(frozen=True, slots=True)
class SessionContext:
    """What Pi's `buildSessionContext` returns: the messages of a path and its settings.

    `thinking_level` is None only when the path's last `thinking_level_change` carries no
    level (a malformed entry; Pi then reports `undefined`). `model` holds `provider` and
    `modelId` as the entry that set it wrote them, each key only if that entry had it.
    """

    messages: tuple[Message, ...]
    thinking_level: str | None
    model: dict[str, Any] | None
    # Where each message comes from (one per message, in order), and the entries a context
    # edit left out: what the context view shows beside Pi's own object.
    sources: tuple[MessageSource, ...] = ()
    omitted: tuple[MessageSource, ...] = ()

    def to_pi(self) -> dict[str, Any]:
        """The context as Pi's object `{messages, thinkingLevel, model}`, ready for JSON."""
        pi: dict[str, Any] = {"messages": list(self.messages)}
        if self.thinking_level is not None:
            pi["thinkingLevel"] = self.thinking_level
        pi["model"] = self.model
        return pi


EMPTY_CONTEXT: Final = SessionContext(messages=(), thinking_level="off", model=None)


# --- the path ------------------------------------------------------------------------


def index_by_id(entries: Iterable[EntryRecord]) -> dict[str, EntryRecord]:
    """Entries by id. On a duplicate id the later entry wins, as in Pi's Map."""
    return {entry.id: entry for entry in entries}


def path_to_root(by_id: Mapping[str, EntryRecord], leaf_id: str | None) -> list[EntryRecord]:
    """The entries from the root down to `leaf_id` (root first); empty for an unknown leaf."""
    leaf = by_id.get(leaf_id) if leaf_id else None
    return _path_from(by_id, leaf) if leaf is not None else []


def _path_from(by_id: Mapping[str, EntryRecord], leaf: EntryRecord) -> list[EntryRecord]:
    """Follow parent ids up from `leaf` until a null or unknown parent.

    An entry whose parent is unknown (an orphan) is the root of its own path. Pi would loop
    forever on a cycle (an entry naming itself or a descendant as parent); we stop before
    visiting an entry twice, so the cycle's last new entry becomes the root.
    """
    path: list[EntryRecord] = []
    seen: set[str] = set()
    current: EntryRecord | None = leaf
    while current is not None and current.id not in seen:
        path.append(current)
        seen.add(current.id)
        current = by_id.get(current.parent_id) if current.parent_id else None
    path.reverse()
    return path


def _resolve_leaf(
    entries: Sequence[EntryRecord],
    by_id: Mapping[str, EntryRecord],
    leaf_id: str | UnsetType,
) -> EntryRecord | None:
    # Pi falls back to the last entry in file order when the leaf is unset, empty or unknown.
    leaf = by_id.get(leaf_id) if isinstance(leaf_id, str) and leaf_id else None
    if leaf is None and entries:
        return entries[-1]
    return leaf


# --- build_session_context -------------------------------------------------------------


def build_session_context(
    entries: Sequence[EntryRecord], leaf_id: str | None | UnsetType = UNSET
) -> SessionContext:
    """Pi's `buildSessionContext(entries, leafId)`. `entries` must be in file order (seq).

    A null leaf (the user went back before the first entry) gives an empty context; an unset,
    empty or unknown leaf means the last entry.
    """
    if leaf_id is None:
        return EMPTY_CONTEXT
    by_id = index_by_id(entries)
    leaf = _resolve_leaf(entries, by_id, leaf_id)
    if leaf is None:
        return EMPTY_CONTEXT
    path = _path_from(by_id, leaf)
    thinking_level, model, compaction = _read_settings(path)
    return _context(_selected(path, compaction), thinking_level, model)


@dataclass(frozen=True, slots=True)
class PathSettings:
    """The entries that decide a path's settings: the last thinking-level change, the last
    model-setting entry (model_change or assistant message) and the last compaction on the
    path, each None when the path has none."""

    thinking: EntryRecord | None
    model: EntryRecord | None
    compaction: EntryRecord | None


def build_context_from_window(
    window: Sequence[EntryRecord], settings: PathSettings
) -> SessionContext:
    """The context for the leaf at the end of `window`, given the path's settings.

    `window` is the tail of the root→leaf path (root first, leaf last) that holds everything
    the context emits: the whole path when it has no compaction, else at least the path from
    the compaction's `firstKeptEntryId` (when that entry is on the path) or from the
    compaction itself. A store that records each entry's settings entries can then build a
    context without reading the older part of a long path; the result is the same as
    `build_session_context` over the whole path.
    """
    if not window:
        return EMPTY_CONTEXT
    # The two entries set different settings, so reading them in any order is the same as
    # reading the whole path.
    thinking_level, model, _ = _read_settings(
        [e for e in (settings.thinking, settings.model) if e is not None]
    )
    return _context(_window_selection(window, settings.compaction), thinking_level, model)


def _window_selection(
    window: Sequence[EntryRecord], compaction: EntryRecord | None
) -> Sequence[EntryRecord]:
    """The entries of `window` a context is made of, given the path's latest compaction."""
    if compaction is None:
        return window
    on_window = next((e for e in window if e.id == compaction.id), None)
    if on_window is None:
        raise ValueError("the window does not reach back to the path's latest compaction")
    return _selected(window, on_window)


def _context(
    selected: Sequence[EntryRecord], thinking_level: str | None, model: dict[str, Any] | None
) -> SessionContext:
    messages: list[Message] = []
    sources: list[MessageSource] = []
    omitted: list[MessageSource] = []
    for entry, edit, produced in _project(selected):
        source = MessageSource(entry.id, edit.id if edit is not None else None)
        if edit is not None and not produced and entry_messages(entry):
            omitted.append(source)
        messages.extend(produced)
        sources.extend(source for _ in produced)
    return SessionContext(
        messages=tuple(messages),
        thinking_level=thinking_level,
        model=model,
        sources=tuple(sources),
        omitted=tuple(omitted),
    )


def _read_settings(
    path: Sequence[EntryRecord],
) -> tuple[str | None, dict[str, Any] | None, EntryRecord | None]:
    """Thinking level, model and latest compaction: the last of each on the path wins."""
    thinking_level: str | None = "off"
    model: dict[str, Any] | None = None
    compaction: EntryRecord | None = None
    for entry in path:
        data = entry.data
        if entry.type == "thinking_level_change":
            level = data.get("thinkingLevel")
            thinking_level = level if isinstance(level, str) else None
        elif entry.type == "model_change":
            model = _model(data, provider="provider", model_id="modelId")
        elif entry.type == "message" and _is_assistant(data.get("message")):
            # An assistant reply names the model that wrote it, so it counts as a change too.
            model = _model(data["message"], provider="provider", model_id="model")
        elif entry.type == "compaction":
            compaction = entry
    return thinking_level, model, compaction


def _is_assistant(message: object) -> bool:
    return isinstance(message, Mapping) and message.get("role") == "assistant"


def _model(source: Mapping[str, Any], *, provider: str, model_id: str) -> dict[str, Any]:
    # A key missing from the entry is `undefined` in Pi, which JSON leaves out.
    model: dict[str, Any] = {}
    if provider in source:
        model["provider"] = source[provider]
    if model_id in source:
        model["modelId"] = source[model_id]
    return model


def _selected(path: Sequence[EntryRecord], compaction: EntryRecord | None) -> list[EntryRecord]:
    """The entries a context is made of (Pi's `buildContextEntries`).

    Without a compaction, the whole path. With one: the compaction first, then its kept
    range — from `firstKeptEntryId` up to the compaction, leaving out system messages, which
    the compaction's checkpoint replaces — then everything after it. When the first kept
    entry is not on this path (another branch, or the compaction itself for a retain-none
    compaction) nothing before the compaction is kept.
    """
    if compaction is None:
        return list(path)
    at = next(i for i, entry in enumerate(path) if entry is compaction)
    first_kept = compaction.data.get("firstKeptEntryId")
    kept_from = next((i for i in range(at) if path[i].id == first_kept), at)
    kept = [entry for entry in path[kept_from:at] if not _is_system_message(entry)]
    return [compaction, *kept, *path[at + 1 :]]


def _is_system_message(entry: EntryRecord) -> bool:
    message = entry.data.get("message") if entry.type == "message" else None
    return isinstance(message, Mapping) and message.get("role") == "system"


def _project(
    selected: Sequence[EntryRecord],
) -> list[tuple[EntryRecord, EntryRecord | None, list[Message]]]:
    """Each selected entry with the context edit that applies to it (the target's latest)
    and the messages it gives with that edit applied (Pi's `buildSessionProjection`).

    Only edits among the selected entries count, so an edit made before a compaction's kept
    range no longer applies after it, and one on another branch never does. An older
    compaction inside the kept range gives no message: only the first entry, the latest
    compaction, contributes its checkpoint and summary.
    """
    edits = _edits(selected)
    projected: list[tuple[EntryRecord, EntryRecord | None, list[Message]]] = []
    for index, entry in enumerate(selected):
        if entry.type == "compaction" and index > 0:
            continue
        edit = edits.get(entry.id)
        projected.append((entry, edit, _edited(entry_messages(entry), edit)))
    return projected


def _edits(selected: Sequence[EntryRecord]) -> dict[object, EntryRecord]:
    """The latest context edit of each target among `selected`, by the target's id."""
    edits: dict[object, EntryRecord] = {}
    for entry in selected:
        if entry.type == "context_edit":
            target = entry.data.get("targetId")
            if isinstance(target, str):
                edits[target] = entry
    return edits


# The roles whose content a context edit replaces; for the two whose content must be a list
# of blocks, a string replacement becomes one text block.
_EDITABLE_ROLES: Final = ("user", "assistant", "toolResult", "custom")
_BLOCK_ROLES: Final = ("assistant", "toolResult")


def _edited(messages: list[Message], edit: EntryRecord | None) -> list[Message]:
    """`messages` as the context edit `edit` leaves them: omitted (replacement null), or
    with their content replaced (new message objects; the entry itself is never changed)."""
    if edit is None:
        return messages
    replacement = edit.data.get("replacement")
    if replacement is None:
        return []
    if not isinstance(replacement, Mapping):
        # Pi would fail on such an edit; the import refuses it, so it never gets here.
        return messages
    out: list[Message] = []
    for message in messages:
        role = message.get("role")
        if role not in _EDITABLE_ROLES:
            out.append(message)
            continue
        edited = dict(message)
        if "content" not in replacement:
            edited.pop("content", None)  # Pi sets `undefined`, which JSON leaves out
        elif role in _BLOCK_ROLES and isinstance(replacement["content"], str):
            edited["content"] = [{"type": "text", "text": replacement["content"]}]
        else:
            edited["content"] = replacement["content"]
        out.append(edited)
    return out


def entry_messages(entry: EntryRecord) -> list[Message]:
    """Every message one selected entry adds to a context: `entry_message`'s, or for a
    compaction its system checkpoint (when it has one) and then its summary."""
    if entry.type == "compaction":
        checkpoint = entry.data.get("systemMessage")
        summary = _compaction_summary(entry)
        if not isinstance(checkpoint, Mapping):
            return [summary]
        return [checkpoint if isinstance(checkpoint, dict) else dict(checkpoint), summary]
    message = entry_message(entry)
    return [] if message is None else [message]


# Pi reads files without validating them; a message whose content is null or missing gets
# an empty one of its role's kind.
_EMPTY_CONTENT_ROLES: Final = ("user", "assistant", "toolResult")


def entry_message(entry: EntryRecord) -> Message | None:
    """The message one entry adds to a context (Pi's `sessionEntryToContextMessages`), or
    None. A compaction gives none here: see `entry_messages`."""
    data = entry.data
    if entry.type == "message":
        message = data.get("message")
        # Pi would crash on a message entry without a message object; we leave it out.
        if not isinstance(message, Mapping):
            return None
        if message.get("content") is None:
            role = message.get("role")
            if role == "system":
                return {**message, "content": ""}
            if role in _EMPTY_CONTENT_ROLES:
                return {**message, "content": []}
        return message if isinstance(message, dict) else dict(message)
    if entry.type == "custom_message":
        return _custom_message(entry)
    if entry.type == "branch_summary" and js_truthy(data.get("summary")):
        return _branch_summary(entry)
    return None


def _custom_message(entry: EntryRecord) -> Message:
    message: Message = {"role": "custom"}
    _copy_present(entry.data, message, ("customType",))
    content = entry.data.get("content")
    message["content"] = [] if content is None else content
    _copy_present(entry.data, message, ("display", "details"))
    message["timestamp"] = entry_time_ms(entry)
    return message


def _branch_summary(entry: EntryRecord) -> Message:
    message: Message = {"role": "branchSummary"}
    _copy_present(entry.data, message, ("summary", "fromId"))
    message["timestamp"] = entry_time_ms(entry)
    return message


def _compaction_summary(entry: EntryRecord) -> Message:
    message: Message = {"role": "compactionSummary"}
    _copy_present(entry.data, message, ("summary", "tokensBefore"))
    message["timestamp"] = entry_time_ms(entry)
    return message


def _copy_present(source: Mapping[str, Any], target: Message, keys: Iterable[str]) -> None:
    # Pi builds these objects with every key; a value missing from the entry is `undefined`
    # there and disappears from the JSON, so we copy only the keys the entry has.
    for key in keys:
        if key in source:
            target[key] = source[key]


def js_truthy(value: object) -> bool:
    """JavaScript truthiness of a JSON value: "", 0, null and false are falsy; [] and {} not."""
    if isinstance(value, list | dict):
        return True
    return bool(value)


# --- timestamps ----------------------------------------------------------------------


def entry_time_ms(entry: EntryRecord) -> int | None:
    """`new Date(entry.timestamp).getTime()`; None where JavaScript gets NaN."""
    # The entry's own field is what Pi reads (even when it is not a string); the record's
    # column stands in only when the data lacks it.
    raw = entry.data.get("timestamp", entry.timestamp)
    return js_date_ms(raw)


_ISO_DATE = re.compile(
    r"(?P<year>[+-]\d{6}|\d{4})(?:-(?P<month>\d{2})(?:-(?P<day>\d{2}))?)?"
    r"(?:[Tt ](?P<hour>\d{2}):(?P<minute>\d{2})(?::(?P<second>\d{2})(?:\.(?P<fraction>\d+))?)?"
    # V8 takes a numeric offset only after a time, but a bare Z after a date too.
    r"(?P<zone>[Zz]|[+-]\d{2}:?\d{2})?|(?P<bare_zone>[Zz]))?"
)
# JavaScript dates reach ±8.64e15 ms from the epoch; beyond that a date is invalid.
_MAX_TIME_MS = 8_640_000_000_000_000
_DAY_MS = 86_400_000


def js_date_ms(value: object) -> int | None:
    """What `new Date(value).getTime()` gives in V8 for a JSON value; None for NaN.

    Strings follow V8's ISO-8601 reading: date-only, date-time with or without seconds and
    fraction (cut to milliseconds, not rounded), `Z` or ±hh:mm offsets, 6-digit years, and
    day-of-month overflow (Feb 30 is Mar 1). A date-time without an offset is local time
    in JavaScript; we read it as UTC, which is what Pi sees on a UTC machine. V8's older
    free-form formats ("Jan 2 2024") are not read and give None.
    """
    if value is None:
        return 0  # new Date(null) is the epoch
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return _time_clip(value)
    if isinstance(value, str):
        return _parse_iso_ms(value)
    return None


def _time_clip(value: float) -> int | None:
    if value != value or abs(value) > _MAX_TIME_MS:  # NaN, infinities, out of range
        return None
    return int(value)  # truncates toward zero, as TimeClip does


def _parse_iso_ms(text: str) -> int | None:
    match = _ISO_DATE.fullmatch(text)
    if match is None or match["year"] == "-000000":
        return None
    year = int(match["year"])
    if match["bare_zone"] and (year < 100 or match["year"][0] in "+-"):
        return None  # V8 reads these with its legacy parser, which guesses at the century
    month = int(match["month"] or 1)
    day = int(match["day"] or 1)
    hour, minute, second = (int(match[k] or 0) for k in ("hour", "minute", "second"))
    millis = int((match["fraction"] or "0")[:3].ljust(3, "0"))
    if not (1 <= month <= 12 and 1 <= day <= 31 and minute <= 59 and second <= 59):
        return None
    if hour > 24 or (hour == 24 and (minute or second or millis)):
        return None
    offset = _zone_offset_ms(match["zone"])
    if offset is None:
        return None
    days = _days_from_civil(year, month, 1) + day - 1
    ms = days * _DAY_MS + ((hour * 60 + minute) * 60 + second) * 1000 + millis - offset
    return ms if abs(ms) <= _MAX_TIME_MS else None


def _zone_offset_ms(zone: str | None) -> int | None:
    if zone is None or zone in ("Z", "z"):
        return 0
    digits = zone[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:])
    if hours > 23 or minutes > 59:
        return None
    sign = -1 if zone[0] == "-" else 1
    return sign * (hours * 60 + minutes) * 60_000


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400  # Python's // floors, which the algorithm needs for negative years
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


# --- Pi's convertToLlm -------------------------------------------------------------------

# Pi 1.6.0's own words (`core/messages.js`), the same as 0.73.1's.
PI_COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:"
    "\n\n<summary>\n"
)
PI_COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
PI_BRANCH_SUMMARY_PREFIX = (
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
)
PI_BRANCH_SUMMARY_SUFFIX = "</summary>"

# The roles convertToLlm turns into user messages.
PI_CONVERTED_ROLES: Final = ("bashExecution", "custom", "branchSummary", "compactionSummary")

# The key a JavaScript object literal would set to `undefined`, which JSON leaves out.
_MISSING: Final = object()


def convert_to_llm(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Pi's `convertToLlm(messages)`, as JSON would print it: system, user, assistant and
    tool result messages as they are; bash executions (but the `!!` ones), custom messages
    and summaries as user messages in Pi's words; anything else left out."""
    return [m for m in map(pi_llm_message, messages) if m is not None]


def pi_llm_message(message: Mapping[str, Any]) -> Message | None:
    """What Pi's `convertToLlm` makes of one context message, or None where it drops it."""
    role = message.get("role")
    if role in ("system", "user", "assistant", "toolResult"):
        return message if isinstance(message, dict) else dict(message)
    if role == "bashExecution":
        if js_truthy(message.get("excludeFromContext")):
            return None
        return _pi_user([_text_block(pi_bash_execution_text(message))], message)
    if role == "custom":
        content = message.get("content", _MISSING)
        if isinstance(content, str):
            content = [_text_block(content)]
        return _pi_user(content, message)
    if role == "branchSummary":
        text = PI_BRANCH_SUMMARY_PREFIX + _js_str(message, "summary") + PI_BRANCH_SUMMARY_SUFFIX
        return _pi_user([_text_block(text)], message)
    if role == "compactionSummary":
        summary = _js_str(message, "summary")
        text = PI_COMPACTION_SUMMARY_PREFIX + summary + PI_COMPACTION_SUMMARY_SUFFIX
        return _pi_user([_text_block(text)], message)
    return None


def pi_bash_execution_text(message: Mapping[str, Any]) -> str:
    """Pi's `bashExecutionToText`: the user message a `!cmd` of the user becomes."""
    text = f"Ran `{_js_str(message, 'command')}`\n"
    if js_truthy(message.get("output")):
        text += f"```\n{_js_str(message, 'output')}\n```"
    else:
        text += "(no output)"
    exit_code = message.get("exitCode")
    if js_truthy(message.get("cancelled")):
        text += "\n\n(command cancelled)"
    elif exit_code is not None and exit_code != 0:
        text += f"\n\nCommand exited with code {_js_str(message, 'exitCode')}"
    if js_truthy(message.get("truncated")) and js_truthy(message.get("fullOutputPath")):
        text += f"\n\n[Output truncated. Full output: {_js_str(message, 'fullOutputPath')}]"
    return text


def _pi_user(content: Any, source: Mapping[str, Any]) -> Message:
    # {role, content, timestamp}, with Pi's key order; an undefined value is left out.
    message: Message = {"role": "user"}
    if content is not _MISSING:
        message["content"] = content
    if "timestamp" in source:
        message["timestamp"] = source["timestamp"]
    return message


def _text_block(text: str) -> Message:
    return {"type": "text", "text": text}


def _js_str(message: Mapping[str, Any], key: str) -> str:
    """`${message[key]}` in JavaScript, for a JSON value (a missing key is "undefined")."""
    return js_string(message[key]) if key in message else "undefined"


def js_string(value: object) -> str:
    """JavaScript's String(value) for a JSON value."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return js_number(value)
    if isinstance(value, list | tuple):
        # Array.prototype.join: null and undefined items print as nothing.
        return ",".join("" if item is None else js_string(item) for item in value)
    return "[object Object]"


# --- the provider boundary -------------------------------------------------------------

# Our own wording for the two synthetic summaries; the summary itself goes inside tags so
# that the model can tell it from the preamble.
COMPACTION_PREAMBLE = (
    "Earlier parts of this conversation were condensed to save space. "
    "This summary stands in for them:\n\n"
)
BRANCH_PREAMBLE = (
    "The conversation came back here after exploring another branch. "
    "This summary tells what happened on that branch:\n\n"
)
NO_RESULT_TEXT = "No result provided"


def to_provider_messages(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Pi's neutral LLM messages (roles user, assistant, toolResult) for a context's messages.

    As Pi's `convertToLlm`: bash executions, custom messages and summaries become user
    messages; other roles are dropped. As pi-ai's `transformMessages`: assistant replies that
    ended in an error or were aborted are left out (they are incomplete turns), and a tool
    call without a result gets a synthetic error result after the results that do follow.
    Beyond Pi, a tool result that answers no pending call of the assistant message before it
    (for example one left over by a compaction) is dropped, because providers reject it.
    """
    provider = ProviderMessages()
    provider.add(messages)
    return provider.messages()


class ProviderMessages:
    """`to_provider_messages` taken message by message: `add` context messages in order and
    read the provider messages of all those added at any point, so that a context which
    starts with the same messages as one already converted costs only its new ones."""

    def __init__(self) -> None:
        self._paired: list[Message] = []
        # The last assistant message, and its tool calls that still wait for a result.
        self._assistant: Mapping[str, Any] | None = None
        self._waiting: dict[str, Mapping[str, Any]] = {}

    def add(self, messages: Iterable[Mapping[str, Any]]) -> None:
        for message in _convert_to_llm(messages):
            role = message.get("role")
            if role == "assistant":
                self._close()
                if message.get("stopReason") in ("error", "aborted"):
                    continue
                self._paired.append(message)
                self._assistant = message
                self._waiting = {call["id"]: call for call in _tool_calls(message)}
            elif role == "toolResult":
                # Only a result that answers a waiting call, and each call at most once.
                call_id = message.get("toolCallId")
                if isinstance(call_id, str) and self._waiting.pop(call_id, None) is not None:
                    self._paired.append(message)
            else:
                self._close()
                self._paired.append(message)

    def messages(self) -> list[Message]:
        """The provider messages of what was added, a call still waiting answered by a
        synthetic error result (here only: a result added later answers it still)."""
        return self._paired + self._missing()

    def _missing(self) -> list[Message]:
        assistant = self._assistant or {}
        return [_missing_result(i, call, assistant) for i, call in self._waiting.items()]

    def _close(self) -> None:
        """Answer every call still waiting with a synthetic error result."""
        self._paired.extend(self._missing())
        self._waiting = {}
        self._assistant = None


class ContextFold:
    """The provider messages of a leaf's context (`build_context_from_window`, then
    `to_provider_messages`), kept so that a leaf further down the same path costs only the
    entries between the two leaves.

    It starts from a leaf's window and then takes the path's next entries, in order, while
    none of them can change a message already made: a context edit may rewrite an earlier
    entry's messages and a compaction starts a window of its own, so `extend` refuses both
    (the caller then starts a fold at that leaf). The messages are the entries' own dicts,
    read-only, as the context's are."""

    def __init__(self, window: Sequence[EntryRecord], compaction: EntryRecord | None) -> None:
        selected = _window_selection(window, compaction)
        self._edits = _edits(selected)
        self._provider = ProviderMessages()
        self.leaf_id: str | None = window[-1].id if window else None
        # The entry whose compaction summary the context holds (its first such message).
        self.summary_entry_id: str | None = None
        for entry, _, produced in _project(selected):
            self._take(entry, produced)

    def extend(self, entries: Sequence[EntryRecord]) -> bool:
        """Take `entries`, the path below the last leaf taken (parent first); False, with
        nothing taken, when they do not go on from it or one is an edit or a compaction."""
        if not entries:
            return True
        if entries[0].parent_id != self.leaf_id or any(
            entry.type in ("context_edit", "compaction") for entry in entries
        ):
            return False
        for entry in entries:
            self._take(entry, _edited(entry_messages(entry), self._edits.get(entry.id)))
        self.leaf_id = entries[-1].id
        return True

    def messages(self) -> list[Message]:
        return self._provider.messages()

    def _take(self, entry: EntryRecord, produced: list[Message]) -> None:
        if self.summary_entry_id is None and any(
            message.get("role") == "compactionSummary" for message in produced
        ):
            self.summary_entry_id = entry.id
        self._provider.add(produced)


def _tool_calls(assistant: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = assistant.get("content")
    if not isinstance(content, list):
        return []
    return [
        block
        for block in content
        if isinstance(block, Mapping)
        and block.get("type") == "toolCall"
        and isinstance(block.get("id"), str)
    ]


def _missing_result(call_id: str, call: Mapping[str, Any], assistant: Mapping[str, Any]) -> Message:
    result: Message = {"role": "toolResult", "toolCallId": call_id}
    if "name" in call:
        result["toolName"] = call["name"]
    result["content"] = [{"type": "text", "text": NO_RESULT_TEXT}]
    result["isError"] = True
    # Pi stamps the synthetic result with the current time; the assistant's own timestamp
    # keeps this projection deterministic.
    if "timestamp" in assistant:
        result["timestamp"] = assistant["timestamp"]
    return result


def _convert_to_llm(messages: Iterable[Mapping[str, Any]]) -> Iterable[Message]:
    for message in messages:
        converted = _llm_message(message)
        if converted is not None:
            yield converted


def _llm_message(message: Mapping[str, Any]) -> Message | None:
    role = message.get("role")
    if role in ("user", "assistant", "toolResult"):
        return message if isinstance(message, dict) else dict(message)
    if role == "system":
        # Pi 1.6 sends its system messages on; Strand sends the prompt and tools of its own
        # request header instead (a payload has no other place for them), so they stop here.
        return None
    if role == "bashExecution":
        if message.get("excludeFromContext"):
            return None  # the user ran it with `!!`: for their eyes only
        return _user_text(bash_execution_text(message), message)
    if role == "custom":
        return _user_message(_content_blocks(message.get("content")), message)
    if role == "branchSummary":
        return _user_text(_tagged_summary(BRANCH_PREAMBLE, message), message)
    if role == "compactionSummary":
        return _user_text(_tagged_summary(COMPACTION_PREAMBLE, message), message)
    return None


def _user_text(text: str, source: Mapping[str, Any]) -> Message:
    return _user_message([{"type": "text", "text": text}], source)


def _user_message(content: list[Any], source: Mapping[str, Any]) -> Message:
    message: Message = {"role": "user", "content": content}
    if "timestamp" in source:
        message["timestamp"] = source["timestamp"]
    return message


def _content_blocks(content: object) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def _tagged_summary(preamble: str, message: Mapping[str, Any]) -> str:
    summary = message.get("summary")
    return f"{preamble}<summary>\n{summary if isinstance(summary, str) else ''}\n</summary>"


def bash_execution_text(message: Mapping[str, Any]) -> str:
    """What the model reads for a shell command the user ran themselves (`!cmd`)."""
    command = message.get("command") or ""
    output = message.get("output")
    parts = [f"The user ran this shell command: `{command}`"]
    parts.append(f"Output:\n```\n{output}\n```" if output else "It printed nothing.")
    exit_code = message.get("exitCode")
    if message.get("cancelled"):
        parts.append("The command was cancelled before it finished.")
    elif exit_code is not None and exit_code != 0:
        parts.append(f"It exited with code {exit_code}.")
    if message.get("truncated"):
        full_output = message.get("fullOutputPath")
        where = f" The full output is in {full_output}." if full_output else ""
        parts.append(f"The output above was truncated.{where}")
    return "\n\n".join(parts)


# The message views of a context by name: Pi's own (`pi`, the context's messages as they
# are), Pi's convertToLlm (`llm`) and what Strand's requests send (`provider`).
CONTEXT_FORMATS: Final[Mapping[str, Callable[[Iterable[Mapping[str, Any]]], list[Message]]]] = {
    "pi": lambda messages: [dict(m) for m in messages],
    "llm": convert_to_llm,
    "provider": to_provider_messages,
}
