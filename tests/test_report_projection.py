"""suite.cluster.report.projection: the projection recomputed by hand from the report's own inputs,
and the banners on what makes the figures unfit for use."""
import os

from suite.cluster import report, scaling
from suite.cluster.report import figures, projection, sweep_folder
from helpers.report import (GRADIENT, PLATEAU_BUSBW, STATUS, TIMES, WITH_PLATEAU, build, make_sweep,
                            per_rank_median, projection_table, report_cli, system, top_of)


def test_without_allreduce_there_is_no_projection(tmp_path):
    folder = make_sweep(str(tmp_path / "sweep"), allreduce=False)
    assert report.main([folder]) == 0
    with open(os.path.join(folder, "report", "report.md")) as handle:
        markdown = handle.read()
    assert "no projection" in markdown and "PROJECTED" not in markdown
    assert not os.path.exists(os.path.join(folder, "report", "allreduce.png"))


def test_projection_of_a_strong_scaling_sweep_by_hand(tmp_path):
    # The runs kept 16 images per step: 16 on 1 rank, 8 + 8 on 2. The curve flattens at 2 GB/s.
    markdown = build(str(tmp_path / "sweep"), curve=WITH_PLATEAU)
    x = per_rank_median(1)  # samples/s of one rank at batch 16
    ring = 2 * (2 - 1) / 2 * GRADIENT["gradient_bytes"] / (PLATEAU_BUSBW * 1e9)
    step_2 = 8 / x + ring
    rows = projection_table(markdown)
    assert rows["2"]["per-rank batch (the sweep's)"] == "8"
    assert rows["2"]["projected compute (ms)"] == f"{8 / x * 1e3:.2f}"
    assert rows["2"]["projected allreduce (ms)"] == f"{ring * 1e3:.3f}"
    assert rows["2"]["projected throughput (samples/s)"] == f"{16 / step_2:,.2f}"
    assert rows["2"]["projected efficiency"] == f"{100 * (16 / step_2) / (2 * x):.1f}%"
    # The weak-scaling arithmetic (2 x 16 images per step) gives another figure: not this sweep's.
    assert rows["2"]["projected throughput (samples/s)"] != f"{2 * 16 / (16 / x + ring):,.2f}"
    assert "b(N) = 16 / N (strong scaling: fixed global batch)" in markdown
    assert f"S = {GRADIENT['gradient_bytes']:,} bytes" in markdown
    assert "the plateau is their median, 2.000 GB/s" in markdown and "NO PLATEAU" not in markdown
    assert "stands in" not in markdown


def test_projection_of_a_weak_scaling_sweep_by_hand(tmp_path):
    # The runs kept 16 images per rank: 16 on 1 rank, 2 x 16 on 2.
    markdown = build(str(tmp_path / "sweep"), curve=WITH_PLATEAU, weak=True)
    x = per_rank_median(1, weak=True)
    ring = GRADIENT["gradient_bytes"] / (PLATEAU_BUSBW * 1e9)
    rows = projection_table(markdown)
    assert rows["2"]["per-rank batch (the sweep's)"] == "16"
    assert rows["2"]["projected throughput (samples/s)"] == f"{2 * 16 / (16 / x + ring):,.2f}"
    assert rows["2"]["projected efficiency"] == f"{100 * (16 / x) / (16 / x + ring):.1f}%"
    assert "b(N) = 16 (weak scaling: fixed per-GPU batch)" in markdown
    assert "weak scaling: the runs kept the per-rank batch at 16" in markdown
    # --scaling overrides what the runs say.
    strong = build(str(tmp_path / "again"), "--scaling", "strong", curve=WITH_PLATEAU, weak=True)
    # At the smallest scale's global batch: 16 images on one rank.
    assert "b(N) = 16 / N (strong scaling: fixed global batch)" in strong
    assert "as asked (--scaling strong)" in strong


def test_a_base_scale_of_several_ranks_has_its_own_allreduce_taken_out(tmp_path):
    # 2 and 4 ranks, 16 images per step: the 2-rank base's measured step already holds an allreduce.
    markdown = build(str(tmp_path / "sweep"), curve=WITH_PLATEAU, times={2: TIMES[2], 4: TIMES[2]},
                     status={2: STATUS[2], 4: STATUS[2]})
    busbw = PLATEAU_BUSBW * 2 * (4 - 1) / 4  # the plateau of the largest (4-rank) curve

    def ring(n):
        return 2 * (n - 1) / n * GRADIENT["gradient_bytes"] / (busbw * 1e9)

    compute_2 = 8 / per_rank_median(2) - ring(2)
    rows = projection_table(markdown)
    # The base is reproduced, not charged its allreduce twice.
    assert rows["2"]["projected throughput (samples/s)"] == \
        rows["2"]["measured throughput (samples/s, median over runs)"] == f"{16 / (compute_2 + ring(2)):,.2f}"
    assert rows["4"]["projected compute (ms)"] == f"{compute_2 / 2 * 1e3:.2f}"
    assert rows["4"]["projected throughput (samples/s)"] == f"{16 / (compute_2 / 2 + ring(4)):,.2f}"
    assert "with its own allreduce taken out" in markdown
    # 4 ranks do not fit the 2 slots of a node; no curve was measured across nodes.
    assert "the one-node plateau stands in for the network" in markdown


