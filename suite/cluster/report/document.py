"""The report as a document: its blocks built from the figures, then written as Markdown and as HTML."""
import base64
import html
import os

import markdown
from markdown.extensions import Extension

from suite.cluster import scaling
from suite.cluster.report import backends, headline, links_section, split_section
from suite.cluster.report.figures import (AGGREGATE, MIN_TIMED_STEPS, STEP_PARTS, allreduce_curves,
                                          base_of, efficiency_loss, scaling_rows, step_splits, stragglers,
                                          time_to_train)
from suite.cluster.report.formats import fmt, pct, size, spread, step_range
from suite.cluster.report.projection import (banners, no_plateau, projection_rows, short_of_gradient,
                                             stops_short)
from suite.cluster.report import published


def build_document(data, threshold_pct, images, scaling_mode="auto", splits=(), price_per_gpu_hour=None):
    """Blocks: ("h1"|"h2"|"p"|"banner"|"code", text), ("table", header, rows), ("img", file, caption),
    ("list", items).

    splits: the split_section Scales, the sweep's and any --compare folders'."""
    doc = [("h1", f"Scaling report: {data.benchmark}, {len(data.scales)} scale(s)")]
    doc += [("banner", text) for text in banners(data, scaling_mode)]
    doc += [("p", f"Sweep folder {os.path.abspath(data.folder)}; submitter {data.submitter}; cluster profile "
                  f"{data.profile}. Every figure below is measured on this sweep unless its column or "
                  f"row says projected or published. Throughput and step times aggregate several runs "
                  f"one way throughout: the {AGGREGATE}, with the min–max over runs beside it; time to "
                  f"train is MLPerf's olympic mean.")]
    doc += headline.blocks(splits, data, price_per_gpu_hour)
    doc += split_section.picture_blocks(splits, images)
    doc += _ttt_section(data, images)
    doc += split_section.blocks(splits, images, price_per_gpu_hour)
    doc += _runs_section(data)
    doc += _throughput_section(data, images)
    doc += backends.blocks(data)
    doc += _attribution_section(data, images)
    doc += _straggler_section(data, threshold_pct, images)
    doc += _network_section(data)
    doc += links_section.blocks(data)
    doc += _allreduce_section(data, images)
    doc += _projection_section(data, scaling_mode)
    doc += _reference_section(data)
    return doc


def _ttt_section(data, images):
    header = ["system", "processes", "nodes", "preset", "runs", "converged",
              "olympic mean (min, MLPerf: non-converged = ∞)",
              "olympic mean of run times (min, status ignored)",
              "fastest (min)", "slowest (min)"]
    rows = []
    for scale in data.scales:
        t = time_to_train(scale)
        runs = f"{t['runs']}" + ("" if t["runs"] == t["planned"] else f" of {t['planned']} planned")
        rows.append([scale.system, str(scale.np), str(scale.nodes), scale.preset, runs,
                     f"{t['converged']} of {t['runs']}",
                     *(fmt(t[key], ".4f") for key in ("olympic", "olympic_all", "min", "max"))])
    return [("h2", "Time to train (measured)"),
            ("p", "Time to train is run_stop − run_start in each MLPerf log, in minutes. The olympic mean "
                  "drops the fastest and the slowest run and averages the rest. Under the MLPerf rules a "
                  "run that does not reach the target counts as infinitely slow, so one such run is the one "
                  "dropped and two or more leave the scale unscored (—). The next column is the same "
                  "arithmetic over every run time whatever its status, which is what "
                  "mlperf_logging.result_summarizer prints (it does not look at run_stop's status)."),
            ("table", header, rows), *_image(images, "time_to_train.png", "Time to train per run and scale")]


def _runs_section(data):
    header = ["system", "run", "status", "run_start (ms)", "run_stop (ms)", "time to train (min)",
              "last accuracy", "log"]
    rows = []
    for scale in data.scales:
        for run in scale.runs:
            accuracy = run.log.accuracies[-1][1] if run.log.accuracies else None
            rows.append([scale.system, str(run.index), run.log.status, str(run.log.run_start_ms),
                         str(run.log.run_stop_ms), f"{run.log.minutes:.4f}", fmt(accuracy, ".4f"),
                         os.path.relpath(run.log.path, data.folder)])
    return [("h2", "Runs (measured, from the MLPerf logs)"), ("table", header, rows)]


