"""`GET /healthz`, answered before Django."""

from __future__ import annotations

from typing import Any


class HealthCheck:
    """`GET /healthz` answered here, before Django: a load balancer asks every second whether
    this process serves, and the answer needs no host check, no middleware and no database
    (which every process shares, so it says nothing about this one)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        if scope.get("path") != "/healthz":
            return await self.app(scope, receive, send)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"cache-control", b"no-store")],
            }
        )
        await send({"type": "http.response.body", "body": b"ok\n"})
