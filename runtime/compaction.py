"""Compaction and branch summaries, with Pi's rules for what is kept (reference §6, §7).

Compaction never deletes anything: it appends a `compaction` entry whose summary stands in
for the path before `firstKeptEntryId`. The cut point follows Pi's `findCutPoint` exactly:
only user, assistant, bashExecution and custom messages, branch summaries and custom
messages can start the kept window, never a tool result, so a kept tool result always keeps
the assistant message that called it. The runtime compacts only between steps, when every
tool call of the path has its result, so a compaction never lands inside a tool call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from projections.context import build_session_context, entry_message, to_provider_messages
from projections.payload import build_payload
from projections.records import EntryRecord
from projections.tokens import estimate_tokens
from runtime.config import AgentConfig
from runtime.providers.base import Assembler, Provider, ProviderError

JSON = dict[str, Any]

TOOL_RESULT_MAX_CHARS = 2000

SUMMARY_SYSTEM_PROMPT = (
    "You write summaries of conversations between a user and an AI assistant that works on "
    "files. Another model will read your summary instead of the conversation and carry on "
    "from it. Write only the summary: do not answer or continue the conversation."
)

_SHAPE = """Write it in this shape:

## Goal
What the user wants to achieve (several items if the work changed direction).

## Constraints & Preferences
- Requirements and preferences the user stated, or "(none)".

## Progress
### Done
- [x] Work that is finished.
### In Progress
- [ ] Work that was under way.
### Blocked
- Anything that stopped the work.

## Key Decisions
- **Decision**: why it was taken.

## Next Steps
1. What should happen next, in order.

## Critical Context
- File paths, names, values and error messages needed to go on, or "(none)".

Be brief in every section and copy paths, names and error messages exactly."""

COMPACTION_PROMPT = (
    "Above, inside <conversation>, is the earlier part of a conversation that no longer fits "
    "in the model's context. Summarize it so that the work can go on without it.\n\n" + _SHAPE
)
UPDATE_PROMPT = (
    "Above, inside <conversation>, are messages that came after the summary inside "
    "<previous-summary>. Write one updated summary: keep what still matters from the previous "
    "summary, add what the new messages did, move finished work to Done and refresh the next "
    "steps.\n\n" + _SHAPE
)
TURN_PREFIX_PROMPT = """Above, inside <conversation>, is the beginning of a turn that is too long to keep whole; its end is kept as it is. Summarize the beginning so that the kept end makes sense:

## Original Request
What the user asked for in this turn.

## Early Progress
- What was decided and done in this part.

