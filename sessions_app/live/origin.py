"""Which pages may open a websocket: the check Django's CSRF protection makes of a form.

A websocket handshake carries the browser's cookies whatever page opens it, and no CSRF
token, so the `Origin` header is all that tells Strand's own pages from someone else's.
channels' `AllowedHostsOriginValidator` compared the origin's host with `ALLOWED_HOSTS`
alone: a page on any other port of the same host (`http://localhost:9999`), or served over
plain HTTP beside an HTTPS deployment, could open a signed-in user's sockets and read their
sessions as they streamed.

Here the origin must be, as `CsrfViewMiddleware` asks of an unsafe request, either the
handshake's own (its scheme, and its `Host` header when that is an allowed host: scheme,
host and port alike), or one of `CSRF_TRUSTED_ORIGINS` (exactly, or a `*.` pattern of that
scheme). Behind a proxy that terminates TLS, `SECURE_PROXY_SSL_HEADER` says the scheme, as
it does for Django's own check.

A handshake without an `Origin` header is refused, as it was: every browser sends one, and
nothing else can sign in to a socket (personal tokens do not open websockets, only the
cookie session does), so no client needs to go without.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain


def _headers(scope: Any) -> dict[str, str]:
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", [])
    }


def _allowed_hosts() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:  # as Django's `HttpRequest.get_host` allows
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def _secure(scope: Any, headers: dict[str, str]) -> bool:
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        meta_name, expected = proxy
        name = meta_name.removeprefix("HTTP_").replace("_", "-").lower()
        if name in headers:
            return headers[name].split(",", 1)[0].strip() == expected
    return scope.get("scheme") in ("wss", "https")


def own_origin(scope: Any) -> str | None:
    """The handshake's own origin (`https://host:port` of its `Host` header), or None when
    that host is not one this server answers for."""
    headers = _headers(scope)
    host = headers.get("host", "")
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return None
    return f"{'https' if _secure(scope, headers) else 'http'}://{host}"


def origin_allowed(scope: Any) -> bool:
    """Whether the page that opens this websocket may (see the module's docstring)."""
    origin = _headers(scope).get("origin")
    if origin is None:
        return False
    if origin == own_origin(scope):
        return True
    trusted = list(getattr(settings, "CSRF_TRUSTED_ORIGINS", []))
    if origin in trusted:
        return True
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    return any(
        "*" in pattern
        and urlsplit(pattern).scheme == parsed.scheme
        and is_same_domain(parsed.netloc, urlsplit(pattern).netloc.lstrip("*"))
        for pattern in trusted
    )


class SameOriginSockets:
    """ASGI middleware: a websocket handshake from an origin `origin_allowed` refuses is
    closed before it is accepted (daphne answers the handshake with 403)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        if scope.get("type") == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.app(scope, receive, send)
