"""Streaming deltas to live viewers.

Deltas are not persisted: they go to the Channels layer, to the session's group, as
`live_protocol.session_delta_message` shapes them. `block` names the content block within
the reply (a reply can have several text, thinking and tool-call blocks); `text` is the
piece that arrived (for a tool call, a piece of its raw JSON arguments); `name` is the
tool's name on the first delta of a tool call. A consumer forwards them while a step
streams; the committed `assistant/message` event then replaces them.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from runtime import Delta
from sessions_app.live_protocol import group_name, session_delta_message

log = logging.getLogger("strand.agent")


def host_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop of the server process calling us, if any: in-memory channel layers
    must be used from the loop their consumers run on."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        pass
    from asgiref.sync import SyncToAsync

    local = SyncToAsync.threadlocal
    if getattr(local, "main_event_loop_pid", None) == os.getpid():
        loop = getattr(local, "main_event_loop", None)
        if isinstance(loop, asyncio.AbstractEventLoop) and loop.is_running():
            return loop
    return None


def delta_publisher(
    host: asyncio.AbstractEventLoop | None, also: Callable[[Delta], None] | None
) -> Callable[[Delta], None]:
    """A callback for the runtime (it runs on the agent loop) that publishes each delta to
    the session's group, on `host` when given, and hands it to `also` first."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()

    def publish(delta: Delta) -> None:
        if also is not None:
            also(delta)
        if layer is None:
            return
        message = session_delta_message(delta)
        target = host if host is not None and host.is_running() else None
        group = group_name(delta.session_id)
        if target is None:
            asyncio.ensure_future(_send_quietly(layer.group_send(group, message)))
        else:
            asyncio.run_coroutine_threadsafe(
                _send_quietly(layer.group_send(group, message)), target
            )

    return publish


async def _send_quietly(send: Awaitable[Any]) -> None:
    try:
        await send
    except Exception:
        log.debug("a delta could not be published", exc_info=True)
