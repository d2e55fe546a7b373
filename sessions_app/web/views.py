"""Pages: the session list and the session page (three views and the branch tree), and the
forms that change a session.

Adapters only: parse the request, call one service (writes) or selector (reads, with the
windows they take from `PageQuery`), render one template. An htmx request gets a named
partial of the same template (`"sessions/session.html#view"`), never a second copy of the
markup; every link also has a plain `href`, so read-only pages work without JavaScript.
Access is decided by `sessions_app.access` alone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseBase,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.shortcuts import render
from django.urls import reverse
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from projections.trace_blocks import trace_blocks
from runtime.errors import AgentError
from sessions_app import access, redaction, selectors, services
from sessions_app.errors import DomainError
from sessions_app.events import ENTRY_KEY_MAX
from sessions_app.models import Session
from sessions_app.selectors import entry_search
from sessions_app.selectors.ceilings import megabytes, whole_read_bytes
from sessions_app.selectors.subagents import (
    subagent_calls,
    subagent_children,
    subagent_lineage,
)
from sessions_app.selectors.workspace_diffs import (
    branches_diff,
    tool_call_diff,
    tool_calls_changing_files,
)
from sessions_app.services import pi_io, ratelimit
from sessions_app.streaming import streamed
from sessions_app.web import html_export, tree_parts
from sessions_app.web.files_views import files_panel
from sessions_app.web.forms import (
    ApprovalForm,
    CompactForm,
    ForkForm,
    LabelForm,
    LeafForm,
    MessageForm,
    RenameForm,
    ResendForm,
    SearchForm,
    SessionImportForm,
    SessionNewForm,
)
from sessions_app.web.page_query import VIEWS, PageQuery

log = logging.getLogger("strand.views")

TEMPLATE = "sessions/session.html"
TREE_FOUND_MAX = 20  # hits of the tree's search box


def _is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true" and not request.headers.get(
        "HX-History-Restore-Request"
    )


def _session_or_404(request: HttpRequest, session_id: Any, *, write: bool = False) -> Session:
    try:
        return access.session_for(request.user, session_id, write=write)
    except access.ReadOnly:
        raise PermissionDenied("this session is read-only for you") from None
    except DomainError:
        raise Http404("no such session") from None


def _shown_query(request: HttpRequest) -> PageQuery:
    """The page shown where a form was sent from the tree: for htmx, the browser's current
    URL (a view switch pushes its URL without drawing the tree, and so the tree's forms,
    again); else the form's `return_to`."""
    current = request.headers.get("HX-Current-URL") if _is_htmx(request) else None
    if current:
        return PageQuery.from_querystring(urlsplit(current).query[:2000])
    return _return_query(request)


def _return_query(request: HttpRequest) -> PageQuery:
    """The page a form came from: its `return_to` field, or the htmx current URL."""
    given = request.POST.get("return_to")
    if given is None and (current := request.headers.get("HX-Current-URL")):
        given = urlsplit(current).query
    return PageQuery.from_querystring(str(given or "").lstrip("?")[:2000])


# --- the session list ----------------------------------------------------------------------


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    search = SearchForm(request.GET)
    q = search.cleaned_data["q"] if search.is_valid() else ""
    if q:
        ratelimit.rate_hit(request.user, "search")
    context = {
        "rows": selectors.session_rows(request.user, query=q),
        "q": q,
        "new_form": SessionNewForm(user=request.user),
        "import_form": SessionImportForm(),
    }
    if _is_htmx(request) and request.headers.get("HX-Target") == "session-rows":
        return render(request, "sessions/list.html#rows", context)
    return render(request, "sessions/list.html", context)


@login_required
@require_POST
def session_new(request: HttpRequest) -> HttpResponseBase:
    ratelimit.rate_hit(request.user, "session")
    form = SessionNewForm(request.POST, user=request.user)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return HttpResponseRedirect(reverse("home"))
    session = services.session_create(
        owner=request.user,  # type: ignore[arg-type]
        title=form.cleaned_data["title"] or "New session",
        cwd=form.cleaned_data["cwd"],
        preset=form.cleaned_data["preset"],
    )
    return _redirect(request, reverse("session", args=[session.id]))


