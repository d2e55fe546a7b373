"""The built-in offline model: deterministic, no network, no key. It is the default.

It reads the request body (Chat Completions shape, as `build_payload` makes it for the
`offline` provider) and streams an answer in small chunks, waiting
`STRAND_OFFLINE_CHUNK_DELAY_MS` milliseconds (default 15) before each, so that the UI
visibly streams.

Grammar, read from the last user message (case-insensitive, keywords as whole words), and
the call each phrase makes where the request offers Pi's tools (the default):

    read PATH             read   {"path": PATH}
    list files [in DIR]   ls     {"path": DIR, default "."}
    search for TEXT       grep   {"pattern": TEXT, "literal": true}; TEXT is "quoted",
                                 'quoted' or one word
    search for regex RE   grep   {"pattern": RE}; RE as TEXT (one word keeps its trailing
                                 punctuation)
    write PATH: TEXT      write  {"path": PATH, "content": TEXT}; TEXT runs to the end of
                                 the line, and a literal \\n in it writes a line break
    run COMMAND           bash   {"command": COMMAND}; COMMAND is the rest of the message
    run in background COMMAND
                          bash   {"command": COMMAND, "background": true}: a job
    job output ID         job_output {"job_id": ID, "wait": 5}
    list jobs             job_list {}
    kill job ID           job_kill {"job_id": ID}
    edit PATH: OLD => NEW edit   {"path": PATH, "edits": [{"oldText": OLD, "newText": NEW}]};
                                 OLD and NEW as TEXT, on one line
    delegate: TEXT        task   {"prompt": TEXT}; TEXT is the rest of the message, the
                                 subagent's own message (`runtime.subagents`)

Where the request offers Strand's older tools instead (sessions made with them), `read`,
`list files`, `write` and `search for` call `read_file`, `list_files`, `write_file` and the
older `grep` (`{"pattern": TEXT}`, `"regex": true` for a regex).

PATH and DIR are one word; trailing punctuation (.,;!?) is dropped. Several requests in one
message become parallel tool calls, in the order they appear. How it answers:

- a user message with requests: one sentence, then the tool calls (stopReason toolUse);
- tool results: one line per result (its first line, or the error), then it stops;
- a background job's notice (a user message that starts with `[job `): one line saying
  which job ended and how, with no tool call, whatever its output holds;
- a user message without requests: prose about the conversation so far (how many messages,
  how it began, tools used, summaries) and a reminder of the grammar;
- a summary request (a `<conversation>…</conversation>` block, as the compaction and
  branch-summary prompts send): a structured summary (Goal, Progress, Next Steps, Critical
  Context) built from the conversation's `[User]`, `[Assistant tool calls]` and
  `[Tool result]` lines.

`fault KIND [once]` makes the model fail the way a provider can (a cut or stalled stream,
HTTP 429/500/502/503/529, an unreadable stream, a plain body, tool-call arguments that are
not JSON, 401/403, a context-length error): see `runtime.offline_faults`.

Usage is a quarter of the characters read (the request's messages as JSON) and written;
the cost is 0. A request whose input estimate exceeds the preset's `context_window` fails
the way providers fail ("prompt is too long"), so overflow handling can be exercised.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.offline_faults import STALL_MAX_S, fault_stream, first_time, requested_fault
from runtime.providers.base import (
    ProviderError,
    StopUpdate,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    UsageUpdate,
)

DEFAULT_CHUNK_DELAY_MS = 15
# How a background job's notice begins (`runtime.jobs.NOTICE_PREFIX`).
JOB_NOTICE = "[job "

_REQUEST = re.compile(
    r"(?P<delegate>\bdelegate\s*:\s*(?P<dtext>\S[\s\S]*))"
    r"|(?P<bg>\brun\s+in\s+background\s+(?P<bcmd>\S[\s\S]*))"
    r"|(?P<run>\brun\s+(?P<cmd>\S[\s\S]*))"
    r"|(?P<jout>\bjob\s+output\s+(?P<joid>[\w-]+))"
    r"|(?P<jlist>\blist\s+jobs\b)"
    r"|(?P<jkill>\bkill\s+job\s+(?P<jkid>[\w-]+))"
    r"|(?P<edit>\bedit\s+(?P<epath>[^\s:]+)\s*:\s?(?P<eold>[^\n]*?)\s?=>\s?(?P<enew>[^\n]*))"
    r"|(?P<write>\bwrite\s+(?P<wpath>[^\s:]+)\s*:\s?(?P<wtext>[^\n]*))"
    r"|(?P<read>\bread\s+(?P<rpath>[^\s]+))"
    r"|(?P<list>\blist\s+files\b(?:\s+in\s+(?P<ldir>[^\s]+))?)"
    r"|(?P<search>\bsearch\s+for\s+(?P<sregex>regex\s+(?=\S))?"
    r"(?:\"(?P<sq>[^\"]+)\"|'(?P<ssq>[^']+)'|(?P<sw>[^\s]+)))",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Request:
    tool: str
    arguments: dict[str, Any]


def parse_requests(text: str) -> list[Request]:
    """The tool requests in a user message, in order (see the module doc)."""
    requests: list[Request] = []
    for match in _REQUEST.finditer(text):
        if match["delegate"]:
            requests.append(Request("task", {"prompt": match["dtext"].strip()}))
        elif match["bg"]:
            command = match["bcmd"].strip()
            requests.append(Request("bash", {"command": command, "background": True}))
        elif match["run"]:
            requests.append(Request("bash", {"command": match["cmd"].strip()}))
        elif match["jout"]:
            requests.append(Request("job_output", {"job_id": match["joid"], "wait": 5}))
        elif match["jlist"]:
            requests.append(Request("job_list", {}))
        elif match["jkill"]:
            requests.append(Request("job_kill", {"job_id": match["jkid"]}))
        elif match["edit"]:
            old, new = (match[g].replace("\\n", "\n") for g in ("eold", "enew"))
            edit = {"oldText": old, "newText": new}
            requests.append(Request("edit", {"path": _word(match["epath"]), "edits": [edit]}))
        elif match["write"]:
            content = match["wtext"].replace("\\n", "\n")
            requests.append(
                Request("write_file", {"path": _word(match["wpath"]), "content": content})
            )
        elif match["read"]:
            requests.append(Request("read_file", {"path": _word(match["rpath"])}))
        elif match["list"]:
            requests.append(Request("list_files", {"path": _word(match["ldir"] or "") or "."}))
        elif match["sregex"]:
            pattern = match["sq"] or match["ssq"] or match["sw"] or ""
            requests.append(Request("grep", {"pattern": pattern, "regex": True}))
        else:
            pattern = match["sq"] or match["ssq"] or _word(match["sw"] or "")
            requests.append(Request("grep", {"pattern": pattern}))
    return [r for r in requests if all(v != "" for k, v in r.arguments.items() if k != "content")]


def in_offered_names(requests: list[Request], offered: set[str]) -> list[Request]:
    """The requests in the vocabulary the request offers: a session with Pi's tools (`read`,
    `ls`, `write`, Pi's `grep`) gets the older phrases as calls of those."""
    if "read_file" in offered or "read" not in offered and "ls" not in offered:
        return requests
    out = []
    for r in requests:
        args = dict(r.arguments)
        if r.tool == "read_file":
            r = Request("read", args)
        elif r.tool == "list_files":
            r = Request("ls", args)
        elif r.tool == "write_file":
            r = Request("write", args)
        elif r.tool == "grep":
            regex = bool(args.pop("regex", False))
            r = Request("grep", args if regex else {**args, "literal": True})
        out.append(r)
    return out


