"""suite.cluster.report.formats: how the report writes a missing figure, a range, a share and a size."""
from suite.cluster.report import formats


def test_a_missing_or_infinite_figure_is_a_dash():
    assert formats.fmt(None, ".2f") == formats.fmt(float("inf"), ".2f") == "—"
    assert formats.fmt(float("nan"), "g") == "—"
    assert formats.fmt(1234.5, ",.2f") == "1,234.50" and formats.fmt(3, "d") == "3"


def test_shares_ranges_and_sizes():
    assert formats.pct(0.8333) == "83.3%" and formats.pct(None) == "—"
    assert formats.spread(1000.0, 1250.5) == "1,000.00–1,250.50" and formats.spread(None, None) == "—"
    assert formats.step_range(40, 40) == "40" and formats.step_range(19, 40) == "19–40"
    assert formats.step_range(None, None) == "—"
    assert formats.size(1 << 20) == "1M" and formats.size(128 << 20) == "128M"
    assert formats.size(1 << 30) == "1G"
