"""The REST API under /api/ (django-ninja); OpenAPI at /api/openapi.json, docs at /api/docs.

Adapters only: parse, check access (`sessions_app.access`, the one place that decides),
call one service or selector plus a projection, return a schema.

Accounts. Browsers use the Django session cookie; every unsafe request made with it must
carry the CSRF token. Programs send a personal token as `Authorization: Bearer …`
(`sessions_app.services.tokens`). A bearer token that is unknown or revoked is refused with 401
even when a session cookie comes along.

Errors. Every refusal is JSON `{"error": code, "detail": text}` (409 adds `current_seq`,
429 adds `retry_after`, 422 adds `errors`), built by `error_response`, the one exception
handler. Statuses: 400 malformed request, 401 not signed in or bad token, 403 read-only
(staff on someone else's session) or CSRF, 404 unknown or someone else's session, 409
conflict, 413 too large, 422 invalid values, 429 rate limited.

Limits. A body is at most `STRAND_MAX_BODY_BYTES` (4 MiB; refused with 413 as soon as its
headers arrive, or a streamed body at the piece that passes), 8 KiB without a token or a
session cookie, text fields have lengths set in `schemas.py`, an event at most
`STRAND_MAX_EVENT_BYTES`, a batch at most `STRAND_MAX_BATCH` events, a Pi upload at most
`STRAND_MAX_IMPORT_BYTES`, an upload into a workspace at most `STRAND_MAX_UPLOAD_BYTES` (and
what it unpacks to within the workspace quota). A read that is not paged (a model context,
a comparison's contexts) gathers at most `STRAND_WHOLE_READ_BYTES` (8 MiB) of stored data:
past it, 413 with what to read instead (the chat window's `older_cursor`, the entries'
pages).
Every costly door is rate limited per user (`sessions_app.services.ratelimit`, scopes in brackets):
sending a message, steering or following up [message], importing [import], appending events
[append], creating [session] and forking [fork] sessions, navigating with a summary
[summary], compacting [compact], replaying a recorded request [replay], uploading files
into a workspace [upload], filtering the list by `q` [search] and making tokens [token];
and the small writes, each an event every
viewer is sent or a row: renaming [rename], moving the leaf (PUT …/leaf, navigating without
a summary) [navigate], deciding approvals [approval], cancelling [cancel], deleting sessions
[delete], making share links [share] and revoking tokens and share links [revoke]. A share
link's guest page (`/s/<token>/`, no account) is limited per link and per client address
[share-view]. The hit is counted before any work, so a refused
request (429) changes nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import (
    BadRequest,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.db import DataError
from django.http import Http404, HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParserError
from django.utils.datastructures import MultiValueDict
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.operation import Operation
from ninja.parser import Parser
from ninja.renderers import JSONRenderer

from projections.request import RequestNotFound
from runtime import AgentError
from runtime.config import ConfigError
from sessions_app import selectors, store
from sessions_app.api.auth import BearerToken, CsrfRefused, SessionCookie
from sessions_app.bad_input import finite_float
from sessions_app.errors import DomainError
from sessions_app.models import Session
from sessions_app.services import ratelimit

log = logging.getLogger("strand.api")

ERRORS = frozenset({400, 401, 403, 404, 409, 413, 422, 429})


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
    """A JSON object as RFC 8259 has it (no NaN or Infinity, no number that overflows to
    infinity), and text Postgres can store: no NUL characters, no lone surrogates, in the
    body or the query string (`sessions_app.bad_input`)."""

    def parse_body(self, request: HttpRequest) -> Any:
        data = json.loads(request.body, parse_constant=_reject_constant, parse_float=finite_float)
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


class StrandAPI(NinjaAPI):
    """The API, with operation ids that name the endpoint alone (`sessions_app_api_<name>`,
    as when the API was one module): clients generated from the schema keep their names
    when an endpoint moves between the routers' modules."""

    def get_openapi_operation_id(self, operation: Operation) -> str:
        return f"sessions_app_api_{operation.view_func.__name__}"


api = StrandAPI(
    title="Strand",
    version="1",
    description=__doc__,
    urls_namespace="api",
    auth=[BearerToken(), SessionCookie()],
    renderer=SafeJSONRenderer(),
    parser=StrictParser(),
)


# --- errors: the one handler -------------------------------------------------------------

_STATUS_BY_CODE = {
    "bad_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "too_large": 413,
    # The owner's sessions hold STRAND_USER_QUOTA_BYTES of JSON: the body is fine, the
    # storage is full (the answer names the quota; `_error_body`).
    "quota_exceeded": 413,
    "invalid": 422,
    "invalid_event": 422,
    "invalid_pi_file": 422,
    "not_allowed": 422,
    # A working directory outside its owner's folders: asked for, or found at a turn.
    "workspace_not_allowed": 403,
    # A session whose preset the server no longer offers: refused at its next turn.
    "preset_unavailable": 409,
    # A recorded request whose rebuilt payload does not hash to its manifest's: not replayed.
    "payload_mismatch": 409,
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
    if isinstance(exc, store.QuotaExceeded):
        return 413, {
            "error": exc.code,
            "detail": str(exc),
            "quota": "STRAND_USER_QUOTA_BYTES",
            "quota_bytes": exc.quota_bytes,
            "used_bytes": exc.used_bytes,
        }
    if isinstance(exc, (DomainError, AgentError)):
        status = _STATUS_BY_CODE.get(exc.code, 422)
        body = {"error": exc.code, "detail": str(exc)}
        if member := getattr(exc, "member", ""):  # an upload's refused member
            body["member"] = str(member)
        return status, body
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


# --- what every router needs ------------------------------------------------------------


def auth_user(request: HttpRequest) -> Any:
    return request.auth  # type: ignore[attr-defined]


def check_entry(session: Session, entry_id: str) -> None:
    if not selectors.entry_exists(session, entry_id):
        raise DomainError(f"{entry_id!r} is not an entry of this session")


def leaf_or_current(session: Session, leaf: str | None) -> str | None:
    """The leaf asked for, which must be an entry of the session, or the current leaf."""
    if leaf is None:
        return session.leaf_entry_id
    check_entry(session, leaf)
    return leaf
