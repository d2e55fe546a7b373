"""Pages: the session list and the session page (three views and the branch tree), and the
forms that change a session.

Adapters only: parse the request, call one service (writes) or the reads below plus a
projection, render one template. An htmx request gets a named partial of the same template
(`"sessions/session.html#view"`), never a second copy of the markup; every link also has a
plain `href`, so read-only pages work without JavaScript. Access is decided by
`sessions_app.access` alone.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.shortcuts import render
from django.urls import reverse
from django.utils.text import slugify
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from projections.chat import content_text, project_chat
from projections.records import EntryRecord
from projections.request import (
    ContextMessage,
    RequestNotFound,
    RequestView,
    diff_requests,
)
from projections.tokens import estimate_tokens
from projections.trace import (
    DEFAULT_PAGE_TURNS,
    TraceRow,
    TraceSpan,
    TraceView,
    pick_turns,
    project_trace,
)
from projections.tree import project_tree
from sessions_app import access, pi_io, ratelimit, selectors, services, store
from sessions_app.errors import DomainError
from sessions_app.events import ENTRY_KEY_MAX
from sessions_app.forms import (
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
from sessions_app.models import Entry, Event, Session
from sessions_app.search import message_text_vector

log = logging.getLogger("strand.views")

VIEWS = ("chat", "trace", "context")
TEMPLATE = "sessions/session.html"


# --- what a page URL says ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PageQuery:
    """The query string of a session page; every field has its own URL parameter."""

    view: str = "chat"
    leaf: str | None = None  # show this leaf instead of the current one (a deep link)
    entry: str | None = None  # scroll to and highlight this entry
    request: int | None = None  # context: the `request/sent` seq (default: the latest)
    before: int | None = None  # trace: the page of turns before this turn
    span: str | None = None  # trace: the selected span
    turn: int | None = None  # trace: the selected span's turn
    scope: str = "branch"  # trace and context: the shown branch, or "all"
    all: bool = False  # chat and context: everything, not only the latest window
    tree: bool = False  # the whole tree, not only the rows around the shown leaf
    edit: str | None = None  # chat: the user message being edited (to resend)

    @classmethod
    def parse(cls, params: Mapping[str, Any]) -> PageQuery:
        def text(name: str, limit: int = 64) -> str | None:
            value = params.get(name)
            value = value[-1] if isinstance(value, list) else value
            return str(value).strip()[:limit] or None if value else None

        def number(name: str) -> int | None:
            value = text(name, 20)
            try:
                return int(value) if value is not None else None
            except ValueError:
                return None

        view = text("view")
        return cls(
            view=view if view in VIEWS else "chat",
            leaf=text("leaf"),
            entry=text("entry"),
            request=number("request"),
            before=number("before"),
            span=text("span", 200),
            turn=number("turn"),
            scope="all" if text("scope") == "all" else "branch",
            all=text("all") == "1",
            tree=text("tree") == "1",
            edit=text("edit"),
        )

    @classmethod
    def from_querystring(cls, query: str) -> PageQuery:
        return cls.parse(parse_qs(query))

    def params(self, **changes: Any) -> dict[str, str]:
        changed = replace(self, **changes)
        default = PageQuery()
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(changed, f.name)
            if value == getattr(default, f.name) or value is None:
                continue
            out[f.name] = "1" if value is True else str(value)
        return out

    def querystring(self, **changes: Any) -> str:
        params = self.params(**changes)
        return "?" + urlencode(params) if params else ""

    def url(self, session: Session, **changes: Any) -> str:
        return reverse("session", args=[session.id]) + self.querystring(**changes)

    def view_only(self) -> PageQuery:
        """What a view switch keeps: the branch shown, nothing view-specific."""
        return PageQuery(leaf=self.leaf, tree=self.tree)


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
        "rows": session_rows(request.user, query=q),
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
    try:
        result = pi_io.pi_import(
            source=upload.file,
            owner=request.user,  # type: ignore[arg-type]
            name=form.cleaned_data["title"] or _title_from_filename(upload.name),
        )
    except DomainError as exc:
        messages.error(request, f"Could not import {upload.name}: {exc}")
        return HttpResponseRedirect(reverse("home"))
    if result.warnings:
        messages.warning(
            request, f"Imported {result.entries} entries; {len(result.warnings)} lines skipped."
        )
    return _redirect(request, reverse("session", args=[result.session.id]))


def _title_from_filename(name: str) -> str:
    stem = name.rsplit("/", 1)[-1].removesuffix(".jsonl")
    return stem[:200] or "Imported session"


# --- the session page --------------------------------------------------------------------


@login_required
@require_GET
def session_page(request: HttpRequest, session_id: Any) -> HttpResponse:
    session = _session_or_404(request, session_id)
    query = PageQuery.parse(request.GET)
    fragment = request.GET.get("fragment") if _is_htmx(request) else None
    target = request.headers.get("HX-Target") if _is_htmx(request) else None
    if fragment == "live":
        return _render_live(request, session, query)
    if fragment == "trace-older":
        return _render(request, session, query, "trace-older", trace_older_context)
    if fragment == "span" or target == "span-detail":
        return _render(request, session, query, "span-detail", span_context)
    if target in ("view", "view-body"):
        return _render(request, session, query, "view", view_context)
    if target == "tree":
        return _render(request, session, query, "tree", tree_context)
    return _render(request, session, query, None, page_context)


def _base_context(request: HttpRequest, session: Session, query: PageQuery) -> dict[str, Any]:
    return {
        "session": session,
        "q": query,
        "views": VIEWS,
        "can_write": access.can_change(request.user, session),
        "is_owner": session.owner_id == request.user.pk,
    }


def _render(
    request: HttpRequest,
    session: Session,
    query: PageQuery,
    partial: str | None,
    build: Callable[[Session, PageQuery], dict[str, Any]],
) -> HttpResponse:
    context = {**_base_context(request, session, query), **build(session, query)}
    name = f"{TEMPLATE}#{partial}" if partial else TEMPLATE
    return render(request, name, context)


def _render_live(request: HttpRequest, session: Session, query: PageQuery) -> HttpResponse:
    """The view plus out-of-band swaps for the tree, the composer and the header."""
    session.refresh_from_db()
    response = _render(request, session, query, "live", page_context)
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
    form = RenameForm(request.POST)
    if form.is_valid():
        try:
            session = services.session_rename(session=session, title=form.cleaned_data["title"])
        except DomainError as exc:
            messages.error(request, str(exc))
    else:
        messages.error(request, _form_errors(form))
    return _after_write(request, session, _return_query(request))


@login_required
@require_http_methods(["GET", "POST"])
def session_delete(request: HttpRequest, session_id: Any) -> HttpResponseBase:
    session = _session_or_404(request, session_id, write=True)
    if request.method == "GET":
        return render(request, "sessions/delete.html", {"session": session})
    title = str(session)
    services.session_delete(session=session, by=request.user)  # type: ignore[arg-type]
    messages.success(request, f"Deleted “{title}”.")
    return _redirect(request, reverse("home"))


@login_required
@require_POST
def session_leaf(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Move the current leaf (a click in the tree); the views follow it."""
    session = _session_or_404(request, session_id, write=True)
    query = _return_query(request).view_only()
    form = LeafForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return _after_write(request, session, query)
    if turn_state(session).running:
        messages.error(request, "A turn is running: wait for it or cancel it first.")
        return _after_write(request, session, query)
    try:
        services.session_move_leaf(session=session, to=form.target())
    except DomainError as exc:
        messages.error(request, str(exc))
    session.refresh_from_db()
    return _after_write(request, session, replace(query, leaf=None))


