"""Who calls the API: a personal token (`Authorization: Bearer …`), or a signed-in
browser session whose unsafe requests pass Django's CSRF check."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from sessions_app.services import tokens

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class BearerToken(HttpBearer):
    """`Authorization: Bearer <personal API token>`. A bad token is refused outright."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = tokens.token_user(token)  # InvalidToken → 401
        request.strand_auth = "token"  # type: ignore[attr-defined]
        return user


class CsrfRefused(HttpError):
    def __init__(self) -> None:
        super().__init__(403, "CSRF check failed: send the csrftoken cookie's value as X-CSRFToken")


class SessionCookie(APIKeyCookie):
    """The browser's Django session. Unsafe methods must pass Django's CSRF check. An
    anonymous request is not checked for CSRF: it is refused with 401 anyway."""

    param_name = settings.SESSION_COOKIE_NAME

    def __init__(self) -> None:
        super().__init__(csrf=False)  # checked below, only for signed-in users

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        if request.method not in SAFE_METHODS and check_csrf(request) is not None:
            raise CsrfRefused()
        request.strand_auth = "session"  # type: ignore[attr-defined]
        return user
