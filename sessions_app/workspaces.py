"""Workspaces belong to their owner: where a session's agent may read and write.

A session's working directory is its owner's own folder, `user-<pk>` under the first of
`STRAND_WORKSPACE_ROOTS`, or a folder inside it. The rule is checked on real paths (links
and `..` resolved), when a session is made (every door: the API, the page, Pi import, fork,
the commands) and again when each turn, compaction or summary starts, so a session made
before the rule, or a folder swapped for a link since, is refused then with a clear message
rather than silently moved. A session with no working directory ("") is allowed: its
agent's file tools report that it has no workspace.

Operators may grant a user further folders with `STRAND_WORKSPACE_GRANTS`, a setting (or,
when settings do not define it, an environment variable) holding JSON: user name → a list
of folders, or an object of folders by label::

    {"alice": ["/srv/datasets/shared"], "bob": {"corpus": "/srv/corpus"}}

A granted folder is labelled by its own name unless given a label. Users cannot grant
themselves anything.

The agent's writes are held to a quota (`run_limits`, from the `STRAND_WORKSPACE_*` settings):
bytes and entries of the owner's own folder when the session works in it or inside it (all
their sessions there share one quota, however they spread over subfolders), else of the
session's working directory itself (a granted folder, which others may share, is not
counted whole); and the size and depth of one write.

Each session works in a folder of its own (DESIGN §11): unless the user picks one, a new
session (and every fork) gets `~/sessions/<short id>`, made on demand. A folder is worked in
by one session: a session asking for a folder another session already works in starts from
a copy of it in a folder of its own, so no two sessions ever share files (the copy holds
the regular files, within the workspace quota; links are not copied). A session working in
the owner's own folder itself never records `~/sessions`, the other sessions' folders.

What users see is relative: `~` is the owner's own folder (`~/project` a folder inside it),
`@label` a granted folder. The server's absolute paths are never shown, and users may type
these forms (or a path relative to their folder) where a working directory is asked for.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from django.conf import settings

from runtime.config import DEFAULT_MAX_TOOL_CALLS_PER_REPLY, JobLimits, RunLimits
from runtime.tools import WorkspaceQuota
from runtime.workspace import SESSIONS, WorkspaceTooLarge, copy_files
from sessions_app.errors import DomainError

OWN = "~"
# What `cwd_for` returns for a session that gets a folder of its own (`session_folder`).
NEW_FOLDER = "~/sessions/(new)"
# What a session shows for a working directory that is in none of its owner's folders.
OUTSIDE = "(outside its owner's folder)"


class WorkspaceNotAllowed(DomainError):
    """A working directory that is not its owner's own folder, inside it, or granted."""

    code = "workspace_not_allowed"


def workspace_roots() -> list[Path]:
    """`settings.STRAND_WORKSPACE_ROOTS`, resolved. Users' own folders are under the first."""
    roots = getattr(settings, "STRAND_WORKSPACE_ROOTS", None) or []
    return [Path(os.path.realpath(root)) for root in roots]


def own_folder(user: Any) -> Path | None:
    """`user`'s own folder (it may not exist yet); None without a workspace root."""
    roots = workspace_roots()
    if not roots or user is None or not getattr(user, "is_authenticated", False):
        return None
    return roots[0] / f"user-{user.pk}"


def default_cwd(user: Any) -> str:
    """A new session's working directory unless another is asked for: its owner's own
    folder, made on demand; "" (no workspace) when no root is configured."""
    folder = own_folder(user)
    if folder is None:
        return ""
    folder.mkdir(parents=True, exist_ok=True)
    return os.path.realpath(folder)


def _grants_setting() -> Any:
    configured = getattr(settings, "STRAND_WORKSPACE_GRANTS", None)
    if configured is not None:
        return configured
    raw = os.environ.get("STRAND_WORKSPACE_GRANTS") or "{}"
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise DomainError(f"STRAND_WORKSPACE_GRANTS is not valid JSON: {exc}") from None


