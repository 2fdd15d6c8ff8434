"""How the report writes its numbers: a dash for what is missing, ranges, percentages, message sizes."""
from suite.cluster.scaling.model import fmt


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