def _throughput_section(data, images):
    header = ["system", "processes", "nodes", f"throughput (samples/s, total; {AGGREGATE})",
              "min–max over runs (samples/s)", f"per rank (samples/s; {AGGREGATE})", "runs",
              "timed steps per run (min–max)", "speed-up (throughput)", "scaling efficiency (throughput)",
              "speed-up (olympic time to train)"]
    rows = [[r["system"], str(r["np"]), str(r["nodes"]), fmt(r["rate"], ",.2f"), spread(r["min"], r["max"]),
             fmt(r["per_rank"], ",.2f"), str(r["runs"]), step_range(r["steps_min"], r["steps_max"]),
             fmt(r["speedup"], ".3f"), pct(r["efficiency"]), fmt(r["ttt_speedup"], ".3f")]
            for r in scaling_rows(data.scales)]
    return [("h2", "Throughput and scaling (measured)"),
            ("p", f"Throughput is the {AGGREGATE} of summary.json's training samples/s (steady state: the "
                  f"first timing interval, with tracing and warm-up, is left out; evaluation is not training "
                  f"time). Timed steps are the steps behind each run's figure (the fewest any rank timed); "
                  f"under {MIN_TIMED_STEPS} the figure is flagged at the top. Speed-up and efficiency are "
                  f"against the smallest scale; efficiency = speed-up × smallest processes / processes."),
            ("table", header, rows), *_image(images, "throughput.png", "Throughput, total and per rank"),
            *_image(images, "scaling.png", "Speed-up and efficiency: measured, ideal and projected")]


ATTRIBUTION_INTRO = (
    "Every run splits its steady step time (the steps behind its throughput) into four parts that add up "
    "to it, per rank and for the job (summary.json, \"attribution\"): input wait (the wait for the next "
    "batch), exposed allreduce (from the moment the last rank had submitted its last gradient to the end "
    "of the step's last allreduce, read from Horovod's timeline over a few steady steps), rank imbalance "
    "(how long the first rank ready waited for the last one) and compute (the rest, with the optimizer's "
    "apply). One rank has no allreduce or imbalance by definition. Each scale shows its median run by step "
    "time.")


def _attribution_section(data, images):
    """Per scale, the median run's step split into four parts and each part's share of the lost points."""
    found = [(scale, *step_splits(scale)) for scale in sorted(data.scales, key=lambda s: s.np)]
    splits = [split for _, split, _ in found if split]
    if not splits:
        why = "; ".join(f"{scale.system}: {reason}" for scale, _, reason in found)
        return [("h2", "Where the efficiency went"), ("p", f"{ATTRIBUTION_INTRO} No run has a split: {why}.")]
    header = ["system", "processes", "run", "per-rank batch", "step (ms)",
              *(f"{label} (ms)" for _, label in STEP_PARTS), "efficiency (these step times)", "lost points",
              *(f"{label} (points)" for _, label in STEP_PARTS)]
    rows = [_attribution_row(base_of(splits, split), split) for split in splits]
    notes = [("p", f"{scale.system} has no split: {reason}.") for scale, split, reason in found if not split]
    return [("h2", "Where the efficiency went (measured)"), ("p", ATTRIBUTION_INTRO),
            ("p", _split_text(splits)), ("table", header, rows), *notes,
            *_image(images, "attribution.png", "Step time split and lost efficiency per scale")]


def _attribution_row(base, split):
    loss = efficiency_loss(base, split)
    parts = [f"{split.parts[key]:.1f}" for key, _ in STEP_PARTS]
    if loss is None:
        shares = ["—"] * (2 + len(STEP_PARTS))
    else:
        shares = [pct(loss["efficiency"]), f"{100 * (1 - loss['efficiency']):.1f}",
                  *(f"{loss['points'][key]:+.1f}" for key, _ in STEP_PARTS)]
    return [split.system, str(split.np), str(split.run), str(split.local_batch), f"{split.step_ms:.1f}",
            *parts, *shares]


def _split_text(splits):
    base = splits[0]
    text = (f"Against the smallest scale ({base.system}): efficiency = s·T₀/T_N with s the per-rank batch "
            f"ratio, and as the parts add up to the step, the lost points 100·(1 − s·T₀/T_N) split exactly "
            f"into 100·(c_N − s·c₀)/T_N per part; a negative share is a part that shrank. The efficiency "
            f"here comes from the same step times, so it can differ a little from the throughput table's "
            f"({AGGREGATE} of samples/s).")
    batches = sorted({split.local_batch for split in splits}, key=str)
    if len(batches) > 1:
        text += (f" The per-rank batch changes between scales ({', '.join(map(str, batches))}): linear "
                 f"scaling would keep every part at s times its base value, so compute's share also holds "
                 f"what the smaller per-rank batch costs per sample.")
    return text


