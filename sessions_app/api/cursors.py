"""The API's cursors: the codec is the read layer's (`sessions_app.selectors.cursors`), so
that the pages read on with the same cursors as the API."""

from __future__ import annotations

from sessions_app.selectors.cursors import KINDS, BadCursor, cursor_decode, cursor_encode

__all__ = ["KINDS", "BadCursor", "cursor_decode", "cursor_encode"]
