"""The report's PNG plots, each drawn from the same figures as its tables."""
import os

from suite.cluster.report.figures import (AGGREGATE, STEP_PARTS, allreduce_curves, base_of,
                                          efficiency_loss, scaling_rows, step_splits, stragglers,
                                          time_to_train)
from suite.cluster.report.projection import projection_rows


def make_plots(data, folder, threshold_pct, scaling_mode="auto"):
    """Writes the PNGs into folder; returns the names written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    written = []
    for name, draw in (("time_to_train.png", _plot_ttt), ("throughput.png", _plot_throughput),
                       ("scaling.png", _plot_scaling), ("stragglers.png", _plot_stragglers),
                       ("allreduce.png", _plot_allreduce), ("attribution.png", _plot_attribution)):
        figure = draw(plt, data, threshold_pct, scaling_mode)
        if figure is not None:
            written.append(_save(plt, figure, folder, name))
    return written


def _save(plt, figure, folder, name):
    """Writes the figure as folder/name and frees it; returns name."""
    figure.savefig(os.path.join(folder, name), dpi=100)
    plt.close(figure)
    return name


def _plot_ttt(plt, data, threshold_pct, scaling_mode):
    figure, axes = plt.subplots(figsize=(7, 4.5))
    top = max((run.log.minutes for scale in data.scales for run in scale.runs), default=1.0)
    labelled = set()

    def label(text):
        """The legend text the first time a kind of mark is drawn; matplotlib leaves "_..." out."""
        first = text not in labelled
        labelled.add(text)
        return text if first else "_" + text

    for scale in data.scales:
        t = time_to_train(scale)
        for run in scale.runs:
            kind = "run (converged)" if run.log.converged else "run (not converged)"
            axes.plot(scale.np, run.log.minutes, "o" if run.log.converged else "x", color="C0",
                      label=label(kind))
        if t["olympic"] is not None:
            axes.plot(scale.np, t["olympic"], "_", color="C3", markersize=30, mew=2,
                      label=label("olympic mean (MLPerf)"))
        elif scale.runs:
            axes.annotate("unscored", (scale.np, 1.08 * top), ha="center", color="C3", fontsize=9)
            axes.plot(scale.np, 1.04 * top, "v", color="C3",
                      label=label("unscored (MLPerf: too few runs, or 2+ not converged)"))
        if t["olympic_all"] is not None:
            axes.plot(scale.np, t["olympic_all"], "_", color="C2", markersize=22, mew=2,
                      label=label("olympic mean of run times (status ignored)"))
    _axes(axes, "processes", "minutes, run_start to run_stop", "Time to train (measured)", data)
    axes.set_ylim(0, 1.15 * top)
    axes.legend(fontsize=8)
    return figure


def _plot_throughput(plt, data, threshold_pct, scaling_mode):
    rows = [r for r in scaling_rows(data.scales) if r["rate"]]
    if not rows:
        return None
    figure, (total, per_rank) = plt.subplots(1, 2, figsize=(10, 4))
    for index, (backend, members) in enumerate(_by_backend(rows)):
        nps, rates = [r["np"] for r in members], [r["rate"] for r in members]
        total.errorbar(nps, rates, yerr=[[r["rate"] - r["min"] for r in members],
                                         [r["max"] - r["rate"] for r in members]],
                       fmt="o-", capsize=4, color=f"C{2 * index}",
                       label=f"measured{backend} ({AGGREGATE}; bars: min–max)")
        total.plot(nps, [rates[0] * n / nps[0] for n in nps], "--", lw=1,
                   color="k" if index == 0 else f"C{2 * index}",
                   label=f"ideal{backend} (linear from the smallest scale)")
        per_rank.plot(nps, [r["per_rank"] for r in members], "o-", color=f"C{2 * index + 1}",
                      label=f"measured{backend} ({AGGREGATE})")
    _axes(total, "processes", "samples/s", "Throughput, total (measured)", data)
    _axes(per_rank, "processes", "samples/s per rank", "Throughput per rank (measured)", data)
    total.legend(fontsize=8)
    per_rank.set_ylim(bottom=0)
    figure.tight_layout()
    return figure


def _plot_scaling(plt, data, threshold_pct, scaling_mode):
    """Measured throughput scaling beside the ideal and the projection of the same experiment only."""
    rows = [r for r in scaling_rows(data.scales) if r["speedup"]]
    if not rows:
        return None
    base = min(r["np"] for r in rows)
    figure, (speed, eff) = plt.subplots(1, 2, figsize=(10, 4))
    everything = [r["np"] / base for r in rows]
    for index, (backend, members) in enumerate(_by_backend(rows)):
        # Each backend against its own smallest scale (figures.scaling_rows); C1 is the projection's.
        factors = [r["np"] / members[0]["np"] for r in members]
        color = f"C{2 * index}"
        speed.plot(factors, [r["speedup"] for r in members], "o-", color=color,
                   label=f"measured{backend} (throughput, {AGGREGATE})")
        eff.plot(factors, [100 * r["efficiency"] for r in members], "o-", color=color,
                 label=f"measured{backend} (throughput, {AGGREGATE})")
    speed.plot([1, max(everything)], [1, max(everything)], "k--", lw=1, label="ideal")
    found, _ = projection_rows(data, scaling_mode)
    if found:
        projected = [(p.gpus / base, p.samples_per_second) for p in found[1].points if p.gpus >= base]
        rate0 = projected[0][1]
        label = f"PROJECTED (ring model, {'strong' if found[0].scenario.strong else 'weak'} scaling)"
        speed.plot([p[0] for p in projected], [p[1] / rate0 for p in projected], "^--", color="C1",
                   label=label)
        eff.plot([p[0] for p in projected], [100 * p[1] / rate0 / p[0] for p in projected], "^--", color="C1",
                 label=label)
    speed.set(xlabel="scale factor (processes / smallest)", ylabel="speed-up", title="Speed-up")
    eff.set(xlabel="scale factor (processes / smallest)", ylabel="efficiency (%)", title="Scaling efficiency")
    eff.set_ylim(0, 110)
    for axes in (speed, eff):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    figure.tight_layout()
    return figure


def _by_backend(rows):
    """[(" (backend)" or "" when the sweep ran one, its rows)]: one line a backend."""
    backends = {}
    for row in rows:
        backends.setdefault(row["distribution"], []).append(row)
    if len(backends) == 1:
        return [("", rows)]
    return [(f" ({name})", members) for name, members in backends.items()]


def _plot_stragglers(plt, data, threshold_pct, scaling_mode):
    scales = [(s, stragglers(s, threshold_pct)) for s in data.scales]
    scales = [(s, rows) for s, rows in scales if rows]
    if not scales:
        return None
    figure, axes = plt.subplots(1, len(scales), figsize=(4 * len(scales) + 1, 4), squeeze=False)
    for ax, (scale, rows) in zip(axes[0], scales):
        ranks = [r["rank"] for r in rows]
        colors = ["C3" if r["straggler"] else "C0" for r in rows]
        ax.bar(ranks, [r["p50"] for r in rows], color=colors, label="p50")
        spread = [[0] * len(rows), [r["p90"] - r["p50"] for r in rows]]
        ax.errorbar(ranks, [r["p50"] for r in rows], yerr=spread, fmt="none", ecolor="k", capsize=4,
                    label="to p90")
        ax.plot(ranks, [r["max"] for r in rows], "v", color="k", label="max")
        ax.set(xlabel="rank", ylabel="step time (ms)", title=f"{scale.system}", xticks=ranks)
        ax.legend(fontsize=7)
    figure.suptitle(f"Per-rank step time (measured); red: > {threshold_pct:g}% above the median rank")
    figure.tight_layout()
    return figure


def _plot_attribution(plt, data, threshold_pct, scaling_mode):
    """Left: each scale's step split into its parts (ms). Right: each part's share of the lost points."""
    splits = [split for split, _ in map(step_splits, sorted(data.scales, key=lambda s: s.np)) if split]
    if not splits:
        return None
    figure, (step, lost) = plt.subplots(1, 2, figsize=(10, 4))
    several = len({split.distribution for split in splits}) > 1
    labels = [f"{split.np}" + (f" {split.distribution}" if several else "") for split in splits]
    below = [0.0] * len(splits)
    for color, (key, label) in enumerate(STEP_PARTS):
        heights = [split.parts[key] for split in splits]
        step.bar(labels, heights, bottom=below, color=f"C{color}", label=label)
        below = [b + h for b, h in zip(below, heights)]
    losses = [efficiency_loss(base_of(splits, split), split) for split in splits]
    up, down = [0.0] * len(splits), [0.0] * len(splits)
    for color, (key, label) in enumerate(STEP_PARTS):
        points = [loss["points"][key] if loss else 0.0 for loss in losses]
        bottoms = [u if p >= 0 else d for p, u, d in zip(points, up, down)]
        lost.bar(labels, points, bottom=bottoms, color=f"C{color}", label=label)
        up = [u + max(p, 0.0) for p, u in zip(points, up)]
        down = [d + min(p, 0.0) for p, d in zip(points, down)]
    total = [100 * (1 - loss["efficiency"]) if loss else 0.0 for loss in losses]
    lost.plot(labels, total, "k_", markersize=30, mew=2, label="lost points (sum)")
    lost.axhline(0, color="k", lw=0.8)
    step.set(xlabel="processes", ylabel="ms per step", title="Step time split (measured, median run)")
    lost.set(xlabel="processes", ylabel="points of efficiency lost",
             title=f"Lost efficiency vs {splits[0].np} process{'es' if splits[0].np > 1 else ''}"
                   + (" (each backend's own)" if several else ""))
    for axes in (step, lost):
        axes.grid(alpha=0.3, axis="y")
        axes.legend(fontsize=7)
    figure.tight_layout()
    return figure


def _plot_allreduce(plt, data, threshold_pct, scaling_mode):
    measured = allreduce_curves(data)
    if not measured:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for scale in measured:
        rows = scale.allreduce["rows"]
        axes.plot([r["bytes"] for r in rows], [r["busbw_gbps"] for r in rows], "o-", label=scale.system)
        expected = scale.allreduce.get("expected_busbw_gbps")
        if expected:
            axes.axhline(expected, ls="--", color="C3", label=f"expected ({scale.system})")
    axes.set_xscale("log", base=2)
    _axes(axes, "message size per rank (bytes)", "busbw (GB/s)", "Allreduce bus bandwidth (measured)", None)
    axes.legend(fontsize=8)
    return figure


def _axes(axes, xlabel, ylabel, title, data):
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if data is not None:
        axes.set_xticks(sorted({s.np for s in data.scales}))
    axes.grid(alpha=0.3)


# The smallest share of a time to train that a bar of a 9-inch plot shows as more than a line.
VISIBLE_SHARE = 0.02


def make_split_plots(scales, folder):
    """One PNG per benchmark: each scale's time to train as training, evaluation and the rest."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from suite.cluster.report.split_section import image_name
    from suite.cluster.report.splits import THIS_SWEEP
    written = []
    for benchmark in sorted({s.benchmark for s in scales}):
        shown = [s for s in scales if s.benchmark == benchmark and s.summary]
        # The bars carry information only where evaluation and the rest are visible beside training (a
        # published folder's are slivers of a percent); the scaling picture tells the rest.
        if not shown or not any(s.source == THIS_SWEEP or 1 - s.summary.training_share >= VISIBLE_SHARE
                                for s in shown):
            continue
        figure, axes = plt.subplots(figsize=(9, 1.5 + 0.7 * len(shown)))
        labels = [f"{'' if s.source == THIS_SWEEP else 'compared: '}{s.label[:40]}\n{s.folder.gpus} GPUs, "
                  f"batch {s.folder.global_batch_size}" for s in shown]
        left = [0.0] * len(shown)
        for key, label in (("training_minutes", "training"), ("evaluation_minutes", "evaluation"),
                           ("other_minutes", "other")):
            widths = [getattr(s.summary, key) for s in shown]
            axes.barh(labels, widths, left=left, label=label)
            left = [a + b for a, b in zip(left, widths)]
        axes.set_xlabel("minutes (mean over the runs the olympic mean keeps)")
        axes.set_title(f"Time to train split, {benchmark} (measured; --compare rows published)")
        axes.invert_yaxis()
        axes.legend(fontsize=8)
        figure.tight_layout()
        written.append(_save(plt, figure, folder, image_name(benchmark)))
    return written


