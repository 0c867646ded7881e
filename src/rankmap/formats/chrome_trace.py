"""The Chrome / Perfetto trace format (Trace Event Format, JSON): rankmap's profiles as timelines.

Perfetto's UI and the Catapult trace viewer (what ``chrome://tracing`` was) read a JSON object whose
``traceEvents`` list holds events of a few phases; this module writes the ones rankmap needs and
reads back what it wrote, checking every event:

* ``M`` metadata: ``process_name`` / ``process_sort_index`` / ``thread_name`` -- one process per
  rank (its track group), one thread per track inside it;
* ``X`` complete events (a slice on a thread track: ``ts`` and ``dur`` in microseconds);
* ``C`` counters (a counter track per name and process; ``args`` holds one value per series).

The top level also carries ``displayTimeUnit`` and ``otherData`` (free-form metadata; rankmap puts
the job there with ``format: rankmap-trace`` and ``version``). Times are microseconds as floats,
the format's unit; rankmap's nanoseconds become ``ns / 1000``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rankmap.errors import RankmapError

FORMAT = "rankmap-trace"
VERSION = 1
PHASES = ("M", "X", "C", "i", "B", "E")


@dataclass
class TraceWriter:
    """Events in the order they are added, and the metadata of the whole trace."""

    meta: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    def process(self, pid: int, name: str, sort_index: int | None = None) -> None:
        """A track group: every event of ``pid`` is drawn under ``name``."""
        self.events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": name}})
        if sort_index is not None:
            self.events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index",
                                "args": {"sort_index": sort_index}})

    def thread(self, pid: int, tid: int, name: str) -> None:
        """A named track inside the group of ``pid``."""
        self.events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": name}})
        self.events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                            "args": {"sort_index": tid}})

    def complete(self, pid: int, tid: int, name: str, ts_ns: int, dur_ns: int, *, cat: str = "",
                 args: dict[str, Any] | None = None) -> None:
        """A slice from ``ts_ns`` lasting ``dur_ns`` (nanoseconds; written in microseconds)."""
        ev = {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts_ns / 1000, "dur": max(dur_ns, 0) / 1000}
        if cat:
            ev["cat"] = cat
        if args:
            ev["args"] = args
        self.events.append(ev)

    def counter(self, pid: int, name: str, ts_ns: int, values: dict[str, float]) -> None:
        """One point of the counter track ``name`` of ``pid``: a value per series."""
        self.events.append({"ph": "C", "pid": pid, "tid": 0, "name": name, "ts": ts_ns / 1000,
                            "args": {k: float(v) for k, v in values.items()}})

    def dumps(self) -> str:
        doc = {"traceEvents": self.events, "displayTimeUnit": "ms",
               "otherData": {"format": FORMAT, "version": VERSION, **self.meta}}
        return json.dumps(doc, separators=(",", ":"), default=str) + "\n"


@dataclass(frozen=True)
class Trace:
    """A trace as read: its events and its ``otherData``."""

    events: list[dict[str, Any]]
    meta: dict[str, Any]

    def process_names(self) -> dict[int, str]:
        return {e["pid"]: e["args"]["name"] for e in self.events if e["ph"] == "M" and e["name"] == "process_name"}


def loads(text: str, where: str = "trace") -> Trace:
    """Read a trace JSON object, checking each event's phase, ids and times; names the culprit."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise RankmapError(f"{where}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if isinstance(doc, list):            # the format allows a bare array of events
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise RankmapError(f"{where}: no traceEvents list: not a Chrome trace")
    meta = doc.get("otherData") or {}
    if meta.get("format") == FORMAT and int(meta.get("version", 0)) > VERSION:
        raise RankmapError(f"{where}: rankmap trace version {meta['version']}, newer than this rankmap's ({VERSION})")
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict) or e.get("ph") not in PHASES:
            raise RankmapError(f"{where}: traceEvents[{i}] has no known phase (ph): {str(e)[:80]}")
        if not isinstance(e.get("pid"), (int, str)) or not isinstance(e.get("name"), str):
            raise RankmapError(f"{where}: traceEvents[{i}] lacks pid or name")
        if e["ph"] != "M" and not isinstance(e.get("ts"), (int, float)):
            raise RankmapError(f"{where}: traceEvents[{i}] ({e['name']}) has no numeric ts")
        if e["ph"] == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
            raise RankmapError(f"{where}: traceEvents[{i}] ({e['name']}) is a complete event without a duration")
    return Trace(doc["traceEvents"], meta)
