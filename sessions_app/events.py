"""The event vocabulary: every event type, its schema version, its upcasters, one loader.

An event is a past-tense fact about a session. Each type is one small pydantic model that
validates the event's `data`. Stored events are never rewritten: an event written under an
older schema version is upcast on read by `load_event`, the one place that applies the chain.

Entry events carry a whole Pi v3 entry under `data["entry"]` (type, id, parentId, timestamp
and the type's own fields), exactly as Pi would write it to its file. The store fills `id`,
`parentId` and `timestamp` when the writer leaves them out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sessions_app.limits import ENTRY_ID_MAX

JSON = dict[str, Any]
ENTRY_KEY_MAX = ENTRY_ID_MAX
JOB_ID_MAX = 40  # a background job's id (`bash-1`, …)


class EventError(ValueError):
    """An event that cannot be accepted or loaded; the message says why."""


class UnknownEventType(EventError):
    pass


class EventData(BaseModel):
    """Base of every event's data. Unknown keys are kept: newer writers may add fields."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: ClassVar[str]
    version: ClassVar[int] = 1
    # The Pi entry type this event adds to the tree, if it adds one.
    entry_type: ClassVar[str | None] = None


# --- session ---------------------------------------------------------------------------


class SessionCreated(EventData):
    type = "session/created"
    title: str = ""
    cwd: str = ""
    preset: JSON = Field(default_factory=dict)
    # observed:otlp: recorded from another agent's OpenTelemetry GenAI spans
    # (`services.otel_ingest`); nothing runs in it, its facts say what that agent did.
    source: Literal["new", "fork", "import:pi", "subagent", "observed:otlp"] = "new"
    parent_session: str | None = None
    fork_point: str | None = None
    pi_header: JSON | None = None
    # A child session started by a parent's `task` call (see "subagents" below).
    origin: Literal["subagent"] | None = None
    delegation_depth: int = Field(default=0, ge=0)


class SessionRenamed(EventData):
    type = "session/renamed"
    title: str = Field(max_length=500)


# --- entries -----------------------------------------------------------------------------


class EntryEvent(EventData):
    """An event that adds exactly one entry to the tree."""

    entry: JSON
    # Set only by Pi import: the entry's parentId names no entry of the session (Pi keeps
    # such entries as roots of their own path, and so do we).
    orphan: bool = False
    roles: ClassVar[tuple[str, ...] | None] = None

    @field_validator("entry")
    @classmethod
    def _entry_shape(cls, entry: JSON) -> JSON:
        if entry.get("type") != cls.entry_type:
            raise ValueError(f"entry type must be {cls.entry_type!r}, got {entry.get('type')!r}")
        for key in ("id", "parentId", "timestamp"):
            if key in entry and entry[key] is not None and not isinstance(entry[key], str):
                raise ValueError(f"entry {key} must be a string")
            # Pi's ids are 8 hex characters and its timestamps ISO strings; the store keeps
            # each in a column of at most 64.
            if isinstance(entry.get(key), str) and len(entry[key]) > ENTRY_KEY_MAX:
                raise ValueError(f"entry {key} is longer than {ENTRY_KEY_MAX} characters")
        if "id" in entry and not entry["id"]:
            raise ValueError("entry id must not be empty")
        if cls.roles is not None:
            message = entry.get("message")
            if not isinstance(message, dict):
                raise ValueError("a message entry needs a 'message' object")
            if message.get("role") not in cls.roles:
                raise ValueError(
                    f"message role must be one of {list(cls.roles)}, got {message.get('role')!r}"
                )
        return entry


class UserMessage(EntryEvent):
    type = "user/message"
    entry_type = "message"
    roles = ("user",)


class AssistantMessage(EntryEvent):
    type = "assistant/message"
    entry_type = "message"
    roles = ("assistant",)
    # Runtime measurements that are not part of Pi's message: time to first token and the
    # whole model call, in milliseconds.
    timing: JSON = Field(default_factory=dict)
    # On a reply with stopReason "error" from a failed model request: the fault (kind,
    # HTTP status, attempts, what the provider said; see `runtime.faults`). Absent on
    # replies written before faults were recorded, as on every other reply.
    fault: JSON | None = None


class ToolResult(EntryEvent):
    type = "tool/result"
    entry_type = "message"
    roles = ("toolResult",)
    error_code: str | None = None