@login_required
@require_POST
def session_import(request: HttpRequest) -> HttpResponseBase:
    form = SessionImportForm(request.POST, request.FILES)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return HttpResponseRedirect(reverse("home"))
    upload = form.cleaned_data["file"]
    ratelimit.rate_hit(request.user, "import")
    name = form.cleaned_data["title"] or _title_from_filename(upload.name)
    if request.headers.get("Accept") == IMPORT_PROGRESS:
        progress = _import_progress(request, upload, name)
        response = StreamingHttpResponse(
            streamed(progress, request, gather=0), content_type=IMPORT_PROGRESS
        )
        response["Cache-Control"] = "no-store"
        response["X-Accel-Buffering"] = "no"  # a proxy passes each line on as it comes
        return response
    try:
        result = pi_io.pi_import(
            source=upload.file,
            owner=request.user,  # type: ignore[arg-type]
            name=name,
        )
    except DomainError as exc:
        messages.error(request, f"Could not import {upload.name}: {exc}")
        return HttpResponseRedirect(reverse("home"))
    if result.warnings:
        messages.warning(
            request, f"Imported {result.entries} entries; {len(result.warnings)} lines skipped."
        )
    return _redirect(request, reverse("session", args=[result.session.id]))


# The import form's script asks for its answer as JSON lines: progress while the file is
# written, then where the session is (or what is wrong with the file).
IMPORT_PROGRESS = "application/x-ndjson"


def _import_progress(request: HttpRequest, upload: Any, name: str) -> Iterator[str]:
    """The import as JSON lines: `{"bytes", "total", "entries"}` every
    `pi_io.PROGRESS_EVERY` entries, then `{"session": url, "entries", "warnings"}` or
    `{"error": text}` (nothing written). The import runs as the lines are read, in the
    request's thread; a reader that leaves stops it, and its transaction rolls back."""
    total = upload.size or 0
    steps = pi_io.pi_import_steps(
        source=upload.file,
        owner=request.user,  # type: ignore[arg-type]
        name=name,
    )
    try:
        while True:
            try:
                done, entries = next(steps)
            except StopIteration as finished:
                result = finished.value
                break
            yield _line({"bytes": done, "total": total, "entries": entries})
    except DomainError as exc:
        yield _line({"error": f"Could not import {upload.name}: {exc}"})
        return
    finally:
        steps.close()
    yield _line(
        {
            "session": reverse("session", args=[result.session.id]),
            "entries": result.entries,
            "warnings": len(result.warnings),
        }
    )


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False) + "\n"


def _title_from_filename(name: str) -> str:
    stem = name.rsplit("/", 1)[-1].removesuffix(".jsonl")
    return stem[:200] or "Imported session"


# --- the session page --------------------------------------------------------------------


@login_required
@require_GET
def session_page(request: HttpRequest, session_id: Any) -> HttpResponse:
    session = _session_or_404(request, session_id)
    query = PageQuery.parse(request.GET)
    if query.tree_q and not _is_htmx(request):  # the tree's search, without JavaScript
        found = tree_found_context(request, session, query)
        return page_response(request, session, query, adjust=lambda c: {**c, **found})
    return page_response(request, session, query)


def tree_found_context(request: HttpRequest, session: Session, query: PageQuery) -> dict[str, Any]:
    """The entries of the session that say the words of the tree's search box, asked of
    the search index (bounded: one page of hits); each opens the tree's window around it."""
    if not query.tree_q:
        return {"tree_found": None}
    ratelimit.rate_hit(request.user, "search")
    try:
        page = entry_search.entries_search(
            request.user,
            q=query.tree_q,
            filters=entry_search.SearchFilters(session_id=session.id),
            limit=TREE_FOUND_MAX,
        )
    except DomainError as exc:
        return {"tree_found": [], "tree_found_error": str(exc)}
    hits = [
        {"hit": hit, "url": query.querystring(entry=hit.entry_id, tree_at=None)}
        for hit in page.hits
    ]
    return {"tree_found": hits, "tree_found_more": page.next_cursor is not None}


