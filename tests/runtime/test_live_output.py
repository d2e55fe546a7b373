"""A running command's live output: pieces reach the sink on the agent's loop, never more
often than the interval, never larger than the piece bound, and never more than the total
bound for one command, however much and however fast the command writes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from runtime import dispatch
from runtime.dispatch import LiveOutput
from runtime.run import Delta


def test_a_flood_of_output_reaches_the_viewers_bounded() -> None:
    async def scenario() -> list[Delta]:
        got: list[Delta] = []
        loop = asyncio.get_running_loop()
        feed = LiveOutput(loop, got.append, "s1", 2, 3, "call_1")

        def flood() -> None:  # as the tool's thread does: `yes`, as fast as it can
            for _ in range(20_000):
                feed.write(b"y\n" * 512)

        thread = threading.Thread(target=flood)
        thread.start()
        while thread.is_alive():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)
        feed.close()
        await asyncio.sleep(0)
        return got

    got = asyncio.run(scenario())
    assert got and all(d.kind == "tool_output" and d.block == "call_1" for d in got)
    assert all((d.session_id, d.turn, d.step) == ("s1", 2, 3) for d in got)
    bound = dispatch.OUTPUT_DELTA_MAX_CHARS + len("[…]\n") + len(dispatch.OUTPUT_LIVE_ENDS)
    assert max(len(d.text) for d in got) <= bound
    total = sum(len(d.text) for d in got)
    assert total <= dispatch.OUTPUT_LIVE_MAX_CHARS + len(dispatch.OUTPUT_LIVE_ENDS)


def test_past_the_total_bound_one_note_goes_out_and_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dispatch, "OUTPUT_DELTA_INTERVAL_S", 0.0)

    async def scenario() -> list[Delta]:
        got: list[Delta] = []
        feed = LiveOutput(asyncio.get_running_loop(), got.append, "s", 1, 1, "c")
        for _ in range(200):
            await asyncio.to_thread(feed.write, b"z" * 4096)
        feed.close()
        await asyncio.sleep(0)
        return got

    got = asyncio.run(scenario())
    assert sum(len(d.text) for d in got) == (
        dispatch.OUTPUT_LIVE_MAX_CHARS + len(dispatch.OUTPUT_LIVE_ENDS)
    )
    assert got[-1].text.endswith(dispatch.OUTPUT_LIVE_ENDS)


def test_pieces_split_inside_a_character_arrive_whole() -> None:
    async def scenario() -> str:
        got: list[Delta] = []
        feed = LiveOutput(asyncio.get_running_loop(), got.append, "s", 1, 1, "c")
        data = "héllo wörld\x00\n".encode()
        for i in range(len(data)):  # one byte at a time, from another thread
            await asyncio.to_thread(feed.write, data[i : i + 1])
        feed.close()
        await asyncio.sleep(0)
        return "".join(d.text for d in got)

    assert asyncio.run(scenario()) == "héllo wörld\\0\n"