# ---- banners ----

def test_no_banner_for_a_sweep_fit_for_its_use(tmp_path):
    folder = str(tmp_path / "sweep")
    make_sweep(folder, curve=WITH_PLATEAU)
    assert projection.banners(sweep_folder.load_sweep(folder)) == []


def test_banner_for_too_few_runs(tmp_path):
    folder = str(tmp_path / "sweep")
    make_sweep(folder, curve=WITH_PLATEAU, runs={1: 5, 2: 3})
    found = projection.banners(sweep_folder.load_sweep(folder))
    assert len(found) == 1 and found[0].startswith("NOT VALID FOR SUBMISSION")
    assert "requires 5 runs" in found[0] and f"{system(2)} 3" in found[0] and system(1) not in found[0]
    assert "found 3, expected 5" in found[0]
    result = report_cli(folder)
    assert result.returncode == 0 and "WARNING: NOT VALID FOR SUBMISSION" in result.stderr
    with open(os.path.join(folder, "report", "report.md")) as handle:
        assert "> **WARNING: NOT VALID FOR SUBMISSION" in top_of(handle.read())
    with open(os.path.join(folder, "report", "report.html")) as handle:
        page = handle.read()
    assert page.index('<div class="banner">') < page.index("<h2>")


def test_banner_for_too_few_timed_steps(tmp_path):
    folder = str(tmp_path / "sweep")
    make_sweep(folder, curve=WITH_PLATEAU, steps=figures.MIN_TIMED_STEPS - 1)
    found = projection.banners(sweep_folder.load_sweep(folder))
    assert len(found) == 1 and found[0].startswith("THROUGHPUT FROM TOO FEW STEPS")
    assert f"10 run(s) timed fewer than {figures.MIN_TIMED_STEPS}" in found[0]
    assert f"{system(2)} run(s) 0, 1, 2, 3, 4: {figures.MIN_TIMED_STEPS - 1} steps" in found[0]
    make_sweep(str(tmp_path / "enough"), curve=WITH_PLATEAU, steps=figures.MIN_TIMED_STEPS)
    assert projection.banners(sweep_folder.load_sweep(str(tmp_path / "enough"))) == []


def test_banner_for_an_allreduce_curve_without_a_plateau(built):
    folder, markdown = built
    found = projection.banners(sweep_folder.load_sweep(folder))
    assert len(found) == 1 and found[0].startswith(f"ALLREDUCE CURVE NEVER REACHED ITS PLATEAU ({system(2)})")
    # 1.1 ms at 64K and at 1M: busbw rose 16x; the gradient of 94 MB wants --max-bytes 128M.
    assert "rose 1500%" in found[0] and '--max-bytes 128M' in found[0]
    assert "> **WARNING: ALLREDUCE CURVE NEVER REACHED" in top_of(markdown)


def test_a_curve_that_falls_at_its_end_is_not_called_rising(tmp_path):
    folder = str(tmp_path / "sweep")
    make_sweep(folder, curve=((1 << 19, 1.1e-3), (1 << 20, 4.8e-3)))
    found, = projection.banners(sweep_folder.load_sweep(folder))
    assert "bus bandwidth fell 54% between the two largest sizes" in found and "rose" not in found


def test_a_flat_curve_that_stops_below_the_gradient_is_no_plateau_to_trust(tmp_path):
    # busbw is 1 GB/s at 512K and at 1M: flat, but the 94 MB gradient is 90 times the largest size.
    folder = str(tmp_path / "sweep")
    make_sweep(folder, curve=((1 << 19, (1 << 19) / 1e9), (1 << 20, (1 << 20) / 1e9)))
    found, = projection.banners(sweep_folder.load_sweep(folder))
    assert found.startswith(f"ALLREDUCE CURVE STOPS BELOW THE GRADIENT ({system(2)})")
    assert "flat from 512K to 1M" in found and "94.0 MB gradient" in found and "--max-bytes 128M" in found
    assert report.main([folder]) == 0
    with open(os.path.join(folder, "report", "report.md")) as handle:
        markdown = handle.read()
    assert "> **WARNING: ALLREDUCE CURVE STOPS BELOW THE GRADIENT" in top_of(markdown)
    assert "the plateau is their median, 1.000 GB/s. BELOW THE GRADIENT" in markdown


def test_a_flat_curve_up_to_256m_is_trusted_for_a_larger_gradient():
    # BERT-large's 1.34 GB gradient against a curve flat from 256M to 1G: the curve nccl-tests measures.
    flat_to_1g = scaling.plateau([{"bytes": n << 20, "busbw_gbps": 20.0} for n in (256, 512, 1024)])
    assert flat_to_1g.reached and not projection.stops_short(flat_to_1g, 1_340_000_000)
    flat_to_64m = scaling.plateau([{"bytes": n << 20, "busbw_gbps": 20.0} for n in (16, 32, 64)])
    assert projection.stops_short(flat_to_64m, 94_048_520)
    assert not projection.stops_short(flat_to_64m, 60_000_000)  # it covers this gradient