def _offered(payload: Mapping[str, Any]) -> set[str]:
    """The tool names a request offers (Chat Completions' `{"function": {"name"}}` or a plain
    `{"name"}`)."""
    names: set[str] = set()
    for tool in payload.get("tools") or ():
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        spec: Mapping[str, Any] = function if isinstance(function, Mapping) else tool
        name = spec.get("name")
        if isinstance(name, str):
            names.add(name)
    return names


def _word(text: str) -> str:
    return text.rstrip(".,;!?")


class OfflineProvider:
    def __init__(
        self,
        *,
        context_window: int,
        chunk_delay_ms: float | None = None,
        stall_s: float = STALL_MAX_S,
    ) -> None:
        self.context_window = context_window
        self.stall_s = stall_s
        if chunk_delay_ms is None:
            raw = os.environ.get("STRAND_OFFLINE_CHUNK_DELAY_MS", str(DEFAULT_CHUNK_DELAY_MS))
            chunk_delay_ms = float(raw or 0)
        self.delay = max(chunk_delay_ms, 0.0) / 1000

    async def stream(self, payload: Mapping[str, Any]) -> AsyncIterator[StreamEvent]:
        messages = list(payload.get("messages") or [])
        read_chars = len(json.dumps(messages, ensure_ascii=False))
        input_tokens = math.ceil(read_chars / 4)
        if input_tokens > self.context_window:
            raise ProviderError(
                f"prompt is too long: {input_tokens} tokens > {self.context_window} maximum",
                status=400,
                overflow=True,
            )
        fault = _fault_asked(messages)
        if fault is not None and (not fault[1] or first_time(fault[0], payload)):
            async for event in fault_stream(fault[0], stall_s=self.stall_s, pause=self._pause):
                yield event
            return
        text, calls = answer(messages, _offered(payload))
        written = len(text)
        yield UsageUpdate(input=input_tokens, output=0, cache_read=0, cache_write=0)
        for chunk in _chunks(text):
            await self._pause()
            yield TextDelta("text", chunk)
        for index, call in enumerate(calls):
            raw = json.dumps(call.arguments, ensure_ascii=False)
            written += len(call.tool) + len(raw)
            call_id = _call_id(messages, index, call)
            await self._pause()
            half = len(raw) // 2
            yield ToolCallDelta(
                f"tool-{index}", call_id=call_id, name=call.tool, arguments=raw[:half]
            )
            await self._pause()
            yield ToolCallDelta(f"tool-{index}", arguments=raw[half:])
        yield UsageUpdate(output=math.ceil(written / 4))
        yield StopUpdate("toolUse" if calls else "stop")

    async def _pause(self) -> None:
        # Always yield to the loop, so that a cancel can land between chunks.
        await asyncio.sleep(self.delay)


