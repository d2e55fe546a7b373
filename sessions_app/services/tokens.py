"""Personal API tokens: the one service that makes, checks and revokes them.

A token is `strand_` followed by 43 URL-safe characters (256 random bits). Only its sha256
digest is stored, so a database leak does not leak tokens, and the token is shown once, when
it is made. A fast hash is enough: the token is random, not a password. The first characters
are kept in clear as a `prefix` so that lists can tell tokens apart.

The UI, the API and `manage.py create_token` all call these functions.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from sessions_app.errors import DomainError
from sessions_app.models import ApiToken

TOKEN_PREFIX = "strand_"
PREFIX_LENGTH = 14  # "strand_" and 7 characters of the secret
NAME_MAX = 100
# `last_used_at` is written at most this often per token, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class TokenNotFound(DomainError):
    """No such token of this user (someone else's tokens are not told apart from none)."""

    code = "not_found"


class InvalidToken(DomainError):
    """A bearer token that is unknown, revoked, or belongs to an inactive account."""

    code = "unauthorized"


def digest_of(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def token_create(user: Any, name: str) -> tuple[ApiToken, str]:
    """A new token for `user`: the stored row and the token itself (shown once)."""
    name = name.strip()
    if not name:
        raise DomainError("a token needs a name")
    if len(name) > NAME_MAX:
        raise DomainError(f"a token name is at most {NAME_MAX} characters")
    if "\x00" in name:
        raise DomainError("a token name must not contain NUL characters")
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        user=user, name=name, prefix=plaintext[:PREFIX_LENGTH], digest=digest_of(plaintext)
    )
    return row, plaintext


def token_revoke(user: Any, token_id: int) -> ApiToken:
    """Revoke one of `user`'s tokens. Revoking twice is harmless; the first time counts."""
    row = ApiToken.objects.filter(pk=token_id, user_id=user.pk).first()
    if row is None:
        raise TokenNotFound(f"no token {token_id}")
    if row.revoked_at is None:
        ApiToken.objects.filter(pk=row.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        row.refresh_from_db(fields=["revoked_at"])
    return row


def tokens_of(user: Any) -> QuerySet[ApiToken]:
    """The user's tokens, newest first, revoked ones included (they show as revoked)."""
    return ApiToken.objects.filter(user_id=user.pk).order_by("-created_at", "-pk")


def token_user(plaintext: str) -> Any:
    """The active user a token belongs to; `InvalidToken` when it is unknown or revoked."""
    if not plaintext.startswith(TOKEN_PREFIX) or len(plaintext) > 200:
        raise InvalidToken("invalid token")
    row = ApiToken.objects.filter(digest=digest_of(plaintext)).select_related("user").first()
    if row is None:
        raise InvalidToken("invalid token")
    if row.revoked_at is not None:
        raise InvalidToken("this token was revoked")
    if not row.user.is_active:
        raise InvalidToken("the account of this token is disabled")
    now = timezone.now()
    if row.last_used_at is None or now - row.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return row.user
