"""The API's request and response shapes: `<Thing>In` and `<Thing>Out`.

Views come from `projections/` as frozen dataclasses; `plain` turns them into JSON values
(dataclasses → objects with their `kind`, tuples → arrays, datetimes → ISO 8601). Content
inside them (messages, tool arguments, event data) is passed through as JSON data, never as
markup: the API renders every string JSON-escaped (see `SafeJSONRenderer` in `api/base.py`).

Size limits on text fields live here, read from settings with defaults, so that a too-long
value is refused with 422 before any service runs.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from django.conf import settings
from ninja import Field, Schema
from ninja.schema import DjangoGetter
from pydantic import model_validator

from projections.compare import DEFAULT_COMPARE_ROWS as COMPARE_ROWS
from projections.trace import DEFAULT_PAGE_TURNS
from sessions_app.limits import ENTRY_ID_MAX, SEQ_MAX
from sessions_app.presets import preset_name_of
from sessions_app.selectors.pages import CHAT_ENTRIES
from sessions_app.selectors.tree import TREE_ROWS
from sessions_app.workspaces import display_cwd

# --- limits --------------------------------------------------------------------------------

TITLE_MAX = 500  # Session.title
NAME_MAX = 100
CWD_MAX = 4096  # Session.cwd
EVENT_TYPE_MAX = 64  # Event.type
MESSAGE_MAX: int = getattr(settings, "STRAND_MAX_MESSAGE_CHARS", 100_000)
INSTRUCTIONS_MAX: int = getattr(settings, "STRAND_MAX_INSTRUCTIONS_CHARS", 10_000)
QUERY_MAX = 200
PAGE_MAX = 200
EVENTS_PAGE_MAX = 1000
ENTRIES_PAGE_MAX = 5000
PATH_PAGE_MAX = 2000  # entries of a path window (the chat's, the entries')
TREE_PAGE_MAX = 2000  # rows of the tree in one answer
CURSOR_MAX = 400
TREE_LABEL_MAX = 200  # characters of a label in a tree row (an imported label can be longer)


def plain(value: Any) -> Any:
    """A projection's view as JSON values.

    Dataclass fields become keys; a class-level `kind` (the chat items' discriminator) is
    added; read-only properties that views expose for convenience are not included, except
    the few named in `_PROPERTIES`.
    """
    kind = type(value)
    # The common cases first, by exact type: a trace window is tens of thousands of values.
    if kind in _AS_IS:
        return value
    if kind is list or kind is tuple:
        return [plain(v) for v in value]
    if kind is dict:
        return {str(k): plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        discriminator, names = _shape(kind)
        out: dict[str, Any] = {} if discriminator is None else {"kind": discriminator}
        for name in names:
            out[name] = plain(getattr(value, name))
        return out
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(plain(v) for v in value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return plain(value.value)
    return value


_AS_IS = frozenset({str, int, float, bool, type(None)})


_SHAPES: dict[type, tuple[str | None, tuple[str, ...]]] = {}


def _shape(cls: type) -> tuple[str | None, tuple[str, ...]]:
    """A dataclass's `kind` and the names `plain` writes: its public fields, then the
    properties named in `_PROPERTIES`."""
    found = _SHAPES.get(cls)
    if found is None:
        kind = getattr(cls, "kind", None)
        names = [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]
        names += _PROPERTIES.get(cls.__name__, ())
        found = _SHAPES[cls] = (kind if isinstance(kind, str) else None), tuple(names)
    return found


_PROPERTIES: dict[str, tuple[str, ...]] = {
    "TraceSpan": ("duration_ms",),
    "BashItem": ("is_error",),
    "ImageRef": (),
}


# --- errors --------------------------------------------------------------------------------


class ErrorOut(Schema):
    """Every refusal: a stable `error` code and a readable `detail`."""

    error: str = Field(..., examples=["not_found"])
    detail: str
    current_seq: int | None = Field(None, description="409 conflict: the session's seq now")
    retry_after: int | None = Field(None, description="429: seconds until the next window")
    errors: list[dict[str, Any]] | None = Field(None, description="422: each invalid field")
    quota: str | None = Field(None, description="413 quota_exceeded: the setting that sets it")
    quota_bytes: int | None = Field(None, description="413 quota_exceeded: the quota in bytes")
    used_bytes: int | None = Field(
        None, description="413 quota_exceeded: the bytes the owner's sessions hold"
    )


# --- accounts ------------------------------------------------------------------------------


class MeOut(Schema):
    username: str
    is_staff: bool
    auth: Literal["session", "token"]


class TokenIn(Schema):
    name: str = Field(..., min_length=1, max_length=NAME_MAX)


class TokenOut(Schema):
    id: int
    name: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class TokenCreatedOut(TokenOut):
    token: str = Field(..., description="The token itself. It is shown this once only.")


# --- share links -------------------------------------------------------------------------


class ShareIn(Schema):
    branch: str | None = Field(
        None,
        max_length=ENTRY_ID_MAX,
        description="An entry: the guest sees the path to it and nothing off it",
    )
    expires_in_s: int = Field(
        7 * 86400,
        ge=60,
        le=365 * 86400,
        description="Seconds until the link expires",
    )
    redact_tool_outputs: bool = False
    redact_file_contents: bool = False
    redact_system_prompt: bool = False
    redact_patterns: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="RE2 regular expressions; matching text shows as [redacted]",
    )


class ShareOut(Schema):
    id: int
    branch: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    redact_tool_outputs: bool
    redact_file_contents: bool
    redact_system_prompt: bool
    redact_patterns: list[str]
    view_count: int


class ShareCreatedOut(ShareOut):
    token: str = Field(..., description="The link's token. It is shown this once only.")
    url: str = Field(..., description="The guest page: /s/<token>/")


# --- sessions ------------------------------------------------------------------------------


class SessionIn(Schema):
    title: str = Field("", max_length=TITLE_MAX)
    preset: str | None = Field(
        None, max_length=NAME_MAX, description="A preset name offered by the server"
    )
    cwd: str = Field(
        "",
        max_length=CWD_MAX,
        description="Working directory: `~` (your own folder, the default), `~/project` or "
        "`project` (a folder in it), `@label/…` (a folder an operator granted you)",
    )


class SessionFilterIn(Schema):
    q: str | None = Field(None, max_length=QUERY_MAX, description="Words in the title")
    owner: str | None = Field(None, max_length=150, description="Owner's user name (staff)")
    parent: uuid.UUID | None = Field(None, description="Forks of this session")
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: int = Field(50, ge=1, le=PAGE_MAX)
    cursor: str | None = Field(None, max_length=200, description="next_cursor of a page")


class SessionRenameIn(Schema):
    title: str = Field(..., min_length=1, max_length=TITLE_MAX)


class SessionOut(Schema):
    id: uuid.UUID
    title: str
    owner: str
    created_at: datetime
    updated_at: datetime
    cwd: str = Field(..., description="Relative to the owner's folder: `~`, `~/project`, `@label`")
    preset_name: str = Field(..., description="The server's preset each turn runs with")
    preset: dict[str, Any] = Field(..., description="What that preset was when the session began")
    parent_id: uuid.UUID | None
    fork_point: str | None
    origin: str = Field(
        "",
        description='"subagent" for a child a `task` call started, "observed" for another agent\'s spans',
    )
    delegation_depth: int = Field(0, description="Parents above a subagent's child (0: none)")
    last_seq: int
    leaf_entry_id: str | None
    message_count: int
    token_count: int
    format_version: int
    turn_status: Literal["idle", "running", "interrupted"] | None = Field(
        None, description="Given when one session is read; not in lists"
    )

    @staticmethod
    def resolve_owner(obj: Any) -> str:
        return str(obj.owner.get_username())

    @staticmethod
    def resolve_cwd(obj: Any) -> str:
        return display_cwd(obj.owner, obj.cwd)

    @staticmethod
    def resolve_preset_name(obj: Any) -> str:
        return preset_name_of(obj.preset)

    @staticmethod
    def resolve_turn_status(obj: Any) -> str | None:
        return getattr(obj, "turn_status", None)


class SessionPageOut(Schema):
    items: list[SessionOut]
    next_cursor: str | None


class ForkIn(Schema):
    entry_id: str = Field(..., min_length=1, max_length=ENTRY_ID_MAX)
    title: str | None = Field(None, max_length=TITLE_MAX)


# --- events and entries --------------------------------------------------------------------


class EventPageIn(Schema):
    after_seq: int = Field(-1, ge=-1, le=SEQ_MAX)
    limit: int = Field(100, ge=1, le=EVENTS_PAGE_MAX)


class EntryPageIn(Schema):
    after_seq: int = Field(-1, ge=-1, le=SEQ_MAX)
    limit: int = Field(500, ge=1, le=ENTRIES_PAGE_MAX)
    path: bool = Field(
        False,
        description="The path to `leaf` instead: its last `limit` entries (at most "
        f"{PATH_PAGE_MAX}), root-most first, as the chat shows them; `older_cursor` reads on",
    )
    leaf: str | None = Field(
        None, max_length=ENTRY_ID_MAX, description="With `path`: an entry (default: the leaf)"
    )
    cursor: str | None = Field(None, max_length=CURSOR_MAX, description="older_cursor of a page")


class EventIn(Schema):
    type: str = Field(..., min_length=1, max_length=EVENT_TYPE_MAX)
    data: dict[str, Any] = Field(default_factory=dict)
    ignorable: bool = False

    @model_validator(mode="before")
    @classmethod
    def _no_turn_or_step(cls, value: Any) -> Any:
        # Refused, not dropped: the runtime alone numbers turns and steps (the same rule
        # as for the data's own fields, `access.check_client_event`). Ninja hands the
        # request's object over wrapped.
        raw = value._obj if isinstance(value, DjangoGetter) else value
        if isinstance(raw, Mapping) and ("turn" in raw or "step" in raw):
            raise ValueError("an appended event cannot set turn or step")
        return value


class EventsAppendIn(Schema):
    expected_seq: int = Field(..., ge=-1, le=SEQ_MAX)
    events: list[EventIn] = Field(..., min_length=1)


class AppendOut(Schema):
    first_seq: int
    last_seq: int
    leaf_entry_id: str | None
    entry_ids: list[str]


class EventOut(Schema):
    seq: int
    type: str
    version: int
    time: datetime
    data: dict[str, Any]
    entry_id: str | None
    turn: int | None
    step: int | None


class EventPageOut(Schema):
    events: list[EventOut]
    last_seq: int = Field(..., description="The session's newest seq when this page was read")
    next_after_seq: int | None = Field(
        ..., description="Pass as after_seq for the next page; null when caught up"
    )


class EntryOut(Schema):
    id: str
    parent_id: str | None
    type: str
    timestamp: str
    seq: int
    data: dict[str, Any]


class EntryPageOut(Schema):
    entries: list[EntryOut]
    next_after_seq: int | None = Field(..., description="In seq order: after_seq of the next page")
    entries_above: int | None = Field(
        None, description="With `path`: entries of the path above these"
    )
    older_cursor: str | None = Field(None, description="With `path`: the entries above these")


class LeafOut(Schema):
    leaf_entry_id: str | None
    last_seq: int


class LeafIn(Schema):
    entry_id: str | None = Field(
        ..., max_length=ENTRY_ID_MAX, description="Any entry; null: the next entry is a root"
    )


class NavigateIn(Schema):
    entry_id: str | None = Field(..., max_length=ENTRY_ID_MAX)
    summarize: bool = False
    instructions: str | None = Field(None, max_length=INSTRUCTIONS_MAX)


class NavigateOut(Schema):
    leaf_id: str | None
    editor_text: str | None
    summary_entry_id: str | None


# --- views ---------------------------------------------------------------------------------


class LeafQueryIn(Schema):
    leaf: str | None = Field(
        None, max_length=ENTRY_ID_MAX, description="An entry id (default: the current leaf)"
    )


class ContextIn(LeafQueryIn):
    format: Literal["pi", "llm", "provider"] = Field(
        "pi",
        description="Pi's context (`pi`); Pi's convertToLlm of it, what Pi hands its "
        "provider (`llm`); or the messages Strand's own requests send (`provider`)",
    )


class ChatIn(LeafQueryIn):
    limit: int = Field(
        CHAT_ENTRIES, ge=1, le=PATH_PAGE_MAX, description="Entries of the path to show (the last)"
    )
    cursor: str | None = Field(None, max_length=CURSOR_MAX, description="older_cursor of a page")


class TraceIn(LeafQueryIn):
    turns: int = Field(DEFAULT_PAGE_TURNS, ge=1, le=200, description="How many turns")
    before_turn: int | None = Field(None, ge=0, le=2**31, description="older_turn of a page")
    scope: Literal["branch", "all"] = Field(
        "branch", description="The turns of the branch to `leaf`, or of the whole session"
    )


class ContextOut(Schema):
    format: Literal["pi", "llm", "provider"]
    leaf_id: str | None
    messages: list[dict[str, Any]]
    thinking_level: str | None
    model: dict[str, Any] | None
    # Format pi: where each message comes from (one per message); every format: the entries
    # a context edit left out.
    sources: list[MessageSourceOut] | None = None
    omitted: list[MessageSourceOut] = []


class TreeIn(LeafQueryIn):
    entry: str | None = Field(
        None, max_length=ENTRY_ID_MAX, description="The rows around this entry (default: the leaf)"
    )
    limit: int | None = Field(
        None, ge=1, le=TREE_PAGE_MAX, description=f"Rows in this page (default {TREE_ROWS})"
    )
    cursor: str | None = Field(
        None,
        max_length=CURSOR_MAX,
        description="previous_cursor or next_cursor of a page, or a row's subtree_cursor",
    )


class TreeNodeOut(Schema):
    """One row of the drawn tree. Its size does not grow with its depth or its number of
    children: `indent` (Pi's layout) and `depth` (from the root) are numbers, `connector`
    is the one mark before a fork's child; a client draws the indentation."""

    row: int = Field(..., description="Position in display order (Pi's /tree)")
    id: str
    parent_id: str | None
    type: str
    role: str | None
    timestamp: str
    seq: int
    depth: int
    indent: int
    connector: str = Field(..., description='"├─" or "└─" for a child of a fork, else ""')
    child_count: int
    text: str
    label: str | None = Field(..., description=f"At most {TREE_LABEL_MAX} characters")
    marker: str | None
    on_active_path: bool
    is_current_leaf: bool
    descendants: int
    messages_below: int
    newest_leaf_id: str
    subtree_cursor: str | None = Field(
        None, description="Partial trees: the entries below this one, not drawn here"
    )
    children_cursor: str | None = Field(
        None, description="Partial trees: this entry's further children, not drawn here"
    )


class TreeOut(Schema):
    """A window of the tree as the session page draws it: a run of rows of the whole layout
    (a session of up to TREE_FULL_LIMIT entries), or, for a larger one (`partial`), the end
    of the path to the leaf with the first entries of the branches that leave it. Counts
    and depths in a partial window are of the entries it holds; `depth` is from the root."""

    leaf_id: str | None
    session_name: str | None
    node_count: int = Field(..., description="Rows of the layout this window is part of")
    root_count: int
    partial: bool
    rows_above: int = Field(..., description="Rows before these (partial: path entries above)")
    rows_below: int
    nodes: list[TreeNodeOut] = Field(..., description="A page of rows in display order")
    previous_cursor: str | None = Field(
        ..., description="The rows before these (partial: the path above), or null"
    )
    next_cursor: str | None = Field(
        ...,
        description="The rows after these (partial: further down a subtree, the further "
        "children or roots), or null. Every cursor reads the tree as it stood at the first page",
    )
    roots_cursor: str | None = Field(
        None, description="Partial trees reaching a root: the session's other roots, or null"
    )
    children_cursors: dict[str, str | None] = Field(
        default_factory=dict,
        description="Partial trees: the further children of entries that are not rows here "
        "(the parent of a subtree window), by entry id",
    )


class ChatOut(Schema):
    leaf_id: str | None = Field(..., description="The last entry of this window")
    path_length: int = Field(..., description="Entries from the root to leaf_id")
    entries_above: int = Field(..., description="Entries of the path above this window")
    older_cursor: str | None = Field(..., description="The window of the path above, or null")
    items: list[dict[str, Any]] = Field(
        ...,
        description="user, assistant, tool_result, bash, custom_message, compaction, "
        "branch_summary, model_change and note items, told apart by `kind`",
    )


class CompareIn(Schema):
    a: str = Field(..., min_length=1, max_length=ENTRY_ID_MAX, description="One branch's leaf")
    b: str = Field(..., min_length=1, max_length=ENTRY_ID_MAX, description="The other's leaf")
    limit: int = Field(
        COMPARE_ROWS, ge=1, le=PATH_PAGE_MAX, description="Rows after the divergence to show"
    )
    cursor: str | None = Field(None, max_length=CURSOR_MAX, description="more_cursor of a page")


class CompareOut(Schema):
    a: str
    b: str
    ancestor: dict[str, Any] | None = Field(
        ..., description="The last entry both paths share, or null when they share no root"
    )
    offset: int = Field(..., description="The first row's index, 0 right after the ancestor")
    total_rows: int = Field(..., description="Entries on the longer branch below the ancestor")
    rows: list[dict[str, Any]] = Field(
        ..., description="Row i holds the i-th entry after the ancestor on each side, or null"
    )
    more_cursor: str | None = Field(..., description="The next rows, or null at the end")
    totals_a: dict[str, Any]
    totals_b: dict[str, Any]
    context: dict[str, Any] = Field(
        ..., description="The contexts each leaf would send next: sizes, token delta, changes"
    )
    files: dict[str, Any] = Field(
        ...,
        description="The files the workspaces at `a` and `b` differ in (from A to B): counts "
        "of added, removed and changed files, and the first of them with bounded diffs",
    )


class TraceOut(Schema):
    turns: list[int]
    older_turn: int | None = Field(..., description="Pass as before_turn for older turns")
    turn_count: int = Field(..., description="Turns found for the branch (or the session)")
    turns_complete: bool = Field(
        ..., description="False when more turns lie further up a long path"
    )
    spans: list[dict[str, Any]]
    usage: dict[str, Any]
    running: bool
    start: datetime | None
    end: datetime | None
    first_seq: int | None
    last_seq: int | None


class ToolSchemaOut(Schema):
    name: str
    description: str
    parameters: dict[str, Any]


class MessageSourceOut(Schema):
    """The entry a context message comes from, and the context edit (Pi 1.6) that replaced
    its content or, among `omitted`, left it out."""

    entry_id: str
    edit_id: str | None


class ContextMessageOut(Schema):
    index: int
    role: str
    message: dict[str, Any]
    text: str
    tokens: int
    key: str
    entry_id: str | None = None
    edit_id: str | None = None


class RequestOut(Schema):
    seq: int
    time: datetime
    turn: int | None
    step: int | None
    header_seq: int
    header_reason: str | None
    provider: str
    model: str
    params: dict[str, Any]
    system_prompt: str
    thinking_level: str | None
    tools: list[ToolSchemaOut]
    leaf_entry_id: str | None
    messages: list[ContextMessageOut]
    token_total: int
    recorded_token_estimate: int | None
    provider_messages: list[dict[str, Any]]
    payload: dict[str, Any] | None
    payload_sha256: str | None
    recorded_sha256: str
    matches: bool
    error: str | None
    response_entry_id: str | None
    omitted: list[MessageSourceOut] = []
    recorded_input: dict[str, Any] | None = Field(
        None,
        description="A request of an observed session: its exact input as the agent's "
        "OpenTelemetry spans recorded it (then payload is this input)",
    )


# --- the agent -----------------------------------------------------------------------------


class MessageIn(Schema):
    text: str = Field(..., min_length=1, max_length=MESSAGE_MAX)


class SentOut(Schema):
    turn: int | None = Field(..., description="The turn the message started")
    inbox_id: str | None = Field(..., description="Set when queued for a running turn")
    target: Literal["next_step", "next_turn"] | None


class RetryIn(Schema):
    entry_id: str | None = Field(
        None,
        min_length=1,
        max_length=ENTRY_ID_MAX,
        description='The failed reply (stopReason "error") to ask again; default: the current leaf',
    )


class CancelOut(Schema):
    running: bool = Field(..., description="Whether a turn was running when asked")


class ApprovalOut(Schema):
    approval_id: str
    call_id: str
    tool: str
    arguments: str
    turn: int | None
    step: int | None
    seq: int


class ApprovalDecisionIn(Schema):
    outcome: Literal["allowed", "rejected"]


class CompactIn(Schema):
    instructions: str | None = Field(None, max_length=INSTRUCTIONS_MAX)


class CompactOut(Schema):
    entry_id: str
    first_kept_entry_id: str
    tokens_before: int
    summary: str


# --- replays -------------------------------------------------------------------------------

REPLAYS_MAX = 5  # sessions_app.services.replay.MAX_REPLAYS


class ReplayIn(Schema):
    """One replay with `preset`, or several: each of `presets`, `count` times over (at most
    five in all)."""

    preset: str | None = Field(
        None, min_length=1, max_length=NAME_MAX, description="Default: the session's preset"
    )
    presets: list[str] | None = Field(None, min_length=1, max_length=REPLAYS_MAX)
    count: int = Field(1, ge=1, le=REPLAYS_MAX)
    system_prompt: str | None = Field(None, max_length=MESSAGE_MAX)
    params: dict[str, float | int] | None = Field(
        None,
        max_length=10,
        description="Overrides: temperature, top_p, max_tokens, presence_penalty, "
        "frequency_penalty, seed",
    )
    thinking_level: str | None = Field(None, max_length=20)

    @model_validator(mode="after")
    def _one_way(self) -> ReplayIn:
        if self.preset is not None and self.presets is not None:
            raise ValueError("name either preset or presets, not both")
        for name in self.presets or ():
            if not 1 <= len(name) <= NAME_MAX:
                raise ValueError(f"a preset name is 1 to {NAME_MAX} characters")
        return self


class ReplayOut(Schema):
    group: int = Field(..., description="The replay group: its first turn")
    turns: list[int] = Field(..., description="The turns the replays run as, in order")
    request_seq: int
    group_url: str = Field(..., description="The answers side by side (progress meanwhile)")
    compare_url: str = Field(
        ...,
        description="Leads to the comparison of the original answer with the (first) replay "
        "once it has answered",
    )


# --- Pi files ------------------------------------------------------------------------------


class ImportOut(Schema):
    session: SessionOut
    entries: int
    warnings: list[str]
