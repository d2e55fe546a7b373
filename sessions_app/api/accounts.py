"""The signed-in account and its personal API tokens."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status

from sessions_app import access
from sessions_app.api.base import ERRORS, auth_user
from sessions_app.api.schemas import ErrorOut, MeOut, TokenCreatedOut, TokenIn, TokenOut
from sessions_app.services import ratelimit, tokens

router = Router(tags=["accounts"])


@router.get("/me", response={200: MeOut, ERRORS: ErrorOut})
def me(request: HttpRequest) -> dict[str, Any]:
    user = auth_user(request)
    return {
        "username": user.get_username(),
        "is_staff": bool(user.is_staff),
        "auth": getattr(request, "strand_auth", "session"),
    }


@router.get("/tokens", response={200: list[TokenOut], ERRORS: ErrorOut})
def token_list(request: HttpRequest) -> Any:
    return tokens.tokens_of(auth_user(request))


@router.post("/tokens", response={201: TokenCreatedOut, ERRORS: ErrorOut})
def token_create(request: HttpRequest, body: TokenIn) -> Any:
    """Make a token (shown once). Only from a signed-in browser session: a token cannot make
    more tokens, so revoking a leaked token is enough to lock its holder out."""
    if getattr(request, "strand_auth", None) != "session":
        raise access.ReadOnly("tokens are made from a signed-in browser session")
    ratelimit.rate_hit(auth_user(request), "token")
    row, plaintext = tokens.token_create(auth_user(request), body.name)
    return Status(201, {**TokenOut.model_validate(row).model_dump(), "token": plaintext})


@router.delete("/tokens/{token_id}", response={204: None, ERRORS: ErrorOut})
def token_revoke(request: HttpRequest, token_id: int) -> Any:
    ratelimit.rate_hit(auth_user(request), "revoke")
    tokens.token_revoke(auth_user(request), token_id)
    return Status(204, None)
