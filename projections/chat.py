"""The chat: what the end user sees on the current path.

One item per visible entry, root first. Tool results are folded under the assistant message
that asked for them (matched by toolCallId); the latest compaction on the path becomes a
card placed where the kept messages begin, and the messages it replaced are inside the card
(recursively: an earlier compaction is a card inside that card). Markdown is left to the
templates: items hold structured data only.

Entries alone give the chat. Events add what entries do not know: tool error codes,
approvals, and how each turn ended (a turn cut by a crash or stopped early gets a note
after its last visible item).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from projections.context import path_to_root
from projections.faults import FaultView, fault_view
from projections.otel_ingest import with_late_agent
from projections.records import EntryRecord, EventRecord

# Error codes that the runtime and crash recovery give to tool results that did not run
# to the end; they say why there is no real output.
OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
NOT_STARTED = "TOOL_NOT_STARTED"
ABORTED_CODES = frozenset({"ABORTED_BEFORE_DISPATCH", "ABORTED"})


# --- shared small views ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and cost of one model response (Pi's `usage`), or a sum of several."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: float = 0.0

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> Usage | None:
        usage = message.get("usage")
        if not isinstance(usage, Mapping):
            return None
        parts = [_int(usage.get(key)) for key in ("input", "output", "cacheRead", "cacheWrite")]
        cost = usage.get("cost")
        total_cost = cost.get("total") if isinstance(cost, Mapping) else None
        return cls(
            input=parts[0],
            output=parts[1],
            cache_read=parts[2],
            cache_write=parts[3],
            # Pi leaves totalTokens out in old files; its own fallback is the plain sum.
            total_tokens=_int(usage.get("totalTokens")) or sum(parts),
            cost=float(total_cost) if isinstance(total_cost, (int, float)) else 0.0,
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            total_tokens=self.total_tokens + other.total_tokens,
            cost=self.cost + other.cost,
        )


@dataclass(frozen=True, slots=True)
class ImageRef:
    mime_type: str
    data: str  # base64

    @property
    def data_uri(self) -> str:
        return f"data:{self.mime_type};base64,{self.data}"


@dataclass(frozen=True, slots=True)
class Notice:
    """Why a response or a turn stopped early. `kind`: aborted, error, max_tokens,
    interrupted, approval_timeout. `text` is a plain default wording for templates."""

    kind: str
    text: str


# --- tool calls --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolResultView:
    entry_id: str
    seq: int
    timestamp: str
    tool_name: str
    text: str
    images: tuple[ImageRef, ...]
    is_error: bool
    error_code: str | None
    details: Any


@dataclass(frozen=True, slots=True)
class ToolCallView:
    """One tool call of an assistant message with its result.

    `status`: ok, error, pending (no result on the path), running (no result yet, but
    dispatched or allowed, in a turn that has not ended), waiting_approval, rejected,
    interrupted (outcome unknown after a crash), not_started, aborted.
    """

    call_id: str
    name: str
    arguments: Any
    arguments_text: str
    result: ToolResultView | None
    approval: str | None  # asked, allowed, rejected, cancelled
    status: str


# --- items -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserItem:
    """`parent_id` is where the leaf goes to edit and resend this message (Pi's /tree
    selection of a user message): the new message becomes its sibling."""

    kind: ClassVar[str] = "user"
    entry_id: str
    seq: int
    timestamp: str
    text: str
    images: tuple[ImageRef, ...]
    parent_id: str | None
    # Set when the message is a background job's notice, claimed from the inbox (the
    # job's id), not something the user wrote.
    job_id: str | None = None


@dataclass(frozen=True, slots=True)
class AssistantItem:
    kind: ClassVar[str] = "assistant"
    entry_id: str
    seq: int
    timestamp: str
    text: str
    thinking: tuple[str, ...]
    tool_calls: tuple[ToolCallView, ...]
    provider: str | None
    model: str | None
    stop_reason: str | None
    error_message: str | None
    usage: Usage | None
    notice: Notice | None
    # A failed reply (stopReason "error"): what failed and after how many attempts.
    fault: FaultView | None = None


@dataclass(frozen=True, slots=True)
class ToolResultItem:
    """A tool result whose call is not on the path (for example cut by a compaction
    written while the tool ran); shown on its own so that it is not lost."""

    kind: ClassVar[str] = "tool_result"
    entry_id: str
    seq: int
    timestamp: str
    result: ToolResultView


@dataclass(frozen=True, slots=True)
class BashItem:
    kind: ClassVar[str] = "bash"
    entry_id: str
    seq: int
    timestamp: str
    command: str
    output: str
    exit_code: int | None
    cancelled: bool
    truncated: bool
    full_output_path: str | None
    exclude_from_context: bool

    @property
    def is_error(self) -> bool:
        return self.cancelled or (self.exit_code is not None and self.exit_code != 0)


@dataclass(frozen=True, slots=True)
class CustomMessageItem:
    kind: ClassVar[str] = "custom_message"
    entry_id: str
    seq: int
    timestamp: str
    custom_type: str
    text: str
    images: tuple[ImageRef, ...]
    details: Any


@dataclass(frozen=True, slots=True)
class CompactionItem:
    """A "compacted from N tokens" card.

    `replaced` holds the items of the path entries before `first_kept_entry_id` (all path
    entries before the compaction when that id is not on the path). A compaction older than
    the latest one that sits inside the kept messages is `superseded`: the model never saw
    its summary after the newer compaction, and it replaces nothing on screen.
    """

    kind: ClassVar[str] = "compaction"
    entry_id: str
    seq: int
    timestamp: str
    summary: str
    tokens_before: int
    first_kept_entry_id: str | None
    details: Any
    from_hook: bool
    superseded: bool
    replaced: tuple[ChatItem, ...] = field(default=())
    # Pi 1.6: the system state the compaction keeps (its `systemMessage` checkpoint), which
    # later contexts start from in place of the system messages it folded.
    checkpoint: SystemMessageItem | None = None


@dataclass(frozen=True, slots=True)
class BranchSummaryItem:
    kind: ClassVar[str] = "branch_summary"
    entry_id: str
    seq: int
    timestamp: str
    summary: str
    from_id: str | None
    details: Any


@dataclass(frozen=True, slots=True)
class ModelChangeItem:
    kind: ClassVar[str] = "model_change"
    entry_id: str
    seq: int
    timestamp: str
    provider: str
    model_id: str


@dataclass(frozen=True, slots=True)
class SystemMessageItem:
    """A Pi 1.6 system message: the prompt's sections set or removed (by name), text
    appended to the prompt, tools added and removed."""

    kind: ClassVar[str] = "system"
    entry_id: str
    seq: int
    timestamp: str
    text: str
    sections: tuple[tuple[str, str | None], ...]  # (name, text; None = removed)
    tools_added: tuple[str, ...]
    tools_removed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ContextEditItem:
    """A Pi 1.6 context edit: from here on, the model sees `target_id` replaced (with
    `text`) or not at all (`omitted`); the message itself stays as it was."""

    kind: ClassVar[str] = "context_edit"
    entry_id: str
    seq: int
    timestamp: str
    target_id: str
    omitted: bool
    text: str


@dataclass(frozen=True, slots=True)
class UsageItem:
    """A Pi 1.6 usage entry: model work outside the conversation (cache warming, say)."""

    kind: ClassVar[str] = "usage"
    entry_id: str
    seq: int
    timestamp: str
    usage_kind: str
    provider: str
    model: str
    usage: Usage | None


@dataclass(frozen=True, slots=True)
class NoteItem:
    """How a turn ended when that is not visible on any message: a crash (interrupted),
    a cancel during tool execution, a provider error with no response. It follows the item
    of the turn's last visible entry, `after_entry_id`; `seq` is the `turn/end` seq."""

    kind: ClassVar[str] = "note"
    entry_id: None
    seq: int
    turn: int
    after_entry_id: str
    notice: Notice


