"""Compaction of a run's path at its position in the tree: on its own at a step's start
when the context outgrew the threshold, and forced once after the provider refused a
context too long for its window. The cut point and the summary are `runtime.compaction`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from projections.context import build_session_context
from runtime.compaction import (
    compaction_entry,
    compaction_summary,
    context_tokens,
    prepare_compaction,
)
from runtime.config import AgentConfig
from runtime.log_cache import LogCache
from runtime.ports import NewFact
from runtime.providers.base import Provider, ProviderError


class Compactor:
    def __init__(self, cache: LogCache, config: AgentConfig, provider: Provider) -> None:
        self.cache = cache
        self.config = config
        self.provider = provider

    async def auto_compact(self, turn: int, step: int) -> None:
        if self.cache.leaf is None:
            return
        window = await self.cache.log.context_window(self.cache.sid, self.cache.leaf)
        context = build_session_context(window, self.cache.leaf)
        if context_tokens(window, context.messages) > self.config.compaction_threshold:
            await self.compact(turn, step, force=False, window=window)

    async def compact(
        self, turn: int, step: int, *, force: bool, window: Sequence[Any] | None = None
    ) -> bool:
        """Compact the path at our position; whether a compaction entry was written."""
        if self.cache.leaf is None:
            return False
        if window is None:
            window = await self.cache.log.context_window(self.cache.sid, self.cache.leaf)
        prep = prepare_compaction(window, self.config.keep_recent_tokens)
        if prep is None or not (prep.messages or prep.turn_prefix):
            return False
        try:
            summary = await compaction_summary(self.provider, self.config, prep)
        except ProviderError:
            return False
        entry = compaction_entry(prep, summary, self.cache.leaf)
        await self.cache.append([NewFact("entry/compaction", {"entry": entry}, turn, step)])
        return True

    async def compactable(self) -> bool:
        """Whether compacting the path at our position would summarize anything."""
        if self.cache.leaf is None:
            return False
        window = await self.cache.log.context_window(self.cache.sid, self.cache.leaf)
        prep = prepare_compaction(window, self.config.keep_recent_tokens)
        return prep is not None and bool(prep.messages or prep.turn_prefix)