def make_scaling_pictures(scales, folder):
    """One PNG per benchmark: speed-up against GPUs for each source, on log-log axes, with the linear
    line, the throughput speed-up and the time-to-train speed-up (splits Scales; published rows drawn
    hollow and labelled so).

    Log-log because the GPU counts double from step to step and speed-ups are ratios: linear scaling is
    the diagonal, each doubling is one equal step, and the vertical gap between two lines is the
    logarithm of an efficiency ratio, the very quantity the headline shares between the factors, so the
    gap between the throughput line and the time-to-train line is the convergence and evaluation cost,
    and the gap between the diagonal and the throughput line is the network and framework cost.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from suite.cluster.report.split_section import picture_name
    from suite.cluster.report.splits import THIS_SWEEP, source_groups
    written = []
    by_source = source_groups(scales)
    for benchmark in sorted({s.benchmark for s in scales}):
        groups = {group: members for (group, of), members in by_source.items()
                  if of == benchmark and len({s.folder.gpus for s in members}) > 1}
        if not groups:
            continue
        figure, axes = plt.subplots(figsize=(8, 5.5))
        everything = sorted({s.folder.gpus for members in groups.values() for s in members})
        smallest = everything[0]
        axes.plot(everything, [n / smallest for n in everything], color="0.5", linestyle=":",
                  label="linear (speed-up = GPU ratio)")
        for index, members in enumerate(groups.values()):
            base = members[0]
            published = base.source != THIS_SWEEP
            what = "published" if published else "measured"
            name = base.source_name
            start = base.folder.gpus / smallest
            gpus = [s.folder.gpus for s in members]
            throughput = [start * s.summary.samples_per_second / base.summary.samples_per_second
                          for s in members]
            time = [start * base.summary.minutes / s.summary.minutes for s in members]
            color = f"C{index}"
            fill = "none" if published else color
            axes.plot(gpus, throughput, "--", marker="s", color=color, markerfacecolor=fill,
                      label=f"{name}: throughput speed-up ({what})")
            axes.plot(gpus, time, "-", marker="o", color=color, markerfacecolor=fill,
                      label=f"{name}: time-to-train speed-up ({what})")
        axes.set_xscale("log", base=2)
        axes.set_yscale("log", base=2)
        axes.set_xticks(everything, [str(n) for n in everything])
        axes.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        axes.set_xlabel("GPUs")
        axes.set_ylabel(f"speed-up over {smallest} GPUs\n(each source's smallest scale on the linear line)")
        axes.set_title(f"Speed-up against GPUs, {benchmark}: gaps below the diagonal are lost efficiency")
        axes.grid(alpha=0.3, which="both")
        axes.legend(fontsize=7)
        figure.tight_layout()
        written.append(_save(plt, figure, folder, picture_name(benchmark)))
    return written