def _fault_asked(messages: Sequence[Mapping[str, Any]]) -> tuple[str, bool] | None:
    """The fault the last user message asks for (`runtime.offline_faults`), if any."""
    last = messages[-1] if messages else {}
    text = _text(last.get("content")) if last.get("role") == "user" else ""
    if "<conversation>" in text:
        return None  # a summary request quotes the conversation, faults and all
    return requested_fault(text)


def _chunks(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)


def _call_id(messages: Sequence[Any], index: int, call: Request) -> str:
    # Deterministic, yet unique within a session: the whole conversation so far goes into the
    # id, so the same request after a compaction (same message count) gets a new one.
    said = [(m.get("role"), _text(m.get("content"))) for m in messages]
    seed = json.dumps([said, index, call.tool, call.arguments], sort_keys=True, default=str)
    return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:16]


# --- answers -----------------------------------------------------------------------------


def answer(
    messages: Sequence[Mapping[str, Any]], offered: set[str] | None = None
) -> tuple[str, list[Request]]:
    """What the model says to a request, and the tool calls it makes (in the vocabulary of
    the tools `offered`, when given)."""
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return _report(messages), []
    text = _text(last.get("content")) if last.get("role") == "user" else ""
    if "<conversation>" in text and "</conversation>" in text:
        return summarize(text), []
    if text.startswith(JOB_NOTICE):
        first = text.splitlines()[0][len(JOB_NOTICE) :].rstrip("]")
        return f"Noted: background job {first}.", []
    requests = parse_requests(text)
    if requests and offered is not None:
        requests = in_offered_names(requests, offered)
    if requests:
        names = ", ".join(f"{r.tool}({_brief(r.arguments)})" for r in requests)
        return f"On it: {names}.", requests
    return _prose(messages, text), []


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return ""


def _brief(arguments: Mapping[str, Any]) -> str:
    value = (
        arguments.get("path")
        or arguments.get("pattern")
        or arguments.get("command")
        or arguments.get("prompt")
        or ""
    )
    return _clip(str(value), 80)


