"""The REST API under /api/ (django-ninja); OpenAPI at /api/openapi.json, docs at /api/docs.

Modules: `base` — the API object, its renderer and parser, and the one error handler (each
refusal's code mapped to a status); `auth` — personal tokens and the browser's session;
the routers, by area: `accounts` (/me, tokens), `sessions` (the list, one session, a Pi
import, forks), `entries` (events, entries, the tree, the leaf, navigation), `views`
(context, chat, trace, a model request), `agent` (messages, cancel, retry, approvals,
compaction), `exports` (the Pi file, streamed), `files` (the workspace at an entry, its tar, an
upload into it), `shares` (a session's share links), `search` (entries across sessions),
`usage` (tokens, cost and failures). The API's own description (accounts,
errors, limits) is `base`'s docstring.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest
from ninja import Router

from sessions_app.api import (
    accounts,
    agent,
    entries,
    exports,
    files,
    search,
    sessions,
    shares,
    usage,
    views,
)
from sessions_app.api.base import api

__all__ = ["api"]

# Added in this order, which is the order of the schema's paths and of the URLs (a router's
# literal paths, like /sessions/import, before the patterns that would take them).
for _router in (
    accounts.router,
    sessions.router,
    entries.router,
    views.router,
    agent.router,
    exports.router,
    files.router,
    shares.router,
    search.router,
    usage.router,
):
    api.add_router("", _router)


# Unknown paths under /api/ answer in the API's own error shape, not Django's HTML page.
_fallback = Router()


@_fallback.api_operation(
    ["GET", "POST", "PUT", "PATCH", "DELETE"], "/{path:rest}", auth=None, include_in_schema=False
)
def unknown(request: HttpRequest, rest: str) -> Any:
    raise Http404(f"no API endpoint /api/{rest}")


api.add_router("", _fallback)
