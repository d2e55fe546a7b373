"""What changed in a session's workspace: at one tool call, and between two branches.

The manifests come from the workspace fold (`selectors.workspace`); `projections.
workspace_diff` plans which contents a bounded diff needs, and only those are read from
the owner's blobs.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from projections.workspace import SNAPSHOT, Manifest, apply, fold_workspace, snapshot_of
from projections.workspace_diff import LIMITS, DiffLimits, WorkspaceDiff, diff_plan, diff_workspaces
from sessions_app import store
from sessions_app.models import Session
from sessions_app.selectors.runtime import events_of_types
from sessions_app.selectors.workspace import workspace_at
from sessions_app.store.blobs import blobs_get

TOOL = "tool"


def workspace_diff_between(
    session: Session, before: Manifest, after: Manifest, limits: DiffLimits = LIMITS
) -> WorkspaceDiff:
    """The bounded diff from `before` to `after`, from `session`'s owner's contents."""
    plan = diff_plan(before, after, limits)
    contents = blobs_get(owner_id=session.owner_id, shas=plan.shas) if plan.shas else {}
    return diff_workspaces(plan, contents, limits)


def tool_call_diff(
    session: Session, call_id: str, limits: DiffLimits = LIMITS
) -> WorkspaceDiff | None:
    """What tool call `call_id` changed in the workspace: the `tool` snapshot recorded
    with its result, against the workspace just before it. None when it changed nothing
    (no such snapshot)."""
    events = events_of_types(session.id, (SNAPSHOT,))
    found = next(
        (
            e
            for e in events
            if e.data.get("reason") == TOOL and str(e.data.get("call_id") or "") == call_id
        ),
        None,
    )
    if found is None:
        return _child_of_call_diff(session, call_id, limits)
    snapshot = snapshot_of(found)
    path = [e.id for e in store.path_to_root(session.id, snapshot.at)] if snapshot.at else []
    earlier = [snapshot_of(e) for e in events if e.seq < found.seq]
    before = fold_workspace(path, earlier)
    return workspace_diff_between(session, before, apply(before, snapshot), limits)


def child_workspace_diff(child: Session, limits: DiffLimits = LIMITS) -> WorkspaceDiff | None:
    """What a subagent's child changed in its copy of its parent's files: its root (the
    `fork` snapshot there) against its current leaf. None when it has no folder."""
    if not child.cwd:
        return None
    before = workspace_at(child.id, None) or {}
    after = workspace_at(child.id, child.leaf_entry_id) or {}
    return workspace_diff_between(child, before, after, limits)


def _child_of_call_diff(session: Session, call_id: str, limits: DiffLimits) -> WorkspaceDiff | None:
    """A `task` call's changes: those its child session made in its copy (None when the
    call started no child, or the child changed nothing)."""
    started = next(
        (
            e
            for e in events_of_types(session.id, ("subagent/started",))
            if str(e.data.get("call_id") or "") == call_id
        ),
        None,
    )
    if started is None:
        return None
    child = Session.objects.filter(
        id=str(started.data.get("child_session")), parent=session, origin="subagent"
    ).first()
    diff = child_workspace_diff(child, limits) if child is not None else None
    return diff if diff is not None and not diff.empty else None


def tool_calls_changing_files(session: Session, call_ids: Iterable[str]) -> dict[str, int]:
    """Of `call_ids`, those whose call changed files, with how many (written or deleted):
    counted in the database from the snapshots' own lists, no fold, no manifest read."""
    wanted = sorted(set(call_ids))
    if not wanted:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_CALLS_CHANGING_FILES, [str(session.id), SNAPSHOT, TOOL, wanted])
        return {str(call_id): int(count) for call_id, count in cursor.fetchall()}


_CALLS_CHANGING_FILES = """
SELECT e.data ->> 'call_id',
       (SELECT count(*) FROM jsonb_object_keys(coalesce(e.data -> 'files', '{}'::jsonb)))
       + coalesce(jsonb_array_length(e.data -> 'deleted'), 0)
FROM sessions_app_event e
WHERE e.session_id = %s AND e.type = %s AND e.data ->> 'reason' = %s
  AND e.data ->> 'call_id' = ANY(%s)
"""


def branches_diff(
    session: Session, a: str, b: str, limits: DiffLimits = LIMITS
) -> WorkspaceDiff | None:
    """The files the workspaces at entries `a` and `b` differ in (from A to B); None when
    either is not an entry of the session."""
    before, after = workspace_at(session.id, a), workspace_at(session.id, b)
    if before is None or after is None:
        return None
    return workspace_diff_between(session, before, after, limits)