def _straggler_section(data, threshold_pct, images):
    blocks = [("h2", "Per-rank step time (measured): stragglers"),
              ("p", f"Per rank, from summary.json: the median over runs of each run's p50 and p90 step time, "
                    f"and the largest step over all runs. A rank whose p50 is more than {threshold_pct:g}% "
                    f"above the median rank's p50 is flagged.")]
    header = ["system", "rank", "host", "runs", "p50 (ms)", "p90 (ms)", "max (ms)", "vs median rank",
              "straggler"]
    rows = []
    for scale in data.scales:
        for row in stragglers(scale, threshold_pct):
            rows.append([scale.system, str(row["rank"]), row["host"], str(row["runs"]),
                         *(fmt(row[key], ".1f") for key in ("p50", "p90", "max")),
                         f"{row['slower_pct']:+.1f}%", "YES" if row["straggler"] else "no"])
    return blocks + [("table", header, rows), *_image(images, "stragglers.png", "Per-rank step time")]


def _network_section(data):
    from suite.common.busbw import WARN_BELOW
    header = ["system", "run", "profile", "carried by", "network (per rank)", "RDMA", "probe busbw (GB/s)",
              "expected (GB/s)", "verdict"]
    rows = [_network_row(scale, run) for scale in data.scales for run in scale.runs]
    rows = [row for row in rows if row]
    intro = ("Before run_start (untimed) every run records which transport NCCL chose on each rank, read "
             "from NCCL's own INFO lines, and times one allreduce of a large message; its bus bandwidth is "
             f"compared with the cluster profile's expected figure for the node count and warned about "
             f"below {WARN_BELOW} of it. A CPU run's gradients go over Gloo or MPI, never RDMA.")
    if not rows:
        return [("h2", "Network per run"),
                ("p", intro + " No run of this sweep recorded it (one host on the CPU has no network to "
                              "check).")]
    return [("h2", "Network per run (measured before run_start)"), ("p", intro), ("table", header, rows)]


def _network_row(scale, run):
    env = run.env or {}
    net, profile = env.get("network"), env.get("profile")
    if not net:
        return None
    probe = net.get("probe") or {}
    rdma = {True: "yes", False: "NO", None: "n/a (one node)" if net.get("nodes") == 1 else "unknown"}
    return [scale.system, str(run.index), (profile or {}).get("name", "none"), net.get("library", "?"),
            _networks(net), rdma[net.get("rdma")],
            f"{probe['busbw_gbps']:.3f} at {size(probe['bytes'])}" if probe else "—",
            fmt(net.get("expected_busbw_gbps"), "g"), net.get("status", "?")]


def _networks(net):
    """'IB' when every rank agrees, else each network with the ranks that chose it."""
    ranks = net.get("ranks") or []
    if not any(ranks):
        return "—"
    by_network = {}
    for rank, found in enumerate(ranks):
        if found is not None:
            by_network.setdefault(found.get("network") or "unknown", []).append(rank)
    if len(by_network) == 1:
        return next(iter(by_network))
    return "; ".join(f"{name} on ranks {_ranks(found)}" for name, found in sorted(by_network.items()))


def _ranks(ranks):
    return ", ".join(str(r) for r in ranks[:8]) + (" ..." if len(ranks) > 8 else "")


def _allreduce_section(data, images):
    measured = allreduce_curves(data)
    single = [s.system for s in data.scales if s.allreduce and s not in measured]
    alone = (f" {', '.join(single)}: one process, so nothing crosses a link (busbw is 0 by definition); "
             f"its curve is left out." if single else "")
    if not measured:
        return [("h2", "Allreduce bandwidth"),
                ("p", "Not measured on more than one rank in this sweep (python -m suite.cluster.sweep "
                      "--allreduce runs it once a scale)." + alone)]
    header = ["system", "ranks", "hosts", "size", "bytes", "time (us)", "algbw (GB/s)", "busbw (GB/s)"]
    rows = [[s.system, str(s.allreduce.get("world_size")), str(s.allreduce.get("hosts_count")),
             size(row["bytes"]), str(row["bytes"]), f"{row['time_us']:.1f}", f"{row['algbw_gbps']:.3f}",
             f"{row['busbw_gbps']:.3f}"] for s in measured for row in s.allreduce.get("rows", [])]
    verdicts = [f"{s.system}: peak busbw {s.allreduce.get('peak_busbw_gbps', 0):.3f} GB/s; "
                f"{_verdict(s.allreduce)}" for s in measured]
    return [("h2", "Allreduce bandwidth (measured)"),
            ("p", "suite.train.allreduce on each scale's job: time is the median over iterations of the "
                  "slowest rank; busbw = algbw × 2(n−1)/n. " + " ".join(verdicts) + alone),
            ("table", header, rows), *_image(images, "allreduce.png", "Allreduce bus bandwidth per size")]