## Context for Suffix
- What the kept end relies on."""
BRANCH_PROMPT = (
    "Above, inside <conversation>, is a branch of the conversation that the user is leaving. "
    "Summarize it so that its results are not lost when the conversation continues "
    "elsewhere.\n\n" + _SHAPE
)
BRANCH_SUMMARY_PREAMBLE = (
    "Before coming back here, the user followed another branch of this conversation. "
    "What happened there:\n\n"
)


# --- token estimates ---------------------------------------------------------------------


def context_tokens(path: Sequence[EntryRecord], messages: Sequence[Mapping[str, Any]]) -> int:
    """Pi's estimate of a context's size: the last assistant's reported usage plus a
    chars/4 estimate of the messages after it. Usage from a reply older than the path's
    latest compaction, or from an aborted or failed reply, does not count (it measured a
    context that no longer exists)."""
    latest_compaction = max(
        (i for i, entry in enumerate(path) if entry.type == "compaction"), default=-1
    )
    candidates = {
        id(entry.data.get("message"))
        for entry in path[latest_compaction + 1 :]
        if entry.type == "message"
    }
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        usage = _valid_usage(message)
        if usage is not None and id(message) in candidates:
            trailing = sum(estimate_tokens(m) for m in messages[index + 1 :])
            return usage_tokens(usage) + trailing
    return sum(estimate_tokens(m) for m in messages)


def usage_tokens(usage: Mapping[str, Any]) -> int:
    total = usage.get("totalTokens")
    if isinstance(total, int) and total:
        return total
    return sum(
        v
        for k in ("input", "output", "cacheRead", "cacheWrite")
        if isinstance(v := usage.get(k), int)
    )


def _valid_usage(message: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if message.get("role") != "assistant" or message.get("stopReason") in ("aborted", "error"):
        return None
    usage = message.get("usage")
    return usage if isinstance(usage, Mapping) else None


# --- cut point (Pi's findCutPoint) -------------------------------------------------------

_CUT_ROLES = frozenset(
    {"user", "assistant", "bashExecution", "custom", "branchSummary", "compactionSummary"}
)


def _role(entry: EntryRecord) -> str | None:
    message = entry.data.get("message") if entry.type == "message" else None
    return message.get("role") if isinstance(message, Mapping) else None


def valid_cut_points(path: Sequence[EntryRecord], start: int, end: int) -> list[int]:
    points = []
    for index in range(start, end):
        entry = path[index]
        if entry.type == "message" and _role(entry) in _CUT_ROLES:
            points.append(index)
        if entry.type in ("branch_summary", "custom_message"):
            points.append(index)
    return points


def turn_start_index(path: Sequence[EntryRecord], index: int, start: int) -> int:
    for i in range(index, start - 1, -1):
        entry = path[i]
        if entry.type in ("branch_summary", "custom_message"):
            return i
        if entry.type == "message" and _role(entry) in ("user", "bashExecution"):
            return i
    return -1


@dataclass(frozen=True, slots=True)
class CutPoint:
    first_kept_index: int
    turn_start_index: int  # -1 when the cut is at a user message
    is_split_turn: bool


def find_cut_point(
    path: Sequence[EntryRecord], start: int, end: int, keep_recent_tokens: int
) -> CutPoint:
    points = valid_cut_points(path, start, end)
    if not points:
        return CutPoint(start, -1, False)
    accumulated = 0
    cut = points[0]
    for index in range(end - 1, start - 1, -1):
        entry = path[index]
        if entry.type != "message":
            continue
        message = entry.data.get("message")
        accumulated += estimate_tokens(message) if isinstance(message, Mapping) else 0
        if accumulated >= keep_recent_tokens:
            cut = next((p for p in points if p >= index), cut)
            break
    # Keep the settings entries (model, thinking, labels…) right before the cut with it.
    while cut > start:
        previous = path[cut - 1]
        if previous.type in ("compaction", "message"):
            break
        cut -= 1
    is_user = path[cut].type == "message" and _role(path[cut]) == "user"
    turn_start = -1 if is_user else turn_start_index(path, cut, start)
    return CutPoint(cut, turn_start, not is_user and turn_start != -1)


# --- preparation (Pi's prepareCompaction) ------------------------------------------------


@dataclass
class FileOps:
    read: set[str] = field(default_factory=set)
    modified: set[str] = field(default_factory=set)

    def add_message(self, message: Mapping[str, Any]) -> None:
        if message.get("role") != "assistant":
            return
        for block in message.get("content") or ():
            if not isinstance(block, Mapping) or block.get("type") != "toolCall":
                continue
            args = block.get("arguments")
            path = args.get("path") if isinstance(args, Mapping) else None
            if not isinstance(path, str) or not path:
                continue
            name = block.get("name")
            if name in ("read_file", "read"):
                self.read.add(path)
            elif name in ("write_file", "write", "edit"):
                self.modified.add(path)

    def add_details(self, details: Any) -> None:
        if not isinstance(details, Mapping):
            return
        for path in details.get("readFiles") or ():
            self.read.add(str(path))
        for path in details.get("modifiedFiles") or ():
            self.modified.add(str(path))

    def lists(self) -> tuple[list[str], list[str]]:
        return sorted(self.read - self.modified), sorted(self.modified)

    def tags(self) -> str:
        read, modified = self.lists()
        sections = []
        if read:
            sections.append("<read-files>\n" + "\n".join(read) + "\n</read-files>")
        if modified:
            sections.append("<modified-files>\n" + "\n".join(modified) + "\n</modified-files>")
        return "\n\n" + "\n\n".join(sections) if sections else ""


@dataclass(frozen=True)
class Preparation:
    first_kept_entry_id: str
    messages: list[Mapping[str, Any]]  # to summarize
    turn_prefix: list[Mapping[str, Any]]  # the cut turn's beginning, when the turn is split
    is_split_turn: bool
    tokens_before: int
    previous_summary: str | None
    file_ops: FileOps


def prepare_compaction(path: Sequence[EntryRecord], keep_recent_tokens: int) -> Preparation | None:
    """What a compaction of this path would summarize and keep; None when there is nothing
    to do (the path ends in a compaction, or is empty)."""
    if not path or path[-1].type == "compaction":
        return None
    previous_index = max((i for i, e in enumerate(path) if e.type == "compaction"), default=-1)
    previous_summary: str | None = None
    start = 0
    if previous_index >= 0:
        previous = path[previous_index]
        previous_summary = str(previous.data.get("summary") or "")
        kept = previous.data.get("firstKeptEntryId")
        kept_index = next((i for i, e in enumerate(path) if e.id == kept), -1)
        start = kept_index if kept_index >= 0 else previous_index + 1
    context = build_session_context(list(path), path[-1].id)
    tokens_before = context_tokens(path, context.messages)
    cut = find_cut_point(path, start, len(path), keep_recent_tokens)
    first_kept = path[cut.first_kept_index]
    history_end = cut.turn_start_index if cut.is_split_turn else cut.first_kept_index
    messages = _messages(path[start:history_end])
    prefix = (
        _messages(path[cut.turn_start_index : cut.first_kept_index]) if cut.is_split_turn else []
    )
    file_ops = FileOps()
    if previous_index >= 0 and not path[previous_index].data.get("fromHook"):
        file_ops.add_details(path[previous_index].data.get("details"))
    for message in [*messages, *prefix]:
        file_ops.add_message(message)
    return Preparation(
        first_kept_entry_id=first_kept.id,
        messages=messages,
        turn_prefix=prefix,
        is_split_turn=cut.is_split_turn,
        tokens_before=tokens_before,
        previous_summary=previous_summary,
        file_ops=file_ops,
    )


def _messages(entries: Sequence[EntryRecord]) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for entry in entries:
        if entry.type == "compaction":
            continue
        message = entry_message(entry)
        if message is not None:
            out.append(message)
    return out


# --- serialization and prompts -----------------------------------------------------------


def serialize_conversation(messages: Sequence[Mapping[str, Any]]) -> str:
    """The conversation as `[User]: …` lines, so that the summarizer reads it as a record
    rather than a conversation to continue. Tool results are cut to 2000 characters."""
    parts: list[str] = []
    for message in to_provider_messages(messages):
        role = message.get("role")
        content = message.get("content")
        if role == "user":
            text = content if isinstance(content, str) else _joined(content, "text")
            if text:
                parts.append(f"[User]: {text}")
        elif role == "assistant":
            thinking = _joined(content, "thinking", "\n")
            text = _joined(content, "text", "\n")
            calls = [
                f"{b.get('name')}("
                + ", ".join(f"{k}={_js(v)}" for k, v in (b.get("arguments") or {}).items())
                + ")"
                for b in content or ()
                if isinstance(b, Mapping) and b.get("type") == "toolCall"
            ]
            if thinking:
                parts.append(f"[Assistant thinking]: {thinking}")
            if text:
                parts.append(f"[Assistant]: {text}")
            if calls:
                parts.append(f"[Assistant tool calls]: {'; '.join(calls)}")
        elif role == "toolResult":
            text = _joined(content, "text")
            if text:
                if len(text) > TOOL_RESULT_MAX_CHARS:
                    more = len(text) - TOOL_RESULT_MAX_CHARS
                    text = f"{text[:TOOL_RESULT_MAX_CHARS]}\n\n[... {more} more characters cut]"
                parts.append(f"[Tool result]: {text}")
    return "\n\n".join(parts)


def _joined(content: Any, kind: str, separator: str = "") -> str:
    if not isinstance(content, Sequence) or isinstance(content, str):
        return ""
    key = "thinking" if kind == "thinking" else "text"
    return separator.join(
        str(b.get(key) or "") for b in content if isinstance(b, Mapping) and b.get("type") == kind
    )


def _js(value: Any) -> str:
    from projections.tokens import js_json_stringify

    return js_json_stringify(value)


def compaction_prompt(
    messages: Sequence[Mapping[str, Any]], previous_summary: str | None, instructions: str | None
) -> str:
    text = f"<conversation>\n{serialize_conversation(messages)}\n</conversation>\n\n"
    if previous_summary:
        text += f"<previous-summary>\n{previous_summary}\n</previous-summary>\n\n"
    text += UPDATE_PROMPT if previous_summary else COMPACTION_PROMPT
    if instructions:
        text += f"\n\nAlso focus on: {instructions}"
    return text


def turn_prefix_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    return f"<conversation>\n{serialize_conversation(messages)}\n</conversation>\n\n{TURN_PREFIX_PROMPT}"


# --- running the summarizer --------------------------------------------------------------


async def summarize(
    provider: Provider, config: AgentConfig, prompt: str, *, max_tokens: int
) -> str:
    """One request to the session's provider with the summary system prompt; its text."""
    params: JSON = {"stream": True}
    if config.kind == "openai":
        params["stream_options"] = {"include_usage": True}
    if config.kind in ("openai", "anthropic"):
        params["max_tokens"] = max_tokens
    payload = build_payload(
        provider=config.kind,
        model=config.model,
        params=params,
        system_prompt=SUMMARY_SYSTEM_PROMPT,
        tools=[],
        messages=[{"role": "user", "content": [{"type": "text", "text": prompt}]}],
    )
    assembler = Assembler()
    async for event in provider.stream(payload):
        assembler.add(event)
    if assembler.stop_reason == "error":
        raise ProviderError("the summary request failed")
    text = "\n".join(
        str(block.get("text") or "") for block in assembler.content() if block.get("type") == "text"
    )
    if not text.strip():
        raise ProviderError("the summary came back empty")
    return text


