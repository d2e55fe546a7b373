"""Writes that users ask for. Each one goes through `store.append_events`."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction

from projections.turns import TURN_MARKERS, is_open
from runtime.errors import lock_refusal
from sessions_app import selectors, store, workspaces
from sessions_app.access import NotAllowed
from sessions_app.errors import DomainError
from sessions_app.models import OBSERVED, Session, SessionDeletion
from sessions_app.presets import DEFAULT_PRESET as DEFAULT_PRESET  # re-exported
from sessions_app.presets import OFFLINE, PresetNotFound, preset_name_of, preset_resolve
from sessions_app.projectors.runner import session_forget
from sessions_app.services.workspace import workspace_fork, workspace_materialize
from sessions_app.store import NewEvent
from sessions_app.turn_lock import turn_lock_key

log = logging.getLogger("strand.sessions")


def user_get_or_create_local(*, username: str | None = None) -> User:
    """The account local commands act as (STRAND_LOCAL_USER), created on demand."""
    name = username or settings.STRAND_LOCAL_USER
    user, _ = User.objects.get_or_create(username=name)
    return user


def user_by_name(username: str | None) -> User:
    """`--owner USERNAME`: an existing account, or the local account when None."""
    if username is None:
        return user_get_or_create_local()
    try:
        return User.objects.get(username=username)
    except User.DoesNotExist:
        raise DomainError(f"no user named {username!r}") from None


def session_create(
    *,
    owner: User,
    title: str = "",
    cwd: str = "",
    preset: str | None = None,
    source: str = "new",
    parent: Session | None = None,
    fork_point: str | None = None,
    pi_header: Mapping[str, Any] | None = None,
) -> Session:
    """A new session with its `session/created` event at seq 0.

    `preset` names one of the server's presets (default: offline); the session records the
    name with a snapshot of the preset for display. `cwd` must be "" (no workspace),
    `workspaces.NEW_FOLDER` (a folder of its own) or lie in one of the owner's folders
    (`workspaces`), whoever asks; a folder another session works in is copied into a folder
    of the new session's own (`workspaces.session_folder`).
    """
    session, created = session_build(
        owner=owner,
        title=title,
        cwd=cwd,
        preset=preset,
        source=source,
        parent=parent,
        fork_point=fork_point,
        pi_header=pi_header,
    )
    with transaction.atomic():
        session.save(force_insert=True)
        store.append_events(session.id, -1, [created])
    session.refresh_from_db()
    return session


def session_build(
    *,
    owner: User,
    title: str = "",
    cwd: str = "",
    preset: str | None = None,
    source: str = "new",
    parent: Session | None = None,
    fork_point: str | None = None,
    pi_header: Mapping[str, Any] | None = None,
) -> tuple[Session, NewEvent]:
    """A new session's row, not yet saved, and its `session/created` event, for a writer
    that saves many at once (the OpenTelemetry ingest makes a session per conversation):
    the caller inserts the row and appends the event first, at seq 0. The arguments are
    `session_create`'s, checked the same way (its workspace folder is made here)."""
    if len(title) > 500:
        raise DomainError("title is longer than 500 characters")
    name = preset or OFFLINE
    try:
        chosen = preset_resolve(name)
    except PresetNotFound as exc:
        raise NotAllowed(str(exc)) from None
    session_id = uuid.uuid4()
    if cwd and cwd != workspaces.NEW_FOLDER:
        cwd = workspaces.check_owned_cwd(owner, cwd)
    in_use = bool(cwd) and Session.objects.filter(cwd=cwd).exists()
    cwd = workspaces.session_folder(owner, cwd, str(session_id), in_use=in_use)
    session = Session(
        id=session_id,
        owner=owner,
        title=title,
        cwd=cwd,
        preset=chosen,
        parent=parent,
        fork_point=fork_point or "",
        origin=OBSERVED if source.startswith("observed:") else "",
    )
    data: dict[str, Any] = {
        "title": title,
        # As its users see it: the log is read through the API and the pages.
        "cwd": workspaces.display_cwd(owner, cwd),
        "preset_name": name,
        "preset": chosen,
        "source": source,
        "parent_session": str(parent.id) if parent else None,
        "fork_point": fork_point,
    }
    if pi_header is not None:
        data["pi_header"] = dict(pi_header)
    return session, NewEvent("session/created", data)