def _verdict(record):
    expectation = record.get("expectation")
    if not expectation:
        return record.get("expected_busbw_source") or "no expected bandwidth to compare with"
    source = expectation.get("source") or "flag"
    return f"expected {expectation.get('expected_busbw_gbps')} GB/s ({source}): {expectation.get('status')}"


def _projection_section(data, scaling_mode):
    found, why = projection_rows(data, scaling_mode)
    if found is None:
        return [("h2", "Projected beside measured"), ("p", why + ".")]
    inputs, projection, rows = found
    header = ["processes", "per-rank batch (the sweep's)", "projected compute (ms)",
              "projected allreduce (ms)",
              "projected throughput (samples/s)", f"measured throughput (samples/s, {AGGREGATE})",
              "measured runs", "projected efficiency", "measured efficiency", "measured / projected"]
    points = {p.gpus: p for p in projection.points}
    body = [[str(r.gpus), f"{points[r.gpus].batch:g}", f"{points[r.gpus].compute_ms:.2f}",
             f"{points[r.gpus].allreduce_ms:.3f}", fmt(r.projected_samples_per_second, ",.2f"),
             fmt(r.measured_samples_per_second, ",.2f"), str(r.measured_runs),
             pct(r.projected_efficiency), pct(r.measured_efficiency),
             fmt(r.measured_over_projected, ".2f")] for r in rows]
    nbytes, dtype, params = inputs.gradient
    return [("h2", "Projected beside measured"),
            ("p", f"PROJECTED figures come from suite.cluster.scaling's ring-allreduce model, not from runs. "
                  f"It models the experiment this sweep ran: {inputs.mode_reason}. Its inputs are measured "
                  f"here: the per-rank throughput of the smallest scale ({inputs.base.system}, {AGGREGATE}), "
                  f"the trained model's gradient ({params:,} trainable parameters × {dtype} = {nbytes:,} "
                  f"bytes, from summary.json) and the plateau bus bandwidth of the allreduce curve; "
                  f"{inputs.scenario.gpus_per_node} ranks per node, no overlap. The formula:"),
            ("code", "\n".join(scaling.formula(inputs.scenario))),
            ("p", inputs.compute_note),
            ("p", " ".join([_plateau_text(link, scale, plateau, nbytes)
                            for link, (scale, plateau) in sorted(inputs.plateaus.items())]
                           + _stand_in(data, inputs))),
            ("p", f"Every projected column says so; the measured columns are the same runs as above "
                  f"({AGGREGATE})."),
            ("table", header, body)]


def _stand_in(data, inputs):
    """A sentence when one link's bandwidth stands in for the other's, which nothing measured."""
    gpus_per_node = inputs.scenario.gpus_per_node
    if "network" not in inputs.plateaus and any(s.np > gpus_per_node for s in data.scales):
        return ["No allreduce was measured across nodes: the one-node plateau stands in for the network, "
                "so the projection beyond one node is optimistic."]
    if "one node" not in inputs.plateaus and any(1 < s.np <= gpus_per_node for s in data.scales):
        return ["No allreduce was measured inside one node: the network plateau stands in for it, so the "
                "projection inside a node is pessimistic."]
    return []


def _plateau_text(link, scale, plateau, gradient_bytes):
    where = "across nodes" if link == "network" else "inside a node"
    if not plateau.reached:
        return f"Bandwidth {where}, from {scale.system}: NO PLATEAU: " + no_plateau(plateau, gradient_bytes)
    text = (f"Bandwidth {where}, from {scale.system}: busbw is flat within "
            f"{100 * scaling.PLATEAU_TOLERANCE:g}% of the largest size's from {size(plateau.sizes[0])} to "
            f"{size(plateau.sizes[-1])}; the plateau is their median, {plateau.busbw_gbps:.3f} GB/s.")
    if stops_short(plateau, gradient_bytes):
        text += " BELOW THE GRADIENT: " + short_of_gradient(plateau, gradient_bytes)
    return text


