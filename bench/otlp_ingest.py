"""Spans recorded per second through `POST /v1/traces`, over HTTP from one daphne process.

Each agent run is four GenAI spans (invoke_agent, chat asking for a tool, execute_tool, chat
answering), its chat spans carrying their whole input (1–4 KB of text per message), as
Pydantic AI sends them. Bodies are protobuf and gzip, as the official OTLP/HTTP exporter
sends them, posted one after another on one keep-alive connection, in three shapes:

- one span per request (a `SimpleSpanProcessor`: each span as it ends), runs of one
  conversation after another;
- one run per request (its four spans together);
- 512 spans per request (a `BatchSpanProcessor`'s default batch), 128 conversations each.

Then the same bodies are sent again: every span is already recorded, so that is the cost of
the idempotence check alone. The rate is spans accepted per second of wall time (the
client's, which includes the server's work: one request at a time).
"""

from __future__ import annotations

import gzip
import json
import random
import time
from typing import Any

from bench.common import Report, Row, text_payload

RUNS = 100  # agent runs per shape (400 spans), but for whole batches:
BATCH_SPANS = 512
BATCH_RUNS = 512  # 2,048 spans: four requests of 512 (128 conversations each)
T0 = 1_790_000_000_000_000_000
NONCE = random.SystemRandom().getrandbits(63) | 1


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, int):
        return {"intValue": str(v)}
    return {"stringValue": str(v)}


def _span(
    name: str,
    trace: str,
    span_id: str,
    parent: str | None,
    start: int,
    end: int,
    attrs: dict[str, Any],
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": trace,
        "spanId": span_id,
        "name": name,
        "startTimeUnixNano": str(T0 + start * 1_000_000),
        "endTimeUnixNano": str(T0 + end * 1_000_000),
        "attributes": [{"key": k, "value": _value(v)} for k, v in attrs.items()],
    }
    if parent:
        out["parentSpanId"] = parent
    return out


def agent_run(rng: random.Random, n: int, conversation: str) -> list[dict[str, Any]]:
    # Ids of this run of the benchmark alone: spans of an earlier run (the same owner, in the
    # same database) would otherwise be found recorded already and skipped.
    trace = f"{NONCE:016x}{n + 1:016x}"
    root, chat1, tool, chat2 = (f"{NONCE % 2**32:08x}{n * 4 + i + 1:08x}" for i in range(4))
    question = text_payload(rng, 1000, 4000)
    answer = text_payload(rng, 300, 2000)
    call = {"type": "tool_call", "id": f"call-{n}", "name": "lookup", "arguments": '{"q": 1}'}
    result = text_payload(rng, 300, 2000)
    common = {"gen_ai.conversation.id": conversation, "gen_ai.agent.name": "bench"}
    model = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "bench-model",
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Be brief."}]),
        "gen_ai.tool.definitions": json.dumps(
            [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
        ),
        **common,
    }
    first_in = [{"role": "user", "parts": [{"type": "text", "content": question}]}]
    second_in = [
        *first_in,
        {"role": "assistant", "parts": [call]},
        {
            "role": "user",
            "parts": [{"type": "tool_call_response", "id": call["id"], "result": result}],
        },
    ]
    return [
        _span(
            "invoke_agent bench",
            trace,
            root,
            None,
            0,
            100,
            {"gen_ai.operation.name": "invoke_agent", **common},
        ),
        _span(
            "chat bench-model",
            trace,
            chat1,
            root,
            1,
            30,
            {
                **model,
                "gen_ai.input.messages": json.dumps(first_in),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [call]}]),
                "gen_ai.usage.input_tokens": 900,
                "gen_ai.usage.output_tokens": 20,
            },
        ),
        _span(
            "execute_tool lookup",
            trace,
            tool,
            root,
            31,
            40,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.id": call["id"],
                "gen_ai.tool.call.arguments": '{"q": 1}',
                "gen_ai.tool.call.result": result,
                **common,
            },
        ),
        _span(
            "chat bench-model",
            trace,
            chat2,
            root,
            41,
            90,
            {
                **model,
                "gen_ai.input.messages": json.dumps(second_in),
                "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
                ),
                "gen_ai.usage.input_tokens": 1400,
                "gen_ai.usage.output_tokens": 300,
            },
        ),
    ]


def _protobuf(spans: list[dict[str, Any]]) -> bytes:
    import base64

    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    for one in spans:
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in one:
                one[key] = base64.b64encode(bytes.fromhex(one[key])).decode()
    body = {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "bench"}, "spans": spans}]}]}
    message = json_format.ParseDict(body, trace_service_pb2.ExportTraceServiceRequest())
    return gzip.compress(message.SerializeToString())


def _bodies(shape: str, seed: int) -> tuple[list[bytes], int]:
    rng = random.Random(seed)
    count = BATCH_RUNS if shape == "batch" else RUNS
    runs = [agent_run(rng, seed * 10_000 + n, f"bench-{NONCE:x}-{shape}-{n}") for n in range(count)]
    if shape == "span":
        # As a SimpleSpanProcessor sends them: each span when it ends.
        order = (1, 2, 3, 0)
        return [_protobuf([run[i]]) for run in runs for i in order], len(runs) * 4
    if shape == "run":
        return [_protobuf(run) for run in runs], len(runs) * 4
    flat = [span for run in runs for span in run]
    return [_protobuf(flat[i : i + BATCH_SPANS]) for i in range(0, len(flat), BATCH_SPANS)], len(
        flat
    )


def run(report: Report) -> None:
    import requests

    from deploy import daphne
    from deploy.daphne import free_port
    from sessions_app import services
    from sessions_app.services import tokens

    owner = services.user_get_or_create_local(username="bench-otlp")
    token = tokens.token_create(owner, "bench")[1]
    port = free_port()
    server = daphne.start(
        port, {"STRAND_RECOVER_AT_START": "0", "STRAND_RATE_LIMITS": '{"otlp": [0, 60]}'}
    )
    http = requests.Session()
    http.headers.update(
        {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "gzip",
        }
    )
    url = f"http://127.0.0.1:{port}/v1/traces"
    try:
        for i, (shape, label) in enumerate(
            (
                ("span", "one span per request"),
                ("run", "one agent run (4 spans) per request"),
                ("batch", f"{BATCH_SPANS} spans per request"),
            )
        ):
            bodies, spans = _bodies(shape, i + 1)
            sent = sum(len(b) for b in bodies)
            rates = []
            for _ in range(2):  # recorded, then sent again
                start = time.perf_counter()
                for body in bodies:
                    answer = http.post(url, data=body, timeout=120)
                    if answer.status_code != 200:
                        raise RuntimeError(f"{answer.status_code}: {answer.text[:300]}")
                rates.append(spans / (time.perf_counter() - start))
            report.add(
                Row(
                    "otlp ingest",
                    f"spans recorded per second, {label}",
                    f"{rates[0]:,.0f}",
                    note=f"{spans:,} spans in {len(bodies):,} requests "
                    f"({sent / len(bodies) / 1024:,.1f} KB gzipped each)",
                ),
                Row(
                    "otlp ingest",
                    f"the same bodies again (all recorded already), {label}",
                    f"{rates[1]:,.0f} spans/s",
                    note="nothing written",
                ),
            )
    finally:
        daphne.stop(server)
