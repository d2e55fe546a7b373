"""Subagents' child sessions in Postgres: `runtime.subagents.Children` over the store and
the selectors (each call on the engine's database threads).

A child is a session of the parent's owner (`origin` "subagent", its `parent` the parent,
its `fork_point` the entry of the `task` call's reply, `delegation_depth` one more than the
parent's) with the preset asked for (by default the parent's) and a tool set no wider than
the parent's, which its turns keep to (`child_tools_for_turn`). It works in a folder of its
own that starts from the parent's files at the fork point: a `fork` snapshot at its root
(the child copies no entries, so the snapshot is on every path of it), the folder written
from the owner's contents after the commit.

Caps, each refused as the `task` call's error result with nothing written:

- depth: a child nests at most `STRAND_SUBAGENT_MAX_DEPTH` (default 3) below a session
  the user started (`SUBAGENT_DEPTH`);
- per session: a session starts at most `STRAND_SUBAGENTS_PER_SESSION` (default 16)
  children in all (`SUBAGENT_CAP`);
- per user: at most `STRAND_SUBAGENTS_PER_USER_HOUR` (default 60) children started by
  the owner's sessions in the last hour, counted from the sessions themselves under a
  lock of the owner's (`RATE_LIMITED`); a child's turn also takes one of its owner's turn
  places (`agent.admission`), so no more children run at once than turns may;
- time: a child that runs past `STRAND_SUBAGENT_TIMEOUT_S` (default 600) is cancelled.
"""

from __future__ import annotations

import hashlib
import os
import struct
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from projections.chat import content_text
from projections.workspace import SNAPSHOT, manifest_data
from projections.workspace_diff import DiffLimits, WorkspaceDiff
from runtime.subagents import Child, ChildAsk, ChildRefused, ChildReport, SubagentLimits
from runtime.workspace import materialize
from sessions_app import presets, workspaces
from sessions_app.errors import DomainError
from sessions_app.limits import duration_words
from sessions_app.models import Session
from sessions_app.selectors import events as event_reads
from sessions_app.selectors.workspace import workspace_at
from sessions_app.selectors.workspace_diffs import child_workspace_diff
from sessions_app.store import NewEvent, append_events
from sessions_app.store.blobs import blobs_get

SUBAGENT = "subagent"
DEFAULT_MAX_DEPTH = 3
DEFAULT_PER_SESSION = 16
DEFAULT_PER_USER_HOUR = 60
HOUR_S = 3600
DEFAULT_TIMEOUT_S = 600.0
# What a `task` result shows of the child's changes: fewer lines than the trace's diff.
REPORT_DIFF = DiffLimits(files=50, file_lines=80, total_lines=300, total_bytes=32_000)


def max_depth() -> int:
    return max(int(getattr(settings, "STRAND_SUBAGENT_MAX_DEPTH", DEFAULT_MAX_DEPTH)), 0)


def per_session() -> int:
    return max(int(getattr(settings, "STRAND_SUBAGENTS_PER_SESSION", DEFAULT_PER_SESSION)), 0)


def per_user_hour() -> int:
    return max(int(getattr(settings, "STRAND_SUBAGENTS_PER_USER_HOUR", DEFAULT_PER_USER_HOUR)), 0)


def subagent_limits() -> SubagentLimits:
    timeout = float(getattr(settings, "STRAND_SUBAGENT_TIMEOUT_S", DEFAULT_TIMEOUT_S) or 0)
    return SubagentLimits(timeout_s=timeout if timeout > 0 else DEFAULT_TIMEOUT_S)


def child_tools_for_turn(session: Session, preset: dict[str, Any]) -> dict[str, Any]:
    """A child's preset as its turn runs it: the tools it was given, of those the preset
    offers now (never wider than when it started). Other sessions' presets as they are."""
    if session.origin != SUBAGENT:
        return preset
    given = (session.preset or {}).get("tools")
    allowed = set(given) if isinstance(given, list) else set()
    return {**preset, "tools": [t for t in preset.get("tools") or () if t in allowed]}


