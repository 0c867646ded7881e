"""The one exception type a user sees as a one-line message.

Every layer raises :class:`RankmapError` (or a subclass) for bad input and missing
prerequisites, with a message that names the culprit (file, offset, field, command) and,
where there is one, the fix. The CLI prints it as ``rankmap: error: <message>`` and exits
non-zero; anything else escaping is a bug in rankmap and is reported as such.

The small text helpers of messages live here too (``shown``, ``counted``, ``verb``): this is the
one module every layer may import, so every layer words its messages the same way.
"""


def shown(value: object) -> str:
    """A bad value as an error message quotes it: JSON where possible, cut to 60 characters."""
    import json

    try:
        s = json.dumps(value)
    except (TypeError, ValueError):
        try:
            s = repr(value)
        except ValueError:          # an integer past Python's digit limit for text
            s = f"(an integer of {value.bit_length()} bits)" if isinstance(value, int) else type(value).__name__
    except RecursionError:
        s = f"(a {type(value).__name__} nested too deep to show)"
    return s if len(s) <= 60 else s[:57] + "..."


def counted(n: int | str, word: str) -> str:
    """``counted(1, "rank")`` -> '1 rank', 2 -> '2 ranks' (and '? ranks' for an unknown count):
    the reader should not have to do the counting that "rank(s)" leaves to them."""
    return f"{n} {noun(n, word)}"


def noun(n: int | str, word: str) -> str:
    """The word alone, in the number ``n`` asks for: ``noun(1, "host")`` -> 'host' (as in 'host h1'),
    ``noun(2, "host")`` -> 'hosts' ('hosts h1, h2')."""
    return word if n == 1 else f"{word}s"


def verb(n: int | str, one: str, many: str) -> str:
    """The verb that agrees with a count: ``verb(1, "does", "do")`` -> 'does' (as in '1 rank does
    not fit'), ``verb(2, "is", "are")`` -> 'are'; an unknown count ("?") takes the plural, as in
    :func:`noun`."""
    return one if n == 1 else many


class RankmapError(Exception):
    """Bad input or a missing prerequisite, said in one line."""

    exit_code = 2


def memory_bytes() -> int:
    """This machine's memory (what a dense matrix must fit in), or 16 GiB where it cannot be told."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def check_dense(n: int, what: str, copies: int = 1) -> None:
    """Refuse, in one line, an ``n`` x ``n`` matrix of 8-byte cells (``copies`` of them) that would not
    fit in half of this machine's memory: a rank count that came from a damaged or hostile file, or
    from a hint followed too far, must not end in a failed allocation of exabytes. Here because the
    store, the mapping layer and the dashboard all build such matrices and word the refusal alike."""
    need = 8 * copies * n * n
    have = memory_bytes()
    if need > have // 2:
        raise RankmapError(f"{what} has {counted(n, 'rank')}: its rank x rank matrix would need "
                           f"{_size(need)}, more than half of this machine's memory ({_size(have)})")


def dense_limit(copies: int = 1) -> int:
    """The most ranks :func:`check_dense` lets through."""
    import math

    return math.isqrt(memory_bytes() // 2 // (8 * copies))


def _size(b: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if b < 1000:
            return f"{b:.3g} {unit}"
        b /= 1000
    return f"{b:.3g} EB"
