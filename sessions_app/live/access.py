"""Open websockets follow their account (issue: a socket outliving its sign-in).

A websocket is authorised once, at its handshake, from the browser's Django session. What
can take that authorisation away later, and how each process hears of it:

- **Sign-out** (or any end of a Django session: a flush, a new sign-in in the same
  browser, an admin removing sessions): a trigger on the session table issues
  `NOTIFY strand_accounts, 'session:<sha256 of the session key>'` for each deleted row.
  Only a digest travels: any database role may LISTEN, and a session key is a credential.
- **An account change**: a new password, `is_active`, `is_staff` or `is_superuser`
  changed, or the user deleted. A trigger on the user table issues
  `NOTIFY strand_accounts, 'user:<id>'`.
- A statement that touches more than a few hundred rows sends one `'*'` instead, which
  re-checks every socket.

The triggers (migration 0005) fire for every writer, the ORM, the admin, a management
command or psql alike, and Postgres delivers the notification at commit to every process.
Each process's live listener (`sessions_app.live.listener`) hears this channel too, through
the process's one LISTEN connection (`sessions_app.listen`), and awaits `account_changed`,
which re-checks the matching local sockets before the listener takes its next notification,
so an event committed after the change never reaches a socket the change shut out. Re-checking, rather than closing, keeps open what is still allowed: staff who lose
staff keep the socket on their own session, and a sign-out in one browser leaves the same
user's other browsers alone.

A socket that fails its check is closed with `CLOSE_SIGNED_OUT` (4401: the sign-in is gone;
the page says so and does not reconnect) or `CLOSE_NOT_VISIBLE` (4403: signed in, but this
session is no longer theirs to see). As a backstop for what sends no notification (a
session that expires, a listener that was reconnecting, triggers disabled by an operator),
every socket is re-checked every `STRAND_WS_RECHECK_S` seconds (default 60): three indexed
reads per socket, one socket at a time. A check that fails (the database busy or away)
leaves its socket open until the next one, rather than dropping every viewer of a busy
process at once.

Personal API tokens do not open websockets (only the cookie session does), so revoking a
token has no socket to close. A share link's guest socket (`consumers.GuestConsumer`) is
watched by its link instead: revoking or deleting the link (the share table's trigger,
migration 0016) sends `'share:<id>'`, and the link's sockets re-check and close with
`CLOSE_NOT_VISIBLE`; an expired link's sockets close at their next periodic check.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
)
from django.utils.crypto import constant_time_compare

from sessions_app import access
from sessions_app.errors import DomainError

log = logging.getLogger("strand.live")

ACCOUNT_CHANNEL = "strand_accounts"
CLOSE_SIGNED_OUT = 4401
CLOSE_NOT_VISIBLE = 4403
DEFAULT_RECHECK_S = 60.0
CHECK_TIMEOUT_S = 10.0

Recheck = Callable[[], Awaitable[None]]


def session_key_digest(session_key: str) -> str:
    """What the session table's trigger sends for a deleted session (see migration 0005)."""
    return hashlib.sha256(session_key.encode("utf-8")).hexdigest()


def recheck_interval() -> float:
    return float(getattr(settings, "STRAND_WS_RECHECK_S", DEFAULT_RECHECK_S))


# --- the check ------------------------------------------------------------------------


def _signed_in_user(session_key: str) -> Any:
    """The active user the Django session `session_key` signs in, or None.

    The same checks as `django.contrib.auth.get_user` (backend, active account, session
    hash against the current or a fallback secret), without its writes: that function
    flushes or re-keys the session it reads, and this one reads a copy the browser does
    not hold.
    """
    engine = import_module(settings.SESSION_ENGINE)
    data = engine.SessionStore(session_key).load()
    try:
        user_id = get_user_model()._meta.pk.to_python(data[SESSION_KEY])  # type: ignore[union-attr]
        backend_path = data[BACKEND_SESSION_KEY]
    except (KeyError, DomainError, ValueError):
        return None
    if backend_path not in settings.AUTHENTICATION_BACKENDS:
        return None
    user = load_backend(backend_path).get_user(user_id)  # None for an inactive account
    if user is None:
        return None
    if hasattr(user, "get_session_auth_hash"):
        session_hash = data.get(HASH_SESSION_KEY)
        hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
        if not session_hash or not any(constant_time_compare(session_hash, h) for h in hashes):
            return None  # the password changed since this sign-in
    return user


def socket_close_code(session_key: str | None, user_id: Any, session_id: str) -> int | None:
    """None if the browser session `session_key` still signs in `user_id` and that user
    may still see `session_id`; otherwise the code to close the socket with."""
    user = _signed_in_user(session_key) if session_key else None
    if user is None or str(user.pk) != str(user_id):
        return CLOSE_SIGNED_OUT
    try:
        access.session_for(user, session_id)
    except DomainError:
        return CLOSE_NOT_VISIBLE
    return None


