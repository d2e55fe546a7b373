"""A real agent that emits OpenTelemetry GenAI spans: Pydantic AI with its own
instrumentation, exporting with the official OTLP/HTTP exporter to Strand's `/v1/traces`.

Run as a child process by the tests (its tracer provider is its own):

    python -m tests.ingest.producer ENDPOINT TOKEN MODEL_BASE_URL BODIES_DIR [TOOL_DELAY_S]

The agent has three tools (`get_weather`, `get_time`, and `read`, named as one of Strand's
own tools is); the model server decides which it calls. Every body the exporter sends is also written to BODIES_DIR (`0000.pb`, …), so a test
can send the very same bodies again. Spans are exported one by one as they end, so Strand
receives them while the agent runs. Prints the agent's output last.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from pydantic_ai import Agent
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider


class Keeping(SpanExporter):
    """The OTLP exporter, keeping a copy of each body it sends."""

    def __init__(self, inner: OTLPSpanExporter, folder: Path) -> None:
        self.inner = inner
        self.folder = folder
        self.count = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        body = encode_spans(spans).SerializeToString()
        (self.folder / f"{self.count:04d}.pb").write_bytes(body)
        self.count += 1
        result = self.inner.export(spans)
        if result is not SpanExportResult.SUCCESS:
            print(f"export failed: {result}", file=sys.stderr)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()


def main(endpoint: str, token: str, model_url: str, bodies: str, delay: float = 0.0) -> None:
    folder = Path(bodies)
    folder.mkdir(parents=True, exist_ok=True)
    exporter = OTLPSpanExporter(
        endpoint=endpoint,
        headers={"Authorization": f"Bearer {token}"},
        compression=Compression.Gzip,
        timeout=20,
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(Keeping(exporter, folder)))
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    model = OpenAIChatModel(
        "test-model", provider=OpenAIProvider(base_url=model_url, api_key="not-a-key")
    )
    agent = Agent(model, name="weather", instructions="You are a weather bot. Be brief.")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        time.sleep(delay)
        return f"Sunny and 21C in {city}"

    @agent.tool_plain
    def get_time(city: str) -> str:
        """The local time in a city."""
        time.sleep(delay)
        return f"10:00 in {city}"

    @agent.tool_plain
    def read(path: str) -> str:
        """Read one of this agent's own files (named as one of Strand's tools is)."""
        return f"the agent's own {path}"

    result = agent.run_sync("What is the weather and the time in Paris?")
    provider.shutdown()
    print(result.output)


if __name__ == "__main__":
    endpoint, token, model_url, bodies, *rest = sys.argv[1:]
    main(endpoint, token, model_url, bodies, float(rest[0]) if rest else 0.0)