ChatItem = (
    UserItem
    | AssistantItem
    | ToolResultItem
    | BashItem
    | CustomMessageItem
    | CompactionItem
    | BranchSummaryItem
    | ModelChangeItem
    | SystemMessageItem
    | ContextEditItem
    | UsageItem
    | NoteItem
)


@dataclass(frozen=True, slots=True)
class ChatView:
    leaf_id: str | None  # the leaf actually shown (Pi falls back to the last entry)
    items: tuple[ChatItem, ...]
    path_length: int


# --- content helpers (also used by the tree and the request views) -----------------------


def content_text(content: Any, separator: str = "\n") -> str:
    """The text of a Pi content value: a bare string, or the text blocks joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, Sequence):
        return ""
    return separator.join(
        str(block.get("text") or "")
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text"
    )


def content_images(content: Any) -> tuple[ImageRef, ...]:
    if isinstance(content, str) or not isinstance(content, Sequence):
        return ()
    return tuple(
        ImageRef(str(block.get("mimeType") or "image/png"), str(block.get("data") or ""))
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "image"
    )


def message_of(entry: EntryRecord) -> Mapping[str, Any]:
    message = entry.data.get("message") if entry.type == "message" else None
    return message if isinstance(message, Mapping) else {}


def tool_calls_of(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, Sequence):
        return []
    return [b for b in content if isinstance(b, Mapping) and b.get("type") == "toolCall"]


def resolve_leaf(
    entries: Sequence[EntryRecord], by_id: Mapping[str, EntryRecord], leaf_id: str | None
) -> str | None:
    """The leaf to show. An unknown leaf falls back to the last entry in file order, as Pi
    does; a null leaf (before the first entry, or after Pi's resetLeaf) stays null."""
    if leaf_id is None or not entries:
        return None
    if leaf_id in by_id:
        return leaf_id
    return max(entries, key=lambda entry: entry.seq).id


def active_path(entries: Sequence[EntryRecord], leaf_id: str | None) -> list[EntryRecord]:
    """Root-first path to the (resolved) leaf."""
    by_id = {entry.id: entry for entry in entries}
    leaf = resolve_leaf(entries, by_id, leaf_id)
    return [] if leaf is None else list(path_to_root(by_id, leaf))


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


# --- facts from events -------------------------------------------------------------------


@dataclass
class _EventFacts:
    error_codes: dict[str, str] = field(default_factory=dict)  # tool result entry id → code
    approvals: dict[str, str] = field(default_factory=dict)  # call id → asked / outcome
    entry_turns: dict[str, int] = field(default_factory=dict)  # entry id → turn
    turn_ends: dict[int, EventRecord] = field(default_factory=dict)
    faults: dict[str, Any] = field(default_factory=dict)  # reply entry id → recorded fault
    dispatched: set[str] = field(default_factory=set)  # call ids a tool/call started
    notices: dict[str, str] = field(default_factory=dict)  # user entry id → job id

    @classmethod
    def collect(cls, events: Iterable[EventRecord]) -> _EventFacts:
        facts = cls()
        approval_calls: dict[str, str] = {}
        open_turn: int | None = None
        job_inbox: dict[str, str] = {}  # inbox id → job id, of job notices
        job_turn = False  # the open turn was started by a job's end (trigger job)
        claimed_job: str | None = None  # the job whose notice the next user message is
        for event in sorted(events, key=lambda e: e.seq):
            data = event.data
            if event.type == "inbox/queued" and data.get("job_id"):
                job_inbox[str(data.get("inbox_id"))] = str(data.get("job_id"))
            elif event.type == "inbox/claimed":
                claimed_job = job_inbox.get(str(data.get("inbox_id")))
                if claimed_job is None and job_turn:
                    claimed_job = ""  # queued outside the events given: named by its text
            elif event.type == "user/message" and claimed_job is not None:
                if event.entry_id:
                    facts.notices[event.entry_id] = claimed_job or _notice_job(data)
                claimed_job = None
            if event.type == "turn/start":
                open_turn = _turn_number(event)
                job_turn = data.get("trigger") == "job"
            turn = event.turn if event.turn is not None else open_turn
            if event.entry_id is not None and turn is not None:
                facts.entry_turns[event.entry_id] = turn
            if event.type == "tool/result" and event.entry_id and data.get("error_code"):
                facts.error_codes[event.entry_id] = str(data["error_code"])
            elif event.type == "assistant/message" and event.entry_id and data.get("fault"):
                facts.faults[event.entry_id] = data["fault"]
            elif event.type == "tool/call":
                facts.dispatched.add(str(data.get("call_id")))
            elif event.type == "approval/asked":
                approval_calls[str(data.get("approval_id"))] = str(data.get("call_id"))
                facts.approvals[str(data.get("call_id"))] = "asked"
            elif event.type == "approval/decided":
                call_id = approval_calls.get(str(data.get("approval_id")))
                if call_id is not None:
                    facts.approvals[call_id] = str(data.get("outcome"))
            elif event.type == "turn/end":
                number = _turn_number(event)
                if number is not None:
                    facts.turn_ends[number] = event
                open_turn = None
            elif event.type == "turn/observed":
                number = _turn_number(event)
                end = facts.turn_ends.get(number) if number is not None else None
                if number is not None and end is not None:
                    amended = with_late_agent(end.data, data)
                    facts.turn_ends[number] = replace(end, data=amended)
        return facts


_NOTICE = re.compile(r"^\[job (\S+) ended")


def _notice_job(data: Mapping[str, Any]) -> str:
    """The job a notice's text names (`runtime.jobs.notice_text`), or "job"."""
    entry = data.get("entry")
    message = entry.get("message") if isinstance(entry, Mapping) else None
    content = message.get("content") if isinstance(message, Mapping) else None
    found = _NOTICE.match(content_text(content))
    return found.group(1) if found else "job"


def tool_facts(events: Iterable[EventRecord]) -> tuple[dict[str, str], dict[str, str]]:
    """What events add to the tool calls of the chat: (tool result entry id → error code,
    call id → approval state), for a door that draws the calls itself (the HTML export)."""
    facts = _EventFacts.collect(events)
    return facts.error_codes, facts.approvals


def _turn_number(event: EventRecord) -> int | None:
    value = event.data.get("turn", event.turn)
    return value if isinstance(value, int) else None


# --- building ----------------------------------------------------------------------------


@dataclass
class _Builder:
    """Everything the per-entry conversion needs, computed once over the whole path."""

    facts: _EventFacts
    results: dict[str, EntryRecord]  # call id → its (first) result entry on the path
    owners: dict[str, str]  # call id → entry id of the assistant that asked for it
    notes: dict[str, list[NoteItem]]  # entry id → notes that follow its item
    # entry id → its item (None: not shown), built once though both the turn notes and
    # the items ask for it
    built: dict[str, ChatItem | None] = field(default_factory=dict)

    def item(self, entry: EntryRecord) -> ChatItem | None:
        if entry.id not in self.built:
            self.built[entry.id] = _entry_item(entry, self)
        return self.built[entry.id]

    def absorbed(self, entry: EntryRecord) -> bool:
        """A tool result shown under its assistant message instead of on its own."""
        message = message_of(entry)
        call_id = str(message.get("toolCallId"))
        return (
            message.get("role") == "toolResult"
            and call_id in self.owners
            and self.results.get(call_id) is entry
        )

    def items(self, entries: Sequence[EntryRecord]) -> list[ChatItem]:
        out: list[ChatItem] = []
        for entry in entries:
            item = None if self.absorbed(entry) else self.item(entry)
            if item is not None:
                out.append(item)
                out.extend(self.notes.get(entry.id, ()))
        return out


def project_chat(
    entries: Sequence[EntryRecord],
    leaf_id: str | None,
    events: Sequence[EventRecord] = (),
) -> ChatView:
    """The chat for the path from the root to `leaf_id`.

    `entries` are all entries of the session (any order); `events` may be empty, or any
    events of the session: tool result error codes, approvals and turn ends are read from
    them.
    """
    path = active_path(entries, leaf_id)
    facts = _EventFacts.collect(events)
    builder = _Builder(facts, *_tool_links(path), notes={})
    builder.notes = _turn_notes(path, builder)
    return ChatView(
        leaf_id=path[-1].id if path else None,
        items=_windowed_items(path, builder),
        path_length=len(path),
    )


def _tool_links(path: Sequence[EntryRecord]) -> tuple[dict[str, EntryRecord], dict[str, str]]:
    results: dict[str, EntryRecord] = {}
    owners: dict[str, str] = {}
    for entry in path:
        message = message_of(entry)
        if message.get("role") == "toolResult":
            results.setdefault(str(message.get("toolCallId")), entry)
        for call in tool_calls_of(message):
            owners.setdefault(str(call.get("id")), entry.id)
    return results, owners


def _windowed_items(path: Sequence[EntryRecord], builder: _Builder) -> tuple[ChatItem, ...]:
    """Items of the path with each latest compaction folding what it replaced.

    Iterative rather than recursive: a long session can hold many chained compactions,
    each nesting the previous one's card.
    """
    levels: list[tuple[EntryRecord, Sequence[EntryRecord]]] = []
    end = len(path)
    while True:
        index = _last_compaction(path, end)
        if index is None:
            break
        compaction = path[index]
        cut = _first_kept_index(path, index, compaction)
        visible = [e for e in path[cut:end] if e is not compaction]
        levels.append((compaction, visible))
        end = cut
    items: tuple[ChatItem, ...] = tuple(builder.items(path[:end]))
    for level_compaction, level_visible in reversed(levels):
        card = _compaction_item(level_compaction, superseded=False, replaced=items)
        items = (card, *builder.items(level_visible))
    return items


def _last_compaction(path: Sequence[EntryRecord], end: int) -> int | None:
    for index in range(end - 1, -1, -1):
        if path[index].type == "compaction":
            return index
    return None


def _first_kept_index(path: Sequence[EntryRecord], index: int, compaction: EntryRecord) -> int:
    """Where the kept messages start; Pi keeps only what follows the compaction when its
    firstKeptEntryId is not on the path before it."""
    first_kept = compaction.data.get("firstKeptEntryId")
    for position in range(index):
        if path[position].id == first_kept:
            return position
    return index


def _turn_notes(path: Sequence[EntryRecord], builder: _Builder) -> dict[str, list[NoteItem]]:
    notes: dict[str, list[NoteItem]] = {}
    last_shown: dict[int, EntryRecord] = {}  # turn → its last displayed entry on the path
    last_assistant: dict[int, Mapping[str, Any]] = {}
    for entry in path:
        turn = builder.facts.entry_turns.get(entry.id)
        if turn is None:
            continue
        if message_of(entry).get("role") == "assistant":
            last_assistant[turn] = message_of(entry)
        if _displayed(entry, builder):
            last_shown[turn] = entry
    for turn, anchor in sorted(last_shown.items()):
        end = builder.facts.turn_ends.get(turn)
        notice = _turn_notice(end, last_assistant.get(turn)) if end is not None else None
        if end is None or notice is None:
            continue
        anchor_id = _anchor_id(anchor, builder)
        note = NoteItem(
            entry_id=None, seq=end.seq, turn=turn, after_entry_id=anchor_id, notice=notice
        )
        notes.setdefault(anchor_id, []).append(note)
    return notes


def _displayed(entry: EntryRecord, builder: _Builder) -> bool:
    return builder.absorbed(entry) or builder.item(entry) is not None


def _anchor_id(entry: EntryRecord, builder: _Builder) -> str:
    if builder.absorbed(entry):
        return builder.owners[str(message_of(entry).get("toolCallId"))]
    return entry.id


# A turn end reason → the assistant stopReason that already shows it on the message.
_SHOWN_BY_STOP_REASON = {"aborted": "aborted", "error": "error", "max_tokens": "length"}


def _turn_notice(end: EventRecord, last_assistant: Mapping[str, Any] | None) -> Notice | None:
    reason = str(end.data.get("reason"))
    if reason == "interrupted":
        return Notice("interrupted", "Interrupted: the process running this turn stopped.")
    if reason == "approval_timeout":
        return Notice("approval_timeout", "Stopped: no decision on an approval came in time.")
    shown_by = _SHOWN_BY_STOP_REASON.get(reason)
    if shown_by is None:
        return None
    if last_assistant is not None and last_assistant.get("stopReason") == shown_by:
        return None
    if reason == "error":
        return Notice("error", f"Error: {end.data.get('error') or 'unknown error'}")
    if reason == "aborted":
        return Notice("aborted", "Aborted")
    return Notice("max_tokens", "Stopped at the output token limit")


# --- one entry → one item ----------------------------------------------------------------


def _entry_item(entry: EntryRecord, builder: _Builder) -> ChatItem | None:
    if entry.type == "message":
        return _message_item(entry, builder)
    data = entry.data
    if entry.type == "compaction":
        # Reached only for compactions inside a newer compaction's kept messages.
        return _compaction_item(entry, superseded=True, replaced=())
    if entry.type == "branch_summary" and data.get("summary"):
        return BranchSummaryItem(
            entry_id=entry.id,
            seq=entry.seq,
            timestamp=entry.timestamp,
            summary=str(data.get("summary")),
            from_id=data.get("fromId"),
            details=data.get("details"),
        )
    if entry.type == "model_change":
        return ModelChangeItem(
            entry_id=entry.id,
            seq=entry.seq,
            timestamp=entry.timestamp,
            provider=str(data.get("provider") or ""),
            model_id=str(data.get("modelId") or ""),
        )
    if entry.type == "custom_message" and data.get("display"):
        return _custom_item(entry, data)
    if entry.type == "context_edit":
        replacement = data.get("replacement")
        content = replacement.get("content") if isinstance(replacement, Mapping) else None
        return ContextEditItem(
            entry_id=entry.id,
            seq=entry.seq,
            timestamp=entry.timestamp,
            target_id=str(data.get("targetId") or ""),
            omitted=replacement is None,
            text=content_text(content),
        )
    if entry.type == "usage":
        return UsageItem(
            entry_id=entry.id,
            seq=entry.seq,
            timestamp=entry.timestamp,
            usage_kind=str(data.get("kind") or ""),
            provider=str(data.get("provider") or ""),
            model=str(data.get("model") or ""),
            usage=Usage.from_message(data),
        )
    # thinking_level_change, label, session_info, custom and hidden custom messages are
    # not part of the conversation the user reads.
    return None


def _message_item(entry: EntryRecord, builder: _Builder) -> ChatItem | None:
    message = message_of(entry)
    role = message.get("role")
    if role == "user":
        return UserItem(
            entry_id=entry.id,
            seq=entry.seq,
            timestamp=entry.timestamp,
            text=content_text(message.get("content")),
            images=content_images(message.get("content")),
            parent_id=entry.parent_id,
            job_id=builder.facts.notices.get(entry.id),
        )
    if role == "assistant":
        return _assistant_item(entry, message, builder)
    if role == "toolResult":
        return ToolResultItem(
            entry_id=entry.id,
            seq=entry.seq,
            timestamp=entry.timestamp,
            result=_result_view(entry, builder),
        )
    if role == "bashExecution":
        return _bash_item(entry, message)
    if role in ("custom", "hookMessage") and message.get("display"):
        return _custom_item(entry, message)
    if role == "system":
        return _system_item(entry, message)
    return None


def _system_item(entry: EntryRecord, message: Mapping[str, Any]) -> SystemMessageItem:
    sections = message.get("sections")
    named = sections.items() if isinstance(sections, Mapping) else ()

    def names(key: str) -> tuple[str, ...]:
        tools = message.get(key)
        if not isinstance(tools, Sequence) or isinstance(tools, str):
            return ()
        return tuple(str(t.get("name")) for t in tools if isinstance(t, Mapping))

    return SystemMessageItem(
        entry_id=entry.id,
        seq=entry.seq,
        timestamp=entry.timestamp,
        text=content_text(message.get("content")),
        sections=tuple((str(k), v if isinstance(v, str) else None) for k, v in named),
        tools_added=names("toolsAdded"),
        tools_removed=names("toolsRemoved"),
    )


def _assistant_item(
    entry: EntryRecord, message: Mapping[str, Any], builder: _Builder
) -> AssistantItem:
    blocks = [b for b in message.get("content") or () if isinstance(b, Mapping)]
    texts = [str(b.get("text") or "") for b in blocks if b.get("type") == "text"]
    thinking = [str(b.get("thinking") or "") for b in blocks if b.get("type") == "thinking"]
    stop_reason = message.get("stopReason")
    return AssistantItem(
        entry_id=entry.id,
        seq=entry.seq,
        timestamp=entry.timestamp,
        text="\n\n".join(t for t in texts if t.strip()),
        thinking=tuple(t for t in thinking if t.strip()),
        tool_calls=tuple(_call_view(call, builder) for call in tool_calls_of(message)),
        provider=message.get("provider"),
        model=message.get("model"),
        stop_reason=stop_reason,
        error_message=message.get("errorMessage"),
        usage=Usage.from_message(message),
        notice=_stop_notice(stop_reason, message.get("errorMessage")),
        fault=(
            fault_view(builder.facts.faults.get(entry.id), message.get("errorMessage"))
            if stop_reason == "error"
            else None
        ),
    )


def _stop_notice(stop_reason: Any, error_message: Any) -> Notice | None:
    if stop_reason == "aborted":
        return Notice("aborted", "Aborted")
    if stop_reason == "error":
        return Notice("error", f"Error: {error_message or 'unknown error'}")
    if stop_reason == "length":
        return Notice("max_tokens", "Stopped at the output token limit")
    return None


def _call_view(call: Mapping[str, Any], builder: _Builder) -> ToolCallView:
    call_id = str(call.get("id"))
    result_entry = builder.results.get(call_id)
    result = _result_view(result_entry, builder) if result_entry is not None else None
    approval = builder.facts.approvals.get(call_id)
    arguments = call.get("arguments")
    return ToolCallView(
        call_id=call_id,
        name=str(call.get("name") or ""),
        arguments=arguments,
        arguments_text=json.dumps(arguments, indent=2, ensure_ascii=False, default=str),
        result=result,
        approval=approval,
        status=_call_status(result, approval, _started(call_id, approval, builder)),
    )


def _started(call_id: str, approval: str | None, builder: _Builder) -> bool:
    """Whether the call runs now: dispatched or allowed, and its turn has not ended."""
    if call_id not in builder.facts.dispatched and approval != "allowed":
        return False
    turn = builder.facts.entry_turns.get(builder.owners.get(call_id, ""))
    return turn is not None and turn not in builder.facts.turn_ends


def _call_status(result: ToolResultView | None, approval: str | None, started: bool) -> str:
    if result is None:
        if approval == "asked":
            return "waiting_approval"
        return "running" if started else "pending"
    if result.error_code == OUTCOME_UNKNOWN:
        return "interrupted"
    if result.error_code == NOT_STARTED:
        return "not_started"
    if result.error_code in ABORTED_CODES:
        return "aborted"
    if approval == "rejected":
        return "rejected"
    return "error" if result.is_error else "ok"


def _result_view(entry: EntryRecord, builder: _Builder) -> ToolResultView:
    message = message_of(entry)
    return ToolResultView(
        entry_id=entry.id,
        seq=entry.seq,
        timestamp=entry.timestamp,
        tool_name=str(message.get("toolName") or ""),
        text=content_text(message.get("content")),
        images=content_images(message.get("content")),
        is_error=bool(message.get("isError")),
        error_code=builder.facts.error_codes.get(entry.id),
        details=message.get("details"),
    )


def _bash_item(entry: EntryRecord, message: Mapping[str, Any]) -> BashItem:
    exit_code = message.get("exitCode")
    return BashItem(
        entry_id=entry.id,
        seq=entry.seq,
        timestamp=entry.timestamp,
        command=str(message.get("command") or ""),
        output=str(message.get("output") or ""),
        exit_code=exit_code if isinstance(exit_code, int) else None,
        cancelled=bool(message.get("cancelled")),
        truncated=bool(message.get("truncated")),
        full_output_path=message.get("fullOutputPath"),
        exclude_from_context=bool(message.get("excludeFromContext")),
    )


def _custom_item(entry: EntryRecord, source: Mapping[str, Any]) -> CustomMessageItem:
    return CustomMessageItem(
        entry_id=entry.id,
        seq=entry.seq,
        timestamp=entry.timestamp,
        custom_type=str(source.get("customType") or ""),
        text=content_text(source.get("content")),
        images=content_images(source.get("content")),
        details=source.get("details"),
    )


def _compaction_item(
    entry: EntryRecord, *, superseded: bool, replaced: tuple[ChatItem, ...]
) -> CompactionItem:
    data = entry.data
    checkpoint = data.get("systemMessage")
    return CompactionItem(
        entry_id=entry.id,
        seq=entry.seq,
        timestamp=entry.timestamp,
        summary=str(data.get("summary") or ""),
        tokens_before=_int(data.get("tokensBefore")),
        first_kept_entry_id=data.get("firstKeptEntryId"),
        details=data.get("details"),
        from_hook=bool(data.get("fromHook")),
        superseded=superseded,
        replaced=replaced,
        checkpoint=_system_item(entry, checkpoint) if isinstance(checkpoint, Mapping) else None,
    )