async def compaction_summary(
    provider: Provider, config: AgentConfig, prep: Preparation, instructions: str | None = None
) -> str:
    """The summary text of a compaction, file lists included (Pi's `compact`)."""
    history_budget = max(int(0.8 * config.reserve_tokens), 256)
    if prep.is_split_turn and prep.turn_prefix:
        history = (
            await summarize(
                provider,
                config,
                compaction_prompt(prep.messages, prep.previous_summary, instructions),
                max_tokens=history_budget,
            )
            if prep.messages
            else "No earlier history."
        )
        prefix = await summarize(
            provider,
            config,
            turn_prefix_prompt(prep.turn_prefix),
            max_tokens=max(int(0.5 * config.reserve_tokens), 256),
        )
        summary = f"{history}\n\n---\n\n**Turn Context (split turn):**\n\n{prefix}"
    else:
        summary = await summarize(
            provider,
            config,
            compaction_prompt(prep.messages, prep.previous_summary, instructions),
            max_tokens=history_budget,
        )
    return summary + prep.file_ops.tags()


def compaction_entry(prep: Preparation, summary: str, parent_id: str | None) -> JSON:
    read, modified = prep.file_ops.lists()
    return {
        "type": "compaction",
        "parentId": parent_id,
        "summary": summary,
        "firstKeptEntryId": prep.first_kept_entry_id,
        "tokensBefore": prep.tokens_before,
        "details": {"readFiles": read, "modifiedFiles": modified},
    }


