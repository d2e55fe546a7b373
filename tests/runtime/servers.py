"""Local model servers for tests: the OpenAI Chat Completions and Anthropic Messages
streaming wire protocols over HTTP on 127.0.0.1, answering from a script.

Each server runs its own asyncio loop in a thread (the agent runs on another), records the
JSON body of every request, and answers each request with the next scripted reply.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Stream:
    """A 200 event stream: OpenAI chunks (dicts) or Anthropic (event, data) pairs."""

    items: list[Any]
    delay: float = 0.0
    hang: bool = False  # keep the connection open after the last item


@dataclass
class Failure:
    status: int
    body: dict[str, Any]


@dataclass
class ScriptedServer:
    kind: str  # openai | anthropic
    replies: deque[Stream | Failure] = field(default_factory=deque)
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        self._ready.wait(5)

    @property
    def base_url(self) -> str:
        root = f"http://127.0.0.1:{self.port}"
        return root + "/v1" if self.kind == "openai" else root

    def script(self, *replies: Stream | Failure) -> None:
        self.replies.extend(replies)

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await reader.readline()
            headers: dict[str, str] = {}
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.paths.append(request_line.decode().split(" ")[1])
            self.requests.append(json.loads(body) if body else {})
            reply = (
                self.replies.popleft()
                if self.replies
                else Failure(500, {"error": "no reply scripted"})
            )
            if isinstance(reply, Failure):
                data = json.dumps(reply.body).encode()
                writer.write(
                    f"HTTP/1.1 {reply.status} Error\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
                return
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                b"Connection: close\r\n\r\n"
            )
            for item in reply.items:
                if reply.delay:
                    await asyncio.sleep(reply.delay)
                writer.write(self._frame(item))
                await writer.drain()
            if self.kind == "openai" and not reply.hang:
                writer.write(b"data: [DONE]\n\n")
            await writer.drain()
            if reply.hang:
                await asyncio.sleep(30)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    def _frame(self, item: Any) -> bytes:
        if self.kind == "openai":
            return f"data: {json.dumps(item)}\n\n".encode()
        event, data = item
        return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


# --- OpenAI chunks -----------------------------------------------------------------------


def oa_chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }


def oa_usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


def oa_text(*pieces: str, usage: tuple[int, int] = (20, 5)) -> Stream:
    items = [oa_chunk({"role": "assistant", "content": ""})]
    items += [oa_chunk({"content": piece}) for piece in pieces]
    items += [oa_chunk(finish="stop"), oa_usage(*usage)]
    return Stream(items)


def oa_tool_call(
    index: int, call_id: str | None, name: str | None, arguments: str
) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    call: dict[str, Any] = {"index": index, "function": function}
    if call_id is not None:
        call["id"] = call_id
        call["type"] = "function"
    return oa_chunk({"tool_calls": [call]})


# --- Anthropic events --------------------------------------------------------------------


def an_start(input_tokens: int = 20, cache_read: int = 0) -> tuple[str, dict[str, Any]]:
    return (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": input_tokens,
                    "output_tokens": 1,
                    "cache_read_input_tokens": cache_read,
                    "cache_creation_input_tokens": 0,
                },
            },
        },
    )


def an_block(index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def an_delta(index: int, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def an_stop_block(index: int) -> tuple[str, dict[str, Any]]:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def an_end(stop_reason: str, output_tokens: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def an_text(*pieces: str, input_tokens: int = 20, output_tokens: int = 5) -> Stream:
    items = [an_start(input_tokens), an_block(0, {"type": "text", "text": ""})]
    items += [an_delta(0, {"type": "text_delta", "text": piece}) for piece in pieces]
    items += [an_stop_block(0), *an_end("end_turn", output_tokens)]
    return Stream(items)