# A page's parts before rendering: the guest page of a share link
# (`sessions_app.web.share_views`) leaves out of them what its guest may not see.
Adjust = Callable[[dict[str, Any]], dict[str, Any]]


def page_response(
    request: HttpRequest,
    session: Session,
    query: PageQuery,
    *,
    base: dict[str, Any] | None = None,
    adjust: Adjust | None = None,
) -> HttpResponse:
    """The session page, or the part of it an htmx request asks for. `base` replaces what
    the page knows of its viewer (`_base_context`); `adjust` changes the parts built."""
    fragment = request.GET.get("fragment") if _is_htmx(request) else None
    target = request.headers.get("HX-Target") if _is_htmx(request) else None
    part: tuple[str | None, Callable[[Session, PageQuery], dict[str, Any]]]
    if fragment == "live":
        return _render_live(request, session, query, base=base, adjust=adjust)
    if fragment == "trace-older":
        part = ("trace-older", trace_older_context)
    elif fragment == "tree-more":
        part = ("tree-rows", tree_more_context)
    elif fragment == "tree-found" and base is None:
        part = ("tree-found", lambda s, q: tree_found_context(request, s, q))
    elif fragment == "span" or target == "span-detail":
        part = ("span-detail", span_context)
    elif target in ("view", "view-body"):
        part = ("view", view_context)
    elif target == "tree":
        part = ("tree", tree_context)
    else:
        part = (None, page_context)
    return _render(request, session, query, *part, base=base, adjust=adjust)


def _base_context(request: HttpRequest, session: Session, query: PageQuery) -> dict[str, Any]:
    return {
        "session": session,
        "q": query,
        "views": VIEWS,
        "can_write": access.can_change(request.user, session),
        "is_owner": session.owner_id == request.user.pk,
        # A subagent's child: the sessions above it, for the breadcrumbs.
        "lineage": [s for s in subagent_lineage(session) if access.can_see(request.user, s)],
        "observed": selectors.session_is_observed(session),
    }


def _render(
    request: HttpRequest,
    session: Session,
    query: PageQuery,
    partial: str | None,
    build: Callable[[Session, PageQuery], dict[str, Any]],
    *,
    base: dict[str, Any] | None = None,
    adjust: Adjust | None = None,
) -> HttpResponse:
    context = {**(base or _base_context(request, session, query)), **build(session, query)}
    if adjust is not None:
        context = adjust(context)
    name = f"{TEMPLATE}#{partial}" if partial else TEMPLATE
    return render(request, name, context)


def _render_live(
    request: HttpRequest,
    session: Session,
    query: PageQuery,
    *,
    base: dict[str, Any] | None = None,
    adjust: Adjust | None = None,
) -> HttpResponse:
    """The view plus out-of-band swaps for the tree, the composer and the header. (With
    `base`, its caller read the session fresh already.)"""
    if base is None:
        session = selectors.session_reloaded(session)
    response = _render(request, session, query, "live", page_context, base=base, adjust=adjust)
    response["HX-Retarget"] = "#view"
    response["HX-Reswap"] = "outerHTML"
    return response


def _after_write(request: HttpRequest, session: Session, query: PageQuery) -> HttpResponse:
    """What a form that changed the session answers: the refreshed page in place for
    htmx (its URL replaced when it changed), a redirect to the page otherwise."""
    if _is_htmx(request):
        response = _render_live(request, session, query)
        response["HX-Replace-Url"] = query.url(session)
        return response
    return HttpResponseRedirect(query.url(session))


def _redirect(request: HttpRequest, url: str) -> HttpResponse:
    if _is_htmx(request):
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return HttpResponseRedirect(url)


def _form_errors(form: Any) -> str:
    return "; ".join(str(e) for errors in form.errors.values() for e in errors)


# --- changes to a session ----------------------------------------------------------------


@login_required
@require_POST
def session_rename(request: HttpRequest, session_id: Any) -> HttpResponse:
    session = _session_or_404(request, session_id, write=True)
    query = _return_query(request)  # before the write: a query it refuses changes nothing
    ratelimit.rate_hit(request.user, "rename")
    form = RenameForm(request.POST)
    if form.is_valid():
        try:
            session = services.session_rename(session=session, title=form.cleaned_data["title"])
        except DomainError as exc:
            messages.error(request, str(exc))
    else:
        messages.error(request, _form_errors(form))
    return _after_write(request, session, query)