def workspace_grants(user: Any) -> dict[str, Path]:
    """The folders an operator granted `user`, by label."""
    if user is None or not getattr(user, "is_authenticated", False):
        return {}
    grants = _grants_setting()
    if not isinstance(grants, dict):
        raise DomainError("STRAND_WORKSPACE_GRANTS must be a JSON object of user names")
    mine = grants.get(user.get_username()) or {}
    if isinstance(mine, list):
        mine = {Path(str(folder)).name: folder for folder in mine}
    if not isinstance(mine, dict) or not all(isinstance(f, str) for f in mine.values()):
        raise DomainError(
            "STRAND_WORKSPACE_GRANTS: each user's grants must be a list of folders or an "
            "object of folders by label"
        )
    return {str(label): Path(os.path.realpath(folder)) for label, folder in mine.items()}


def allowed_folders(user: Any) -> list[tuple[str, Path]]:
    """Where `user`'s sessions may work, each with the name users see: their own folder
    (`~`) and each granted folder (`@label`)."""
    folders: list[tuple[str, Path]] = []
    own = own_folder(user)
    if own is not None:
        folders.append((OWN, Path(os.path.realpath(own))))
    folders.extend((f"@{label}", path) for label, path in workspace_grants(user).items())
    return folders


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_owned_cwd(owner: Any, cwd: str) -> str:
    """`cwd`'s real path, if it is one of `owner`'s folders or lies inside one; "" stays ""
    (no workspace). Anything else (another user's folder, a workspace root itself, a path
    whose links or `..` lead out) raises WorkspaceNotAllowed."""
    if not cwd:
        return ""
    if "\x00" in cwd:
        raise WorkspaceNotAllowed("a working directory must not contain NUL characters")
    if not os.path.isabs(cwd):
        raise WorkspaceNotAllowed("a working directory must be an absolute path")
    real = Path(os.path.realpath(cwd))
    if any(_inside(real, folder) for _, folder in allowed_folders(owner)):
        return str(real)
    raise WorkspaceNotAllowed(
        "a session's working directory must be your own folder (~) or a folder inside it"
        + (", or a folder granted to you" if workspace_grants(owner) else "")
    )


def cwd_for(user: Any, asked: str) -> str:
    """The working directory `user` asked for (typed in the form, sent to the API), checked
    and made if missing. Empty: their own folder. `~`, `~/x` or a relative `x`: in their
    own folder; `@label/x`: in a granted folder; an absolute path: as it resolves."""
    asked = asked.strip()
    if not asked:
        return new_folder(user)
    if "\x00" in asked:
        raise WorkspaceNotAllowed("a working directory must not contain NUL characters")
    if asked.startswith("@"):
        label, _, rest = asked[1:].partition("/")
        granted = workspace_grants(user)
        if label not in granted:
            raise WorkspaceNotAllowed(f"no folder @{label} is granted to you")
        path = granted[label] / rest if rest else granted[label]
    elif os.path.isabs(asked):
        path = Path(asked)
    else:
        base = default_cwd(user)
        if not base:
            raise WorkspaceNotAllowed("no workspace root is configured (STRAND_WORKSPACE_ROOTS)")
        own = asked == OWN or asked.startswith(OWN + "/")
        path = Path(base) / (asked[len(OWN) :].lstrip("/") if own else asked)
    checked = check_owned_cwd(user, str(path))
    try:
        Path(checked).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        shown = display_cwd(user, checked)
        raise DomainError(f"cannot use {shown} as a working directory: {exc.strerror}") from None
    return checked


def cwd_for_turn(owner: Any, cwd: str) -> str:
    """The real path a session's next turn works in, checked again: a session made before
    the rule, or whose folder became a link since, is refused here, not silently moved."""
    try:
        return check_owned_cwd(owner, cwd)
    except WorkspaceNotAllowed:
        raise WorkspaceNotAllowed(
            "This session's working directory is outside its owner's folder, so its agent "
            "may not run in it. Start a new session (it works in your own folder, ~), or ask "
            "an operator to grant that folder."
        ) from None


