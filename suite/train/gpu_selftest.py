"""`python -m suite.train.gpu_selftest`: what a GPU node's first run checks first, on one screen.

    horovodrun -np 8 -H localhost:8 python -m suite.train.gpu_selftest --profile oci-bm-gpu4-8

One rank per local GPU of one node. It reports the GPUs TensorFlow sees; a Horovod NCCL allreduce of
1 GiB across them, its bus bandwidth against the profile's expectation for one node; the transport
NCCL chose (from its own INFO lines); and one mixed-precision (fp16) training step of every benchmark,
on synthetic data at its default preset, with XLA off and on. Where TensorFlow sees no GPU it refuses
in one line before Horovod starts.

UNVERIFIED on a GPU: written where no GPU was reachable (docs/gpu-workflow.md); only the refusal has
run. Exit codes: 0 every check ran and passed, 1 no GPU or a check failed, 2 bad flags.
"""
import argparse
import importlib
import os
import shutil
import socket
import subprocess
import sys

import suite  # noqa: F401  (TF_USE_LEGACY_KERAS and TensorFlow's quiet start, before TensorFlow)
from suite.common import benchmarks
from suite.common.busbw import WARN_BELOW, expectation, format_size
from suite.common.config import ConfigError, resolve
from suite.common.profiles import ProfileError
from suite.train.startup import apply_profile, env_rank

BATCH_PER_GPU = 32
DEFAULT_RUN_DIR = os.path.join("runs", "gpu-selftest")


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m suite.train.gpu_selftest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", help="cluster profile (name or YAML file): its expected busbw for one "
                                          "node and its NCCL settings")
    parser.add_argument("--batch-per-gpu", type=int, default=BATCH_PER_GPU,
                        help=f"samples per GPU in each benchmark's step (default {BATCH_PER_GPU})")
    parser.add_argument("--run-dir", default=DEFAULT_RUN_DIR,
                        help=f"where NCCL's log goes (default {DEFAULT_RUN_DIR})")
    return parser


def driver_state():
    """What nvidia-smi says of this host's NVIDIA driver, in a few words."""
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found: no NVIDIA driver"
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        return f"nvidia-smi failed: {err}"
    versions = sorted(set(result.stdout.split()))
    if result.returncode != 0 or not versions:
        return f"nvidia-smi lists no GPU (exit {result.returncode})"
    return f"NVIDIA driver {', '.join(versions)}"


def no_gpu_refusal(tf, host):
    """The one-line refusal for a host where TensorFlow sees no GPU, or None."""
    if tf.config.list_physical_devices("GPU"):
        return None
    why = (driver_state() if tf.test.is_built_with_cuda()
           else f"this TensorFlow ({tf.__version__}) is a CPU-only build")
    return (f"host {host}: TensorFlow sees no GPU ({why}); the GPU self-test runs on a GPU node, one rank "
            f"per GPU (horovodrun -np <GPUs> -H localhost:<GPUs> python -m suite.train.gpu_selftest)")


def main(argv=None):
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as done:
        return done.code
    rank = env_rank()
    try:
        profile, _ = apply_profile(args.profile)
    except ProfileError as err:
        return _fail(rank, err, 2)
    import tensorflow as tf
    refusal = no_gpu_refusal(tf, socket.gethostname())
    if refusal:
        return _fail(rank, refusal, 1)
    from suite.train import dist, network
    # Before the first collective, which starts NCCL: its INFO lines name the transport it chose.
    nccl_log = network.NcclLog(os.environ, args.run_dir)
    world = dist.initialize()
    if world.cross_size > 1:
        return _fail(world.rank, f"{world.cross_size} nodes: the self-test is of one node's GPUs; start "
                                 f"it with -H localhost:<GPUs>", 2)
    if not dist.nccl_built():
        return _fail(world.rank, "Horovod was built without NCCL: allreduce would run on the CPU", 1)
    lines, failed = _gpus(tf, world)
    allreduce_lines, allreduce_failed = _allreduce(world, profile, nccl_log)
    step_lines, steps_failed = _steps(world, args.batch_per_gpu)
    unverified = "UNVERIFIED: this self-test has not yet run on a GPU (docs/gpu-workflow.md)"
    if world.is_root:
        print("\n".join(lines + allreduce_lines + step_lines + [unverified]))
    return 1 if failed or allreduce_failed or steps_failed else 0


