"""The one exception type a user sees as a one-line message.

Every layer raises :class:`RankmapError` (or a subclass) for bad input and missing
prerequisites, with a message that names the culprit (file, offset, field, command) and,
where there is one, the fix. The CLI prints it as ``rankmap: error: <message>`` and exits
non-zero; anything else escaping is a bug in rankmap and is reported as such.
"""


class RankmapError(Exception):
    """Bad input or a missing prerequisite, said in one line."""

    exit_code = 2
