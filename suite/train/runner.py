"""Entry-point machinery shared by every benchmark: flags → config → Horovod → MLPerf log → loop → summary."""
import json
import sys

import suite
from suite.common import modelargs, profiles
from suite.common.config import ConfigError, to_dict
from suite.train.startup import apply_profile, env_rank


def build_parser(spec):
    return modelargs.build_parser(spec.benchmark)


def main(spec, argv=None):
    """Parses flags and runs one benchmark; returns the process exit code."""
    rank = env_rank()
    parser = build_parser(spec)
    if rank != 0:
        # Only rank 0 explains a bad flag; the others exit with the same code, quietly.
        parser.print_usage = lambda *a, **k: None
        parser._print_message = lambda *a, **k: None
    args = parser.parse_args(argv)
    if args.verbose:
        suite.show_tensorflow_messages()
    try:
        config = modelargs.resolve_config(args, spec.benchmark)
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
    with suite.lean_tensorflow_import():
        from suite.train.session import Options, run
    return run(spec, config, args.preset, args.run_dir,
               Options(profile=profile, profile_record=record, require_rdma=args.require_rdma,
                       require_links=args.require_links, throughput=args.throughput))


def _fail(rank, err, code):
    if rank == 0:
        print(f"error: {err}", file=sys.stderr, flush=True)
    return code
