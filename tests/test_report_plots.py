"""suite.cluster.report.plots: valid PNGs that show what they label, like with like."""
import os
import re

import pytest

from suite.cluster.report import plots, sweep_folder
from helpers.report import PART_COLUMNS, STRONG_SPLIT, make_sweep, system


def test_plots_are_valid_pngs_and_the_html_embeds_them(built):
    from PIL import Image
    folder, markdown = built
    out = os.path.join(folder, "report")
    names = sorted(name for name in os.listdir(out) if name.endswith(".png"))
    assert names == ["allreduce.png", "attribution.png", "scaling.png", "scaling_picture_resnet.png",
                     "stragglers.png", "throughput.png", "time_to_train.png",
                     "time_to_train_split_resnet.png"]
    for name in names:
        with Image.open(os.path.join(out, name)) as image:
            image.verify()
        with Image.open(os.path.join(out, name)) as image:
            assert image.format == "PNG" and image.size[0] >= 600 and image.size[1] >= 350, (name, image.size)
        assert f"]({name})" in markdown
    with open(os.path.join(out, "report.html")) as handle:
        page = handle.read()
    assert page.count('src="data:image/png;base64,') == len(names)
    assert not re.search(r'src="(?!data:)', page)


def legend_of(axes):
    return [text.get_text() for text in axes.get_legend().get_texts()]


def test_plots_show_what_they_label(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # Two runs of the 1-process scale did not converge: it is unscored.
    status = {1: ["aborted", "success", "aborted", "success", "success"], 2: ["success"] * 5}
    folder = str(tmp_path / "sweep")
    make_sweep(folder, allreduce="every scale", status=status)
    data = sweep_folder.load_sweep(folder)
    ttt = plots._plot_ttt(plt, data, 10.0, "auto").axes[0]
    labels = legend_of(ttt)
    for label in labels:
        drawn = [line for line in ttt.get_lines() if line.get_label() == label]
        assert len(drawn) == 1 and len(drawn[0].get_xdata()) == 1, label
    assert "olympic mean (MLPerf)" in labels and "run (not converged)" in labels
    assert any(label.startswith("unscored") for label in labels)
    assert [t.get_text() for t in ttt.texts] == ["unscored"]
    scaling_axes = plots._plot_scaling(plt, data, 10.0, "auto").axes
    assert not [label for axes in scaling_axes for label in legend_of(axes) if "published" in label.lower()]
    allreduce = plots._plot_allreduce(plt, data, 10.0, "auto").axes[0]
    assert [line.get_label() for line in allreduce.get_lines()] == [system(2)]
    plt.close("all")


def test_ttt_legend_has_no_entry_for_what_is_not_drawn(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    folder = str(tmp_path / "sweep")
    make_sweep(folder, status={1: ["success"] * 5, 2: ["success"] * 5})
    labels = legend_of(plots._plot_ttt(plt, sweep_folder.load_sweep(folder), 10.0, "auto").axes[0])
    assert labels == ["run (converged)", "olympic mean (MLPerf)",
                      "olympic mean of run times (status ignored)"]
    plt.close("all")


def test_the_attribution_plot_stacks_what_the_table_says(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    folder = make_sweep(str(tmp_path / "sweep"), split=STRONG_SPLIT)
    step, lost = plots._plot_attribution(plt, sweep_folder.load_sweep(folder), 10.0, "auto").axes
    assert legend_of(step) == list(PART_COLUMNS)
    heights = [(bar.get_x(), bar.get_height()) for bar in step.patches]
    assert sum(h for x, h in heights if x > 0.5) == pytest.approx(60.0)  # the 2-process bar: its step
    points = {part: bar for part, bar in zip(PART_COLUMNS, lost.patches[1::2])}  # the 2-process bars
    assert points["input wait"].get_height() == pytest.approx(-100 / 60) and points["input wait"].get_y() == 0
    assert sum(bar.get_height() for bar in points.values()) == pytest.approx(100 * (1 - 0.5 * 100 / 60))
    plt.close("all")