def session_rename(*, session: Session, title: str) -> Session:
    title = title.strip()
    if not title:
        raise DomainError("a title must not be empty")
    _append_at_head(session, [NewEvent("session/renamed", {"title": title})])
    session.refresh_from_db()
    return session


def session_label(*, session: Session, entry_id: str, label: str) -> store.AppendResult:
    """Label an entry (an empty label clears it): a `label` entry at the current leaf, as
    Pi's `appendLabelChange` writes it."""
    if not store.entries_by_id(session.id, [entry_id]):
        raise DomainError(f"{entry_id!r} is not an entry of this session")
    entry: dict[str, Any] = {"type": "label", "targetId": entry_id}
    if label:
        entry["label"] = label
    return _append_at_head(session, [NewEvent("entry/label", {"entry": entry})])


def session_move_leaf(
    *, session: Session, to: str | None, reason: str = "navigate"
) -> store.AppendResult:
    """Point the current leaf at any entry (or None: the next entry starts a new root).

    Every leaf move a user asks for (a click in the tree, `PUT /api/…/leaf`, editing a
    message to send it again) comes here, and is made holding the session's turn lock, as
    the runtime's navigation is: while a turn runs it is refused (`TurnRunning`, 409), and
    it waits a few seconds for a compaction or a navigation to let go (`SessionBusy`)."""
    with session_turn_lock(session.id):
        return _append_at_head(session, [NewEvent("leaf/moved", {"to": to, "reason": reason})])


def session_leaf_before(*, session: Session, entry_id: str) -> None:
    """Move the leaf to a user message's parent, so that what is sent next becomes the
    message's sibling (editing a message to send it again)."""
    found = store.entries_by_id(session.id, [entry_id])
    if not found:
        raise DomainError(f"{entry_id!r} is not an entry of this session")
    entry = found[0]
    message = entry.data.get("message")
    if entry.type != "message" or not isinstance(message, Mapping) or message.get("role") != "user":
        raise DomainError("only a user message can be edited and sent again")
    session.refresh_from_db(fields=["leaf_entry_id"])
    if session.leaf_entry_id != entry.parent_id:
        session_move_leaf(session=session, to=entry.parent_id)


# How long a leaf move waits for the turn lock while no turn is open (the holder is
# finishing a turn, compacting or navigating): as long as the runtime's own navigation.
LOCK_WAIT_S = 3.0


@contextlib.contextmanager
def session_turn_lock(session_id: uuid.UUID) -> Iterator[None]:
    """Hold the session's turn lock (the runtime's advisory lock) for a transaction: the
    write made under it commits before anyone else can take it, and a failed one lets go
    of it with its rollback."""
    key = turn_lock_key(session_id)
    deadline = time.monotonic() + LOCK_WAIT_S
    with transaction.atomic(), connection.cursor() as cur:
        while True:
            cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [key])
            row = cur.fetchone()
            if row and row[0]:
                break
            turn_open = is_open(selectors.latest_event(session_id, TURN_MARKERS))
            if turn_open or time.monotonic() > deadline:
                raise lock_refusal(turn_open=turn_open)
            time.sleep(0.05)
        yield


def session_fork(
    *, session: Session, entry_id: str, owner: User, title: str | None = None
) -> Session:
    """A new session of `owner` holding the root→entry path, as Pi's /fork does.

    A fork works in a folder of its own in the forker's folder (staff may fork what they
    may read, never into the owner's folder), which starts with the files of the fork point
    (`workspace_fork`: a `fork` snapshot there, the contents copied for another owner). It
    keeps the preset's name.

    Label entries are left out of the copied path and re-applied at its end, as Pi does, so
    the new session carries the labels of the entries it copied.
    """
    path = store.path_to_root(session.id, entry_id)
    if not path:
        raise DomainError(f"{entry_id!r} is not an entry of session {session.id}")
    labels = _labels_on(session.id, {e.id for e in path})
    with transaction.atomic():
        fork = session_create(
            owner=owner,
            title=title if title is not None else f"{session.title or 'Session'} (fork)",
            cwd=workspaces.new_folder(owner) if session.cwd else "",
            preset=preset_name_of(session.preset),
            source="fork",
            parent=session,
            fork_point=entry_id,
        )
        copied = [e for e in path if e.type != "label"]
        events = [NewEvent(_event_type(e.data), {"entry": dict(e.data)}) for e in copied]
        # The copied path is linear: re-chain around the labels that were left out.
        previous: str | None = None
        for event in events:
            event.data["entry"]["parentId"] = previous  # type: ignore[index]
            previous = event.data["entry"]["id"]  # type: ignore[index]
        for target, label in labels.items():
            events.append(
                NewEvent(
                    "entry/label", {"entry": {"type": "label", "targetId": target, "label": label}}
                )
            )
        for chunk_start in range(0, len(events), settings.STRAND_MAX_BATCH):
            chunk = events[chunk_start : chunk_start + settings.STRAND_MAX_BATCH]
            fork.refresh_from_db(fields=["last_seq"])
            store.append_events(fork.id, fork.last_seq, chunk)
        fork.refresh_from_db(fields=["last_seq"])
        manifest = workspace_fork(source=session, fork=fork, entry_id=entry_id)
    # Slow I/O after the commit: the fold says what the folder holds, and writing it out is
    # repeatable from the facts.
    workspace_materialize(session=fork, manifest=manifest)
    fork.refresh_from_db()
    return fork