def display_cwd(owner: Any, cwd: str) -> str:
    """A working directory as users see it: `~`, `~/project`, `@label/x`, or OUTSIDE; ""
    when the session has none. Never the server's path. (Stored paths are real paths, so
    this compares them as they are and reads nothing from the disk but the roots.)"""
    if not cwd:
        return ""
    path = Path(cwd)
    for name, folder in allowed_folders(owner):
        if path == folder:
            return name
        if folder in path.parents:
            return f"{name}/{path.relative_to(folder).as_posix()}"
    return OUTSIDE


def quota_folder(owner: Any, cwd: str) -> str:
    """The folder whose quota the agent's writes in `cwd` count against: the owner's own
    folder when `cwd` lies in it, else `cwd` itself; "" without a working directory."""
    if not cwd:
        return ""
    own = own_folder(owner)
    if own is not None:
        own = Path(os.path.realpath(own))
        if _inside(Path(cwd), own):
            return str(own)
    return cwd


def run_limits(owner: Any, cwd: str) -> RunLimits:
    """The server's limits on the agent of a session of `owner` working in `cwd`."""
    default = WorkspaceQuota()
    quota = WorkspaceQuota(
        max_bytes=_setting("STRAND_WORKSPACE_MAX_BYTES", default.max_bytes),
        max_entries=_setting("STRAND_WORKSPACE_MAX_FILES", default.max_entries),
        max_write_bytes=_setting("STRAND_WORKSPACE_MAX_WRITE_BYTES", default.max_write_bytes),
        max_depth=_setting("STRAND_WORKSPACE_MAX_DEPTH", default.max_depth),
        folder=quota_folder(owner, cwd),
    )
    calls = _setting("STRAND_MAX_TOOL_CALLS_PER_REPLY", DEFAULT_MAX_TOOL_CALLS_PER_REPLY)
    base = JobLimits()
    jobs = JobLimits(
        per_session=_setting("STRAND_MAX_JOBS_PER_SESSION", base.per_session),
        per_process=_setting("STRAND_MAX_JOBS_PER_PROCESS", base.per_process),
        wall_s=float(getattr(settings, "STRAND_JOB_WALL_S", base.wall_s)) or base.wall_s,
        output_kept_bytes=_setting("STRAND_JOB_OUTPUT_BYTES", base.output_kept_bytes),
    )
    return RunLimits(max_tool_calls_per_reply=calls, workspace=quota, jobs=jobs)


def _setting(name: str, default: int) -> int:
    return max(int(getattr(settings, name, default)), 0)


def new_folder(owner: Any) -> str:
    """What a session of `owner` that gets a folder of its own asks for: NEW_FOLDER, or ""
    (no workspace) when no root is configured."""
    return NEW_FOLDER if own_folder(owner) is not None else ""


def session_folder(owner: Any, cwd: str, session_id: str, *, in_use: bool) -> str:
    """The real folder a new session `session_id` of `owner` works in, made and marked:
    its own `~/sessions/<short id>` for NEW_FOLDER, or for a folder another session works
    in (`in_use`), which it starts from a copy of; else `cwd` as checked ("": none)."""
    if cwd != NEW_FOLDER and not in_use:
        return check_owned_cwd(owner, cwd)
    own = own_folder(owner)
    if own is None:
        raise WorkspaceNotAllowed("no workspace root is configured (STRAND_WORKSPACE_ROOTS)")
    folder = own / SESSIONS / session_id.replace("-", "")[:12]
    folder.mkdir(parents=True, exist_ok=False)
    real = check_owned_cwd(owner, str(folder))
    if in_use:
        source = check_owned_cwd(owner, cwd)
        try:
            copy_files(Path(source), Path(real), run_limits(owner, real).workspace)
        except WorkspaceTooLarge as exc:
            raise DomainError(
                f"{display_cwd(owner, source)} is another session's folder, and a new "
                f"session starts from a copy of it; {exc}"
            ) from None
    return real
