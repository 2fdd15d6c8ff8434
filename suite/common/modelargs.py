"""A model entry point's flags, read alike in every rank and on the login node before anything starts.

The ranks parse them to run (suite/train/runner.py); the launchers parse them the same way to refuse,
before any node is allocated, what every rank would refuse at start-up: an unknown flag or setting, a
bad value, a preset meant for another process count, a global batch that does not split over the ranks.
Nothing here imports TensorFlow: a model's presets module is plain data.
"""
import argparse
import os

from suite.common import benchmarks, profiles
from suite.common.busbw import WARN_BELOW
from suite.common.config import DISTRIBUTIONS, ConfigError, describe_fields, load_file, resolve
from suite.common.workload import local_batch_size


def build_parser(benchmark, parser_class=argparse.ArgumentParser):
    """The flags of `python -m MODULE` for a suite.common.workload.Benchmark."""
    presets, default_preset = benchmark.presets, benchmark.default_preset
    parser = parser_class(
        prog=f"python -m {benchmark.module}",
        description=f"MLPerf Training {benchmark.title} with TensorFlow, distributed by Horovod or by "
                    f"TensorFlow's own collectives. Runs unchanged on one process or under horovodrun, "
                    f"mpirun or srun. Settings come from a preset, then --config, then "
                    f"--data-dir/--distribution, then each --set.",
        epilog="Presets:\n" + "\n".join(f"  {preset_name}: {preset.describe()}"
                                        for preset_name, preset in presets.items())
               + "\n\nSettings (--set key=value):\n" + "\n".join(describe_fields(benchmark.config_cls)),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default=default_preset,
                        help=f"named starting configuration (default: {default_preset})")
    parser.add_argument("--data-dir", help="dataset directory (overrides the preset's data_dir)")
    parser.add_argument("--run-dir", help="where the MLPerf log and run records go "
                                          "(default: runs/<preset>-<time>)")
    parser.add_argument("--distribution", choices=DISTRIBUTIONS,
                        help="horovod (default): Horovod's allreduce; tf: TensorFlow's own collectives "
                             "(MultiWorkerMirroredStrategy), under mpirun, srun or suite.cluster.launch, "
                             "not horovodrun (the distribution setting)")
    parser.add_argument("--config", metavar="FILE", help="JSON or YAML file of settings")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override one setting; repeatable")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's own start-up and info messages (TF_CPP_MIN_LOG_LEVEL=0); "
                             "without it they are hidden unless TF_CPP_MIN_LOG_LEVEL is set")
    parser.add_argument("--throughput", action="store_true",
                        help="time the training step alone instead of training to the target: "
                             "throughput_warmup_steps untimed, then throughput_steps timed; no evaluation "
                             "and no MLPerf log; per-rank and total samples/s, spread and MFU go to "
                             "<run-dir>/throughput.json")
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--profile", default=os.environ.get(profiles.PROFILE_VARIABLE) or None,
                         metavar="NAME|FILE",
                         help=f"cluster profile ({', '.join(profiles.available())}, or a YAML file): its "
                              f"NCCL, UCX, Open MPI and Horovod settings are put into this process's "
                              f"environment before Horovod starts, so a raw horovodrun/mpirun/srun gets what "
                              f"suite.cluster.launch gives (default: ${profiles.PROFILE_VARIABLE})")
    cluster.add_argument("--require-rdma", action="store_true",
                         help=f"stop before run_start unless every rank's NCCL uses RDMA between the nodes "
                              f"and a short allreduce probe reaches {WARN_BELOW} of the profile's expected "
                              "bus bandwidth (without it, both are checked and only warned about)")
    cluster.add_argument("--require-links", action="store_true",
                         help="stop before run_start when the link probe of a multi-host job names a host "
                              "(its link below the profile's expected_link_gbits, or below half its peers' "
                              "median, or unreachable); without it a named host is warned about")
    return parser


def resolve_config(args, benchmark):
    """The frozen config from parsed flags; raises ConfigError naming the flag, key or file."""
    extra = {"data_dir": args.data_dir} if args.data_dir else {}
    if args.distribution:
        extra["distribution"] = args.distribution
    return resolve(benchmark.config_cls, benchmark.presets, args.preset, args.config, args.sets, extra)


class _Refusing(argparse.ArgumentParser):
    # The launcher's check says what is wrong in one line instead of argparse's usage and exit.
    def error(self, message):
        raise ConfigError(f"{self.prog}: {message}")


def parse_model_args(model, benchmark):
    """The parser and parsed flags of model ([MODULE, args...]); a flag it refuses is a ConfigError."""
    parser = build_parser(benchmark, _Refusing)
    return parser, parser.parse_args(model[1:])


def check(model, np):
    """Refuses, in one line naming the flag, model args that every one of np ranks would refuse.

    model is [MODULE, args...]; a module without a presets module (a script, the allreduce
    benchmark) is left to check its own flags. Returns (parsed flags, resolved config) for the
    launcher's own checks, or None when it checked nothing.
    """
    benchmark = benchmarks.of_module(model[0])
    if benchmark is None or {"-h", "--help"} & set(model[1:]):
        return None
    parser, args = parse_model_args(model, benchmark)
    try:
        config = resolve_config(args, benchmark)
    except ConfigError as err:
        raise ConfigError(f"{parser.prog}: {err}") from None
    check_scale(parser.prog, benchmark.presets, args.preset, config, np, _sets_batch(args))
    return args, config


def origin(args, key, value):
    """Which of the parsed flags gave setting `key` its value: the last one that sets it wins, in
    resolve_config's order (the preset, --config, --data-dir/--distribution, each --set)."""
    if any(item.partition("=")[0] == key for item in args.sets):
        return f"--set {key}={value}"
    if getattr(args, key, None):
        return f"--{key.replace('_', '-')} {value}"
    if args.config and key in load_file(args.config):
        return f"--config {args.config} ({key}: {value})"
    return f"preset {args.preset} ({key}: {value})"


def _sets_batch(args):
    """True when --set or --config gives the global batch, so the preset's arithmetic no longer holds."""
    if any(item.partition("=")[0] == "global_batch_size" for item in args.sets):
        return True
    return bool(args.config) and "global_batch_size" in load_file(args.config)


def check_scale(prog, presets, preset_name, config, np, batch_given=False):
    """The preset's process count (unless the batch was given by hand) and the batch split over np ranks."""
    preset = presets[preset_name]
    if preset.ranks and np not in preset.ranks and not batch_given:
        fitting = [name for name, other in presets.items() if np in other.ranks]
        choose = f"choose {' or '.join(fitting)}" if fitting else "choose a preset for that count"
        raise ConfigError(f"{prog}: preset {preset_name} is for {_counts(preset.ranks)} processes "
                          f"({preset.batch_arithmetic}), not {np}; {choose}, or set the global batch "
                          f"with --set global_batch_size=N")
    try:
        local_batch_size(config.global_batch_size, np, getattr(config, "accumulation_steps", 1))
    except ValueError as err:
        raise ConfigError(f"{prog}: preset {preset_name}: {err}; change -np or --set "
                          f"global_batch_size=N") from None


def _counts(ranks):
    return " or ".join(str(count) for count in ranks)
