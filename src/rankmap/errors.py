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
        s = repr(value)
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
