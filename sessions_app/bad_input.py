"""Text Postgres cannot store and numbers Python cannot hold, refused where they enter.

Postgres refuses U+0000 (NUL) in `text` and in `jsonb`, and a lone surrogate (U+D800 to
U+DFFF on its own) has no UTF-8 form, so psycopg cannot send it. Either one, let through to a
query, fails there: a 500, and sometimes after an earlier write of the same request was
applied (a rename, then its return URL). A JSON number like `1e999` is infinity to Python,
which no column holds and `int()` cannot convert (OverflowError).

So every door checks what it reads before it does anything:

- `RefuseUnstorableInput`, a middleware, for every page, form and API request: the path,
  the query string, the header values (and the query of `HX-Current-URL`, which the pages
  read as the page a form came from) and, on the pages, the fields of a form body. The
  API's JSON bodies are its parser's (`api.base.StrictParser`, which refuses NUL and lone
  surrogates itself and reads numbers with `finite_float`).
- `page_query.PageQuery` parses the query a page reads, the one carried in a form's
  `return_to` or in `HX-Current-URL` included, and refuses a NUL or a number past any seq
  with BadInput; the views parse it before they write, and the middleware answers 400.
- `projections.pi_file` refuses a number that overflows in a Pi file, with the number of
  its line (with a `finite_float` of its own: projections import nothing of ours).
- Commands check their arguments with `check_text` (a lone surrogate is how Python hands
  over the bytes of an argument that are not UTF-8).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from sessions_app.errors import DomainError

TEMPLATE = "bad_request.html"

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class BadInput(DomainError):
    """Input that cannot be stored or read as a number: a NUL, a lone surrogate, an
    overflowing number."""

    code = "bad_request"


def unstorable(text: str) -> str | None:
    """Why Postgres cannot store `text` (a NUL, a lone surrogate), or None when it can."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "holds a NUL character (U+0000)"
    return "holds a lone surrogate (invalid Unicode)"


def check_text(text: str, what: str) -> str:
    """`text` if Postgres can store it, else BadInput naming `what`."""
    reason = unstorable(text)
    if reason is not None:
        raise BadInput(f"{what} {reason}")
    return text


def finite_float(literal: str) -> float:
    """A JSON number with a fraction or exponent, refused when it overflows to infinity
    (`parse_float` of `json.loads`)."""
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"the number {literal[:40]} is out of range")
    return value


# --- the middleware ------------------------------------------------------------------------


def _printable(name: str) -> str:
    return _UNSTORABLE.sub("?", name)[:80]


def _first_refusal(pairs: Iterable[tuple[str, str]], kind: str) -> str | None:
    for name, value in pairs:
        for part in (name, value):
            reason = unstorable(part)
            if reason is not None:
                return f"{kind} {_printable(name)!r} {reason}"
    return None


def _query_pairs(request: HttpRequest) -> Iterable[tuple[str, str]]:
    for name, values in request.GET.lists():
        for value in values:
            yield name, value


def _header_pairs(request: HttpRequest) -> Iterable[tuple[str, str]]:
    for name, value in request.headers.items():
        yield name, str(value)
    current = request.headers.get("HX-Current-URL")
    if current:
        # The pages read the query of this URL as the page a form came from.
        query = urlsplit(current).query
        yield from (("HX-Current-URL", v) for pair in parse_qsl(query) for v in pair)


def _form_pairs(request: HttpRequest) -> Iterable[tuple[str, str]]:
    for name, values in request.POST.lists():
        for value in values:
            yield name, str(value)
    for name in request.FILES:
        yield name, str(getattr(request.FILES[name], "name", "") or "")


_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


class RefuseUnstorableInput:
    """Answers 400 before the view for a request whose input Postgres could not store.

    Placed after `CsrfViewMiddleware`, whose `process_view` runs first: a forged form is
    refused as such, and has its body read by that check already. API bodies are left to the
    API's parser (which answers in its own shape, 413 for a body too large included); only
    the pages' forms are read here.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        # A page's own parsing (`PageQuery`: a query carried in `return_to` or in
        # `HX-Current-URL`, a number past any seq) refuses with BadInput before it writes.
        if isinstance(exception, BadInput) and not _is_api(request):
            return refused(request, str(exception), api=False)
        return None

    def process_view(
        self, request: HttpRequest, view_func: Any, view_args: Any, view_kwargs: Any
    ) -> HttpResponse | None:
        api = _is_api(request)
        problem = (
            _first_refusal([("path", request.path)], "the")
            or _first_refusal(_query_pairs(request), "query parameter")
            or _first_refusal(_header_pairs(request), "header")
        )
        if problem is None and not api and request.content_type in _FORMS:
            problem = _first_refusal(_form_pairs(request), "form field")
        if problem is None:
            return None
        return refused(request, problem, api=api)


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith("/api/")


def refused(request: HttpRequest, detail: str, *, api: bool) -> HttpResponse:
    """The 400 of the door: the API's JSON error, or a page that says what is wrong."""
    if api:
        # Escaped as the API's renderer escapes: no markup in a JSON answer.
        text = json.dumps({"error": BadInput.code, "detail": detail})
        text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        return HttpResponse(text, status=400, content_type="application/json")
    return render(
        request, TEMPLATE, {"message": f"This request cannot be read: {detail}."}, status=400
    )
