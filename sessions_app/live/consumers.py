"""The live feed of one session: `ws/sessions/<id>/?after_seq=N` (DESIGN §6).

Protocol, server to client, one JSON object per message:

    {"type": "event", "seq": 12, "event": "assistant/message", "time": "…", "turn": 3,
     "step": 1, "entry_id": "a1b2c3d4", "data": {…}}     a committed event, in seq order
    {"type": "ready", "last_seq": 12}                      catch-up done: live from here on
    {"type": "delta", "turn": 3, "step": 1, "kind": "text", "block": "0", "text": "…",
     "name": null}                                          ephemeral text of the step in flight

The socket first sends every event with seq > N from the database, then each event as it
commits (any process; see `live`), and deltas as the runtime publishes them. Each event is
sent once per connection: the consumer keeps the seq it has sent up to and reads only after
it. A client that reconnects with its last seq misses nothing; it drops any seq it already
has, so nothing is shown twice.

Access: the cookie session (AuthMiddlewareStack) and `access.session_for`; the Origin
header is checked by AllowedHostsOriginValidator before this consumer runs. A refused
socket is closed before the handshake completes (HTTP 403). An open socket follows its
account (`live_access`): after a sign-out, a deactivation, a new password or a lost staff
flag it is re-checked and, if it may no longer watch, closed with 4401 (signed out) or 4403
(this session is no longer visible), and sends nothing more.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.core.serializers.json import DjangoJSONEncoder

from projections.records import EventRecord
from sessions_app import selectors
from sessions_app.live import access as live_access
from sessions_app.live import admission as live_admission
from sessions_app.live import db as live_db
from sessions_app.live import listener as live
from sessions_app.live_protocol import delta_message, event_message, group_name
from sessions_app.services import shares

PAGE = 500
CLOSE_REFUSED = live_access.CLOSE_NOT_VISIBLE


def after_seq_of(query_string: bytes) -> int:
    values = parse_qs(query_string.decode("latin-1")).get("after_seq", [])
    try:
        return max(-1, int(values[0])) if values else -1
    except ValueError:
        return -1


class SessionConsumer(AsyncJsonWebsocketConsumer):
    session_id: str | None = None
    requested: str = ""
    cursor: int = -1
    revoked: int | None = None  # the close code, once access was withdrawn

    async def connect(self) -> None:
        self.requested = self._requested()
        # The listener may hand events straight to this socket (see `deliver`) and re-check
        # its access (see `recheck_access`) while its own handlers run: the cursor is only
        # read and moved, and access only decided, under this lock.
        self.sending = asyncio.Lock()
        # Watched, with the listener listening, before the check: an account change committed
        # after the check reaches this socket.
        self._watch()
        await live.wait_listening()
        async with self.sending:
            session_id = await self._visible_session_id()
            if session_id is None or self.revoked is not None:
                live_access.unwatch(self.channel_name)
                if self.revoked is None:
                    await self.close(code=CLOSE_REFUSED)
                return
            self.session_id = session_id
            self.cursor = after_seq_of(self.scope.get("query_string", b""))
            await self.accept()
        live_admission.accepted(self.scope)
        # Listen first, then read: a commit lands either in the read or in a notification.
        await self.channel_layer.group_add(group_name(session_id), self.channel_name)
        await live.subscribe(session_id, self.channel_name, self.deliver)
        async with self.sending:
            await self._read_new_events()
            if self.revoked is None:
                await self.send_json({"type": "ready", "last_seq": self.cursor})
        live_admission.ready(self.scope)

    def _requested(self) -> str:
        return str(self.scope["url_route"]["kwargs"]["session_id"])

    def _watch(self) -> None:
        live_access.watch(
            self.channel_name, self.scope.get("user"), self._session_key(), self.recheck_access
        )

    async def _visible_session_id(self) -> str | None:
        return await live_db.run(
            selectors.visible_session_id, self.scope.get("user"), self.requested
        )

    async def _close_code(self) -> int | None:
        return await live_db.run(
            live_access.socket_close_code,
            self._session_key(),
            getattr(self.scope.get("user"), "pk", None),
            self.session_id or self.requested,
        )

    def _session_key(self) -> str | None:
        return getattr(self.scope.get("session"), "session_key", None)

    async def recheck_access(self) -> None:
        """Close this socket if its sign-in, or its user's right to see the session, is gone
        (`live_access` calls this on an account change and periodically)."""
        async with self.sending:
            if self.revoked is not None:
                return
            check = self._close_code()
            # A check that fails (the database busy or away) leaves the socket open until the
            # next one: closing every socket of a busy process would bring them all back at once.
            code = await asyncio.wait_for(check, live_access.CHECK_TIMEOUT_S)
            if code is None:
                return
            self.revoked = code
            live_access.unwatch(self.channel_name)
            if self.session_id is not None:
                live.unsubscribe(self.session_id, self.channel_name)
            await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        live_access.unwatch(self.channel_name)
        if self.session_id is None:
            return
        live.unsubscribe(self.session_id, self.channel_name)
        await self.channel_layer.group_discard(group_name(self.session_id), self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        # The feed is one-way; writes go through the HTTP forms and the API.
        return

    async def session_committed(self, message: Mapping[str, Any]) -> None:
        last_seq = message.get("last_seq")
        if isinstance(last_seq, int) and last_seq <= self.cursor:
            return
        await self._send_new_events()

    async def session_events(self, message: Mapping[str, Any]) -> None:
        await self.deliver(message)

    async def deliver(self, message: Mapping[str, Any]) -> None:
        """Events the process's listener read once for all viewers of this session."""
        async with self.sending:
            await self._deliver(message)

    async def _deliver(self, message: Mapping[str, Any]) -> None:
        if self.revoked is not None:
            return
        for seq, frame in message.get("events", ()):
            if seq <= self.cursor:
                continue
            if seq != self.cursor + 1:
                break  # a gap: the log fills it below
            await self.send(text_data=self._delivered_frame(frame))
            self.cursor = seq
        last_seq = message.get("last_seq")
        if not isinstance(last_seq, int) or last_seq > self.cursor:
            await self._read_new_events()

    async def session_delta(self, message: Mapping[str, Any]) -> None:
        if self.revoked is not None:
            return
        await self.send_json(delta_message(message))

    async def _send_new_events(self) -> None:
        async with self.sending:
            await self._read_new_events()

    async def _read_new_events(self) -> None:
        assert self.session_id is not None
        while self.revoked is None:
            page = await live_db.run(selectors.events_after, self.session_id, self.cursor, PAGE)
            for event in page:
                await self.send_json(self._event_frame(event))
                self.cursor = event.seq
            if len(page) < PAGE:
                return

    def _delivered_frame(self, frame: str) -> str:
        return frame

    def _event_frame(self, event: EventRecord) -> dict[str, Any]:
        return event_message(event)

    async def dispatch(self, message: Any) -> None:
        # channels first closes stale Django connections on Django's one thread-sensitive
        # thread, for every message to every socket: under a storm of handshakes (or a delta
        # to a thousand viewers) that queues each of them behind that thread. This consumer
        # reads through `live_db`, whose threads keep their own connections, so it skips it.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def websocket_disconnect(self, message: Any) -> None:
        # channels' own ends with the same hop (see `dispatch`): a thousand viewers leaving at
        # once queued behind that one thread.
        for group in self.groups:
            await self.channel_layer.group_discard(group, self.channel_name)
        await self.disconnect(message["code"])
        raise StopConsumer()

    @classmethod
    async def encode_json(cls, content: Any) -> str:
        return json.dumps(content, cls=DjangoJSONEncoder, ensure_ascii=False)