def _tools_of(session: Session) -> list[str]:
    """The tools a session's turns run with now."""
    preset = child_tools_for_turn(session, presets.preset_for_turn(session.preset))
    return [str(t) for t in preset.get("tools") or ()]


def _refuse_over_caps(parent: Session) -> None:
    depth = parent.delegation_depth + 1
    limit = max_depth()
    if depth > limit:
        raise ChildRefused(
            f"subagents nest at most {limit} deep, and this session is a subagent at depth "
            f"{parent.delegation_depth}: do this work here instead",
            "SUBAGENT_DEPTH",
        )
    cap = per_session()
    if cap and Session.objects.filter(parent=parent, origin=SUBAGENT).count() >= cap:
        raise ChildRefused(
            f"a session starts at most {cap} subagents, and this one has started {cap}",
            "SUBAGENT_CAP",
        )


def _chosen_tools(parent_tools: Sequence[str], asked: Sequence[str] | None) -> list[str]:
    if asked is None:
        return list(parent_tools)
    wider = sorted({t for t in asked if t not in parent_tools})
    if wider:
        raise ChildRefused(
            f"a subagent gets at most this session's tools ({', '.join(parent_tools)}); "
            f"not {', '.join(wider)}",
            "SUBAGENT_TOOLS",
        )
    return [t for t in parent_tools if t in set(asked)]


def start_child(ask: ChildAsk) -> Child:
    """Create the child `ask` asks for (see the module doc), or `ChildRefused`."""
    parent = Session.objects.select_related("owner").filter(id=ask.parent_session).first()
    if parent is None:
        raise ChildRefused(f"no session {ask.parent_session}")
    _refuse_over_caps(parent)
    tools = _chosen_tools(_tools_of(parent), ask.tools)
    name = ask.preset or presets.preset_name_of(parent.preset)
    try:
        preset = presets.preset_resolve(name)
    except presets.PresetNotFound as exc:
        raise ChildRefused(str(exc), "SUBAGENT_PRESET") from None
    tools = [t for t in tools if t in (preset.get("tools") or ())]
    manifest = (workspace_at(parent.id, ask.at_entry) or {}) if parent.cwd else {}
    with transaction.atomic():
        _refuse_over_the_hour(parent)
        child = _child_session(parent, ask, name, {**preset, "tools": tools})
        events = [NewEvent("subagent/descriptor", _descriptor(parent, ask, child, tools))]
        if manifest and child.cwd:
            files = manifest_data(manifest)
            fork = {
                "at": None,
                "reason": "fork",
                "files": files,
                "full": True,
                "manifest": files,
                "from_session": str(parent.id),
                "from_entry": ask.at_entry,
            }
            events.append(NewEvent(SNAPSHOT, fork))
        append_events(child.id, 0, events)
    if manifest and child.cwd:
        contents = blobs_get(owner_id=child.owner_id, shas=[f.sha256 for f in manifest.values()])
        materialize(Path(os.path.realpath(child.cwd)), {}, manifest, contents)
    return Child(str(child.id), child.delegation_depth, tuple(tools), ask.prompt)


def _refuse_over_the_hour(parent: Session) -> None:
    """The per-user cap: children started by the owner's sessions in the last hour,
    counted under a transaction lock of the owner's, so two processes cannot both take
    the last one."""
    limit = per_user_hour()
    if not limit:
        return
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [_owner_key(parent.owner_id)])
    since = timezone.now() - timedelta(seconds=HOUR_S)
    started = Session.objects.filter(
        owner_id=parent.owner_id, origin=SUBAGENT, created_at__gte=since
    ).count()
    if started >= limit:
        raise ChildRefused(
            f"Too many subagents: at most {limit} per {duration_words(HOUR_S)} for each user. "
            "Do the work here, or try again later.",
            "RATE_LIMITED",
        )


def _owner_key(owner_id: int) -> int:
    digest = hashlib.blake2b(f"strand-subagents:{owner_id}".encode(), digest_size=8)
    return int(struct.unpack(">q", digest.digest())[0])


