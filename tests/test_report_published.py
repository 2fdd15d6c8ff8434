"""suite.cluster.report.published: the published rows, their sources and their arithmetic."""
import re

from suite.cluster.report import published
from helpers.report import olympic_by_hand, table_with


def test_published_references_carry_their_sources(built):
    _, markdown = built
    rows = table_with(markdown, "published system")
    assert {row["time to train (min)"] for row in rows} == {"31.5", "10.67", "29.15", "16.88"}
    assert all(row["source"] for row in rows)
    assert "not measured here" in markdown


def test_published_rows_link_public_sources_and_recompute_from_their_runs(built):
    _, markdown = built
    rows = table_with(markdown, "published system")
    for row in rows:
        assert re.search(r"\]\(https://[^)]+\)", row["source"]), row["source"]
    listed = [row for row in rows if row["runs (min, run_stop − run_start)"] != "not listed"]
    assert len(listed) == 2
    for row in listed:
        runs = [float(v) for v in row["runs (min, run_stop − run_start)"].split(", ")]
        assert len(runs) == {"resnet": 5, "bert": 10}[row["benchmark"]]
        assert f"{olympic_by_hand(runs):.2f}" == row["time to train (min)"]
    for _, reference in published.references():
        if reference.runs_ms:
            minutes = [ms / 60000 for ms in reference.runs_ms]
            assert round(olympic_by_hand(minutes), 2) == reference.minutes
    assert "tracker" not in markdown.lower()


def test_published_ratios_are_a_table_of_their_own(built):
    _, markdown = built
    ratio, = table_with(markdown, "time-to-train ratio")
    assert ratio["time-to-train ratio"] == f"31.5 / 10.67 = {31.5 / 10.67:.2f}x"
    assert ratio["GPUs"] == "8 → 32"