# Of an event, what a guest's page needs to refresh its views: nothing of its data.
GUEST_FRAME_KEYS = ("type", "seq", "event", "turn", "step")


class GuestConsumer(SessionConsumer):
    """The live feed of a share link's guest: `ws/sessions/shared/<token>/`.

    The link's token is the credential (no sign-in); it opens the socket only while the link
    is live, and the socket is watched by its link (`live_access.watch_share`): revoking the
    link closes it with 4403 at once. Frames carry no event data, only what tells the page
    to refresh its views from the guest's page, which redacts them on the server; deltas
    (the text of a step in flight, not redacted) are not sent. The feed is one-way, as for
    owners: nothing a guest sends acts.
    """

    share_id: int | None = None

    def _requested(self) -> str:
        return str(self.scope["url_route"]["kwargs"]["token"])

    def _watch(self) -> None:
        return  # watched by its link, once the token has named one

    async def _visible_session_id(self) -> str | None:
        found = await live_db.run(shares.share_live, self.requested)
        if found is None:
            return None
        self.share_id = found.share_id
        live_access.watch_share(self.channel_name, found.share_id, self.recheck_access)
        # Watched, then checked again: a revocation committed in between closes it too.
        if not await live_db.run(shares.share_is_live, found.share_id):
            return None
        return found.session_id

    async def _close_code(self) -> int | None:
        if self.share_id is None:
            return live_access.CLOSE_NOT_VISIBLE
        live_now = await live_db.run(shares.share_is_live, self.share_id)
        return None if live_now else live_access.CLOSE_NOT_VISIBLE

    def _delivered_frame(self, frame: str) -> str:
        message = json.loads(frame)
        return json.dumps({key: message.get(key) for key in GUEST_FRAME_KEYS})

    def _event_frame(self, event: EventRecord) -> dict[str, Any]:
        message = event_message(event)
        return {key: message.get(key) for key in GUEST_FRAME_KEYS}

    async def session_delta(self, message: Mapping[str, Any]) -> None:
        return
