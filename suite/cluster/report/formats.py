"""How the report writes its numbers: a dash for what is missing, ranges, percentages, message sizes."""
import math


def fmt(value, spec):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return format(value, spec)


def pct(fraction):
    return fmt(None if fraction is None else 100 * fraction, ".1f") + ("" if fraction is None else "%")


def spread(low, high):
    return "—" if low is None else f"{low:,.2f}–{high:,.2f}"


def step_range(low, high):
    if low is None:
        return "—"
    return str(low) if low == high else f"{low}–{high}"


def size(nbytes):
    from suite.common.busbw import format_size
    return format_size(nbytes)