class OtherMessage(EntryEvent):
    """Message entries of Pi's other roles: bashExecution, custom (and v2's hookMessage),
    and Pi 1.6's system messages (the prompt's sections and the tools, set or patched)."""

    type = "entry/message"
    entry_type = "message"
    roles = ("bashExecution", "custom", "hookMessage", "system")

    @field_validator("entry")
    @classmethod
    def _system_shape(cls, entry: JSON) -> JSON:
        message = entry["message"]
        if message.get("role") != "system":
            return entry
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise ValueError("a system message's content must be a string or a list of blocks")
        sections = message.get("sections")
        if sections is not None and (
            not isinstance(sections, dict)
            or not all(v is None or isinstance(v, str) for v in sections.values())
        ):
            raise ValueError("a system message's sections must map names to text or null")
        for key in ("toolsAdded", "toolsRemoved"):
            tools = message.get(key)
            if tools is not None and not (
                isinstance(tools, list)
                and all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools)
            ):
                raise ValueError(f"a system message's {key} must be a list of tools with names")
        return entry


def _entry_event(name: str, pi_type: str) -> type[EntryEvent]:
    return type(name, (EntryEvent,), {"type": f"entry/{pi_type}", "entry_type": pi_type})


ModelChange = _entry_event("ModelChange", "model_change")
ThinkingLevelChange = _entry_event("ThinkingLevelChange", "thinking_level_change")


class Compaction(EntryEvent):
    """A compaction. Since Pi 1.6 it may carry `systemMessage`, the prompt and tools replayed
    up to it, which leads every context built after it."""

    type = "entry/compaction"
    entry_type = "compaction"

    @field_validator("entry")
    @classmethod
    def _checkpoint_shape(cls, entry: JSON) -> JSON:
        checkpoint = entry.get("systemMessage")
        if checkpoint is not None and not (
            isinstance(checkpoint, dict) and checkpoint.get("role") == "system"
        ):
            raise ValueError('a compaction\'s systemMessage must be a message of role "system"')
        return entry


BranchSummary = _entry_event("BranchSummary", "branch_summary")
CustomEntry = _entry_event("CustomEntry", "custom")
CustomMessage = _entry_event("CustomMessage", "custom_message")
Label = _entry_event("Label", "label")
SessionInfo = _entry_event("SessionInfo", "session_info")


class UsageEntry(EntryEvent):
    """Pi 1.6: model usage outside the context (cache warming, say). `kind` is any string:
    kinds Pi does not define yet are usage all the same."""

    type = "entry/usage"
    entry_type = "usage"

    @field_validator("entry")
    @classmethod
    def _usage_shape(cls, entry: JSON) -> JSON:
        if not isinstance(entry.get("kind"), str):
            raise ValueError("a usage entry needs a string kind")
        if not isinstance(entry.get("usage"), dict):
            raise ValueError("a usage entry needs a usage object")
        return entry


class ContextEdit(EntryEvent):
    """Pi 1.6: an edit of an earlier message in later contexts only: `replacement` null
    omits the target, `{content}` replaces its content. Pi itself would fail on any other
    replacement, so it is refused here."""

    type = "entry/context_edit"
    entry_type = "context_edit"

    @field_validator("entry")
    @classmethod
    def _edit_shape(cls, entry: JSON) -> JSON:
        if not isinstance(entry.get("targetId"), str) or not entry["targetId"]:
            raise ValueError("a context edit needs a targetId")
        if "replacement" not in entry:
            raise ValueError("a context edit needs a replacement (null to omit the target)")
        replacement = entry["replacement"]
        if replacement is not None and not (
            isinstance(replacement, dict) and isinstance(replacement.get("content"), str | list)
        ):
            raise ValueError(
                "a context edit's replacement must be null or {content: text or blocks}"
            )
        return entry


# --- the leaf ----------------------------------------------------------------------------


class LeafMoved(EventData):
    type = "leaf/moved"
    # `from` is a Python keyword; the stored key is still "from".
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)
    from_: str | None = Field(default=None, alias="from")
    to: str | None
    reason: Literal["navigate", "fork", "retry", "replay", "import"] = "navigate"


# --- turns and steps ---------------------------------------------------------------------


class TurnStart(EventData):
    type = "turn/start"
    turn: int = Field(ge=0)
    # retry: the turn asks again from where a failed reply was asked (no new user message;
    # `retry_of` is the failed assistant message's entry id).
    # replay: the turn sends a recorded request again (`replay_of`, the seq of its
    # `request/sent`) from that request's leaf; the replays of one action run one after
    # another and share `replay_group` (the first one's turn) and `replay_count`.
    # job: the turn starts because a background job ended while no turn ran; it claims
    # the job's notice from the inbox, as a follow-up claims its message.
    trigger: Literal["message", "follow_up", "retry", "replay", "job"] = "message"
    retry_of: str | None = Field(default=None, max_length=ENTRY_KEY_MAX)
    replay_of: int | None = Field(default=None, ge=0)
    replay_group: int | None = Field(default=None, ge=0)
    replay_count: int | None = Field(default=None, ge=1)