def _reference_section(data):
    header = ["benchmark", "published system", "GPUs", "nodes", "time to train (min)",
              "runs (min, run_stop − run_start)", "source"]
    rows = [[name, r.system, str(r.gpus), str(r.nodes), f"{r.minutes:g}", _published_runs(r), r.source]
            for name, r in published.references()]
    ratio_header = ["published pair", "GPUs", "time-to-train ratio", "efficiency (ratio / GPU factor)",
                    "source"]
    ratios = [_published_ratio(pair) for pair in published.scaling_pairs()]
    return [("h2", "Published results (reference, not measured here)"),
            ("p", f"Reference rows for the benchmarks this suite runs; this sweep ran {data.benchmark}. "
                  f"A row that lists its runs gives each run's time to 4 decimals; its time to train is "
                  f"their olympic mean."),
            ("table", header, rows),
            ("p", "Published scaling is a ratio of times to train on GPUs, a different experiment from this "
                  "sweep's throughput: it stays in its own table, off the measured plots."),
            ("table", ratio_header, ratios)]


def _published_ratio(pair):
    small, large = pair.smaller, pair.larger
    return [pair.label, f"{small.gpus} → {large.gpus}",
            f"{small.minutes:g} / {large.minutes:g} = {small.minutes / large.minutes:.2f}x",
            pct(small.minutes / large.minutes * small.gpus / large.gpus), large.source]


def _published_runs(reference):
    return ", ".join(f"{ms / 60000:.4f}" for ms in reference.runs_ms) or "not listed"


def _image(images, name, caption):
    return [("img", name, caption)] if name in images else []


def render_markdown(doc):
    return "\n\n".join(_markdown(block) for block in doc) + "\n"


def _markdown(block):
    kind = block[0]
    if kind in ("h1", "h2"):
        return ("#" if kind == "h1" else "##") + " " + block[1]
    if kind == "banner":
        return f"> **WARNING: {block[1]}**"
    if kind == "code":
        return f"```\n{block[1]}\n```"
    if kind == "table":
        cells = lambda row: "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"  # noqa: E731
        return "\n".join([cells(block[1]), "|" + "---|" * len(block[1]), *map(cells, block[2])])
    if kind == "img":
        return f"![{block[2]}]({block[1]})"
    if kind == "list":
        return "\n".join(f"- {item}" for item in block[1])
    return block[1]


class _TextOnly(Extension):
    """Text in the report is shown as written: a '<' in a folder or host name is not taken for HTML."""

    def extendMarkdown(self, md):
        md.preprocessors.deregister("html_block")
        md.inlinePatterns.deregister("html")


# Long words (a folder's path, a system's name) may break anywhere rather than widen the page past a
# 1,280 px window.
STYLE = ("body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse;"
         "margin:1em 0}td,th{border:1px solid #999;padding:3px 6px;font-size:90%}img{max-width:100%}"
         "td,th,p,li{overflow-wrap:anywhere}pre{white-space:pre-wrap}"
         ".banner{border:3px solid #c00;background:#fee;color:#700;padding:8px 12px;margin:8px 0}"
         ".banner p{margin:0}pre{background:#f4f4f4;padding:8px}")


def render_html(doc, folder):
    """One self-contained page: each block's Markdown as HTML, the PNGs embedded as data URIs."""
    converter = markdown.Markdown(extensions=["tables", "fenced_code", _TextOnly()])
    body = []
    for block in doc:
        if block[0] == "banner":
            # A box of its own rather than report.md's block quote: it must not be missed.
            body.append(f'<div class="banner">{converter.reset().convert(f"**WARNING:** {block[1]}")}</div>')
        elif block[0] == "img":
            with open(os.path.join(folder, block[1]), "rb") as handle:
                encoded = base64.b64encode(handle.read()).decode("ascii")
            body.append(f'<figure><img alt="{html.escape(block[2])}" src="data:image/png;base64,{encoded}">'
                        f"<figcaption>{html.escape(block[2])}</figcaption></figure>")
        else:
            body.append(converter.reset().convert(_markdown(block)))
    title = html.escape(doc[0][1])
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
