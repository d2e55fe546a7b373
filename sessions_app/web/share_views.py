"""Share links on the pages: the owner's list of a session's links (make one, revoke one),
and the guest page a link opens, `/s/<token>/`.

The guest page is the session page (`views.page_response`, the same template and partials)
with a guest's parts: no composer, no actions, no header links, no other sessions; a link
to one branch shows the path to it and nothing off it (the tree's other rows, other
requests, other turns are left out before rendering); every entry and event read for it
passes through the link's redaction (`sessions_app.redaction`). A token that opens no live
link answers 404 whatever the reason. It is never indexed and never sends a referrer; it is
rate-limited per link and per client address; each full page load counts one view.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import replace
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from sessions_app import access, redaction, selectors
from sessions_app.errors import DomainError
from sessions_app.models import Session, ShareLink
from sessions_app.selectors.turns import path_turns
from sessions_app.services import ratelimit, shares
from sessions_app.web.limit_responses import client_address
from sessions_app.web.page_query import VIEWS, PageQuery
from sessions_app.web.views import page_response

GUEST_VIEWS = tuple(view for view in VIEWS if view != "files")
GUEST_HEADERS = {
    "X-Robots-Tag": "noindex, nofollow",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store, private",
}
EXPIRY_CHOICES = [("1", "1 day"), ("7", "7 days"), ("30", "30 days"), ("90", "90 days")]
PATTERNS_TEXT_MAX = redaction.PATTERNS_MAX * (redaction.PATTERN_CHARS_MAX + 2)


# --- the owner's doors ---------------------------------------------------------------------


class ShareForm(forms.Form):
    branch = forms.CharField(max_length=64, required=False, strip=True)
    expires_days = forms.ChoiceField(choices=EXPIRY_CHOICES, initial="7")
    tool_outputs = forms.BooleanField(required=False)
    file_contents = forms.BooleanField(required=False)
    system_prompt = forms.BooleanField(required=False)
    # One pattern a line.
    patterns = forms.CharField(max_length=PATTERNS_TEXT_MAX, required=False, strip=False)

    def pattern_list(self) -> list[str]:
        lines = str(self.cleaned_data.get("patterns") or "").splitlines()
        return [line for line in (raw.strip() for raw in lines) if line]


def _owned_session(request: HttpRequest, session_id: Any) -> Session:
    """The session if the signed-in user owns it: staff read others' sessions but share
    only their own (they revoke any link in the admin)."""
    try:
        return access.session_for(request.user, session_id, write=True)
    except access.ReadOnly:
        raise PermissionDenied("only the owner of this session shares it") from None
    except DomainError:
        raise Http404("no such session") from None


@login_required
@require_http_methods(["GET", "POST"])
def session_shares(request: HttpRequest, session_id: Any) -> HttpResponse:
    """The session's links; POST makes one and shows its URL, this once."""
    session = _owned_session(request, session_id)
    form = ShareForm(initial={"branch": request.GET.get("branch", "")[:64]})
    made: str | None = None
    made_branch = ""
    status = 200
    if request.method == "POST":
        ratelimit.rate_hit(request.user, "share")
        form = ShareForm(request.POST)
        if form.is_valid():
            try:
                _, token = shares.share_create(
                    session=session,
                    by=request.user,
                    branch=form.cleaned_data["branch"] or None,
                    expires_in=timedelta(days=int(form.cleaned_data["expires_days"])),
                    tool_outputs=form.cleaned_data["tool_outputs"],
                    file_contents=form.cleaned_data["file_contents"],
                    system_prompt=form.cleaned_data["system_prompt"],
                    patterns=form.pattern_list(),
                )
                made = request.build_absolute_uri(shares.share_url(token))
                made_branch = form.cleaned_data["branch"]
                form = ShareForm()
            except DomainError as exc:
                form.add_error(None, str(exc))
                status = 400
        else:
            status = 400
    context = {
        "session": session,
        "form": form,
        "made": made,
        "made_branch": made_branch,
        "links": shares.shares_of(session)[:200],
        "now": timezone.now(),
    }
    response = render(request, "sessions/shares.html", context, status=status)
    if made:
        response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def session_share_revoke(request: HttpRequest, session_id: Any, share_id: int) -> HttpResponse:
    session = _owned_session(request, session_id)
    ratelimit.rate_hit(request.user, "revoke")
    try:
        shares.share_revoke(session=session, share_id=share_id)
    except DomainError:
        raise Http404("no such share link") from None
    messages.success(request, "Revoked: the link no longer opens, and open views are closed.")
    return HttpResponseRedirect(reverse("session-shares", args=[session.id]))