def _gpus(tf, world):
    import horovod
    gpus = tf.config.list_physical_devices("GPU")
    named = []
    for gpu in gpus:
        details = tf.config.experimental.get_device_details(gpu)
        capability = ".".join(str(part) for part in details.get("compute_capability", ()))
        named.append(f"{gpu.name.split(':', 1)[1]} {details.get('device_name', '?')} (sm {capability})")
    info = tf.sysconfig.get_build_info()
    lines = [f"GPU self-test on {world.host}: TensorFlow {tf.__version__} (CUDA {info.get('cuda_version')}, "
             f"cuDNN {info.get('cudnn_version')}), Horovod {horovod.__version__}, {driver_state()}",
             f"GPUs TensorFlow sees ({len(gpus)}): " + "; ".join(named)]
    if world.size != len(gpus):
        lines.append(f"  FAIL: {world.size} rank(s) for {len(gpus)} GPU(s): start one rank per GPU")
        return lines, True
    return lines, False


def _allreduce(world, profile, nccl_log):
    from suite.train import dist, network
    import horovod.tensorflow as hvd
    row, nbytes = network.probe(hvd, world), network.PROBE_BYTES["gpu"]
    expected, source = expectation(None, profile, 1)
    verdict, failed = "no expectation (give --profile)", not row["correct"]
    if expected:
        share = row["busbw_gbps"] / expected
        verdict = f"expected {expected:g} ({source}): {share:.0%}" + (" LOW" if share < WARN_BELOW else "")
        failed = failed or share < WARN_BELOW
    transports = dist.allgather_object(nccl_log.read(world.host, os.getpid()), "selftest_nccl")
    via = transports[0].get("via") or {}  # rank 0's channels; NCCL picks alike within a node
    lines = [f"NCCL allreduce of {format_size(nbytes)} over {world.size} GPUs: busbw "
             f"{row['busbw_gbps']:.1f} GB/s, {verdict}" + ("" if row["correct"] else ", WRONG RESULT"),
             f"NCCL transport: network {transports[0].get('network') or 'not named'}; channels via "
             + (", ".join(f"{path} x{count}" for path, count in sorted(via.items())) or "not logged")
             + f" (log: {transports[0].get('log')})"]
    return lines, failed


def _steps(world, batch_per_gpu):
    """One fp16 training step of every benchmark, XLA off and on: one line per benchmark."""
    lines, failed = [f"One mixed-precision (fp16) step, synthetic data, {batch_per_gpu} per GPU:"], False
    for benchmark in benchmarks.discovered().values():
        cells = []
        for xla in (False, True):
            try:
                seconds = _one_step(benchmark, world, batch_per_gpu, xla)
                cells.append(f"XLA {'on' if xla else 'off'} {seconds:.3f} s")
            except (ConfigError, ValueError, RuntimeError) as err:  # tf.errors.OpError is a RuntimeError
                failed = True
                cells.append(f"XLA {'on' if xla else 'off'} FAIL: {str(err).splitlines()[0][:80]}")
        lines.append(f"  {benchmark.name:<12} " + "; ".join(cells))
    return lines, failed


def _one_step(benchmark, world, batch_per_gpu, xla):
    """Seconds of one timed step after one untimed (compiling) step, the slowest rank's."""
    from suite.train import dist, throughput
    workload = importlib.import_module(f"{benchmark.module}.workload")
    sets = ["synthetic=true", "precision=fp16", f"xla={str(xla).lower()}",
            f"global_batch_size={batch_per_gpu * world.size}", "throughput_warmup_steps=0",
            "throughput_steps=1"]
    config = resolve(benchmark.config_cls, benchmark.presets, benchmark.default_preset, sets=sets)
    job = workload.SPEC.build_job(config, world, seed=1)
    seconds = throughput.measure(job, config)["step_seconds"][0]
    return max(dist.allgather_object(seconds, f"selftest_step_{benchmark.name}_{xla}"))


def _fail(rank, message, code):
    if rank == 0:
        print(f"error: {message}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
