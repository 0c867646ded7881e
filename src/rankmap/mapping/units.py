"""Units of the figures the mapping reports print: one unit for figures read side by side.

Fixed GB and ms printed a job of megabytes as 0.001 GB against 0.002 GB, and its congestions as
0.000 ms; a unit chosen by the largest of the figures compared (a table's before and after columns,
the two ends of an arrow) keeps every one of them and their ratio readable.
"""

from __future__ import annotations

BYTE_UNITS = ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B"))
TIME_UNITS = ((1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))   # of seconds

Unit = tuple[float, str]


def unit(largest: float, units: tuple[Unit, ...]) -> Unit:
    """The unit of ``units`` (largest first) for figures whose largest is ``largest``."""
    for scale, name in units:
        if largest >= scale:
            return scale, name
    return units[0] if largest <= 0 else units[-1]


def fmt(x: float, u: Unit) -> str:
    """``x`` in unit ``u``, three decimals, without the unit's name."""
    return f"{x / u[0]:.3f}"


def amount_in(x: float, u: Unit) -> str:
    """``x`` in unit ``u``, with the unit's name: ``7.865 MB``."""
    return f"{fmt(x, u)} {u[1]}"


def amount(x: float, units: tuple[Unit, ...] = BYTE_UNITS) -> str:
    """``x`` in its own unit, with the unit's name: ``7.865 MB``."""
    return amount_in(x, unit(x, units))


def percent(x: float) -> str:
    """A small share in percent, in words: "0.04 %", "less than 0.001 %"."""
    v = 100 * x
    return f"{v:.2g} %" if v >= 0.001 else "less than 0.001 %"