@login_required
@require_POST
def session_label(request: HttpRequest, session_id: Any) -> HttpResponse:
    session = _session_or_404(request, session_id, write=True)
    form = LabelForm(request.POST)
    query = _return_query(request)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
    elif turn_state(session).running:
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
    session.refresh_from_db()
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


@login_required
@require_GET
def session_export_html(request: HttpRequest, session_id: Any) -> StreamingHttpResponse:
    from sessions_app import html_export  # it reads through this module's page reads

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
    lines = (
        line if line.endswith("\n") else line + "\n" for line in pi_io.pi_export_lines(session)
    )
    response = StreamingHttpResponse(lines, content_type="application/x-ndjson")
    response["Content-Disposition"] = f'attachment; filename="{_filename(session)}.jsonl"'
    return response


def _filename(session: Session) -> str:
    return (slugify(session.title)[:60] or "session") + f"-{str(session.id)[:8]}"


# --- the agent: send, steer, follow up, cancel, approve, compact, navigate -----------------
#
# `sessions_app.agent` runs turns on its own loop thread, so these are plain views: a turn
# outlives the request that started it, and its events reach the page over the websocket.


def _agent_errors() -> tuple[type[BaseException], ...]:
    from sessions_app.agent import AgentError

    return (DomainError, AgentError)