# --- the sockets of this process ----------------------------------------------------------


@dataclass
class _Watched:
    user_id: str
    key_digest: str
    recheck: Recheck
    share_id: str = ""  # a guest's socket: the link that opened it


@dataclass
class _Registry:
    watched: dict[str, _Watched] = field(default_factory=dict)  # channel name → socket
    by_user: dict[str, set[str]] = field(default_factory=dict)
    by_key: dict[str, set[str]] = field(default_factory=dict)
    by_share: dict[str, set[str]] = field(default_factory=dict)
    sweeper: asyncio.Task[None] | None = None

    def add(self, channel_name: str, watched: _Watched) -> None:
        self.remove(channel_name)
        self.watched[channel_name] = watched
        for index, key in self._keys(watched):
            if key:  # a guest's socket has no user nor sign-in, a user's no link
                index.setdefault(key, set()).add(channel_name)

    def _keys(self, watched: _Watched) -> tuple[tuple[dict[str, set[str]], str], ...]:
        return (
            (self.by_user, watched.user_id),
            (self.by_key, watched.key_digest),
            (self.by_share, watched.share_id),
        )

    def remove(self, channel_name: str) -> None:
        watched = self.watched.pop(channel_name, None)
        if watched is None:
            return
        for index, key in self._keys(watched):
            channels = index.get(key)
            if channels is not None:
                channels.discard(channel_name)
                if not channels:
                    del index[key]


_registry = _Registry()


def watch(channel_name: str, user: Any, session_key: str | None, recheck: Recheck) -> None:
    """Re-check the socket `channel_name` (with its `recheck` coroutine) whenever the
    account of `user` or the Django session `session_key` changes, and periodically."""
    user_id = getattr(user, "pk", None)
    if user_id is None:
        return  # an anonymous socket is refused at its handshake
    _registry.add(
        channel_name,
        _Watched(str(user_id), session_key_digest(session_key or ""), recheck),
    )
    _start_sweeper()


def watch_share(channel_name: str, share_id: int, recheck: Recheck) -> None:
    """Re-check the guest socket `channel_name` whenever its share link changes (revoked,
    deleted), and periodically (an expiry sends no notification)."""
    _registry.add(channel_name, _Watched("", "", recheck, share_id=str(share_id)))
    _start_sweeper()


def unwatch(channel_name: str) -> None:
    _registry.remove(channel_name)


def watched_count() -> int:
    return len(_registry.watched)


def _matching(payload: str) -> Iterable[str]:
    kind, _, value = payload.partition(":")
    if payload == "*":
        return list(_registry.watched)
    if kind == "user":
        return list(_registry.by_user.get(value, ()))
    if kind == "session":
        return list(_registry.by_key.get(value, ()))
    if kind == "share":
        return list(_registry.by_share.get(value, ()))
    return ()


async def _recheck(channel_name: str) -> None:
    watched = _registry.watched.get(channel_name)
    if watched is None:
        return
    try:
        # Longer than the check's own limit: the socket may first finish a send in progress.
        await asyncio.wait_for(watched.recheck(), 3 * CHECK_TIMEOUT_S)
    except Exception:
        log.warning("re-checking a websocket's access failed", exc_info=True)


async def account_changed(payload: str) -> None:
    """Re-check this process's sockets that a notification on `ACCOUNT_CHANNEL` names;
    returns when each has been checked (and closed if it must)."""
    channels = _matching(payload)
    if channels:
        await asyncio.gather(*(_recheck(channel) for channel in channels))


_background: set[asyncio.Task[None]] = set()


def recheck_all_soon() -> None:
    """Re-check every socket of this process, in the background (the listener calls this
    when it listens again after losing its connection: changes committed meanwhile were not
    notified here, and the events it is about to read need not wait for the checks)."""
    task = asyncio.get_running_loop().create_task(account_changed("*"))
    _background.add(task)
    task.add_done_callback(_background.discard)


def _start_sweeper() -> None:
    loop = asyncio.get_running_loop()
    task = _registry.sweeper
    if task is not None and not task.done() and task.get_loop() is loop:
        return
    _registry.sweeper = loop.create_task(_sweep(), name="strand-live-access-sweep")


async def _sweep() -> None:
    """The backstop: each socket in turn, one at a time, every interval."""
    while _registry.watched:
        await asyncio.sleep(recheck_interval())
        for channel in list(_registry.watched):
            with contextlib.suppress(Exception):
                await _recheck(channel)
