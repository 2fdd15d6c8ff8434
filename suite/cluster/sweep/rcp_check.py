"""The RCP pre-flight of a sweep, before any GPU hour is spent: per scale, the preset's global batch, the
RCP that batch matches in mlperf-logging's tables (or that none does, and what follows), whether the
learning rate, warmup and decay follow that RCP's hyperparameters, and the epochs (or samples)
the reference runs took to converge there."""
from suite.cluster import rcp
from suite.common import benchmarks, modelargs
from suite.common.config import ConfigError
from suite.common.mlperf_rules import RULESET

SCHEDULE_WORDS = ("learning_rate", "warmup", "decay", "lr")


def scale_lines(sweep, scale):
    """The scale's pre-flight lines; [] for a model with no presets."""
    benchmark = benchmarks.of_module(sweep.model[0])
    if benchmark is None:
        return []
    head = f"RCP check, {scale.system} ({scale.np} processes, preset {scale.preset})"
    try:
        config = scale_config(sweep, scale, benchmark)
    except ConfigError as err:
        return [f"{head}: the preset does not resolve: {err}"]
    batch = config.global_batch_size
    try:
        found = rcp.lookup(sweep.benchmark, RULESET, batch)
    except ValueError as err:
        return [f"{head}: global batch {batch}: {err}"]
    if not found.covered:
        return [f"{head}: global batch {batch}: {found.note}; its runs show scaling, not a comparable "
                f"time to train"]
    if found.source == "interpolated":
        where = f"the RCP interpolated between {found.between[0]} and {found.between[1]}"
    else:
        where = {"record": f"the RCP record at {batch}",
                 "smallest record": "the smallest RCP record (below every record)"}[found.source]
    lines = [f"{head}: global batch {batch} matches {where} (ruleset {RULESET}): expected {found.mean:,.1f} "
             f"{found.unit} to converge (reference mean; the RCP check accepts a submission mean from "
             f"{found.check_min_mean:,.1f})"]
    lines.append(f"{head}: {_schedule(config, scale, benchmark, found)}")
    return lines


def _schedule(config, scale, benchmark, found):
    values_of = benchmark.rcp_hyperparameters
    if values_of is None:
        return "the model names no RCP hyperparameters to compare"
    if not found.hyperparameters:
        return "an interpolated RCP has no hyperparameters of its own: nothing to follow"
    differences = rcp.compare_hyperparameters(values_of(config, scale.np), found)
    schedule = [d for d in differences if any(word in d.name for word in SCHEDULE_WORDS)]
    text = ("learning rate, warmup and decay follow the RCP" if not schedule else
            "learning rate, warmup or decay DIFFER from the RCP: "
            + "; ".join(f"{d.name} {d.preset} (RCP {d.rcp})" for d in schedule))
    others = [d for d in differences if d not in schedule]
    if others:
        text += "; other differences: " + "; ".join(f"{d.name} {d.preset} (RCP {d.rcp})" for d in others)
    return text


def scale_config(sweep, scale, benchmark):
    """The config every run of the scale resolves (the model's args with the scale's preset)."""
    _, args = modelargs.parse_model_args([*sweep.model, "--preset", scale.preset], benchmark)
    if not args.data_dir:
        args.data_dir = "/data"  # only the batch and the schedule are read; no data is opened
    return modelargs.resolve_config(args, benchmark)