# --- branch summaries (Pi's navigateTree with a summary) ---------------------------------


def entries_left_behind(
    old_path: Sequence[EntryRecord], target_path: Sequence[EntryRecord]
) -> list[EntryRecord]:
    """The entries from the old leaf back to (not including) the deepest common ancestor
    with the target, oldest first."""
    target_ids = {entry.id for entry in target_path}
    common = max((i for i, e in enumerate(old_path) if e.id in target_ids), default=-1)
    return list(old_path[common + 1 :])


def branch_messages(
    entries: Sequence[EntryRecord], token_budget: int
) -> tuple[list[Mapping[str, Any]], FileOps]:
    """Pi's prepareBranchEntries: newest first within the budget, tool results left out,
    compactions and branch summaries as their summaries."""
    file_ops = FileOps()
    for entry in entries:
        if entry.type == "branch_summary" and not entry.data.get("fromHook"):
            file_ops.add_details(entry.data.get("details"))
    messages: list[Mapping[str, Any]] = []
    total = 0
    for entry in reversed(entries):
        message = _branch_message(entry)
        if message is None:
            continue
        file_ops.add_message(message)
        tokens = estimate_tokens(message)
        if token_budget > 0 and total + tokens > token_budget:
            if entry.type in ("compaction", "branch_summary") and total < token_budget * 0.9:
                messages.insert(0, message)
                total += tokens
            break
        messages.insert(0, message)
        total += tokens
    return messages, file_ops


def _branch_message(entry: EntryRecord) -> Mapping[str, Any] | None:
    if entry.type == "compaction":
        return {
            "role": "compactionSummary",
            "summary": entry.data.get("summary") or "",
            "tokensBefore": entry.data.get("tokensBefore"),
        }
    if entry.type == "branch_summary":
        return {"role": "branchSummary", "summary": entry.data.get("summary") or ""}
    if entry.type == "message" and _role(entry) == "toolResult":
        return None
    return entry_message(entry)


async def branch_summary(
    provider: Provider,
    config: AgentConfig,
    entries: Sequence[EntryRecord],
    instructions: str | None = None,
) -> tuple[str, FileOps]:
    messages, file_ops = branch_messages(entries, config.context_window - config.reserve_tokens)
    if not messages:
        return "No content to summarize", file_ops
    prompt = (
        f"<conversation>\n{serialize_conversation(messages)}\n</conversation>\n\n{BRANCH_PROMPT}"
    )
    if instructions:
        prompt += f"\n\nAlso focus on: {instructions}"
    text = await summarize(provider, config, prompt, max_tokens=2048)
    return BRANCH_SUMMARY_PREAMBLE + text + file_ops.tags(), file_ops
