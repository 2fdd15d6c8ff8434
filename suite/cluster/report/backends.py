"""The report's backends side by side: per scale of a sweep run under more than one distribution backend,
each backend's throughput, time to train and step split in one table."""
from suite.cluster.report.figures import AGGREGATE, STEP_PARTS, scaling_rows, step_splits, time_to_train
from suite.cluster.report.formats import fmt, pct

INTRO = (
    "The sweep ran every scale under each distribution backend (python -m suite.cluster.sweep "
    "--distributions): Horovod's allreduce, and TensorFlow's own collectives (tf, "
    "MultiWorkerMirroredStrategy), with the same model, data and MLPerf log. Per scale, each backend's "
    f"throughput ({AGGREGATE}) and its scaling efficiency against the same backend's smallest scale, its "
    "olympic time to train, and its median run's step split (ms); the split's method is named, since "
    "only one measured alike under both (subtraction: the steps timed with and without the collective "
    "after run_stop) compares the parts across backends. The headline says, step by step, which backend "
    "loses fewer points of linear scaling.")


def blocks(data):
    """The section, or nothing for a sweep of one backend."""
    if len({scale.distribution for scale in data.scales}) < 2:
        return []
    efficiency = {row["system"]: row for row in scaling_rows(data.scales)}
    header = ["processes", "nodes", "backend", "system", f"throughput (samples/s, {AGGREGATE})",
              "scaling efficiency (throughput, vs the backend's smallest scale)",
              "olympic time to train (min)",
              "step (ms)", *(f"{label} (ms)" for _, label in STEP_PARTS), "split (method, run)"]
    rows = []
    for scale in sorted(data.scales, key=lambda s: (s.np, s.distribution)):
        row = efficiency[scale.system]
        split, why = step_splits(scale)
        parts = ["—"] * (1 + len(STEP_PARTS)) if split is None else \
            [f"{split.step_ms:.1f}", *(f"{split.parts[key]:.1f}" for key, _ in STEP_PARTS)]
        rows.append([str(scale.np), str(scale.nodes), scale.distribution, scale.system,
                     fmt(row["rate"], ",.2f"), pct(row["efficiency"]),
                     fmt(time_to_train(scale)["olympic"], ".4f"), *parts,
                     f"{split.method or 'unnamed'}, run {split.run}" if split else f"none: {why}"])
    return [("h2", "Distribution backends side by side (measured)"), ("p", INTRO), ("table", header, rows)]