@login_required
@require_http_methods(["GET", "POST"])
def session_delete(request: HttpRequest, session_id: Any) -> HttpResponseBase:
    from sessions_app.agent import agent_stop_turn

    session = _session_or_404(request, session_id, write=True)
    if request.method == "GET":
        return render(request, "sessions/delete.html", {"session": session})
    ratelimit.rate_hit(request.user, "delete")
    title = str(session)
    try:
        agent_stop_turn(session.id)  # a running turn first: none is left behind
        services.session_delete(session=session, by=request.user)  # type: ignore[arg-type]
    except (DomainError, AgentError) as exc:
        messages.error(request, str(exc))
        return _redirect(request, reverse("session", args=[session.id]))
    messages.success(request, f"Deleted “{title}”.")
    return _redirect(request, reverse("home"))


@login_required
@require_POST
def session_leaf(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Move the current leaf (a click in the tree); the views follow it."""
    session = _session_or_404(request, session_id, write=True)
    ratelimit.rate_hit(request.user, "navigate")
    given = _shown_query(request)
    # The view shown stays, and the Files view keeps its file: the same path at the entry
    # clicked.
    query = replace(given.view_only(), view=given.view, file=given.file)
    form = LeafForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return _after_write(request, session, query)
    try:
        # Refused while a turn runs, as every leaf move is (the service holds the turn lock).
        services.session_move_leaf(session=session, to=form.target())
    except (DomainError, AgentError) as exc:
        messages.error(request, str(exc))
    session = selectors.session_reloaded(session)
    return _after_write(request, session, replace(query, leaf=None))


@login_required
@require_POST
def session_label(request: HttpRequest, session_id: Any) -> HttpResponse:
    session = _session_or_404(request, session_id, write=True)
    ratelimit.rate_hit(request.user, "label")
    form = LabelForm(request.POST)
    query = _return_query(request)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
    elif selectors.session_turn_state(session).running:
        messages.error(request, "A turn is running: label entries once it ends.")
    else:
        try:
            services.session_label(
                session=session,
                entry_id=form.cleaned_data["entry_id"],
                label=form.cleaned_data["label"],
            )
        except DomainError as exc:
            messages.error(request, str(exc))
    session = selectors.session_reloaded(session)
    return _after_write(request, session, replace(query, leaf=None))


@login_required
@require_POST
def session_fork(request: HttpRequest, session_id: Any) -> HttpResponseBase:
    session = _session_or_404(request, session_id)
    ratelimit.rate_hit(request.user, "fork")
    form = ForkForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return _after_write(request, session, _return_query(request))
    try:
        fork = services.session_fork(
            session=session,
            entry_id=form.cleaned_data["entry_id"],
            owner=request.user,  # type: ignore[arg-type]
            title=form.cleaned_data["title"] or None,
        )
    except DomainError as exc:
        messages.error(request, str(exc))
        return _after_write(request, session, _return_query(request))
    messages.success(request, "Forked into this new session.")
    return _redirect(request, reverse("session", args=[fork.id]))


# --- exports -----------------------------------------------------------------------------


# The export is a file to open offline, with its own inline script and styles, and it is
# served as a download. Should a browser render it from this URL all the same, it runs
# sandboxed: an opaque origin that cannot read Strand's cookies or pages, and no network.
# (The pages' own policy, which allows no inline script, is in settings.)
EXPORT_CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
    "sandbox allow-scripts allow-downloads"
)


COMPARE_PAGE_ROWS = 50  # rows of a comparison on one page; "show more" reads the next


@login_required
@require_GET
def session_compare(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Two branches side by side from their divergence: `a` (default: the current leaf) and
    `b`, `COMPARE_PAGE_ROWS` rows from `offset` on."""
    session = _session_or_404(request, session_id)
    a = request.GET.get("a") or session.leaf_entry_id
    b = request.GET.get("b")
    if not a or not b:
        return HttpResponseBadRequest("Name the two entries to compare: ?a=…&b=…")
    for entry_id in (a, b):
        if len(entry_id) > ENTRY_KEY_MAX or not selectors.entry_exists(session, entry_id):
            raise Http404("no such entry in this session")
    try:
        offset = max(0, int(request.GET.get("offset") or 0))
    except ValueError:
        return HttpResponseBadRequest("offset must be a number")
    view = selectors.branch_comparison(session, a, b, offset=offset, limit=COMPARE_PAGE_ROWS)
    # htmx: "show more" puts the next window in place of its own row; a live update
    # redraws the summary (the same template's partials).
    target = request.headers.get("HX-Target") if _is_htmx(request) else None
    # Without `a`, A is the current leaf, and a live update follows it as it moves on.
    follows = not request.GET.get("a")
    context = {
        "session": session,
        "a": a,
        "b": b,
        "cmp": view,
        "follows": follows,
        "files_diff": branches_diff(session, a, b) if target != "compare-more" else None,
    }
    partial = {"compare-more": "#compare-rows", "view": "#compare-summary"}.get(target or "", "")
    return render(request, f"sessions/compare.html{partial}", context)


@login_required
@require_GET
def session_export_html(request: HttpRequest, session_id: Any) -> StreamingHttpResponse:
    session = _session_or_404(request, session_id)
    chunks = html_export.export_stream(session, request)
    response = StreamingHttpResponse(chunks, content_type="text/html; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_filename(session)}.html"'
    response["Content-Security-Policy"] = EXPORT_CONTENT_SECURITY_POLICY
    return response


@login_required
@require_GET
def session_export_jsonl(request: HttpRequest, session_id: Any) -> StreamingHttpResponse:
    session = _session_or_404(request, session_id)
    exported = pi_io.pi_export_lines(session, selectors.entry_stream(session))
    lines = (line if line.endswith("\n") else line + "\n" for line in exported)
    response = StreamingHttpResponse(streamed(lines, request), content_type="application/x-ndjson")
    response["Content-Disposition"] = f'attachment; filename="{_filename(session)}.jsonl"'
    return response


def _filename(session: Session) -> str:
    return (slugify(session.title)[:60] or "session") + f"-{str(session.id)[:8]}"


# --- the agent: send, steer, follow up, cancel, approve, compact, navigate -----------------
#
# `sessions_app.agent` runs turns on its own loop thread, so these are plain views: a turn
# outlives the request that started it, and its events reach the page over the websocket.


def _agent_call(request: HttpRequest, work: Callable[[], Any]) -> bool:
    """Run one agent service; its refusal (a turn running, nothing to compact…) becomes a
    message on the page."""
    try:
        work()
    except (DomainError, AgentError) as exc:
        if isinstance(exc, ratelimit.RateLimited):
            raise  # a 429 page (`limit_responses`), as every rate limit answers
        messages.error(request, str(exc))
        return False
    return True


@login_required
@require_POST
def session_send(request: HttpRequest, session_id: Any) -> HttpResponse:
    from sessions_app.agent import agent_send_message

    session = _session_or_404(request, session_id, write=True)
    query = _return_query(request)
    if selectors.session_is_observed(session):
        messages.error(request, "This session is observed: nothing runs in it.")
        return _after_write(request, session, query)
    form = MessageForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return _after_write(request, session, query)
    text, mode = form.cleaned_data["text"], form.cleaned_data["mode"]
    ratelimit.rate_hit(request.user, "message")
    _agent_call(request, lambda: agent_send_message(session.id, text, mode=mode))
    session = selectors.session_reloaded(session)
    return _after_write(request, session, replace(query, leaf=None, entry=None))


@login_required
@require_POST
def session_resend(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Edit and resend a user message: the leaf goes to the message's parent and the new
    text is sent from there, so it becomes the message's sibling (a new branch)."""
    from sessions_app.agent import agent_check_turn_room, agent_send_message

    session = _session_or_404(request, session_id, write=True)
    query = _return_query(request).view_only()
    if selectors.session_is_observed(session):
        messages.error(request, "This session is observed: nothing runs in it.")
        return _after_write(request, session, query)
    form = ResendForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return _after_write(request, session, query)
    ratelimit.rate_hit(request.user, "message")
    agent_check_turn_room(session.id)  # at the cap, the leaf does not move either
    try:
        services.session_leaf_before(session=session, entry_id=form.cleaned_data["entry_id"])
    except (DomainError, AgentError) as exc:
        messages.error(request, str(exc))
        return _after_write(request, session, query)
    text = form.cleaned_data["text"]
    _agent_call(request, lambda: agent_send_message(session.id, text))
    session = selectors.session_reloaded(session)
    return _after_write(request, session, replace(query, leaf=None))


@login_required
@require_POST
def session_retry(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Ask the model again from where a failed reply was asked: a new turn, whose answer
    becomes the failed reply's sibling."""
    from sessions_app.agent import agent_retry

    session = _session_or_404(request, session_id, write=True)
    query = _return_query(request)
    if selectors.session_is_observed(session):
        messages.error(request, "This session is observed: nothing runs in it.")
        return _after_write(request, session, query)
    entry_id = str(request.POST.get("entry_id") or "") or None
    if entry_id is not None and len(entry_id) > ENTRY_KEY_MAX:
        messages.error(request, "That is not an entry of this session.")
        return _after_write(request, session, query)

    # Counted outside `_agent_call`, which would turn the refusal into a message: over the
    # limit the page answers 429 like every other limited door.
    ratelimit.rate_hit(request.user, "message")
    _agent_call(request, lambda: agent_retry(session.id, entry_id))
    session = selectors.session_reloaded(session)
    return _after_write(request, session, replace(query, leaf=None, entry=None))


@login_required
@require_POST
def session_cancel(request: HttpRequest, session_id: Any) -> HttpResponse:
    from sessions_app.agent import agent_cancel

    session = _session_or_404(request, session_id, write=True)
    query = _return_query(request)
    ratelimit.rate_hit(request.user, "cancel")
    _agent_call(request, lambda: agent_cancel(session.id))
    return _after_write(request, session, query)


@login_required
@require_POST
def session_approval(request: HttpRequest, session_id: Any, approval_id: str) -> HttpResponse:
    from sessions_app.agent import agent_decide_approval

    session = _session_or_404(request, session_id, write=True)
    query = _return_query(request)
    ratelimit.rate_hit(request.user, "approval")
    form = ApprovalForm(request.POST)
    if form.is_valid():
        outcome = form.cleaned_data["outcome"]
        by = request.user.get_username()
        _agent_call(
            request,
            lambda: agent_decide_approval(session.id, approval_id[:64], outcome=outcome, by=by),
        )
    else:
        messages.error(request, _form_errors(form))
    return _after_write(request, session, query)


@login_required
@require_POST
def session_compact(request: HttpRequest, session_id: Any) -> HttpResponse:
    from sessions_app.agent import agent_compact

    session = _session_or_404(request, session_id, write=True)
    query = _return_query(request)
    ratelimit.rate_hit(request.user, "compact")
    form = CompactForm(request.POST)
    instructions = (form.cleaned_data["instructions"] if form.is_valid() else "") or None
    if _agent_call(request, lambda: agent_compact(session.id, instructions=instructions)):
        messages.success(request, "Compacted: older messages are summarized in the context.")
    session = selectors.session_reloaded(session)
    return _after_write(request, session, query)


@login_required
@require_POST
def session_leaf_summary(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Leave the current branch for another entry, with a summary of the branch left."""
    from sessions_app.agent import agent_navigate

    session = _session_or_404(request, session_id, write=True)
    ratelimit.rate_hit(request.user, "summary")
    query = _return_query(request).view_only()
    form = LeafForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return _after_write(request, session, query)
    target = form.target()
    instructions = form.cleaned_data["instructions"] or None
    _agent_call(
        request,
        lambda: agent_navigate(session.id, target, summarize=True, instructions=instructions),
    )
    session = selectors.session_reloaded(session)
    return _after_write(request, session, replace(query, leaf=None))


# --- page parts: the selectors' windows under the template's names ----------------------------


def page_context(session: Session, query: PageQuery) -> dict[str, Any]:
    """Everything of the full page: state, tree and the selected view."""
    leaf = selectors.shown_leaf(session, query.leaf)
    return {
        "state": selectors.session_turn_state(session),
        **_tree_part(session, query, leaf),
        **_view_part(session, query, leaf),
    }


def view_context(session: Session, query: PageQuery) -> dict[str, Any]:
    return _view_part(session, query, selectors.shown_leaf(session, query.leaf))


def tree_context(session: Session, query: PageQuery) -> dict[str, Any]:
    return _tree_part(session, query, selectors.shown_leaf(session, query.leaf))


def _tree_part(session: Session, query: PageQuery, leaf: str | None) -> dict[str, Any]:
    part = tree_parts.tree_part(session, query, leaf)
    part["subagents"] = subagent_children(session)
    return part


def tree_more_context(session: Session, query: PageQuery) -> dict[str, Any]:
    """The lines of one further window of the tree, in place of the link that named it."""
    leaf = selectors.shown_leaf(session, query.leaf)
    return tree_parts.tree_part(session, query, leaf, fragment=True)


def _view_part(session: Session, query: PageQuery, leaf: str | None) -> dict[str, Any]:
    part: dict[str, Any] = {
        "leaf": leaf,
        "current_leaf": session.leaf_entry_id,
        "browsing": leaf != session.leaf_entry_id,
        "view": query.view,
    }
    if query.view == "trace":
        part.update(_trace_part(session, query, leaf))
    elif query.view == "files":
        part.update(files_panel(session, query, leaf))
    elif query.view == "context":
        window = selectors.context_window(
            session,
            leaf,
            request=query.request,
            everywhere=query.scope == "all",
            everything=query.all,
        )
        part.update(window.as_template_context())
    else:
        part.update(_chat_part(session, query, leaf))
    return part


def _chat_part(session: Session, query: PageQuery, leaf: str | None) -> dict[str, Any]:
    """The chat of the path's latest entries (all of it with `?all=1`)."""
    window = selectors.chat_window(session, leaf, entry=query.entry, everything=query.all)
    return {
        "chat": window.chat,
        "subagent_calls": subagent_calls(session),
        "items": window.chat.items,
        "hidden_items": window.above,
        # Where the window above ends, when even "everything" stopped at its ceiling.
        "chat_older_end": window.older_end if query.all else None,
        "whole_read_mb": megabytes(whole_read_bytes()),
    }


def _trace_window(session: Session, query: PageQuery, leaf: str | None) -> dict[str, Any]:
    window = selectors.trace_window(
        session, leaf, everywhere=query.scope == "all", before=query.before
    )
    blocks = trace_blocks(window.trace)
    calls = [b.row.span.key for block in blocks for b in block.bars if b.row.span.kind == "tool"]
    if redaction.active() is not None:
        calls = []  # a guest of a share link sees no files (sessions_app.web.share_views)
    return {
        "trace": window.trace,
        "blocks": blocks,
        # Tool calls that changed files, with how many: a mark on their rows.
        "files_changed": {
            f"tool-{call_id}": count
            for call_id, count in tool_calls_changing_files(
                session, [key.removeprefix("tool-") for key in calls]
            ).items()
        },
        "older": window.older,
        "turn_count": window.turn_count,
        "turns_complete": window.complete,
    }


def _trace_part(session: Session, query: PageQuery, leaf: str | None) -> dict[str, Any]:
    part = _trace_window(session, query, leaf)
    part["selected"] = selectors.selected_span(session, query.span, query.turn, part["trace"])
    part.update(_span_files(session, part["selected"]))
    return part


def trace_older_context(session: Session, query: PageQuery) -> dict[str, Any]:
    return _trace_window(session, query, selectors.shown_leaf(session, query.leaf))


def span_context(session: Session, query: PageQuery) -> dict[str, Any]:
    selected = selectors.selected_span(session, query.span, query.turn, None)
    return {"selected": selected, **_span_files(session, selected)}


def _span_files(session: Session, span: Any) -> dict[str, Any]:
    """What a selected tool call changed in the workspace."""
    if span is None or span.kind != "tool" or redaction.active() is not None:
        return {}
    return {"span_files": tool_call_diff(session, span.key.removeprefix("tool-"))}