class TurnEnd(EventData):
    type = "turn/end"
    turn: int = Field(ge=0)
    # approval_timeout: no decision on an approval came within STRAND_APPROVAL_TIMEOUT_S.
    reason: Literal[
        "completed", "aborted", "error", "max_tokens", "interrupted", "approval_timeout"
    ]
    error: str | None = None


class TurnObserved(EventData):
    """In an observed session: the agent span of a turn that arrived after the turn was
    closed (a span of another trace closed it first). What that span says of the turn —
    its status, and under `observed` its end, ids and unmapped attributes — is the turn's,
    as if it had come in time; the turn is not closed again."""

    type = "turn/observed"
    turn: int = Field(ge=0)
    reason: Literal["completed", "error"]
    error: str | None = None


class StepStart(EventData):
    type = "step/start"
    turn: int = Field(ge=0)
    step: int = Field(ge=0)


class StepEnd(EventData):
    type = "step/end"
    turn: int = Field(ge=0)
    step: int = Field(ge=0)
    reason: str = "completed"


# --- model requests ----------------------------------------------------------------------


class RequestHeader(EventData):
    """The settings of the requests that follow. Reason `replay`: the header of a replay's
    requests (`runtime.replay`), naming the replayed request (`replay_of`, the seq of its
    `request/sent`), the preset it ran with and the fields the user overrode (`params.NAME`,
    `system_prompt`, `thinking_level`). Headers written before replays lack those fields
    and mean what their defaults say, so no upcaster is needed."""

    type = "request/header"
    reason: Literal["initial", "resume", "change", "replay"]
    provider: str
    model: str
    params: JSON = Field(default_factory=dict)
    system_prompt: str = ""
    tools: list[JSON] = Field(default_factory=list)
    thinking_level: str = "off"
    replay_of: int | None = Field(default=None, ge=0)
    replay_preset: str | None = Field(default=None, max_length=200)
    overrides: list[str] = Field(default_factory=list)


class RequestSent(EventData):
    """The manifest of one model request. Version 2: a failed request may be tried again
    within its step; each try is a `request/sent` of its own, with its `attempt` (1 for
    the first) and, from the second on, `previous_fault`: what ended the attempt before
    (kind, HTTP status, message, how long it ran and waited; see `runtime.faults`)."""

    type = "request/sent"
    version = 2
    header_seq: int = Field(ge=0)
    leaf_entry_id: str | None
    payload_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    token_estimate: int = Field(ge=0)
    attempt: int = Field(default=1, ge=1)
    previous_fault: JSON | None = None


# --- tools and approvals -----------------------------------------------------------------


class ToolCall(EventData):
    type = "tool/call"
    call_id: str
    tool: str
    arguments: str = ""


class ApprovalAsked(EventData):
    type = "approval/asked"
    approval_id: str
    tool: str
    call_id: str
    arguments: str = ""


class ApprovalDecided(EventData):
    type = "approval/decided"
    approval_id: str
    outcome: Literal["allowed", "rejected", "cancelled"]
    by: str | None = None


# --- input during a turn -----------------------------------------------------------------


class InboxQueued(EventData):
    type = "inbox/queued"
    inbox_id: str
    target: Literal["next_step", "next_turn"]
    text: str
    # Set when the input is a background job's notice (`job/ended`), not the user's.
    job_id: str | None = Field(default=None, max_length=JOB_ID_MAX)


class InboxClaimed(EventData):
    type = "inbox/claimed"
    inbox_id: str
    # `discarded`: the turn it waited for was cancelled (or failed), so it was never sent.
    outcome: Literal["delivered", "discarded"] = "delivered"


# --- subagents ----------------------------------------------------------------------------
# A parent's `task` call starts a child session (`session/created` with origin "subagent"):
# the parent records which child its call started, the child what it was started for.


class SubagentStarted(EventData):
    """In the parent, inside the step of the `task` call: the child session it started."""

    type = "subagent/started"
    call_id: str = Field(max_length=200)
    child_session: str = Field(max_length=64)
    prompt: str = ""
    tools: list[str] = Field(default_factory=list)
    delegation_depth: int = Field(default=1, ge=1)