# --- the guest page ------------------------------------------------------------------------


def _guest_link(request: HttpRequest, token: str) -> ShareLink:
    address = client_address(request) or "unknown"
    digest = hashlib.sha256(address.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    # Counted before the token is looked up, so guessing tokens is limited too.
    ratelimit.rate_hit_key(f"addr:{digest}", "share-view")
    try:
        link = shares.share_for_token(token)
    except shares.ShareNotFound:
        raise Http404("no such page") from None
    ratelimit.rate_hit_key(f"share:{link.pk}", "share-view")
    return link


def _guest_session(link: ShareLink, rules: redaction.Redaction) -> Session:
    """The session as its guest sees it: title and preset redacted (a copy, never saved)."""
    session = copy.copy(link.session)
    session.title = rules.text(session.title)
    session.preset = dict(rules.preset(session.preset or {}))
    return session


def _guest_query(session: Session, link: ShareLink, query: PageQuery) -> PageQuery:
    """What a guest's URL may show: no edit or compare marks; with a branch, only its path
    (the branch's leaf, its turns and its requests)."""
    query = replace(query, edit=None, mark=None)
    if query.view not in GUEST_VIEWS:
        query = replace(query, view="chat", file=None, files_from=None)
    if not link.branch:
        return query
    # The tree around the branch only: no cursor reads another window of it.
    query = replace(query, leaf=link.branch, scope="branch", tree_at=None, tree_rows=None)
    if query.turn is not None and query.turn not in path_turns(session, link.branch):
        query = replace(query, turn=None, span=None)
    if query.request is not None:
        listed = selectors.requests_of(session, link.branch, everywhere=False)
        if query.request not in {ref.seq for ref in listed.refs}:
            query = replace(query, request=None)
    return query


def _branch_only(context: dict[str, Any]) -> dict[str, Any]:
    """The tree's rows on the branch's path alone."""
    if "tree_rows" in context:
        rows = [row for row in context["tree_rows"] if row.node.on_active_path]
        context["tree_rows"] = rows
        # Rows alone: no window beside them, no run folding the path away.
        context["tree_items"] = rows
    return context


@require_GET
def shared_session(request: HttpRequest, token: str) -> HttpResponse:
    link = _guest_link(request, token)
    rules = shares.share_redaction(link)
    session = _guest_session(link, rules)
    base = {
        "session": session,
        # No Files view: a workspace's files are not facts the link's redaction reads through,
        # so a guest sees none of them (nor the trace's diffs of them).
        "views": GUEST_VIEWS,
        "can_write": False,
        "is_owner": False,
        "guest": True,
        "guest_branch": bool(link.branch),
        "redacted": rules.any,
        "page_path": shares.share_url(token),
        "live_socket": f"/ws/sessions/shared/{token}/",
    }
    with redaction.redacting(rules):
        query = _guest_query(session, link, PageQuery.parse(request.GET))
        base["q"] = query
        response = page_response(
            request,
            session,
            query,
            base=base,
            adjust=_branch_only if link.branch else None,
        )
    if request.headers.get("HX-Request") != "true":
        shares.share_viewed(link)
    for name, value in GUEST_HEADERS.items():
        response[name] = value
    return response
