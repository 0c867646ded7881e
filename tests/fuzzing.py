"""What the property-based fuzz tests (``tests/test_fuzz_*.py``) share: their Hypothesis profiles and
the checks every reader's answer to a hostile input must pass.

Profiles, chosen by ``RANKMAP_FUZZ`` (default ``fast``):

* ``fast``: a few dozen examples a property, so the whole fuzz suite stays within the fast lane;
* ``long``: thousands a property, for a run on demand (``RANKMAP_FUZZ=long pytest tests/test_fuzz_*.py``);
  Hypothesis keeps the failing inputs it finds in ``.hypothesis/`` and tries them first next time.

A hostile input may be refused, but only with :class:`~rankmap.errors.RankmapError` (one line naming
the file and the place); any other exception is a bug, and so is a hang (each example has a deadline)
or memory far beyond the input's size (:func:`bounded_memory`).
"""

from __future__ import annotations

import os
import tracemalloc
from contextlib import contextmanager
from datetime import timedelta
from typing import Iterator

from hypothesis import HealthCheck, settings

settings.register_profile("fast", max_examples=int(os.environ.get("RANKMAP_FUZZ_EXAMPLES", 40)),
                          deadline=timedelta(seconds=5), derandomize=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("long", max_examples=int(os.environ.get("RANKMAP_FUZZ_EXAMPLES", 3000)),
                          deadline=timedelta(seconds=20),
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("RANKMAP_FUZZ", "fast"))

#: what a reader may use beyond a fixed allowance, per byte of its input
MEMORY_PER_INPUT_BYTE = 64
MEMORY_ALLOWANCE = 8 << 20


def one_line(e: BaseException, *needles: str) -> str:
    """The error's text, checked: one line, naming every one of ``needles`` (the file, the place)."""
    text = str(e)
    assert "\n" not in text, text
    for n in needles:
        assert n in text, (n, text)
    return text


@contextmanager
def bounded_memory(input_size: int, allowance: int = MEMORY_ALLOWANCE) -> Iterator[None]:
    """Fail when the block allocated more than the input's size allows (Python and NumPy memory,
    as :mod:`tracemalloc` sees it) beyond a fixed ``allowance`` (what a well-formed answer needs)."""
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    limit = allowance + MEMORY_PER_INPUT_BYTE * input_size
    assert peak <= limit, f"peak {peak} bytes for an input of {input_size} bytes (limit {limit})"


class Hang(AssertionError):
    """A reader took longer than its time limit: a hang, as far as a user is concerned."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Fail the block when it runs past ``seconds`` (SIGALRM: the test must run in the main thread)."""
    import signal

    def _alarm(_sig, _frame):
        raise Hang(f"no answer after {seconds} s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
