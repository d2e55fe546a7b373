"""A small round-robin TCP proxy for running several Strand processes behind one address.

Each incoming connection (HTTP or websocket) is handed, whole, to the next backend in turn.
It stands in for the load balancer of a real deployment (nginx, HAProxy, a cloud balancer):
Strand needs nothing from it but that, since no process keeps state another one needs.

    python -m deploy.proxy --listen 127.0.0.1:8000 127.0.0.1:8001 127.0.0.1:8002
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging

log = logging.getLogger("strand.proxy")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def serve(listen: tuple[str, int], backends: list[tuple[str, int]]) -> None:
    turn = itertools.cycle(backends)

    async def handle(
        client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        for _ in range(len(backends)):
            host, port = next(turn)
            try:
                backend_reader, backend_writer = await asyncio.open_connection(host, port)
                break
            except OSError:
                log.warning("backend %s:%d is down; trying the next", host, port)
        else:
            client_writer.close()
            return
        await asyncio.gather(
            _pipe(client_reader, backend_writer), _pipe(backend_reader, client_writer)
        )

    server = await asyncio.start_server(handle, *listen)
    log.info("proxy on %s:%d → %s", *listen, ", ".join(f"{h}:{p}" for h, p in backends))
    async with server:
        await server.serve_forever()


def _address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host or "127.0.0.1", int(port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", type=_address, default=("127.0.0.1", 8000))
    parser.add_argument("backends", nargs="+", type=_address)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    asyncio.run(serve(args.listen, args.backends))


if __name__ == "__main__":
    main()