class SubagentDescriptor(EventData):
    """In the child, once, before its first turn: who started it and with what."""

    type = "subagent/descriptor"
    parent_session: str = Field(max_length=64)
    parent_call_id: str = Field(max_length=200)
    parent_turn: int | None = None
    fork_point: str | None = Field(default=None, max_length=ENTRY_KEY_MAX)
    prompt: str = ""
    preset_name: str = ""
    tools: list[str] = Field(default_factory=list)
    delegation_depth: int = Field(default=1, ge=1)


# --- background jobs ---------------------------------------------------------------------
# A `bash` call with `background: true` starts a job and answers at once with its id; the
# job runs on in the sandbox, and its end is a fact of its own, whatever ended it: the
# command exiting, `job_kill`, its wall time, or (written by recovery) the process that ran
# it dying. A job has exactly one `job/started` and at most one `job/ended`.


class JobStarted(EventData):
    type = "job/started"
    job_id: str = Field(max_length=JOB_ID_MAX)
    command: str
    call_id: str = Field(max_length=200)
    # The turn whose tool call started it (also the event's turn).
    turn: int | None = Field(default=None, ge=0)
    started: str  # ISO 8601, when the command was started
    wall_s: float = Field(gt=0)  # the longest it may run
    output_max_bytes: int = Field(ge=0)  # the output it keeps (head and tail)


class JobEnded(EventData):
    """How a job ended. `exited`: the command ended by itself (`exit_code`, or `signal`
    when a signal killed it); `killed`: `job_kill` (or the run that owned it stopping);
    `timeout`: its wall time passed; `output`: it wrote past the output cap and was
    stopped; `lost`: the process running it died (written by recovery, with no output).
    `output` keeps its head and tail; `truncated` says bytes were left out between."""

    type = "job/ended"
    job_id: str = Field(max_length=JOB_ID_MAX)
    reason: Literal["exited", "killed", "timeout", "output", "lost"]
    exit_code: int | None = None
    signal: int | None = None
    output: str = ""
    output_bytes: int = Field(default=0, ge=0)
    truncated: bool = False
    duration_s: float | None = Field(default=None, ge=0)
    # The turn the job was started in (the trace draws the job there).
    turn: int | None = Field(default=None, ge=0)


# --- the workspace -----------------------------------------------------------------------

SHA256 = r"^[0-9a-f]{64}$"
# A workspace path: relative, "/"-separated, no "." or ".." part, no NUL (checked below).
WORKSPACE_PATH_MAX = 4096


