"""ASGI entry point: HTTP through Django, websockets through Channels."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from config.body_limits import BodyLimits, refuse_early_in_daphne  # noqa: E402
from config.health import HealthCheck  # noqa: E402
from config.reason_phrases import install as install_reason_phrases  # noqa: E402
from config.request_heads import answer_long_heads_in_daphne  # noqa: E402
from config.request_slots import RequestSlots  # noqa: E402
from config.slow_readers import answer_slow_readers_in_daphne  # noqa: E402
from config.startup import (  # noqa: E402
    RunOnceAtStart,
    recover_open_turns,
    tune_garbage_collection,
)
from sessions_app.live import wire  # noqa: E402
from sessions_app.live.admission import Admission  # noqa: E402
from sessions_app.live.middleware import SocketAuthMiddlewareStack  # noqa: E402
from sessions_app.live.origin import SameOriginSockets  # noqa: E402
from sessions_app.live.routing import websocket_urlpatterns  # noqa: E402

router = ProtocolTypeRouter(
    {
        # Bodies past their route's limit are refused before Django reads them, and so
        # many requests are in Django at once, each on a thread and a Postgres connection
        # of its own; the rest wait their turn (config.request_slots).
        "http": BodyLimits(HealthCheck(RequestSlots(ASGIStaticFilesHandler(django_asgi)))),
        # The origin checked as Django's CSRF check does: scheme, host and port.
        "websocket": SameOriginSockets(
            Admission(SocketAuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)

# The first connection a process serves starts crash recovery (STRAND_RECOVER_AT_START=0
# turns it off, as the test suite does for the servers it runs in-process).
application = RunOnceAtStart(router, recover_open_turns)

# Under daphne, the same body limits while Twisted reads the request, before any of it is
# kept (config.body_limits).
refuse_early_in_daphne()
# A URL or headers over Twisted's 16 KiB are answered 414 or 431, not with silence
# (config.request_heads).
answer_long_heads_in_daphne()
# A response body goes out as fast as its client reads it, and a client that reads nothing
# for a minute is let go (config.slow_readers).
answer_slow_readers_in_daphne()
# Status lines say `Too Many Requests`, not `Unknown Status` (config.reason_phrases).
install_reason_phrases()
# The changes to Twisted and autobahn that the live feed's send path was measured with
# (sessions_app.live.wire); STRAND_WIRE_TUNING=0 serves with both libraries as released.
if settings.STRAND_WIRE_TUNING:
    wire.install()
# Last, once everything this process keeps is loaded.
tune_garbage_collection()