def _report(messages: Sequence[Mapping[str, Any]]) -> str:
    results: list[Mapping[str, Any]] = []
    index = len(messages) - 1
    while index >= 0 and messages[index].get("role") == "tool":
        results.insert(0, messages[index])
        index -= 1
    names: dict[str, str] = {}
    if index >= 0 and messages[index].get("role") == "assistant":
        for call in messages[index].get("tool_calls") or ():
            function = call.get("function") or {}
            names[str(call.get("id"))] = f"{function.get('name')} {_args_brief(function)}"
    lines = ["Here is what I found:"]
    for result in results:
        body = _text(result.get("content")).strip()
        first = body.splitlines()[0] if body else "(empty)"
        if len(first) > 160:
            first = first[:157] + "..."
        label = names.get(str(result.get("tool_call_id")), "tool").strip()
        lines.append(f"- {label}: {first}")
    return "\n".join(lines)


def _args_brief(function: Mapping[str, Any]) -> str:
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        return ""
    return _brief(arguments) if isinstance(arguments, Mapping) else ""


def _prose(messages: Sequence[Mapping[str, Any]], text: str) -> str:
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    asked = [u for u in users if not u.startswith(_SUMMARY_PREFIXES)]
    tools = sum(1 for m in messages if m.get("role") == "tool")
    summaries = sum(1 for u in users if u.startswith(_SUMMARY_PREFIXES))
    said = _clip(text.strip(), 200) or "nothing"
    parts = [f"You said: “{said}”."]
    if len(asked) > 1:
        parts.append(
            f"That is message {len(asked)} from you here; the conversation began with "
            f"“{_clip(asked[0].strip(), 120)}”."
        )
    else:
        parts.append("That is the first thing you asked me here.")
    if tools:
        parts.append(f"So far I have used tools {tools} time{'s' if tools != 1 else ''}.")
    if summaries:
        parts.append("Part of the earlier conversation reaches me as a summary.")
    parts.append(
        "I am Strand's offline model: I can read, list, search, write and edit files in "
        "the working directory and run commands there. Try “read README.md”, “list files”, "
        "“search for TODO”, “write notes.txt: hello”, “edit notes.txt: hello => hi” or "
        "“run ls -la”."
    )
    return " ".join(parts)


# The preambles `projections.context` puts before compaction and branch summaries.
_SUMMARY_PREFIXES = ("Earlier parts of this conversation", "The conversation came back here")


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- summaries ---------------------------------------------------------------------------

_LINE = re.compile(r"^\[(User|Assistant|Assistant thinking|Assistant tool calls|Tool result)\]: ?")


def summarize(prompt: str) -> str:
    """A structured summary of the `<conversation>` block of a summary request."""
    inside = prompt.split("<conversation>", 1)[1].split("</conversation>", 1)[0]
    users: list[str] = []
    calls: list[str] = []
    results = 0
    replies = 0
    current: str | None = None
    for line in inside.splitlines():
        match = _LINE.match(line)
        if match:
            current = match.group(1)
            rest = line[match.end() :]
            if current == "User":
                users.append(rest)
            elif current == "Assistant tool calls":
                calls.extend(call.strip() for call in rest.split("; ") if call.strip())
            elif current == "Tool result":
                results += 1
            elif current == "Assistant":
                replies += 1
        elif current == "User" and users:
            users[-1] += "\n" + line
    previous = "<previous-summary>" in prompt
    goal = _clip(users[0], 200) if users else "(no request in this part)"
    lines = ["## Goal", f"- {goal}", "", "## Progress", "### Done"]
    lines += [f"- [x] {_clip(call, 160)}" for call in calls] or ["- (no tool calls)"]
    lines += ["", "### In Progress"]
    lines.append(f"- [ ] {_clip(users[-1], 200)}" if users else "- (nothing)")
    lines += ["", "## Next Steps"]
    lines.append(f"1. Continue from: {_clip(users[-1], 200)}" if users else "1. Wait for the user.")
    lines += [
        "",
        "## Critical Context",
        f"- {len(users)} user message(s), {replies} assistant repl(ies), {results} tool "
        f"result(s) summarized{'; builds on the previous summary' if previous else ''}.",
    ]
    return "\n".join(lines)
