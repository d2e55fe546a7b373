"""Share links: the one service that makes, finds and revokes them.

A link gives whoever holds its URL a read-only view of one session, or of one branch of
it (the path from the root to an entry, nothing off it), until it expires or its owner
revokes it. Its token is 256 random bits (`secrets.token_urlsafe(32)`, 43 URL-safe
characters); only its sha256 digest is stored, so the URL is shown once, when the link is
made. A token that is malformed, unknown, revoked or expired is told apart from none of the
others (`ShareNotFound`, which every door answers with 404 and no reason).

Revoking (here or in the admin) updates the row; a trigger on the table (migration 0016)
announces it on the live channel, and each process closes the guest sockets of that link
at once (`sessions_app.live.access`). An expired link's sockets close at their next
periodic check.

Only the session's owner makes, lists and revokes its links through the pages and the
API; staff see every live link in the admin and may revoke it there.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import F, QuerySet
from django.utils import timezone

from sessions_app import redaction, store
from sessions_app.errors import DomainError
from sessions_app.limits import ENTRY_ID_MAX
from sessions_app.models import Session, ShareLink
from sessions_app.redaction import Redaction

URL_PREFIX = "/s/"
EXPIRY_DEFAULT = timedelta(days=7)
EXPIRY_MAX = timedelta(days=365)
EXPIRY_MIN = timedelta(minutes=1)
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")


class ShareNotFound(DomainError):
    """No live link with this token, or no such link of this session."""

    code = "not_found"


def digest_of(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def share_url(token: str) -> str:
    return f"{URL_PREFIX}{token}/"


def share_create(
    *,
    session: Session,
    by: Any,
    branch: str | None = None,
    expires_in: timedelta = EXPIRY_DEFAULT,
    tool_outputs: bool = False,
    file_contents: bool = False,
    system_prompt: bool = False,
    patterns: list[str] | None = None,
) -> tuple[ShareLink, str]:
    """A new link to `session` (to the path ending at `branch`, when given): the row and
    its token, which is not kept and is shown this once. Nothing is written when any
    argument is refused."""
    branch = (branch or "").strip()
    if "\x00" in branch:
        raise DomainError("a branch is an entry id, which holds no NUL characters")
    if branch and (len(branch) > ENTRY_ID_MAX or store.depth_of(session.id, branch) is None):
        raise DomainError(f"no entry {branch[:ENTRY_ID_MAX]!r} in this session")
    if not EXPIRY_MIN <= expires_in <= EXPIRY_MAX:
        raise DomainError(
            f"a link expires between {_words(EXPIRY_MIN)} and {_words(EXPIRY_MAX)} after it is made"
        )
    patterns = list(patterns or [])
    redaction.compile_patterns(patterns)  # BadPattern says which one, before any write
    token = secrets.token_urlsafe(32)
    link = ShareLink.objects.create(
        session=session,
        branch=branch,
        digest=digest_of(token),
        created_by=by,
        expires_at=timezone.now() + expires_in,
        redact_tool_outputs=tool_outputs,
        redact_file_contents=file_contents,
        redact_system_prompt=system_prompt,
        redact_patterns=patterns,
    )
    return link, token


def _words(span: timedelta) -> str:
    if span >= timedelta(days=1):
        return f"{span.days} days"
    return f"{int(span.total_seconds() // 60)} minute(s)"


def shares_of(session: Session) -> QuerySet[ShareLink]:
    """The session's links, newest first, revoked and expired ones included."""
    return ShareLink.objects.filter(session_id=session.id).order_by("-created_at", "-pk")


def live_shares() -> QuerySet[ShareLink]:
    return ShareLink.objects.filter(revoked_at__isnull=True, expires_at__gt=timezone.now())


def share_revoke(*, session: Session, share_id: int) -> ShareLink:
    """Revoke one of the session's links; revoking twice is harmless (the first counts)."""
    link = ShareLink.objects.filter(pk=share_id, session_id=session.id).first()
    if link is None:
        raise ShareNotFound(f"no share link {share_id} of this session")
    shares_revoke_rows(ShareLink.objects.filter(pk=link.pk))
    link.refresh_from_db(fields=["revoked_at"])
    return link


def shares_revoke_rows(links: QuerySet[ShareLink]) -> int:
    """Revoke the live links among `links` (the admin's action too); returns how many."""
    return links.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


def share_for_token(token: str) -> ShareLink:
    """The live link a token opens, with its session; `ShareNotFound` otherwise (a
    malformed, forged, revoked or expired token alike)."""
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise ShareNotFound("no such link")
    link = live_shares().filter(digest=digest_of(token)).select_related("session__owner").first()
    if link is None:
        raise ShareNotFound("no such link")
    return link


def share_is_live(share_id: int) -> bool:
    return live_shares().filter(pk=share_id).exists()


def share_viewed(link: ShareLink) -> None:
    """Count one view of the page (not of its refreshes and fragments)."""
    ShareLink.objects.filter(pk=link.pk).update(view_count=F("view_count") + 1)


def share_redaction(link: ShareLink) -> Redaction:
    return Redaction(
        tool_outputs=link.redact_tool_outputs,
        file_contents=link.redact_file_contents,
        system_prompt=link.redact_system_prompt,
        patterns=redaction.compile_patterns(list(link.redact_patterns or [])),
    )


@dataclass(frozen=True, slots=True)
class LiveShare:
    """What a guest's websocket needs: the link and the session it opens."""

    share_id: int
    session_id: str


def share_live(token: str) -> LiveShare | None:
    try:
        link = share_for_token(token)
    except ShareNotFound:
        return None
    return LiveShare(link.pk, str(link.session_id))
