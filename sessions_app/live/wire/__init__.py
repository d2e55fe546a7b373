"""Changes to daphne's network libraries for the live feed's send path, one module each.

Each replaces one method (or two helpers) of Twisted or autobahn that cost a large share of
a process's CPU while it sent events to a thousand viewers; each module's docstring has the
measurement. Each reads private attributes of its library, so each first checks that the
installed release still has them and otherwise keeps the library's own way (with a
warning): `tests/reliability/test_live_send_path.py` fails when that happens, and
`pyproject.toml` bounds Twisted and autobahn at the releases these were read against.

`install()` applies them; `config/asgi.py` calls it at start-up unless
`STRAND_WIRE_TUNING=0`, which serves with the libraries exactly as released.
"""

from __future__ import annotations

from sessions_app.live.wire import eager_socket_writes, frames_shared, plain_debug_arguments


def install() -> None:
    """Apply every change (each once, however often this is called)."""
    plain_debug_arguments.install()
    eager_socket_writes.install()
    frames_shared.install()
