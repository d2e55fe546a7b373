"""Each agent service once, called from sync code or from async code.

A service is written once as a *plan*: a plain function that takes the service's arguments,
does what must happen in the caller's own context (normalise the session id, note the
caller's event loop for deltas) and returns the work to run on the engine's loop. `twins`
makes the pair from it: `agent_x` waits for the work from a thread (views, commands) and
`aagent_x` awaits it from a coroutine (consumers, async API endpoints). Services that are
plain database work have an async twin from `in_thread`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from sessions_app.agent.engine import Engine, engine, engine_if_started

P = ParamSpec("P")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# The work of one service call, run on the engine's loop.
Work = Callable[[Engine], Coroutine[Any, Any, T]]


def twins(
    plan: Callable[P, Work[T]], *, start: bool = True
) -> tuple[Callable[P, T], Callable[P, Coroutine[Any, Any, T]]]:
    """`agent<plan name>` and `aagent<plan name>` from `plan` (named `_x`). With
    `start=False` the work needs an engine this process already runs; without one both
    return None (so `T` must admit None)."""

    def sync(*args: P.args, **kwargs: P.kwargs) -> T:
        work = plan(*args, **kwargs)
        return call_sync(work, start=start)

    async def asynchronous(*args: P.args, **kwargs: P.kwargs) -> T:
        work = plan(*args, **kwargs)
        running = await asyncio.to_thread(engine) if start else engine_if_started()
        if running is None:
            return None  # type: ignore[return-value]  # start=False: T admits None
        return await running.acall(work(running))

    return _named(sync, plan, "agent"), _named(asynchronous, plan, "aagent")


def call_sync(work: Work[T], *, start: bool = True) -> T:
    """Run `work` on the engine and wait for it, from a thread that runs no event loop
    (waiting there would stall that loop). `start=False`: None when no engine runs."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = engine() if start else engine_if_started()
        if running is None:
            return None  # type: ignore[return-value]  # start=False: T admits None
        return running.call(work(running))
    raise RuntimeError("this agent service is synchronous; from async code use its a-prefixed twin")


def in_thread(service: Callable[P, T]) -> Callable[P, Coroutine[Any, Any, T]]:
    """The async twin of a service that is database work: it runs on a worker thread."""

    async def asynchronous(*args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(service, *args, **kwargs)

    return _named(asynchronous, service, "a")


def _named(fn: F, model: Callable[..., Any], prefix: str) -> F:
    """`fn` with `model`'s docstring and parameters, named for the service it is."""
    fn.__name__ = fn.__qualname__ = prefix + model.__name__
    fn.__doc__ = model.__doc__
    signature = inspect.signature(model).replace(return_annotation=inspect.Signature.empty)
    setattr(fn, "__signature__", signature)  # noqa: B010 (a callable's attribute, for help())
    fn.__module__ = "sessions_app.agent"
    return fn