def _agent_call(request: HttpRequest, work: Callable[[], Any]) -> bool:
    """Run one agent service; its refusal (a turn running, nothing to compact…) becomes a
    message on the page."""
    try:
        work()
    except _agent_errors() as exc:
        messages.error(request, str(exc))
        return False
    return True


@login_required
@require_POST
def session_send(request: HttpRequest, session_id: Any) -> HttpResponse:
    from sessions_app.agent import agent_send_message

    session = _session_or_404(request, session_id, write=True)
    query = _return_query(request)
    form = MessageForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return _after_write(request, session, query)
    text, mode = form.cleaned_data["text"], form.cleaned_data["mode"]
    ratelimit.rate_hit(request.user, "message")
    _agent_call(request, lambda: agent_send_message(session.id, text, mode=mode))
    session.refresh_from_db()
    return _after_write(request, session, replace(query, leaf=None, entry=None))


@login_required
@require_POST
def session_resend(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Edit and resend a user message: the leaf goes to the message's parent and the new
    text is sent from there, so it becomes the message's sibling (a new branch)."""
    from sessions_app.agent import agent_send_message

    session = _session_or_404(request, session_id, write=True)
    query = _return_query(request).view_only()
    form = ResendForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_errors(form))
        return _after_write(request, session, query)
    ratelimit.rate_hit(request.user, "message")
    try:
        leaf_before_entry(session, form.cleaned_data["entry_id"])
    except DomainError as exc:
        messages.error(request, str(exc))
        return _after_write(request, session, query)
    text = form.cleaned_data["text"]
    _agent_call(request, lambda: agent_send_message(session.id, text))
    session.refresh_from_db()
    return _after_write(request, session, replace(query, leaf=None))


