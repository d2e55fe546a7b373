"""ASGI entry point: HTTP through Django, websockets through Channels."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from config.startup import RunOnceAtStart, recover_open_turns  # noqa: E402
from sessions_app.routing import websocket_urlpatterns  # noqa: E402

router = ProtocolTypeRouter(
    {
        "http": ASGIStaticFilesHandler(django_asgi),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

# The first connection a process serves starts crash recovery (STRAND_RECOVER_AT_START=0
# turns it off, as the test suite does for the servers it runs in-process).
application = RunOnceAtStart(router, recover_open_turns)