def _event_type(entry: Mapping[str, Any]) -> str:
    from sessions_app.events import event_type_for_entry

    return event_type_for_entry(entry)


def _labels_on(session_id: uuid.UUID, ids: set[str]) -> dict[str, str]:
    """Labels in force for `ids`: last writer wins in file order, an empty label clears."""
    labels: dict[str, str] = {}
    for entry in store.entries_of(session_id):
        if entry.type != "label":
            continue
        target = entry.data.get("targetId")
        if target not in ids:
            continue
        label = entry.data.get("label")
        if label:
            labels[target] = label
        else:
            labels.pop(target, None)
    return labels


def session_delete(*, session: Session, by: User) -> None:
    """Delete a whole session: the one operation that lifts the append-only guard.

    The guard is lifted for this session only, for this transaction only, and an audit row
    records who deleted what. The session's turn lock is held for the transaction, so no
    turn runs in a deleted session: refused (`TurnRunning`) while a turn holds it, which is
    why the doors stop the turn first (`agent.agent_stop_turn`).
    """
    sid = str(session.id)
    with session_turn_lock(session.id), connection.cursor() as cur:
        cur.execute("SELECT last_seq FROM sessions_app_session WHERE id = %s FOR UPDATE", [sid])
        row = cur.fetchone()
        if row is None:
            raise store.SessionNotFound(f"no session {sid}")
        cur.execute("SELECT set_config('strand.deleting_session', %s, true)", [sid])
        # The owner's storage gets back what the append path counted for this session (the
        # owner's row is locked after the session's, as on the append path).
        cur.execute(
            "UPDATE sessions_app_storageusage u "
            "SET stored_bytes = greatest(u.stored_bytes - s.stored_bytes, 0) "
            "FROM sessions_app_session s WHERE s.id = %s AND u.owner_id = s.owner_id",
            [sid],
        )
        # Its share links go with it (their open guest sockets close: migration 0016).
        cur.execute("DELETE FROM sessions_app_sharelink WHERE session_id = %s", [sid])
        cur.execute("DELETE FROM sessions_app_entry WHERE session_id = %s", [sid])
        # An observed session's spans and conversation (`services.otel_ingest`).
        cur.execute("DELETE FROM sessions_app_observedspan WHERE session_id = %s", [sid])
        cur.execute("DELETE FROM sessions_app_observedconversation WHERE session_id = %s", [sid])
        cur.execute("DELETE FROM sessions_app_event WHERE session_id = %s", [sid])
        # What the asynchronous projectors made of it (the search index, the usage rollups).
        session_forget(sid)
        cur.execute("UPDATE sessions_app_session SET parent_id = NULL WHERE parent_id = %s", [sid])
        cur.execute("DELETE FROM sessions_app_session WHERE id = %s", [sid])
        SessionDeletion.objects.create(
            session_id=session.id,
            title=session.title,
            owner_username=session.owner.get_username(),
            deleted_by=by.get_username(),
            event_count=row[0] + 1,
        )
    log.info("session %s deleted by %s (%d events)", sid, by.get_username(), row[0] + 1)


def _append_at_head(session: Session, events: list[NewEvent]) -> store.AppendResult:
    """Append after whatever the session holds now (for writes that do not race a view)."""
    for _ in range(20):
        session.refresh_from_db(fields=["last_seq"])
        try:
            return store.append_events(session.id, session.last_seq, events)
        except store.ConcurrencyError:
            continue
    raise store.ConcurrencyError(session.last_seq, session.last_seq)
