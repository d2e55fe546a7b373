"""The agent services come in pairs made once: `agent_x` for threads, `aagent_x` for
coroutines, with the same parameters."""

from __future__ import annotations

import asyncio
import inspect
import uuid

import pytest

from sessions_app import agent

TWINS = [name for name in agent.__all__ if name.startswith("aagent_")]


def test_every_service_the_async_doors_use_has_its_twin():
    assert {"aagent_send_message", "aagent_navigate", "aagent_compact", "aagent_wait"} <= set(TWINS)
    assert len(TWINS) == 11


@pytest.mark.parametrize("name", TWINS)
def test_a_twin_takes_the_parameters_of_its_sync_service(name: str):
    coroutine, sync = getattr(agent, name), getattr(agent, name[1:])
    assert inspect.iscoroutinefunction(coroutine) and not inspect.iscoroutinefunction(sync)
    assert inspect.signature(coroutine).parameters == inspect.signature(sync).parameters
    assert sync.__name__ == name[1:] and coroutine.__name__ == name
    assert sync.__doc__ and coroutine.__doc__ == sync.__doc__


def test_a_sync_service_refuses_to_block_an_event_loop():
    async def from_a_coroutine() -> None:
        agent.agent_send_message(uuid.uuid4(), "hello")

    with pytest.raises(RuntimeError, match="a-prefixed twin"):
        asyncio.run(from_a_coroutine())
