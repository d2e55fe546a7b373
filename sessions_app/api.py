"""The REST API under /api/ (django-ninja); OpenAPI at /api/openapi.json, docs at /api/docs.

Adapters only: parse, check access (`sessions_app.access`, the one place that decides),
call one service or selector plus a projection, return a schema.

Accounts. Browsers use the Django session cookie; every unsafe request made with it must
carry the CSRF token. Programs send a personal token as `Authorization: Bearer …`
(`sessions_app.tokens`). A bearer token that is unknown or revoked is refused with 401
even when a session cookie comes along.

Errors. Every refusal is JSON `{"error": code, "detail": text}` (409 adds `current_seq`,
429 adds `retry_after`, 422 adds `errors`), built by `error_response`, the one exception
handler. Statuses: 400 malformed request, 401 not signed in or bad token, 403 read-only
(staff on someone else's session) or CSRF, 404 unknown or someone else's session, 409
conflict, 413 too large, 422 invalid values, 429 rate limited.

Limits. A JSON body is at most `DATA_UPLOAD_MAX_MEMORY_SIZE` (Django's, 2.5 MB by default),
text fields have lengths set in `schemas.py`, an event at most `STRAND_MAX_EVENT_BYTES`, a
batch at most `STRAND_MAX_BATCH` events, a Pi upload at most `STRAND_MAX_IMPORT_BYTES`.
Every costly door is rate limited per user (`sessions_app.ratelimit`, scopes in brackets):
sending a message, steering or following up [message], importing [import], appending events
[append], creating [session] and forking [fork] sessions, navigating with a summary
[summary], compacting [compact], filtering the list by `q` [search] and making tokens
[token]. The hit is counted before any work, so a refused request (429) changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import tempfile
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import (
    BadRequest,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.db import DataError
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.multipartparser import MultiPartParserError
from django.utils.datastructures import MultiValueDict
from ninja import NinjaAPI, Query, Router
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser
from ninja.renderers import JSONRenderer
from ninja.responses import Status
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from projections.context import UNSET, to_provider_messages
from projections.records import EntryRecord
from projections.request import RequestNotFound
from projections.trace import project_trace
from projections.tree import TreeRow
from runtime import AgentError
from runtime.config import ConfigError
from sessions_app import (
    access,
    agent,
    pi_io,
    ratelimit,
    selectors,
    services,
    store,
    tokens,
    workspaces,
)
from sessions_app.cursors import cursor_decode, cursor_encode
from sessions_app.errors import DomainError
from sessions_app.models import Session
from sessions_app.schemas import (
    PATH_PAGE_MAX,
    TITLE_MAX,
    TREE_LABEL_MAX,
    AppendOut,
    ApprovalDecisionIn,
    ApprovalOut,
    CancelOut,
    ChatIn,
    ChatOut,
    CompactIn,
    CompactOut,
    ContextIn,
    ContextOut,
    EntryPageIn,
    EntryPageOut,
    ErrorOut,
    EventPageIn,
    EventPageOut,
    EventsAppendIn,
    ForkIn,
    ImportOut,
    LeafIn,
    LeafOut,
    MeOut,
    MessageIn,
    NavigateIn,
    NavigateOut,
    RequestOut,
    RetryIn,
    SentOut,
    SessionFilterIn,
    SessionIn,
    SessionOut,
    SessionPageOut,
    SessionRenameIn,
    TokenCreatedOut,
    TokenIn,
    TokenOut,
    TraceIn,
    TraceOut,
    TreeIn,
    TreeOut,
    plain,
)
from sessions_app.streaming import streamed

log = logging.getLogger("strand.api")

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
ERRORS = frozenset({400, 401, 403, 404, 409, 413, 422, 429})


def max_import_bytes() -> int:
    return int(getattr(settings, "STRAND_MAX_IMPORT_BYTES", 50 * 1024 * 1024))


class BadInput(DomainError):
    """A request that cannot be read (bad JSON, NUL characters, a broken upload)."""

    code = "bad_request"


# --- rendering and parsing ---------------------------------------------------------------


class SafeJSONRenderer(JSONRenderer):
    """JSON with `<`, `>` and `&` escaped as \\u003c, \\u003e, \\u0026 (as Django's
    `json_script` does): a response holds no markup even if something sniffs it as HTML.
    Those characters only ever occur inside JSON strings, where the escapes mean the same."""

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> Any:
        text = super().render(request, data, response_status=response_status)
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class StrictParser(Parser):
    """A JSON object as RFC 8259 has it (no NaN or Infinity), and text Postgres can store:
    no NUL characters, no lone surrogates, in the body or the query string."""

    def parse_body(self, request: HttpRequest) -> Any:
        data = json.loads(request.body, parse_constant=_reject_constant)
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
        text = json.dumps(data, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("the body holds a lone surrogate (invalid Unicode)") from None
        if "\\u0000" in text:
            raise ValueError("the body holds a NUL character (\\u0000)")
        return data

    def parse_querydict(
        self, data: MultiValueDict, list_fields: list[str], request: HttpRequest
    ) -> dict[str, Any]:
        for key, values in data.lists():
            if "\x00" in key or any(isinstance(v, str) and "\x00" in v for v in values):
                raise BadInput(f"parameter {key.replace(chr(0), '')!r} holds a NUL character")
        return super().parse_querydict(data, list_fields, request)


# --- authentication ----------------------------------------------------------------------


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


api = NinjaAPI(
    title="Strand",
    version="1",
    description=__doc__,
    urls_namespace="api",
    auth=[BearerToken(), SessionCookie()],
    renderer=SafeJSONRenderer(),
    parser=StrictParser(),
)
router = Router(tags=["sessions"])


# --- errors: the one handler -------------------------------------------------------------

_STATUS_BY_CODE = {
    "bad_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "too_large": 413,
    "invalid": 422,
    "invalid_event": 422,
    "invalid_pi_file": 422,
    "not_allowed": 422,
    # A working directory outside its owner's folders: asked for, or found at a turn.
    "workspace_not_allowed": 403,
    # A session whose preset the server no longer offers: refused at its next turn.
    "preset_unavailable": 409,
    "rate_limited": 429,
}
_CODE_BY_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    422: "invalid",
    429: "rate_limited",
}


def error_response(request: HttpRequest, exc: Exception) -> HttpResponse:
    """Every exception an operation raises, as `{"error", "detail"}` with its status."""
    status, body = _error_body(exc)
    response = api.create_response(request, body, status=status)
    if "retry_after" in body:
        response["Retry-After"] = str(body["retry_after"])
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="strand"'
    return response


def _error_body(exc: Exception) -> tuple[int, dict[str, Any]]:
    if isinstance(exc, store.ConcurrencyError):
        return 409, {"error": exc.code, "detail": str(exc), "current_seq": exc.current_seq}
    if isinstance(exc, ratelimit.RateLimited):
        return 429, {"error": exc.code, "detail": str(exc), "retry_after": exc.retry_after}
    if isinstance(exc, (DomainError, AgentError)):
        status = _STATUS_BY_CODE.get(exc.code, 422)
        return status, {"error": exc.code, "detail": str(exc)}
    if isinstance(exc, ConfigError):
        return 422, {"error": "invalid_preset", "detail": str(exc)}
    if isinstance(exc, RequestNotFound):
        return 404, {"error": "not_found", "detail": str(exc)}
    if isinstance(exc, ValidationError):
        errors = [_field_error(e) for e in exc.errors]
        detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors)
        return 422, {"error": "validation_error", "detail": detail, "errors": errors}
    if isinstance(exc, AuthenticationError):
        return 401, {"error": "unauthorized", "detail": "sign in, or send an API token"}
    if isinstance(exc, HttpError):
        code = "csrf_failed" if isinstance(exc, CsrfRefused) else None
        detail = str(exc)
        cause = exc.__cause__
        if exc.status_code == 400 and cause is not None:  # the body could not be parsed
            if isinstance(cause, RequestDataTooBig):
                return 413, {"error": "too_large", "detail": _too_big()}
            detail = f"{detail}: {cause}"
        return exc.status_code, {
            "error": code or _CODE_BY_STATUS.get(exc.status_code, "error"),
            "detail": detail,
        }
    if isinstance(exc, Http404):
        return 404, {"error": "not_found", "detail": str(exc) or "not found"}
    if isinstance(exc, (RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent)):
        return 413, {"error": "too_large", "detail": _too_big()}
    if isinstance(exc, DataError):
        # A value the database cannot hold (too long for its column, out of range): the
        # input's fault, so a 422, with Postgres's own one-line reason.
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid value"
        log.warning("refused a value the database cannot hold: %s", reason)
        return 422, {"error": "invalid", "detail": f"a value cannot be stored: {reason}"}
    if isinstance(exc, (MultiPartParserError, BadRequest, SuspiciousOperation, UnicodeError)):
        return 400, {"error": "bad_request", "detail": f"the request cannot be read: {exc}"}
    log.exception("API error on %s %s", exc.__class__.__name__, exc)
    return 500, {"error": "internal", "detail": "internal server error"}


def _field_error(error: Mapping[str, Any]) -> dict[str, Any]:
    loc = [str(p) for p in error.get("loc", ())]
    if len(loc) > 1 and loc[0] == "body":
        del loc[1]  # the view's parameter name, not part of the document sent
    return {"loc": loc, "msg": str(error.get("msg", ""))}


def _too_big() -> str:
    return f"the request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"


for _exc in (Exception, Http404, HttpError, ValidationError):
    api.add_exception_handler(_exc, error_response)  # type: ignore[arg-type]


def _user(request: HttpRequest) -> Any:
    return request.auth  # type: ignore[attr-defined]


# --- reads the API shares with the admin audit -------------------------------------------


def _check_entry(session: Session, entry_id: str) -> None:
    if not selectors.entry_exists(session, entry_id):
        raise DomainError(f"{entry_id!r} is not an entry of this session")


# --- accounts ----------------------------------------------------------------------------


@router.get("/me", response={200: MeOut, ERRORS: ErrorOut}, tags=["accounts"])
def me(request: HttpRequest) -> dict[str, Any]:
    user = _user(request)
    return {
        "username": user.get_username(),
        "is_staff": bool(user.is_staff),
        "auth": getattr(request, "strand_auth", "session"),
    }


@router.get("/tokens", response={200: list[TokenOut], ERRORS: ErrorOut}, tags=["accounts"])
def token_list(request: HttpRequest) -> Any:
    return tokens.tokens_of(_user(request))


@router.post("/tokens", response={201: TokenCreatedOut, ERRORS: ErrorOut}, tags=["accounts"])
def token_create(request: HttpRequest, body: TokenIn) -> Any:
    """Make a token (shown once). Only from a signed-in browser session: a token cannot make
    more tokens, so revoking a leaked token is enough to lock its holder out."""
    if getattr(request, "strand_auth", None) != "session":
        raise access.ReadOnly("tokens are made from a signed-in browser session")
    ratelimit.rate_hit(_user(request), "token")
    row, plaintext = tokens.token_create(_user(request), body.name)
    return Status(201, {**TokenOut.model_validate(row).model_dump(), "token": plaintext})


@router.delete("/tokens/{token_id}", response={204: None, ERRORS: ErrorOut}, tags=["accounts"])
def token_revoke(request: HttpRequest, token_id: int) -> Any:
    tokens.token_revoke(_user(request), token_id)
    return Status(204, None)


# --- sessions ----------------------------------------------------------------------------


def _encode_cursor(session: Session) -> str:
    raw = f"{session.created_at.isoformat()}|{session.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment, _, sid = raw.partition("|")
        parsed = datetime.fromisoformat(moment)
        if parsed.tzinfo is None:
            raise ValueError("naive time")
        return _utc(parsed, "cursor"), uuid.UUID(sid)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise DomainError("the cursor is not one this API gave out") from None


def _utc(moment: datetime, name: str) -> datetime:
    """A time as UTC (a time without a zone is taken as UTC), or 422 when it has none."""
    try:
        aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        return aware.astimezone(UTC)
    except (OverflowError, ValueError):
        raise DomainError(f"{name}: the time is out of range") from None


@router.get("/sessions", response={200: SessionPageOut, ERRORS: ErrorOut})
def session_list(request: HttpRequest, filters: Query[SessionFilterIn]) -> Any:
    """Sessions you may see, newest first: yours, or every session for staff."""
    if filters.q:
        ratelimit.rate_hit(_user(request), "search")
    found = selectors.session_page(
        _user(request),
        title=filters.q,
        owner=filters.owner,
        parent=filters.parent,
        created_after=_utc(filters.created_after, "created_after")
        if filters.created_after
        else None,
        created_before=_utc(filters.created_before, "created_before")
        if filters.created_before
        else None,
        after=_decode_cursor(filters.cursor) if filters.cursor else None,
        limit=filters.limit,
    )
    last = found.items[-1] if found.more and found.items else None
    return {"items": found.items, "next_cursor": _encode_cursor(last) if last else None}


@router.post("/sessions", response={201: SessionOut, ERRORS: ErrorOut})
def session_create(request: HttpRequest, body: SessionIn) -> Any:
    user = access.signed_in(_user(request))
    ratelimit.rate_hit(user, "session")
    preset = access.check_preset(body.preset)
    session = services.session_create(
        owner=user, title=body.title, cwd=workspaces.cwd_for(user, body.cwd), preset=preset
    )
    return Status(201, session)


# Pi import (before /sessions/{session_id}, which would take its path)-------------------------------------------------------------------------

_IMPORT_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {
                    "file": {"type": "string", "format": "binary"},
                    "name": {"type": "string", "maxLength": TITLE_MAX},
                },
            }
        }
    },
}


@router.post(
    "/sessions/import",
    response={201: ImportOut, ERRORS: ErrorOut},
    openapi_extra={"requestBody": _IMPORT_BODY},
)
def pi_import(request: HttpRequest) -> Any:
    """Import a Pi session file (any version) as a new session of yours: all or nothing.
    Multipart upload: `file`, and optionally `name` (the title)."""
    user = access.signed_in(_user(request))
    limit = max_import_bytes()
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise BadInput("the Content-Length header is not a number") from None
    if declared > limit + 64 * 1024:  # the file plus the multipart framing
        raise store.TooLarge(f"a Pi file is at most {limit} bytes")
    if not (request.content_type or "").startswith("multipart/form-data"):
        raise BadInput("send the file as multipart/form-data, field 'file'")
    ratelimit.rate_hit(user, "import")
    upload = request.FILES.get("file")
    if upload is None:
        raise BadInput("no file: send it in the multipart field 'file'")
    name = request.POST.get("name", "")
    if len(name) > TITLE_MAX or "\x00" in name:
        raise DomainError(f"name: at most {TITLE_MAX} characters, no NUL")
    with tempfile.TemporaryFile() as copy:
        # A file of our own, so that the import can read it twice (ids first, then entries).
        for chunk in upload.chunks():
            copy.write(chunk)
            if copy.tell() > limit:
                raise store.TooLarge(f"a Pi file is at most {limit} bytes")
        copy.seek(0)
        result = pi_io.pi_import(source=copy, owner=user, name=name)
    return Status(
        201,
        {
            "session": result.session,
            "entries": result.entries,
            "warnings": [str(w) for w in result.warnings],
        },
    )


@router.get("/sessions/{session_id}", response={200: SessionOut, ERRORS: ErrorOut})
def session_get(request: HttpRequest, session_id: uuid.UUID) -> Any:
    session = access.session_for(_user(request), session_id)
    session.turn_status = selectors.session_turn_state(session).status  # type: ignore[attr-defined]
    return session


@router.patch("/sessions/{session_id}", response={200: SessionOut, ERRORS: ErrorOut})
def session_rename(request: HttpRequest, session_id: uuid.UUID, body: SessionRenameIn) -> Any:
    session = access.session_for(_user(request), session_id, write=True)
    return services.session_rename(session=session, title=body.title)


@router.delete("/sessions/{session_id}", response={204: None, ERRORS: ErrorOut})
def session_delete(request: HttpRequest, session_id: uuid.UUID) -> Any:
    """Delete a session and its whole history (audited). Refused while a turn runs."""
    user = _user(request)
    session = access.session_for(user, session_id, write=True)
    if selectors.session_turn_state(session).running:
        raise store.ConcurrencyError(session.last_seq, session.last_seq)
    services.session_delete(session=session, by=user)
    return Status(204, None)


@router.post("/sessions/{session_id}/fork", response={201: SessionOut, ERRORS: ErrorOut})
def session_fork(request: HttpRequest, session_id: uuid.UUID, body: ForkIn) -> Any:
    """A new session of yours holding the root → `entry_id` path of this one."""
    user = _user(request)
    session = access.session_for(user, session_id, write=True)
    ratelimit.rate_hit(user, "fork")
    fork = services.session_fork(
        session=session, entry_id=body.entry_id, owner=user, title=body.title
    )
    return Status(201, fork)


# --- events and entries ------------------------------------------------------------------


@router.get("/sessions/{session_id}/events", response={200: EventPageOut, ERRORS: ErrorOut})
def event_list(request: HttpRequest, session_id: uuid.UUID, page: Query[EventPageIn]) -> Any:
    """Events with seq > after_seq, oldest first."""
    session = access.session_for(_user(request), session_id)
    after_seq = page.after_seq
    events = selectors.events_after(session.id, after_seq, page.limit)
    last = max(session.last_seq, events[-1].seq if events else -1)
    upto = events[-1].seq if events else after_seq
    return {
        "events": [plain(e) for e in events],
        "last_seq": last,
        "next_after_seq": upto if upto < last else None,
    }


@router.post("/sessions/{session_id}/events", response={201: AppendOut, ERRORS: ErrorOut})
def event_append(request: HttpRequest, session_id: uuid.UUID, body: EventsAppendIn) -> Any:
    """Append after `expected_seq`; 409 with `current_seq` when the session moved on.
    Clients may append entries, leaf moves and renames; the runtime writes the rest."""
    session = access.session_for(_user(request), session_id, write=True)
    ratelimit.rate_hit(_user(request), "append")
    for event in body.events:
        access.check_client_event(event.type, event.data)
    result = store.append_events(
        session.id,
        body.expected_seq,
        [store.NewEvent(e.type, e.data, ignorable=e.ignorable) for e in body.events],
    )
    return Status(201, plain(result))


@router.get("/sessions/{session_id}/entries", response={200: EntryPageOut, ERRORS: ErrorOut})
def entry_list(request: HttpRequest, session_id: uuid.UUID, page: Query[EntryPageIn]) -> Any:
    """Entries (the tree's nodes, as Pi writes them) in the order they were added, a page
    after `after_seq`; or, with `path`, the last entries of the path to `leaf`, the window
    the chat shows, with `older_cursor` for the window above."""
    session = access.session_for(_user(request), session_id)
    if page.path or page.cursor:
        if page.cursor:
            _, at = cursor_decode(page.cursor, "path")
            leaf, end = at["leaf"], at["end"]
        else:
            leaf = end = _leaf_or_current(session, page.leaf)
        window = selectors.path_window(session, end, limit=min(page.limit, PATH_PAGE_MAX))
        older = window.older_end
        return {
            "entries": [_entry(e) for e in window.entries],
            "next_after_seq": None,
            "entries_above": window.above,
            "older_cursor": cursor_encode("path", leaf=leaf, end=older) if older else None,
        }
    found = selectors.entry_page(session, after_seq=page.after_seq, limit=page.limit)
    entries = [_entry(e) for e in found.entries]
    return {
        "entries": entries,
        "next_after_seq": entries[-1]["seq"] if found.more and entries else None,
    }


def _entry(entry: EntryRecord) -> dict[str, Any]:
    return {
        "id": entry.id,
        "parent_id": entry.parent_id,
        "type": entry.type,
        "timestamp": entry.timestamp,
        "seq": entry.seq,
        "data": entry.data,
    }


@router.get("/sessions/{session_id}/tree", response={200: TreeOut, ERRORS: ErrorOut})
def tree_get(request: HttpRequest, session_id: uuid.UUID, page: Query[TreeIn]) -> Any:
    """The branch tree as the session page draws it, a window of rows in display order:
    the `limit` rows around `entry` (default: the leaf). Each row has its depth and indent
    as numbers, so the answer grows with the rows it holds, whatever the tree's shape. The
    cursors read the rows before and after, the path above, or the entries below a row
    (`subtree_cursor`), always of the tree as it stood at the first window."""
    session = access.session_for(_user(request), session_id)
    if page.cursor:
        window = _tree_at_cursor(session, page.cursor, page.limit)
    else:
        leaf = _leaf_or_current(session, page.leaf)
        window = selectors.tree_window(session, leaf, focus=page.entry, rows=page.limit)
    return _tree_answer(window, page.limit)


def _tree_at_cursor(session: Session, cursor: str, limit: int) -> selectors.TreeWindow:
    kind, at = cursor_decode(cursor, "rows", "above", "below")
    common = {"as_of_seq": at["as_of"], "leaf": at["leaf"]}
    if kind == "rows":
        stop = min(at["stop"], at["start"] + limit)
        return selectors.tree_rows(session, **common, start=at["start"], stop=stop)
    if kind == "above":
        return selectors.tree_path_window(
            session, **common, end=at["end"], below=at["below"], rows=limit
        )
    return selectors.tree_subtree_window(session, **common, parent=at["parent"], rows=limit)


def _tree_answer(window: selectors.TreeWindow, limit: int) -> dict[str, Any]:
    tree = window.tree
    common = {"as_of": window.as_of_seq, "leaf": window.leaf}
    previous = following = None
    if window.partial:
        if window.older_end and window.older_below:
            previous = cursor_encode(
                "above", **common, end=window.older_end, below=window.older_below
            )
        if window.chain_next:
            following = cursor_encode("below", **common, parent=window.chain_next)
    else:
        first, last = window.start, window.start + len(window.rows)
        if window.above:
            previous = cursor_encode("rows", **common, start=max(0, first - limit), stop=first)
        if window.below:
            following = cursor_encode("rows", **common, start=last, stop=last + limit)
    nodes = [
        _tree_row(
            row,
            window,
            cursor_encode("below", **common, parent=row.node.id)
            if row.node.id in window.expandable
            else None,
        )
        for row in window.rows
    ]
    return {
        "leaf_id": window.leaf,
        "session_name": _clip(tree.session_name),
        "node_count": len(tree.rows),
        "root_count": len(tree.roots),
        "partial": window.partial,
        "rows_above": window.above,
        "rows_below": window.below,
        "nodes": nodes,
        "previous_cursor": previous,
        "next_cursor": following,
    }


def _tree_row(row: TreeRow, window: selectors.TreeWindow, subtree: str | None) -> dict[str, Any]:
    node = row.node
    return {
        "row": row.row,
        "id": node.id,
        "parent_id": node.parent_id,
        "type": node.type,
        "role": node.role,
        "timestamp": node.timestamp,
        "seq": node.seq,
        "depth": node.depth + window.depth_offset,
        "indent": row.display_indent,
        "connector": row.connector,
        "child_count": len(node.children),
        "text": node.text,
        "label": _clip(node.label),
        "marker": node.marker,
        "on_active_path": node.on_active_path,
        "is_current_leaf": node.id == window.leaf,
        "descendants": node.descendants,
        "messages_below": node.messages_below,
        "newest_leaf_id": node.newest_leaf_id,
        "subtree_cursor": subtree,
    }


def _clip(text: str | None) -> str | None:
    return text if text is None or len(text) <= TREE_LABEL_MAX else text[: TREE_LABEL_MAX - 1] + "…"


@router.get("/sessions/{session_id}/leaf", response={200: LeafOut, ERRORS: ErrorOut})
def leaf_get(request: HttpRequest, session_id: uuid.UUID) -> Any:
    session = access.session_for(_user(request), session_id)
    return {"leaf_entry_id": session.leaf_entry_id, "last_seq": session.last_seq}


@router.put("/sessions/{session_id}/leaf", response={200: LeafOut, ERRORS: ErrorOut})
def leaf_move(request: HttpRequest, session_id: uuid.UUID, body: LeafIn) -> Any:
    """Point the current leaf at exactly this entry (null: the next entry starts a root).
    Refused with 409 while a turn runs, as every leaf move is."""
    session = access.session_for(_user(request), session_id, write=True)
    result = services.session_move_leaf(session=session, to=body.entry_id)
    return {"leaf_entry_id": result.leaf_entry_id, "last_seq": result.last_seq}


@router.post("/sessions/{session_id}/navigate", response={200: NavigateOut, ERRORS: ErrorOut})
async def navigate(request: HttpRequest, session_id: uuid.UUID, body: NavigateIn) -> Any:
    """Move the leaf as Pi's tree navigation does: picking a user message lands on its
    parent and returns its text for editing; `summarize` leaves a summary of the branch.
    (Async: a summary waits for the model, and no server thread should wait with it.)"""
    session = await sync_to_async(access.session_for)(_user(request), session_id, write=True)
    if body.summarize:
        await sync_to_async(ratelimit.rate_hit)(_user(request), "summary")
    return await agent.aagent_navigate(
        session, body.entry_id, summarize=body.summarize, instructions=body.instructions
    )


# --- views -------------------------------------------------------------------------------


@router.get("/sessions/{session_id}/context", response={200: ContextOut, ERRORS: ErrorOut})
def context_get(request: HttpRequest, session_id: uuid.UUID, query: Query[ContextIn]) -> Any:
    """The model context of a leaf: Pi's `buildSessionContext` (`pi`), or the messages a
    provider is sent after Pi's conversion (`provider`)."""
    session = access.session_for(_user(request), session_id)
    leaf = query.leaf
    if leaf is not None:
        _check_entry(session, leaf)
    context = selectors.session_context(session, leaf if leaf is not None else UNSET)
    pi = query.format == "pi"
    messages = context.messages if pi else to_provider_messages(context.messages)
    return {
        "format": query.format,
        "leaf_id": leaf if leaf is not None else session.leaf_entry_id,
        "messages": plain(messages),
        "thinking_level": context.thinking_level,
        "model": context.model,
    }


@router.get("/sessions/{session_id}/views/chat", response={200: ChatOut, ERRORS: ErrorOut})
def chat_view(request: HttpRequest, session_id: uuid.UUID, query: Query[ChatIn]) -> Any:
    """The chat of the path to `leaf` (default: the current leaf) as the session page shows
    it: its last `limit` entries; `older_cursor` gives the window above."""
    session = access.session_for(_user(request), session_id)
    if query.cursor:
        _, at = cursor_decode(query.cursor, "path")
        leaf, end = at["leaf"], at["end"]
    else:
        leaf = _leaf_or_current(session, query.leaf)
        end = None
    window = selectors.chat_window(session, leaf, end=end, limit=query.limit)
    older = window.older_end
    return {
        **plain(window.chat),
        "path_length": window.path_length,
        "entries_above": window.above,
        "older_cursor": cursor_encode("path", leaf=leaf, end=older) if older else None,
    }


@router.get("/sessions/{session_id}/views/trace", response={200: TraceOut, ERRORS: ErrorOut})
def trace_view(request: HttpRequest, session_id: uuid.UUID, query: Query[TraceIn]) -> Any:
    """Turns → steps → model requests → tool calls, as the session page shows them: the
    latest `turns` turns of the branch to `leaf` (every turn with `scope=all`), or those
    before `before_turn`."""
    session = access.session_for(_user(request), session_id)
    window = selectors.trace_window(
        session,
        _leaf_or_current(session, query.leaf),
        everywhere=query.scope == "all",
        before=query.before_turn,
        turns=query.turns,
    )
    trace = window.trace if window.trace is not None else project_trace(())
    return {
        **plain(trace),
        "turns": list(window.turns),
        "older_turn": window.older,
        "turn_count": window.turn_count,
        "turns_complete": window.complete,
    }


def _leaf_or_current(session: Session, leaf: str | None) -> str | None:
    if leaf is None:
        return session.leaf_entry_id
    _check_entry(session, leaf)
    return leaf


@router.get(
    "/sessions/{session_id}/views/requests/{seq}", response={200: RequestOut, ERRORS: ErrorOut}
)
def request_get(request: HttpRequest, session_id: uuid.UUID, seq: int) -> Any:
    """The exact context of one model request (the seq of its `request/sent`), rebuilt
    from the stored facts; `matches` says whether its hash equals the recorded one."""
    session = access.session_for(_user(request), session_id)
    if seq < 0 or seq > session.last_seq:
        raise RequestNotFound(f"no model request at seq {seq}")
    return plain(selectors.request_view(session, seq))


# --- the agent ---------------------------------------------------------------------------


def _send(request: HttpRequest, session_id: uuid.UUID, text: str, mode: str) -> Any:
    user = _user(request)
    session = access.session_for(user, session_id, write=True)
    ratelimit.rate_hit(user, "message")
    sent = agent.agent_send_message(session, text, mode=mode)
    return Status(202, plain(sent))


@router.post("/sessions/{session_id}/messages", response={202: SentOut, ERRORS: ErrorOut})
def message_send(request: HttpRequest, session_id: uuid.UUID, body: MessageIn) -> Any:
    """Start a turn with this message; returns its turn number (409 while a turn runs)."""
    return _send(request, session_id, body.text, "message")


@router.post("/sessions/{session_id}/steer", response={202: SentOut, ERRORS: ErrorOut})
def message_steer(request: HttpRequest, session_id: uuid.UUID, body: MessageIn) -> Any:
    """Input for the running turn's next step (with no turn running: starts one)."""
    return _send(request, session_id, body.text, "steer")


@router.post("/sessions/{session_id}/follow-up", response={202: SentOut, ERRORS: ErrorOut})
def message_follow_up(request: HttpRequest, session_id: uuid.UUID, body: MessageIn) -> Any:
    """Input that starts the turn after the running one (with none running: starts one)."""
    return _send(request, session_id, body.text, "follow_up")


@router.post("/sessions/{session_id}/cancel", response={202: CancelOut, ERRORS: ErrorOut})
def turn_cancel(request: HttpRequest, session_id: uuid.UUID) -> Any:
    session = access.session_for(_user(request), session_id, write=True)
    return Status(202, {"running": agent.agent_cancel(session)})


@router.post("/sessions/{session_id}/retry", response={202: SentOut, ERRORS: ErrorOut})
def turn_retry(request: HttpRequest, session_id: uuid.UUID, body: RetryIn) -> Any:
    """Start a turn that asks the model again from where a failed reply was asked (409
    while a turn runs; 422 for a reply that did not fail)."""
    user = _user(request)
    session = access.session_for(user, session_id, write=True)
    ratelimit.rate_hit(user, "message")
    return Status(202, plain(agent.agent_retry(session, body.entry_id)))


@router.get("/sessions/{session_id}/approvals", response={200: list[ApprovalOut], ERRORS: ErrorOut})
def approval_list(request: HttpRequest, session_id: uuid.UUID) -> Any:
    session = access.session_for(_user(request), session_id)
    return [plain(a) for a in selectors.open_turn_approvals(session)]


@router.post(
    "/sessions/{session_id}/approvals/{approval_id}", response={204: None, ERRORS: ErrorOut}
)
def approval_decide(
    request: HttpRequest, session_id: uuid.UUID, approval_id: str, body: ApprovalDecisionIn
) -> Any:
    user = _user(request)
    session = access.session_for(user, session_id, write=True)
    if len(approval_id) > 64:
        raise DomainError("an approval id is at most 64 characters")
    agent.agent_decide_approval(session, approval_id, outcome=body.outcome, by=user.get_username())
    return Status(204, None)


@router.post("/sessions/{session_id}/compact", response={200: CompactOut, ERRORS: ErrorOut})
async def compact(request: HttpRequest, session_id: uuid.UUID, body: CompactIn) -> Any:
    """Compact the current path now. (Async: the summary waits for the model.)"""
    session = await sync_to_async(access.session_for)(_user(request), session_id, write=True)
    await sync_to_async(ratelimit.rate_hit)(_user(request), "compact")
    return plain(await agent.aagent_compact(session, instructions=body.instructions))


# --- Pi export ---------------------------------------------------------------------------

_EXPORT_RESPONSES = {
    200: {
        "description": "The session as a Pi v3 session file (JSON lines)",
        "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
    }
}


@router.get(
    "/sessions/{session_id}/export",
    response={200: None, ERRORS: ErrorOut},
    openapi_extra={"responses": _EXPORT_RESPONSES},
)
def pi_export(request: HttpRequest, session_id: uuid.UUID) -> Any:
    session = access.session_for(_user(request), session_id)
    lines = pi_io.pi_export_lines(session, selectors.entry_stream(session))
    response = StreamingHttpResponse(
        streamed(lines, request), content_type="application/x-ndjson; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="strand-{session.id}.jsonl"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


api.add_router("", router)


# Unknown paths under /api/ answer in the API's own error shape, not Django's HTML page.
_fallback = Router()


@_fallback.api_operation(
    ["GET", "POST", "PUT", "PATCH", "DELETE"], "/{path:rest}", auth=None, include_in_schema=False
)
def unknown(request: HttpRequest, rest: str) -> Any:
    raise Http404(f"no API endpoint /api/{rest}")


api.add_router("", _fallback)
