"""JSON text a person can read and a large document can afford.

``json.dumps(indent=...)`` runs Python's pure encoder and puts every scalar on its own line: a
4096-rank mapping with its link list becomes ~1.8 million writes and most of a second of
``rankmap map``'s wall time. Here the outer ``depth`` levels are laid out one item per line and
everything deeper is one compact line from the C encoder: one rank, one link per line, same JSON.
"""
from __future__ import annotations

import json
from typing import Any

_compact = json.JSONEncoder(separators=(", ", ": "), default=str).encode


def dumps(obj: Any, depth: int = 2, indent: int = 1) -> str:
    """``obj`` as JSON text ending in a newline; containers above ``depth`` one item per line."""
    out: list[str] = []
    _write(obj, depth, indent, 0, out)
    out.append("\n")
    return "".join(out)


def _write(obj: Any, depth: int, indent: int, level: int, out: list[str]) -> None:
    if depth <= 0 or not isinstance(obj, (dict, list, tuple)) or not obj:
        out.append(_compact(obj))
        return
    pad = "\n" + " " * (indent * (level + 1))
    items = obj.items() if isinstance(obj, dict) else ((None, v) for v in obj)
    out.append("{" if isinstance(obj, dict) else "[")
    first = True
    for k, v in items:
        out.append(pad if first else "," + pad)
        first = False
        if k is not None or isinstance(obj, dict):
            out.append(_compact(str(k) if not isinstance(k, str) else k) + ": ")
        _write(v, depth - 1, indent, level + 1, out)
    out.append("\n" + " " * (indent * level) + ("}" if isinstance(obj, dict) else "]"))