@login_required
@require_POST
def session_retry(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Ask the model again from where a failed reply was asked: a new turn, whose answer
    becomes the failed reply's sibling."""
    from sessions_app.agent import agent_retry

    session = _session_or_404(request, session_id, write=True)
    query = _return_query(request)
    entry_id = str(request.POST.get("entry_id") or "") or None
    if entry_id is not None and len(entry_id) > ENTRY_KEY_MAX:
        messages.error(request, "That is not an entry of this session.")
        return _after_write(request, session, query)

    def retry() -> None:
        ratelimit.rate_hit(request.user, "message")
        agent_retry(session.id, entry_id)

    _agent_call(request, retry)
    session.refresh_from_db()
    return _after_write(request, session, replace(query, leaf=None, entry=None))


@login_required
@require_POST
def session_cancel(request: HttpRequest, session_id: Any) -> HttpResponse:
    from sessions_app.agent import agent_cancel

    session = _session_or_404(request, session_id, write=True)
    _agent_call(request, lambda: agent_cancel(session.id))
    return _after_write(request, session, _return_query(request))


@login_required
@require_POST
def session_approval(request: HttpRequest, session_id: Any, approval_id: str) -> HttpResponse:
    from sessions_app.agent import agent_decide_approval

    session = _session_or_404(request, session_id, write=True)
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
    return _after_write(request, session, _return_query(request))


@login_required
@require_POST
def session_compact(request: HttpRequest, session_id: Any) -> HttpResponse:
    from sessions_app.agent import agent_compact

    session = _session_or_404(request, session_id, write=True)
    ratelimit.rate_hit(request.user, "compact")
    form = CompactForm(request.POST)
    instructions = (form.cleaned_data["instructions"] if form.is_valid() else "") or None
    if _agent_call(request, lambda: agent_compact(session.id, instructions=instructions)):
        messages.success(request, "Compacted: older messages are summarized in the context.")
    session.refresh_from_db()
    return _after_write(request, session, _return_query(request))


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
    session.refresh_from_db()
    return _after_write(request, session, replace(query, leaf=None))


# =========================================================================================
# Reads for the pages. Each returns plain data for one part of a page; the projections do
# the folding. (Candidates for selectors.py.)
# =========================================================================================

LIST_LIMIT = 200
CHAT_ENTRIES = 300  # the chat shows the path's latest entries; all on request
TREE_ROWS = 600  # rows of the tree drawn around the shown leaf; all on request
TREE_FULL_LIMIT = 5000  # entries; a larger session's tree is drawn near the branch shown
TURN_SCAN_ENTRIES = 2000  # entries at the end of a path searched first for its latest turns
CONTEXT_MESSAGES = 200  # messages of a context drawn (the latest); all on request
TURN_MARKERS = ("turn/start", "turn/end")


@dataclass(frozen=True, slots=True)
class SessionRow:
    session: Session
    state: str  # idle, running, interrupted, error, aborted
    owner_name: str | None  # set when the viewer is not the owner (staff)


@dataclass(frozen=True, slots=True)
class PendingApproval:
    approval_id: str
    call_id: str
    tool: str
    arguments: str
    seq: int

    @property
    def arguments_pretty(self) -> str:
        try:
            return json.dumps(json.loads(self.arguments), indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            return self.arguments


@dataclass(frozen=True, slots=True)
class TurnState:
    running: bool = False
    turn: int | None = None
    last_reason: str | None = None  # how the latest turn ended
    approvals: tuple[PendingApproval, ...] = ()

    @property
    def label(self) -> str:
        if self.running:
            return "waiting" if self.approvals else "running"
        if self.last_reason in ("interrupted", "error", "aborted"):
            return str(self.last_reason)
        return "idle"


def _state_of(marker: tuple[str, str | None] | None) -> str:
    if marker is None:
        return "idle"
    kind, reason = marker
    if kind == "turn/start":
        return "running"
    return reason if reason in ("interrupted", "error", "aborted") else "idle"


# Postgres full-text search over the sessions the viewer may see: the title, or the text of
# any user or assistant message. Unindexed on purpose: a GIN index on the message text made
# every append of a message about three times slower (to_tsvector at insert time), which
# the append path cannot afford; searching 100,000 entries takes about a second.
_TEXT_QUERY = "websearch_to_tsquery('english', %s)"
_SEARCH_SQL = f"""(
    to_tsvector('english', sessions_app_session.title) @@ {_TEXT_QUERY}
    OR sessions_app_session.id IN (
        SELECT e.session_id FROM sessions_app_entry e
        WHERE e.type = 'message'
          AND e.data->'message'->>'role' IN ('user', 'assistant')
          AND {message_text_vector("e")} @@ {_TEXT_QUERY}
    )
)"""


def session_rows(user: Any, *, query: str = "") -> list[SessionRow]:
    """The sessions `user` may see, latest activity first; matching `query` when given."""
    sessions = access.visible_sessions(user)
    if query:
        sessions = sessions.filter(RawSQL(_SEARCH_SQL, [query, query], output_field=BooleanField()))
    page = list(sessions.select_related("owner").order_by("-updated_at")[:LIST_LIMIT])
    markers = _turn_markers([s.id for s in page])
    states = {str(s.id): _state_of(markers.get(str(s.id))) for s in page}
    for s in page:
        if states[str(s.id)] == "running" and not _turn_alive(s.id):
            states[str(s.id)] = "interrupted"
    return [
        SessionRow(
            session=s,
            state=states[str(s.id)],
            owner_name=None if s.owner_id == user.pk else s.owner.get_username(),
        )
        for s in page
    ]


def _turn_markers(session_ids: list[uuid.UUID]) -> dict[str, tuple[str, str | None]]:
    """The newest turn/start or turn/end of each session (an index scan back from its head)."""
    if not session_ids:
        return {}
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT s.id, m.type, m.reason
            FROM unnest(%s::uuid[]) AS s(id)
            JOIN LATERAL (
                SELECT e.type, e.data->>'reason' AS reason FROM sessions_app_event e
                WHERE e.session_id = s.id AND e.type IN ('turn/start', 'turn/end')
                ORDER BY e.seq DESC LIMIT 1
            ) m ON true
            """,
            [[str(i) for i in session_ids]],
        )
        return {str(row[0]): (row[1], row[2]) for row in cur.fetchall()}


def turn_state(session: Session) -> TurnState:
    """Whether a turn is open, how the last one ended, and the approvals it waits for."""
    marker = (
        Event.objects.filter(session_id=session.id, type__in=TURN_MARKERS)
        .order_by("-seq")
        .values_list("type", "turn", "data")
        .first()
    )
    if marker is None:
        return TurnState()
    kind, turn, data = marker
    if kind == "turn/end":
        reason = data.get("reason") if isinstance(data, dict) else None
        return TurnState(running=False, turn=turn, last_reason=reason)
    if not _turn_alive(session.id):
        # Open, but the process that ran it is gone: recovery closes it on the next write.
        return TurnState(running=False, turn=turn, last_reason="interrupted")
    return TurnState(running=True, turn=turn, approvals=_pending_approvals(session, turn))


def _turn_alive(session_id: uuid.UUID) -> bool:
    from sessions_app.agent import agent_turn_status

    return agent_turn_status(session_id) == "running"


def _pending_approvals(session: Session, turn: int | None) -> tuple[PendingApproval, ...]:
    if turn is None:
        return ()
    asked: dict[str, PendingApproval] = {}
    for event in store.events_of_turns(session.id, [turn]):
        data = event.data
        if event.type == "approval/asked":
            approval_id = str(data.get("approval_id"))
            asked[approval_id] = PendingApproval(
                approval_id=approval_id,
                call_id=str(data.get("call_id") or ""),
                tool=str(data.get("tool") or ""),
                arguments=str(data.get("arguments") or ""),
                seq=event.seq,
            )
        elif event.type == "approval/decided":
            asked.pop(str(data.get("approval_id")), None)
    return tuple(asked.values())


# --- small writes the pages make -----------------------------------------------------------


def leaf_before_entry(session: Session, entry_id: str) -> None:
    """Move the leaf to a user message's parent, so that what is sent next is its sibling."""
    found = (
        Entry.objects.filter(session_id=session.id, entry_id=entry_id)
        .values_list("type", "parent_id", "data")
        .first()
    )
    if found is None:
        raise DomainError(f"{entry_id!r} is not an entry of this session")
    kind, parent_id, data = found
    message = data.get("message") if isinstance(data, dict) else None
    if kind != "message" or not isinstance(message, dict) or message.get("role") != "user":
        raise DomainError("only a user message can be edited and sent again")
    if turn_state(session).running:
        raise DomainError("a turn is running: wait for it or cancel it first")
    session.refresh_from_db(fields=["leaf_entry_id"])
    if session.leaf_entry_id != parent_id:
        services.session_move_leaf(session=session, to=parent_id)


# --- the shown branch ----------------------------------------------------------------------


def shown_leaf(session: Session, query: PageQuery) -> str | None:
    """The deep-linked leaf when it names an entry of the session, else the current leaf."""
    if query.leaf and Entry.objects.filter(session_id=session.id, entry_id=query.leaf).exists():
        return query.leaf
    return session.leaf_entry_id


def _turns_of_entries(session: Session, path: list[EntryRecord]) -> list[int]:
    """The turns that added entries of `path`."""
    if not path:
        return []
    with connection.cursor() as cur:
        cur.execute(
            "SELECT DISTINCT turn FROM sessions_app_event "
            "WHERE session_id = %s AND seq = ANY(%s) AND turn IS NOT NULL",
            [str(session.id), [e.seq for e in path]],
        )
        return sorted(int(row[0]) for row in cur.fetchall())


def _path_turns(session: Session, leaf: str | None, *, min_depth: int = 0) -> list[int]:
    """The turns that added entries on the path to `leaf`, from `min_depth` down (without
    reading the entries)."""
    if leaf is None:
        return []
    with connection.cursor() as cur:
        cur.execute(
            f"{store.PATH_CTE} SELECT DISTINCT ev.turn FROM path JOIN sessions_app_event ev "
            "ON ev.session_id = %(s)s AND ev.seq = path.seq "
            "WHERE ev.turn IS NOT NULL AND path.depth >= %(min_depth)s",
            {"s": str(session.id), "leaf": leaf, "min_depth": min_depth},
        )
        return sorted(int(row[0]) for row in cur.fetchall())


def _branch_turns(session: Session, leaf: str | None, before: int | None) -> tuple[list[int], bool]:
    """The turns of the branch shown, and whether that is all of them: the latest page is
    found from the end of the path alone (a long path is not walked to its root)."""
    if leaf is None:
        return [], True
    depth = store.depth_of(session.id, leaf) or 0
    if depth > TURN_SCAN_ENTRIES and not _all_turns(session):
        return [], True  # an imported session: no turns to look for
    if before is None and depth > TURN_SCAN_ENTRIES:
        recent = _path_turns(session, leaf, min_depth=depth - TURN_SCAN_ENTRIES)
        if len(recent) > DEFAULT_PAGE_TURNS:
            return recent, False
    return _path_turns(session, leaf), True


def _all_turns(session: Session) -> list[int]:
    return sorted(
        t
        for t in Event.objects.filter(session_id=session.id, type="turn/start")
        .values_list("turn", flat=True)
        .distinct()
        if t is not None
    )


# --- page parts ------------------------------------------------------------------------------


def page_context(session: Session, query: PageQuery) -> dict[str, Any]:
    """Everything of the full page: state, tree and the selected view."""
    leaf = shown_leaf(session, query)
    return {
        "state": turn_state(session),
        **_tree_part(session, query, leaf),
        **_view_part(session, query, leaf),
    }


def view_context(session: Session, query: PageQuery) -> dict[str, Any]:
    return _view_part(session, query, shown_leaf(session, query))


def tree_context(session: Session, query: PageQuery) -> dict[str, Any]:
    return _tree_part(session, query, shown_leaf(session, query))


def _tree_part(session: Session, query: PageQuery, leaf: str | None) -> dict[str, Any]:
    """The tree, drawn as the TREE_ROWS rows around the shown leaf (all rows on request).

    A session of more than TREE_FULL_LIMIT entries is drawn from the shown branch alone:
    the end of its path and the first entry of each branch that leaves it, so the page
    reads a window of entries rather than all of them.
    """
    if not query.tree and leaf is not None and _entry_count(session) > TREE_FULL_LIMIT:
        return _tree_near(session, leaf)
    tree = project_tree(store.entries_of(session.id), leaf)
    rows = tree.rows
    above = below = 0
    if not query.tree and len(rows) > TREE_ROWS:
        focus = [r.row for r in rows if r.node.id == query.entry] or [
            r.row for r in rows if r.node.is_current_leaf
        ]
        at = focus[0] if focus else len(rows) - 1
        start = max(0, min(at - TREE_ROWS // 2, len(rows) - TREE_ROWS))
        above, below = start, len(rows) - start - TREE_ROWS
        rows = rows[start : start + TREE_ROWS]
    return {"tree": tree, "tree_rows": rows, "tree_above": above, "tree_below": below}


def _tree_near(session: Session, leaf: str) -> dict[str, Any]:
    depth = store.depth_of(session.id, leaf) or 0
    start = max(0, depth + 1 - TREE_ROWS // 2)
    path = store.path_to_root(session.id, leaf, min_depth=start)
    on_path = [entry.id for entry in path]
    branches = list(
        Entry.objects.filter(session_id=session.id, parent_id__in=on_path)
        .exclude(entry_id__in=on_path)
        .order_by("seq")
        .values_list("entry_id", flat=True)[: TREE_ROWS // 2]
    )
    tree = project_tree([*path, *store.entries_by_id(session.id, branches)], leaf)
    return {
        "tree": tree,
        "tree_rows": tree.rows,
        "tree_above": start,
        "tree_below": 0,
        "tree_partial": True,
    }


def _entry_count(session: Session) -> int:
    if session.last_seq < TREE_FULL_LIMIT:
        return session.last_seq + 1  # every entry comes with an event
    return Entry.objects.filter(session_id=session.id).count()


def _view_part(session: Session, query: PageQuery, leaf: str | None) -> dict[str, Any]:
    part: dict[str, Any] = {
        "leaf": leaf,
        "current_leaf": session.leaf_entry_id,
        "browsing": leaf != session.leaf_entry_id,
        "view": query.view,
    }
    if query.view == "trace":
        part.update(_trace_part(session, query, leaf))
    elif query.view == "context":
        part.update(_context_part(session, query, leaf))
    else:
        part.update(_chat_part(session, query, leaf))
    return part


def _chat_part(session: Session, query: PageQuery, leaf: str | None) -> dict[str, Any]:
    """The chat of the path's last CHAT_ENTRIES entries (all of it with `?all=1`)."""
    depth = store.depth_of(session.id, leaf) if leaf else None
    start = 0 if query.all or depth is None else max(0, depth + 1 - CHAT_ENTRIES)
    if start and query.entry:
        # A deep link to an earlier entry of the path opens the chat down from it.
        linked = store.depth_of(session.id, query.entry)
        if linked is not None and linked < start:
            start = linked
    path = store.path_to_root(session.id, leaf, min_depth=start) if leaf else []
    turns = _turns_of_entries(session, path)
    events = store.events_of_turns(session.id, turns) if turns else []
    chat = project_chat(path, leaf, events)
    hidden = (depth + 1 - len(path)) if depth is not None else 0
    return {"chat": chat, "items": chat.items, "hidden_items": max(hidden, 0)}


# --- trace ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceBar:
    """One span of a turn block, placed on the turn's own time scale (percent)."""

    row: TraceRow
    depth: int
    left: float
    width: float


@dataclass(frozen=True, slots=True)
class TraceBlock:
    turn: TraceSpan
    bars: tuple[TraceBar, ...]
    duration_ms: int | None

    @property
    def failed_step(self) -> bool:
        """A step of the turn failed on a model request (it has its own error card)."""
        return any(bar.row.span.kind == "step" and bar.row.span.error for bar in self.bars)


def trace_blocks(trace: TraceView | None) -> list[TraceBlock]:
    """The trace's turns, newest first, each with its spans on its own time scale."""
    if trace is None:
        return []
    groups: list[list[TraceRow]] = []
    for row in trace.rows:
        if row.depth == 0 or not groups:
            groups.append([])
        groups[-1].append(row)
    blocks = [_block(group, trace) for group in groups]
    blocks.reverse()
    return blocks


def _block(group: list[TraceRow], trace: TraceView) -> TraceBlock:
    turn = group[0].span
    start = min(row.span.start for row in group)
    end = turn.end or trace.end or turn.start
    end = max([end, *(row.span.end for row in group if row.span.end is not None)])
    total = max((end - start).total_seconds() * 1000, 1.0)

    def place(row: TraceRow) -> TraceBar:
        left = (row.span.start - start).total_seconds() * 1000 / total * 100
        span_end = row.span.end or end
        width = (span_end - row.span.start).total_seconds() * 1000 / total * 100
        left = min(max(left, 0.0), 99.4)
        width = min(max(width, 0.6), 100.0 - left)
        return TraceBar(row=row, depth=row.depth, left=round(left, 2), width=round(width, 2))

    return TraceBlock(
        turn=turn,
        bars=tuple(place(row) for row in group),
        duration_ms=turn.duration_ms,
    )


def _trace_window(session: Session, query: PageQuery, leaf: str | None) -> dict[str, Any]:
    if query.scope == "all":
        turns, complete = _all_turns(session), True
    else:
        turns, complete = _branch_turns(session, leaf, query.before)
    window = pick_turns(turns, before_turn=query.before)
    older = window.older
    if older is None and not complete and window.turns:
        older = window.turns[0]  # more turns lie further up the path
    events = store.events_of_turns(session.id, window.turns) if window.turns else []
    trace = project_trace(events) if events else None
    return {
        "trace": trace,
        "blocks": trace_blocks(trace),
        "older": older,
        "turn_count": len(turns),
        "turns_complete": complete,
    }


def _trace_part(session: Session, query: PageQuery, leaf: str | None) -> dict[str, Any]:
    part = _trace_window(session, query, leaf)
    part["selected"] = _selected_span(session, query, part["trace"])
    return part


def trace_older_context(session: Session, query: PageQuery) -> dict[str, Any]:
    return _trace_window(session, query, shown_leaf(session, query))


def span_context(session: Session, query: PageQuery) -> dict[str, Any]:
    return {"selected": _selected_span(session, query, None)}


def _selected_span(session: Session, query: PageQuery, trace: TraceView | None) -> TraceSpan | None:
    if not query.span:
        return None
    if trace is not None:
        for row in trace.rows:
            if row.span.key == query.span:
                return row.span
    if query.turn is None:
        return None
    events = store.events_of_turns(session.id, [query.turn])
    for row in project_trace(events).rows if events else ():
        if row.span.key == query.span:
            return row.span
    return None


# --- context -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestRef:
    seq: int
    turn: int | None
    step: int | None
    time: datetime
    leaf_entry_id: str | None


def _requests(session: Session, leaf: str | None, *, everywhere: bool) -> list[RequestRef]:
    """The session's model requests, oldest first: those built for an entry of the path to
    `leaf` (the branch shown), or all of them."""
    sql = (
        "SELECT ev.seq, ev.turn, ev.step, ev.time, ev.data->>'leaf_entry_id' "
        "FROM sessions_app_event ev WHERE ev.session_id = %(s)s AND ev.type = 'request/sent'"
    )
    if not everywhere:
        if leaf is None:
            return []
        sql = f"{store.PATH_CTE} {sql} AND ev.data->>'leaf_entry_id' IN (SELECT entry_id FROM path)"
    with connection.cursor() as cur:
        cur.execute(sql + " ORDER BY ev.seq", {"s": str(session.id), "leaf": leaf, "min_depth": 0})
        return [RequestRef(*row) for row in cur.fetchall()]


def _request_count(session: Session) -> int:
    return Event.objects.filter(session_id=session.id, type="request/sent").count()


def _request_view(session: Session, ref: RequestRef) -> RequestView:
    return selectors.request_view(session, ref.seq)


def _context_part(session: Session, query: PageQuery, leaf: str | None) -> dict[str, Any]:
    requests = _requests(session, leaf, everywhere=query.scope == "all")
    chosen: RequestRef | None = None
    if query.request is not None:
        chosen = next((r for r in requests if r.seq == query.request), None) or next(
            (r for r in _requests(session, leaf, everywhere=True) if r.seq == query.request),
            None,
        )
    elif requests:
        chosen = requests[-1]
    part: dict[str, Any] = {
        "requests": requests,
        "request_count": _request_count(session),
        "chosen": chosen,
    }
    if chosen is None:
        part["next_context"] = _next_context(session, leaf)
        part.update(_shown_messages(part["next_context"].messages, query))
        return part
    earlier = [r for r in requests if r.seq < chosen.seq]
    try:
        view = _request_view(session, chosen)
        part["request_view"] = view
        part.update(_shown_messages(view.messages, query))
        if earlier:
            part["previous"] = earlier[-1]
            part["diff"] = diff_requests(_request_view(session, earlier[-1]), view)
    except RequestNotFound as exc:
        part["request_error"] = str(exc)
    return part


def _shown_messages(messages: tuple[ContextMessage, ...], query: PageQuery) -> dict[str, Any]:
    hidden = 0 if query.all else max(0, len(messages) - CONTEXT_MESSAGES)
    return {"context_messages": messages[hidden:], "context_hidden": hidden}


@dataclass(frozen=True, slots=True)
class NextContext:
    """The context a next request from this leaf would start from (no request yet)."""

    messages: tuple[ContextMessage, ...]
    token_total: int
    preset: Mapping[str, Any]


def _next_context(session: Session, leaf: str | None) -> NextContext:
    context = selectors.session_context(session, leaf)
    lines = tuple(
        ContextMessage(
            index=i,
            role=str(message.get("role")),
            message=message,
            text=message_text(message),
            tokens=estimate_tokens(message),
            key=str(i),
        )
        for i, message in enumerate(context.messages)
    )
    return NextContext(lines, sum(m.tokens for m in lines), session.preset or {})


def message_text(message: Mapping[str, Any]) -> str:
    """The readable text of a context message, whatever its role."""
    role = message.get("role")
    if role in ("compactionSummary", "branchSummary"):
        return str(message.get("summary") or "")
    if role == "bashExecution":
        return f"$ {message.get('command') or ''}\n{message.get('output') or ''}".rstrip()
    return content_text(message.get("content"), "\n\n" if role == "assistant" else "\n")


def context_for_export(session: Session) -> dict[str, Any]:
    """The context view of the current leaf's latest request (for the HTML export)."""
    return _context_part(session, PageQuery(view="context"), session.leaf_entry_id)
