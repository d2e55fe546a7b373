"""How deeply a JSON value nests, measured without recursion.

A value nested thousands of levels deep breaks every recursive reader (`json`, templates,
the renderers of the views), so the append path and the Pi import refuse one nested past a
limit, and say where. A value's depth counts the objects and arrays on the way down to its
deepest one: a scalar is 0, `{}` and `[]` are 1, `{"a": [1]}` is 2.
"""

from __future__ import annotations

from typing import Any

_Path = tuple[Any, str | int] | None  # (the path above, this key or index), root is None


def nested_past(value: Any, limit: int) -> str | None:
    """Where `value` first nests past `limit` levels (a path such as
    `message.content[0].a…`), or None when it stays within them."""
    if not isinstance(value, dict | list):
        return None
    stack: list[tuple[Any, int, _Path]] = [(value, 1, None)]
    while stack:
        current, depth, path = stack.pop()
        if depth > limit:
            return path_text(path)
        children = current.items() if isinstance(current, dict) else enumerate(current)
        for key, child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1, (path, key)))
    return None


def depth_of(value: Any) -> int:
    """The depth of `value` (see the module's note)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        children = current.values() if isinstance(current, dict) else current
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return deepest


PATH_SHOWN = 8  # keys of a path named in an error; the rest is elided


def path_text(path: _Path) -> str:
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    keys.reverse()
    text = ""
    for key in keys[:PATH_SHOWN]:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return (text or "(top)") + ("…" if len(keys) > PATH_SHOWN else "")
