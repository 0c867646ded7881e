"""The one exception type a user sees as a one-line message.

Every layer raises :class:`RankmapError` (or a subclass) for bad input and missing
prerequisites, with a message that names the culprit (file, offset, field, command) and,
where there is one, the fix. The CLI prints it as ``rankmap: error: <message>`` and exits
non-zero; anything else escaping is a bug in rankmap and is reported as such.
"""


def shown(value: object) -> str:
    """A bad value as an error message quotes it: JSON where possible, cut to 60 characters."""
    import json

    try:
        s = json.dumps(value)
    except (TypeError, ValueError):
        s = repr(value)
    return s if len(s) <= 60 else s[:57] + "..."


class RankmapError(Exception):
    """Bad input or a missing prerequisite, said in one line."""

    exit_code = 2
