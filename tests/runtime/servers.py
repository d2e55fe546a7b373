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
    """A 200 event stream: OpenAI chunks (dicts) or Anthropic (event, data) pairs, and
    `RawFrame`s written as they are."""

    items: list[Any]
    delay: float = 0.0
    hang: bool = False  # keep the connection open after the last item
    # Faults: `cut` closes the connection after the items, with no `[DONE]`; with
    # `chunked` the body is sent in HTTP chunks, so a cut leaves the last chunk unfinished
    # (the client sees a broken transfer, not a clean end).
    cut: bool = False
    chunked: bool = False


@dataclass(frozen=True)
class RawFrame:
    """Bytes written into a stream as they are (a malformed event)."""

    data: bytes


@dataclass
class Failure:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Raw:
    """Any answer: status, content type and body, as given (a JSON body to a stream
    request)."""

    status: int
    content_type: str
    body: bytes


@dataclass
class ScriptedServer:
    kind: str  # openai | anthropic
    replies: deque[Stream | Failure | Raw] = field(default_factory=deque)
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

    def script(self, *replies: Stream | Failure | Raw) -> None:
        self.replies.extend(replies)

    def close(self) -> None:
        if not self._thread.is_alive():
            return  # closed already

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
            if isinstance(reply, Failure | Raw):
                if isinstance(reply, Failure):
                    data, content_type = json.dumps(reply.body).encode(), "application/json"
                    extra = "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
                else:
                    data, content_type, extra = reply.body, reply.content_type, ""
                writer.write(
                    f"HTTP/1.1 {reply.status} Reply\r\nContent-Type: {content_type}\r\n{extra}"
                    f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                    + data
                )
                await writer.drain()
                return
            await self._stream(writer, reply)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter, reply: Stream) -> None:
        def send(data: bytes) -> None:
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if reply.chunked else data)

        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            + (b"Transfer-Encoding: chunked\r\n" if reply.chunked else b"")
            + b"Connection: close\r\n\r\n"
        )
        for item in reply.items:
            if reply.delay:
                await asyncio.sleep(reply.delay)
            send(self._frame(item))
            await writer.drain()
        if reply.cut:
            if reply.chunked:
                writer.write(b"400\r\npartial")  # a chunk announced and never finished
            await writer.drain()
            return
        if self.kind == "openai" and not reply.hang:
            send(b"data: [DONE]\n\n")
        if reply.chunked and not reply.hang:
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        if reply.hang:
            await asyncio.sleep(30)

    def _frame(self, item: Any) -> bytes:
        if isinstance(item, RawFrame):
            return item.data
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


# --- faults, in either protocol -----------------------------------------------------------


def text_prefix(kind: str, *pieces: str) -> list[Any]:
    """The start of a text answer, without its end."""
    if kind == "openai":
        return [oa_chunk({"role": "assistant", "content": ""})] + [
            oa_chunk({"content": piece}) for piece in pieces
        ]
    return [an_start(), an_block(0, {"type": "text", "text": ""})] + [
        an_delta(0, {"type": "text_delta", "text": piece}) for piece in pieces
    ]


def tool_prefix(kind: str, *arguments: str, name: str = "read_file") -> list[Any]:
    """The start of a tool call whose raw arguments arrive in `arguments` pieces."""
    if kind == "openai":
        first, *rest = arguments
        return [
            oa_chunk({"role": "assistant", "content": None}),
            oa_tool_call(0, "call_1", name, first),
            *(oa_tool_call(0, None, None, piece) for piece in rest),
        ]
    block = {"type": "tool_use", "id": "toolu_1", "name": name, "input": {}}
    return [
        an_start(),
        an_block(0, block),
        *(an_delta(0, {"type": "input_json_delta", "partial_json": p}) for p in arguments),
    ]


def tool_end(kind: str) -> list[Any]:
    if kind == "openai":
        return [oa_chunk(finish="tool_calls"), oa_usage(20, 9)]
    return [an_stop_block(0), *an_end("tool_use", 9)]


def text_answer(kind: str, *pieces: str) -> Stream:
    return oa_text(*pieces) if kind == "openai" else an_text(*pieces)


def error_body(kind: str, message: str, error_type: str = "api_error") -> dict[str, Any]:
    if kind == "openai":
        return {"error": {"message": message, "type": error_type, "code": None}}
    return {"type": "error", "error": {"type": error_type, "message": message}}


def error_event(kind: str, message: str, error_type: str) -> RawFrame:
    """An error reported inside a 200 stream, as each protocol does it."""
    body: dict[str, Any]
    if kind == "openai":
        body = {"error": {"message": message, "type": error_type, "code": error_type}}
        return RawFrame(f"data: {json.dumps(body)}\n\n".encode())
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return RawFrame(f"event: error\ndata: {json.dumps(body)}\n\n".encode())


def malformed_frame(kind: str) -> RawFrame:
    if kind == "openai":
        return RawFrame(b'data: {"id": "chatcmpl-1", "choices": [{"delta": {"content": "x\n\n')
    return RawFrame(b'event: content_block_delta\ndata: {"type": "content_block_delta", "ind\n\n')


def plain_body(kind: str, text: str) -> Raw:
    """A whole non-streamed answer, as a proxy that ignores `stream: true` sends it."""
    if kind == "openai":
        body: dict[str, Any] = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "test-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
        }
    else:
        body = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 5},
        }
    return Raw(200, "application/json", json.dumps(body).encode())