class FileState(BaseModel):
    """One file of a workspace: its content's hash (the key of its blob), size in bytes,
    permission bits, and the modification time the folder had when it was recorded (a
    restore sets it back, so a later scan can skip files whose size and time agree)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    sha256: str = Field(pattern=SHA256)
    size: int = Field(ge=0)
    mode: int = Field(default=0o644, ge=0, le=0o7777)
    mtime_ns: int = Field(default=0, ge=0)


def _check_workspace_path(path: str) -> str:
    parts = path.split("/")
    if (
        not path
        or len(path) > WORKSPACE_PATH_MAX
        or "\x00" in path
        or path.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise ValueError(f"{path[:200]!r} is not a relative workspace path")
    return path


class WorkspaceSnapshot(EventData):
    """What changed in the session's folder (DESIGN §11), recorded at entry `at` (None: at
    the root, before every entry, so on every path). `files` maps each path written to its
    new state, `deleted` lists the paths removed. A `full` snapshot is also a manifest
    checkpoint: `manifest` holds the whole workspace at `at` after its changes, so a fold
    may start from it (`projections.workspace`).

    Reasons: `tool` (a tool call changed files; `call_id` names it), `outside` (changed by
    hand since the last snapshot, found before a turn), `restore` (the folder was brought
    to the workspace of `at`, the entry a turn starts from; it changes no file of the fold),
    `fork` (a forked session starts from its fork point's files), `upload`, `recovery`,
    `job` (a background job changed files; `call_id` names the call that started it and
    `job_id` the job)."""

    type = "workspace/snapshot"
    at: str | None = Field(default=None, max_length=ENTRY_KEY_MAX)
    reason: Literal["tool", "outside", "restore", "fork", "upload", "recovery", "job"]
    files: dict[str, FileState] = Field(default_factory=dict)
    deleted: list[str] = Field(default_factory=list)
    full: bool = False
    manifest: dict[str, FileState] | None = None
    call_id: str | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _checkpoint(self) -> WorkspaceSnapshot:
        if self.full != (self.manifest is not None):
            raise ValueError("a full snapshot carries its manifest, and only a full one does")
        return self

    @field_validator("files", "manifest")
    @classmethod
    def _file_paths(cls, files: dict[str, FileState] | None) -> dict[str, FileState] | None:
        for path in files or {}:
            _check_workspace_path(path)
        return files

    @field_validator("deleted")
    @classmethod
    def _deleted_paths(cls, deleted: list[str]) -> list[str]:
        for path in deleted:
            _check_workspace_path(path)
        return deleted


EVENT_TYPES: dict[str, type[EventData]] = {
    cls.type: cls
    for cls in (
        SessionCreated,
        SessionRenamed,
        UserMessage,
        AssistantMessage,
        ToolResult,
        OtherMessage,
        ModelChange,
        ThinkingLevelChange,
        Compaction,
        BranchSummary,
        CustomEntry,
        CustomMessage,
        Label,
        SessionInfo,
        UsageEntry,
        ContextEdit,
        LeafMoved,
        TurnStart,
        TurnEnd,
        TurnObserved,
        StepStart,
        StepEnd,
        RequestHeader,
        RequestSent,
        ToolCall,
        ApprovalAsked,
        ApprovalDecided,
        InboxQueued,
        InboxClaimed,
        WorkspaceSnapshot,
        SubagentStarted,
        SubagentDescriptor,
        JobStarted,
        JobEnded,
    )
}

# Pi entry type (and message role) → the event type that adds such an entry.
_MESSAGE_EVENT_BY_ROLE = {
    "user": "user/message",
    "assistant": "assistant/message",
    "toolResult": "tool/result",
}


def event_type_for_entry(entry: Mapping[str, Any]) -> str:
    """The event type that adds `entry` (a Pi v3 entry) to a session."""
    pi_type = entry.get("type")
    if pi_type == "message":
        message = entry.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        return _MESSAGE_EVENT_BY_ROLE.get(str(role), "entry/message")
    name = f"entry/{pi_type}"
    if name not in EVENT_TYPES:
        raise UnknownEventType(f"no event adds Pi entries of type {pi_type!r}")
    return name


# --- upcasting ---------------------------------------------------------------------------

Upcaster = Callable[[JSON], JSON]


def _request_sent_v1(data: JSON) -> JSON:
    # Before retries were recorded every request was its step's first (and only) attempt.
    return {**data, "attempt": 1, "previous_fault": None}


# (type, from_version) → function returning the data at from_version + 1. A change to a
# schema adds one function here and bumps the class version. Fields added with a default
# that old events already mean (a reply without `fault`) need none.
UPCASTERS: dict[tuple[str, int], Upcaster] = {
    ("request/sent", 1): _request_sent_v1,
}


def upcast(event_type: str, version: int, data: JSON) -> tuple[int, JSON]:
    cls = EVENT_TYPES.get(event_type)
    if cls is None:
        return version, data
    while version < cls.version:
        step = UPCASTERS.get((event_type, version))
        if step is None:
            raise EventError(f"{event_type}: no upcaster from schema version {version}")
        data = step(data)
        version += 1
    return version, data


def load_event(
    event_type: str, version: int, data: JSON, *, ignorable: bool = False
) -> JSON | None:
    """Bring stored data to the current schema version.

    Returns None for an unknown type that was written as ignorable (a newer writer's
    optional fact). An unknown type that is not ignorable is an error, never silently lost.
    """
    if event_type not in EVENT_TYPES:
        if ignorable:
            return None
        raise UnknownEventType(f"unknown event type {event_type!r} (not ignorable)")
    if version > EVENT_TYPES[event_type].version:
        raise EventError(
            f"{event_type}: schema version {version} is newer than this code knows "
            f"({EVENT_TYPES[event_type].version})"
        )
    return upcast(event_type, version, data)[1]


def validate_event(event_type: str, data: Any, *, ignorable: bool = False) -> EventData | None:
    """Validate an event about to be written. Returns the parsed model (None if ignorable
    and unknown). Raises EventError with a readable message."""
    cls = EVENT_TYPES.get(event_type)
    if cls is None:
        if ignorable:
            if not isinstance(data, dict):
                raise EventError(f"{event_type}: data must be a JSON object")
            return None
        raise UnknownEventType(f"unknown event type {event_type!r}")
    if not isinstance(data, dict):
        raise EventError(f"{event_type}: data must be a JSON object")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "data"
        raise EventError(f"{event_type}: {where}: {first['msg']}") from None
