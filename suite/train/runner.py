"""Entry-point machinery shared by every benchmark: flags → config → Horovod → MLPerf log → loop → summary."""
import argparse
import json
import os
import sys

from suite.common import profiles
from suite.common.busbw import WARN_BELOW
from suite.common.config import ConfigError, describe_fields, resolve, to_dict


def env_rank():
    """This process's rank from the launcher's variables, for gating messages before Horovod starts."""
    for key in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def build_parser(spec):
    parser = argparse.ArgumentParser(
        prog=f"python -m models.{spec.name}",
        description=f"MLPerf Training {spec.title} with TensorFlow + Horovod. Runs unchanged on one "
                    f"process or under horovodrun, mpirun or srun. Settings come from a preset, then "
                    f"--config, then --data-dir/--run-dir, then each --set.",
        epilog="Presets:\n" + "\n".join(f"  {name}: {preset.describe()}"
                                        for name, preset in spec.presets.items())
               + "\n\nSettings (--set key=value):\n" + "\n".join(describe_fields(spec.config_cls)),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default=spec.default_preset,
                        help=f"named starting configuration (default: {spec.default_preset})")
    parser.add_argument("--data-dir", help="dataset directory (overrides the preset's data_dir)")
    parser.add_argument("--run-dir", help="where the MLPerf log and run records go "
                                          "(default: runs/<preset>-<time>)")
    parser.add_argument("--config", metavar="FILE", help="JSON or YAML file of settings")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override one setting; repeatable")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
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
    return parser


def main(spec, argv=None):
    """Parses flags and runs one benchmark; returns the process exit code."""
    rank = env_rank()
    parser = build_parser(spec)
    if rank != 0:
        # Only rank 0 explains a bad flag; the others exit with the same code, quietly.
        parser.print_usage = lambda *a, **k: None
        parser._print_message = lambda *a, **k: None
    args = parser.parse_args(argv)
    extra = {"data_dir": args.data_dir} if args.data_dir else {}
    try:
        config = resolve(spec.config_cls, spec.presets, args.preset, args.config, args.sets, extra)
    except ConfigError as err:
        return _fail(rank, err, code=2)
    if args.print_config:
        if rank == 0:
            print(json.dumps(to_dict(config), indent=2, sort_keys=True))
        return 0
    try:
        profile, record = apply_profile(args.profile)
    except profiles.ProfileError as err:
        return _fail(rank, err, code=2)
    from suite.train.session import Options, run
    return run(spec, config, args.preset, args.run_dir,
               Options(profile=profile, profile_record=record, require_rdma=args.require_rdma))


def apply_profile(name_or_path, environ=os.environ):
    """(profile, what applying it did), or (None, None); before Horovod, MPI or NCCL read anything."""
    if not name_or_path:
        return None, None
    profile = profiles.load(name_or_path)
    return profile, profiles.apply(profile, environ)


def _fail(rank, err, code):
    if rank == 0:
        print(f"error: {err}", file=sys.stderr, flush=True)
    return code
