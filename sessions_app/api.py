"""The REST API under /api/ (django-ninja). Adapters only: parse, call a service or a
selector plus a projection, return a schema."""

from __future__ import annotations

from ninja import NinjaAPI

api = NinjaAPI(title="Strand", version="1", urls_namespace="api")
