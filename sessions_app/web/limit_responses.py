"""What a page shows when a limit refuses it: a rate limit (`sessions_app.services.ratelimit`), a
sign-in paused after repeated failures (django-axes), or a read past the ceiling of whole
reads (`selectors.ceilings`, 413).

Both answer 429 with `Retry-After`. The API answers rate limits itself, as JSON (see
`error_response` in `api/base.py`); these are the pages' answers:

- A page view counts its hit with `ratelimit.rate_hit` before doing any work and lets
  `RateLimited` propagate; `RateLimitedPages` turns it into a 429. An htmx request gets the
  flash area with the message (the page it came from stays as it was, a typed message
  included; `base.html` lets htmx swap a 429); any other request gets a small page with the
  message and a link back.
- django-axes calls `signin_paused` (`AXES_LOCKOUT_CALLABLE`) for a sign-in refused because
  its user name and address failed too often; it draws `registration/locked.html`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.deprecation import MiddlewareMixin
from django.utils.http import url_has_allowed_host_and_scheme

from sessions_app.limits import RateLimited, duration_words
from sessions_app.selectors.ceilings import ReadTooLarge

TEMPLATE = "limited.html"


class RateLimitedPages(MiddlewareMixin):
    """Turns a `RateLimited` raised by a page view into a 429, and a `ReadTooLarge` (a read
    past the ceiling of whole reads) into a 413 (the API handles its own)."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, ReadTooLarge):
            return too_large_page(request, exception)
        if not isinstance(exception, RateLimited):
            return None
        return rate_limited_page(request, exception)


def too_large_page(request: HttpRequest, refused: ReadTooLarge) -> HttpResponse:
    context = {
        "title": "Too large to show at once",
        "message": str(refused),
        "back": _back(request),
    }
    return render(request, TEMPLATE, context, status=413)


def rate_limited_page(request: HttpRequest, refused: RateLimited) -> HttpResponse:
    context = {"message": refused.readable(), "back": _back(request)}
    htmx = request.headers.get("HX-Request") == "true"
    response = render(request, f"{TEMPLATE}#flash" if htmx else TEMPLATE, context, status=429)
    response["Retry-After"] = str(refused.retry_after)
    if htmx:
        # Only the flash area changes: whatever the form targeted stays as it was.
        response["HX-Retarget"] = "#flash"
        response["HX-Reswap"] = "outerHTML"
    return response


def _back(request: HttpRequest) -> str:
    """Where "Back" leads: the page the request came from when it is one of ours."""
    referer = request.headers.get("Referer", "")
    if referer and url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return referer
    return reverse("home")


def cool_off() -> timedelta:
    value = getattr(settings, "AXES_COOLOFF_TIME", None)
    if isinstance(value, timedelta):
        return value
    return timedelta(hours=float(value or 0))


def signin_paused(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """django-axes' lockout answer: a 429 page saying why and for how long. (Axes calls this
    with the original response and the credentials, or, on its async path, with the
    credentials in the second place; neither is used.)"""
    wait = int(cool_off().total_seconds())
    response = render(
        request, "registration/locked.html", {"cool_off": duration_words(max(wait, 1))}, status=429
    )
    if wait > 0:
        response["Retry-After"] = str(wait)
    return response


def client_address(request: HttpRequest) -> str | None:
    """The address sign-in throttling counts failures by (`AXES_CLIENT_IP_CALLABLE`).

    Without trusted proxies (`STRAND_TRUSTED_PROXIES`, 0) it is the connection's own
    address, and `X-Forwarded-For` is ignored: any client can write that header. Behind N
    proxies that each append the address they saw, the client is the N-th address from the
    right; the addresses left of it were written by the client and are not believed.
    """
    proxies = int(getattr(settings, "STRAND_TRUSTED_PROXIES", 0) or 0)
    remote = request.META.get("REMOTE_ADDR")
    if proxies <= 0:
        return remote
    forwarded = [
        part.strip()
        for part in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",")
        if part.strip()
    ]
    if len(forwarded) < proxies:
        return remote
    return forwarded[-proxies]
