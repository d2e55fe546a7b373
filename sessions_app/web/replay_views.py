"""Pages of replays: the "Replay…" form of a recorded request, and a replay group's answers
side by side with the original one.

Adapters only, as `views`: the form posts to `replay.replay_start`; the group page reads
`selectors.replay_group`. Without JavaScript the flow is: the form posts, the browser is
sent to the group page, which reloads itself (a `<meta http-equiv="refresh">`, which the
Content-Security-Policy does not govern) until every replay has answered; with
`?then=compare` a group of one then goes on to the comparison of the original answer with
the replay. The same reload serves browsers with JavaScript: a replay's turns are short,
and the page is small.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from projections.replay import ReplayGroup, ReplayGroupNotFound
from projections.request import RequestNotFound, RequestView
from runtime.errors import AgentError
from sessions_app import access, selectors
from sessions_app.errors import DomainError
from sessions_app.limits import SEQ_MAX
from sessions_app.models import Session
from sessions_app.presets import preset_name_of, presets
from sessions_app.services import ratelimit, replay
from sessions_app.web.forms import ReplayForm

FORM_TEMPLATE = "sessions/replay.html"
GROUP_TEMPLATE = "sessions/replay_group.html"
REFRESH_S = 1  # how often a group page still running reloads itself


def _session(request: HttpRequest, session_id: Any) -> Session:
    try:
        return access.session_for(request.user, session_id)
    except DomainError:
        raise Http404("no such session") from None


@login_required
@require_http_methods(["GET", "POST"])
def request_replay(request: HttpRequest, session_id: Any, seq: int) -> HttpResponse:
    """The "Replay…" form of the request recorded at `seq` (GET), and the replay (POST:
    owners only). Staff see the request and are told they may not replay it."""
    session = _session(request, session_id)
    if seq > SEQ_MAX:
        raise Http404("no such model request")
    try:
        view = selectors.request_view(session, seq)
    except RequestNotFound:
        raise Http404("no such model request") from None
    can_replay = access.can_change(request.user, session)
    names = sorted(presets())
    own = preset_name_of(session.preset)
    form = ReplayForm(
        request.POST if request.method == "POST" else None,
        preset_names=names,
        initial={"presets": [own] if own in names else []},
    )
    status, error = 200, None
    if request.method == "POST":
        if not can_replay:
            raise PermissionDenied("this session is read-only for you: only its owner replays")
        if form.is_valid():
            try:
                return _start(request, session, view, form)
            except (DomainError, AgentError) as exc:
                if isinstance(exc, ratelimit.RateLimited):
                    raise
                status, error = _status_of(exc), str(exc)
        else:
            status = 422
    context = {
        "session": session,
        "rv": view,
        "form": form,
        "can_replay": can_replay,
        "error": error,
        "max_replays": replay.MAX_REPLAYS,
    }
    return render(request, FORM_TEMPLATE, context, status=status)


def _start(
    request: HttpRequest, session: Session, view: RequestView, form: ReplayForm
) -> HttpResponse:
    data = form.cleaned_data
    plans = replay.replay_plans(
        preset_names=list(data["presets"]),
        count=int(data["count"]),
        system_prompt=data["system_prompt"] or None,
        params=form.params(),
        thinking_level=data["thinking_level"] or None,
    )
    ratelimit.rate_hit(request.user, "replay")
    started = replay.replay_start(session, view.seq, plans, view=view)
    url = reverse("session-replay-group", args=[session.id, started.group])
    if len(started.turns) == 1:
        url += "?then=compare"
    return HttpResponseRedirect(url, status=303)


def _status_of(exc: Exception) -> int:
    code = getattr(exc, "code", "invalid")
    return {"conflict": 409, "payload_mismatch": 409, "not_found": 404}.get(code, 422)


@login_required
@require_GET
def replay_group(request: HttpRequest, session_id: Any, group: int) -> HttpResponse:
    """A replay group's answers side by side with the original answer; it reloads itself
    while replays run. `?then=compare`: once a group of one has answered, the comparison of
    the original answer with the replay."""
    session = _session(request, session_id)
    if group > SEQ_MAX:
        raise Http404("no such replay")
    try:
        found = selectors.replay_group(session, group)
    except ReplayGroupNotFound:
        raise Http404("no such replay") from None
    compare = compare_urls(session, found)
    if request.GET.get("then") == "compare" and found.done and found.count == 1 and compare[0]:
        return HttpResponseRedirect(compare[0])
    context = {
        "session": session,
        "g": found,
        "answers": list(zip(found.answers, compare, strict=True)),
        "refresh_s": None if found.done else REFRESH_S,
        "then": request.GET.get("then") == "compare",
    }
    return render(request, GROUP_TEMPLATE, context)


def compare_urls(session: Session, group: ReplayGroup) -> list[str | None]:
    """The comparison page of the original answer with each replay's, once both exist."""
    base = reverse("session-compare", args=[session.id])
    original = group.original.entry_id
    return [
        f"{base}?{urlencode({'a': original, 'b': a.entry_id})}" if original and a.entry_id else None
        for a in group.answers
    ]