def _child_session(parent: Session, ask: ChildAsk, name: str, preset: dict[str, Any]) -> Session:
    """The child's row and its `session/created` (as `services.session_create` writes one,
    with its origin and depth): a folder of its own when the parent has one."""
    session_id = uuid.uuid4()
    owner = parent.owner
    wanted = workspaces.new_folder(owner) if parent.cwd else ""
    cwd = workspaces.session_folder(owner, wanted, str(session_id), in_use=False) if wanted else ""
    depth = parent.delegation_depth + 1
    child = Session.objects.create(
        id=session_id,
        owner=owner,
        title=_title(ask.prompt),
        cwd=cwd,
        preset=preset,
        parent=parent,
        fork_point=ask.at_entry or "",
        origin=SUBAGENT,
        delegation_depth=depth,
    )
    created = {
        "title": child.title,
        "cwd": workspaces.display_cwd(owner, cwd),
        "preset_name": name,
        "preset": preset,
        "source": SUBAGENT,
        "parent_session": str(parent.id),
        "fork_point": ask.at_entry,
        "origin": SUBAGENT,
        "delegation_depth": depth,
    }
    append_events(child.id, -1, [NewEvent("session/created", created)])
    child.refresh_from_db()
    return child


def _descriptor(parent: Session, ask: ChildAsk, child: Session, tools: list[str]) -> dict[str, Any]:
    return {
        "parent_session": str(parent.id),
        "parent_call_id": ask.call_id,
        "parent_turn": ask.turn,
        "fork_point": ask.at_entry,
        "prompt": ask.prompt,
        "preset_name": presets.preset_name_of(child.preset),
        "tools": tools,
        "delegation_depth": child.delegation_depth,
    }


def _title(prompt: str) -> str:
    line = " ".join(prompt.split())
    return f"Subagent: {line[:80]}{'…' if len(line) > 80 else ''}"


def child_report(child_session: str) -> ChildReport:
    child = Session.objects.filter(id=child_session).first()
    if child is None:
        return ChildReport("", "")
    reply = event_reads.latest_event(child.id, ("assistant/message",))
    answer = ""
    if reply is not None:
        entry = reply.data.get("entry")
        message = entry.get("message") if isinstance(entry, Mapping) else None
        if isinstance(message, Mapping):
            answer = content_text(message.get("content"))
    diff = child_workspace_diff(child, REPORT_DIFF)
    if diff is None or diff.empty:
        return ChildReport(answer, "The subagent changed no files." if diff is not None else "")
    return ChildReport(answer, _diff_text(diff), tuple(_file_rows(diff)))


def _file_rows(diff: WorkspaceDiff) -> list[dict[str, Any]]:
    return [
        {"path": f.path, "status": f.status, "added": f.added, "removed": f.removed}
        for f in diff.files
    ]


def _diff_text(diff: WorkspaceDiff) -> str:
    """The child's changes as a result shows them: counts, then each file's unified diff
    (bounded by `REPORT_DIFF`)."""
    lines = [
        "Files the subagent changed in its copy (the parent's files are as they were): "
        f"{diff.added} added, {diff.changed} changed, {diff.removed} removed."
    ]
    for f in diff.files:
        counts = f" (+{f.added} -{f.removed})" if f.added is not None else ""
        lines.append(f"{f.status} {f.path}{counts}{': ' + f.skipped if f.skipped else ''}")
        lines.extend(line.text if line.kind in "@\\" else line.kind + line.text for line in f.lines)
        if f.hidden_lines:
            lines.append(f"[… {f.hidden_lines} more diff lines]")
    if diff.more_files:
        lines.append(f"[… {diff.more_files} more files]")
    return "\n".join(lines)


class PostgresChildren:
    """`runtime.subagents.Children` on an engine's database threads."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    async def start_child(self, ask: ChildAsk) -> Child:
        try:
            return await self._engine.db(start_child, ask)
        except DomainError as exc:  # past the owner's storage quota, a folder refused…
            raise ChildRefused(str(exc)) from None

    async def child_report(self, child_session: str) -> ChildReport:
        return await self._engine.db(child_report, child_session)

    def limits(self) -> SubagentLimits:
        return subagent_limits()
