"""One run of one benchmark on this job: the backend up, MLPerf log, workload built, loop, records written."""
import gc
import os
import random
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass

import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

from suite.common import linkprobe, time_to_train_split
from suite.common.config import to_dict
from suite.common.profiles import Timeouts
from suite.common.workload import Division
from suite.train import attribution, dist, linkprobe_by_ranks, network, peers, rundir, signals, startup
from suite.train.loop import train
from suite.train.mlperf import ABORTED, MLPerfLog

# Errors a user can cause (bad data, bad run directory, a launch that does not fit the hosts, a
# missing or wrong package such as Keras 3 behind tf.keras): reported in one line, no traceback.
USER_ERRORS = (ValueError, OSError, ImportError, rundir.RunDirError, dist.LaunchError, network.NetworkError)

# How long a failed non-root rank stays up once training has started, so that rank 0 can log the
# failure at its next collective (the rank watch, suite/train/peers.py, has already told it which
# rank failed and why, for the log). If rank 0 is still tracing or compiling then (15 s on two CPU
# cores, longer with XLA), the launcher's SIGTERM reaches it first once this rank has exited, and
# its signal watcher closes the log instead (suite/train/signals.py).
PEER_GRACE_SECONDS = 10
# After a verdict every rank reached together (a NaN loss, --require-rdma), a rank without a rank
# watch to hear rank 0 end pauses this long: rank 0 has only to write one line and run_stop.
VERDICT_GRACE_SECONDS = 3
# With a rank watch, the bound on that wait: rank 0 says `done` once its line is out, and its socket
# closes at once if it dies, so only a rank 0 that hangs makes the others wait this long.
VERDICT_WAIT_SECONDS = 60


@dataclass(frozen=True)
class Options:
    """How the job was set up around the config: its cluster profile and the network it demands."""

    profile: object = None          # suite.common.profiles.Profile, or None
    profile_record: dict = None     # what applying it did (profiles.apply)
    require_rdma: bool = False
    require_links: bool = False     # a host named by the link probe stops the run before run_start
    throughput: bool = False        # time the train step alone (suite/train/throughput.py)


class _Run:
    """State that the error path needs: is the log open, has run_start been written."""

    def __init__(self):
        self.log = None
        self.world = None
        self.run_dir = None
        self.started = False
        self.job = None
        self.watch = None
        self.ranks = []  # every rank's {rank, host, local_rank, pid}, once exchanged
        # Taken by whichever of the main thread, the signal watcher and the rank watch ends the run
        # first, so that one of them alone writes the closing line.
        self._closing = threading.Lock()
        self.closed = threading.Event()  # run_stop written (or nothing to write)

    def claim(self):
        """True for the first caller only."""
        return self._closing.acquire(blocking=False)


def run(spec, config, preset, run_dir=None, options=Options()):
    """Runs the benchmark and returns the exit code (0 success or budget reached, 1 failure)."""
    state = _Run()
    signals.Watcher(lambda signum: _on_signal(state, signum)).start()
    try:
        code = _run(spec, config, preset, run_dir, state, options)
        if state.watch:
            state.watch.done()
        return code
    except BaseException as err:  # noqa: BLE001 - every failure must close the log and free the others
        code = _abort(spec, state, err)
        dist.end_after_failure(code)  # tf: ends the process here (its runtime's exit waits on the peers)
        return code


def _run(spec, config, preset, run_dir, state, options):
    started = time.time()
    phases = startup.Phases()
    if config.distribution == "horovod":
        # attribution: HOROVOD_TIMELINE=DYNAMIC before hvd.init (multi-rank GPU runs)
        attribution.enable_timeline(gpu=dist.gpus_visible())
    state.world = world = dist.initialize(config.cpu_threads, config.distribution, config.tf_pack_mb)
    phases.mark("horovod_init")
    if not config.gradient_allreduce and world.size > 1:
        raise dist.LaunchError(f"gradient_allreduce=false is for one process (it leaves the backend out "
                               f"of the step), but {world.launcher} started {world.size}; drop the setting "
                               f"or run -np 1")
    ranks = dist.allgather_object({"rank": world.rank, "host": world.host, "local_rank": world.local_rank,
                                   "pid": os.getpid()}, "ranks")
    state.ranks = ranks
    state.watch = _watch_peers(state, world, ranks, options)
    say = _say if world.is_root else _silent
    if world.cross_size > 1 and options.profile is None:
        _warn(world, "warning: a multi-host run with no cluster profile (--profile or SUITE_PROFILE): NCCL "
                     "and MPI pick their own NICs, traffic class and GID index, and may run over TCP")
    seed = config.seed if config.seed >= 0 else dist.broadcast_value(draw_seed(), "seed")
    state.run_dir = run_dir = dist.broadcast_value(run_dir or rundir.default_run_dir(preset),
                                                   "run_dir")
    log_path = _on_root(world, lambda: rundir.prepare(run_dir), "run_dir_ready")
    # Before the first collective on the GPU, which is when NCCL starts and reads its variables, and
    # once the run directory is known: NCCL's log goes there. The object exchanges above (the rank
    # table, the seed, the run directory) came before it already.
    nccl_log = network.NcclLog(os.environ, run_dir) if world.device != "cpu" and dist.nccl_built() else None
    # A throughput run is not an MLPerf run: it writes no result log.
    state.log = log = MLPerfLog(log_path, enabled=world.is_root and not options.throughput)
    cache_cleared = _clear_page_cache_on_every_host(world) if config.clear_cache else False
    log.event("cache_clear", cache_cleared)
    log.start("init_start")
    say(f"{spec.benchmark.title}: preset {preset}, {world.size} rank(s) via {world.launcher} on "
        f"{world.device}, seed {seed}, run directory {run_dir}")

    phases.mark("run_directory_and_log")
    state.job = job = spec.build_job(config, world, seed)
    phases.mark("workload_build")
    job.division = division_of_run(job.division, config, cache_cleared)
    # The weights are built (and loaded) alike on every rank; from here on each rank draws its own
    # random stream, so dropout masks differ between ranks as they would on one large batch.
    dist.seed_per_rank(seed, world.rank)
    platform = config.submission_platform or f"{world.size}x{world.device}"
    log.submission(job.benchmark, config.submission_org, job.division.name, platform,
                   config.submission_status)
    log.event("seed", seed)
    log.hyperparameters(job.hyperparameters)
    log.weights_initialization(job.tensor_names)
    net = _check_network(world, ranks, nccl_log, options)
    phases.mark("network_check")
    start_up = startup.summarize(dist.allgather_object({"rank": world.rank, **phases.record()}, "startup"))
    if world.is_root:
        rundir.write_json(os.path.join(run_dir, "config.json"),
                          {"preset": preset, "config": to_dict(config), "seed": seed,
                           "division": job.division.name, "open_reasons": list(job.division.reasons),
                           "operator_statements": list(job.division.statements), **job.details})
        rundir.write_json(os.path.join(run_dir, "env.json"),
                          {**rundir.environment(world, ranks), "profile": options.profile_record,
                           "network": net, "startup_seconds": start_up})
    if job.division.reasons:
        say(f"open division: {'; '.join(job.division.reasons)}")

    if options.throughput:
        _measure_throughput(job, spec.benchmark.sample_unit, world, config, run_dir, say)
        log.close()
        return 0
    state.started = True
    outcome = train(job, world, log, config, say=say, run_dir=run_dir)
    per_rank = dist.allgather_object({**outcome.timing, "host": world.host,
                                      "weights_digest": outcome.weights_digest,
                                      "peak_memory_mb": startup.peak_memory_mb()}, "per_rank")
    if world.is_root:
        summary = _summary(spec, job, world, outcome, per_rank, seed, time.time() - started)
        summary.update(gradient_record(job.model, config.fp16_allreduce))
        summary["attribution"] = attribution.summarize(outcome.window, per_rank, world.size)
        if outcome.step_split and summary["attribution"].get("method") == "none":
            # No timeline split (the tf backend, or a CPU): the split by subtraction stands in for it.
            summary["attribution"] = {**outcome.step_split, "timeline": summary["attribution"].get("reason")}
        # run_stop is in the log by now: where this run's time to train went, from its own events.
        summary["time_to_train"] = time_to_train_split.run_record(log.path, job.benchmark)
        rundir.write_json(os.path.join(run_dir, "summary.json"), summary)
        say(f"run {outcome.status}: accuracy {outcome.accuracy:.4f} after {outcome.steps} steps, "
            f"{outcome.train_seconds / 60:.2f} min from run_start to run_stop")
        say(f"MLPerf log: {log.path}")
        say(f"summary:    {os.path.join(run_dir, 'summary.json')}")
    log.close()
    return 0


def _measure_throughput(job, sample_unit, world, config, run_dir, say):
    """--throughput: every rank times the train step; rank 0 writes throughput.json and prints it."""
    from suite.train import throughput
    record = throughput.measure(job, config)
    peak, source = throughput.peak_for_run(config, world.device)
    gathered = dist.allgather_object({"record": record, "host": world.host, "peak": peak}, "throughput")
    if world.is_root:
        result = throughput.summarize([g["record"] for g in gathered], [g["host"] for g in gathered],
                                      job.local_batch_size, job.flops_per_sample,
                                      [g["peak"] for g in gathered], source)
        rundir.write_json(os.path.join(run_dir, "throughput.json"), result)
        for line in throughput.describe(result, sample_unit):
            say(line)
        say(f"throughput: {os.path.join(run_dir, 'throughput.json')}")


def _watch_peers(state, world, ranks, options):
    """Every rank's line to rank 0 (suite/train/peers.py), with the profile's silence bound."""
    timeout = (options.profile.timeouts if options.profile else Timeouts()).peer_seconds
    watch, unwatched = peers.start(world, [r["host"] for r in ranks], timeout,
                                   lambda lost: _on_peer_lost(state, lost), dist.broadcast_value,
                                   dist.allgather_object)
    if unwatched:
        named = ", ".join(f"{rank} on {ranks[rank]['host']}" for rank in unwatched)
        _warn(world, f"warning: rank(s) {named} cannot reach rank 0 on a TCP port of its own (a firewall "
                     f"between the nodes?): if one dies or hangs, only the launcher will notice")
    return watch


def _on_peer_lost(state, lost):
    """In the rank watch's thread: a peer died, stopped, went silent or failed. Ends this process."""
    world = state.world
    if not world.is_root:
        # Rank 0 is gone (or stopped the job, which it reports itself): nothing left to wait for.
        if lost.kind != "abort":
            _write(sys.stderr, f"error (rank {world.rank}): {lost.describe()}; this rank stops")
        os._exit(1)
    if lost.kind == "failed":
        # Kept for the main thread or the signal watcher to name: the same error often strikes
        # every rank at once (a batch the ranks cannot split), and then rank 0 reports its own.
        return
    if not state.claim():
        return  # the main thread or the signal watcher is already closing the run, and will name it
    reason = lost.describe()
    _close_log(state, reason)
    state.watch.abort()
    _write(sys.stderr, f"error (rank 0): {reason}; the job is stopped")
    if lost.kind == "silent" and lost.host != world.host:
        _end_open_mpi_daemon()
    os._exit(1)


def _end_open_mpi_daemon():
    """Ends the Open MPI daemon that started this rank (mpirun itself, or its orted on this node).

    Once a host is cut off, mpirun's teardown waits for that host's daemon to confirm that its ranks
    are gone, over the dead link, until TCP gives up (about 15 minutes). Its ranks there end on their
    own (rank 0 went silent to them) and this host's ranks on rank 0's abort; a daemon that dies is
    what mpirun does not wait for. Under horovodrun's Gloo, srun or a single process the parent is
    not an Open MPI daemon and is left alone.
    """
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/comm") as handle:
            name = handle.read().strip()
    except OSError:
        return
    if name in ("mpirun", "mpiexec", "orterun", "orted", "prted", "prterun"):
        time.sleep(1.0)  # the abort reaches this host's other ranks first
        os.kill(parent, signal.SIGKILL)


def _close_log(state, reason):
    if state.log is not None:
        if state.started:
            state.log.run_stop(ABORTED, reason=reason)
        state.log.close()
    state.closed.set()


def _check_network(world, ranks, nccl_log, options):
    """Untimed, before run_start: the transport every rank's NCCL chose and a short allreduce probe.

    Runs where there is a network to learn about: GPU runs of more than one rank, any multi-host
    run, and whenever --require-rdma asks; a multi-host run also gets each host's link (links).
    Returns the env.json record (None when skipped).
    """
    nodes = len({r["host"] for r in ranks})
    if world.size == 1 or (world.device == "cpu" and nodes == 1 and not options.require_rdma):
        return None
    row = network.probe(dist.allreduce_ops(), world)
    mine = nccl_log.read(world.host, os.getpid()) if nccl_log else None
    transports = dist.allgather_object(mine, "nccl_transport")
    library = "nccl" if nccl_log else world.controller
    record, warnings = network.assess(transports, row, options.profile, nodes, library)
    for line in warnings:
        _warn(world, f"warning: {line}")
    if options.require_rdma:
        network.check_required(record, warnings)
    record["links"] = _check_links(world, ranks, options, nodes)
    return record


def _check_links(world, ranks, options, nodes):
    """Each host's link: the launcher's verdict when it probed them, else measured here across hosts."""
    verdict = linkprobe.from_environment(os.environ)
    if verdict is not None or nodes == 1:
        return verdict
    expected = options.profile.expected_link_gbits if options.profile is not None else None
    record, lines = linkprobe_by_ranks.probe(world, ranks, dist.allgather_object, expected)
    for line in lines:
        _warn(world, f"warning: link probe: {line}")
    if options.require_links:
        linkprobe_by_ranks.check_required(lines)
    return record


def _warn(world, line):
    if world.is_root:
        _write(sys.stderr, line)


def gradient_record(model, fp16_allreduce):
    """What one step allreduces: the trained model's own size, for the report's projection.

    One gradient per trainable value; fp16 compression puts 2 bytes of each on the wire, otherwise
    a gradient is as wide as its variable (float32 also under mixed precision).
    """
    variables = model.trainable_variables
    parameters = sum(int(v.shape.num_elements()) for v in variables)
    wire = sum(int(v.shape.num_elements()) * (2 if fp16_allreduce else v.dtype.size) for v in variables)
    return {"trainable_parameters": parameters, "allreduce_dtype": "float16" if fp16_allreduce else "float32",
            "gradient_bytes": wire}


def _summary(spec, job, world, outcome, per_rank, seed, wall_seconds):
    ranks = [{"rank": rank, **timing} for rank, timing in enumerate(per_rank)]
    total = sum(r.get("samples_per_second", 0.0) for r in ranks)
    return {
        "benchmark": job.benchmark,
        "status": outcome.status,
        "accuracy": outcome.accuracy,
        "target_accuracy": job.target_accuracy,
        "evals": outcome.evals,
        "steps": outcome.steps,
        "time_to_train_minutes": outcome.train_seconds / 60,
        "wall_seconds": wall_seconds,
        "world_size": world.size,
        "global_batch_size": job.global_batch_size,
        "local_batch_size": job.local_batch_size,
        "samples_per_second_total": total,
        "samples_per_second_per_rank": total / world.size,
        "ranks": ranks,
        "weights_in_sync": len({r["weights_digest"] for r in ranks}) == 1,
        "division": job.division.name,
        "seed": seed,
        "distribution": world.distribution,
        "loss_curve": outcome.loss_curve,
    }


def _abort(spec, state, err):
    """Closes the log as aborted, tells the user in one line and frees the ranks waiting on this one."""
    world, watch = state.world, state.watch
    rank = world.rank if world else startup.env_rank()  # before the backend joined: the launcher's
    if not state.claim():
        # The rank watch or the signal watcher is closing the run and ends the process in a moment.
        time.sleep(PEER_GRACE_SECONDS)
        return 1
    shared_verdict = getattr(err, "on_every_rank", False)
    if shared_verdict and world is not None and not world.is_root:
        # Every rank reached this verdict at the same point; rank 0 says it and closes the log. This
        # rank waits for it to end its side first, since this exit makes the launcher signal it.
        state.closed.set()
        dist.shutdown()
        if watch:
            watch.done()
            watch.await_ends(VERDICT_WAIT_SECONDS)
        else:
            time.sleep(VERDICT_GRACE_SECONDS)
        return 1
    caused_elsewhere = isinstance(err, _PeerFailed) or dist.failed_in_a_peer(err)
    # Rank 0 sees only its backend's error; the rank watch knows which rank failed, if it has heard.
    cause = watch.cause(wait=1.0) if caused_elsewhere and watch and world.is_root else None
    if caused_elsewhere:
        blamed = None if cause else _blamed_by_backend(state, err)
        message = (f"stopped because {cause.describe()}" if cause else
                   f"stopped because {blamed}" if blamed else "stopped because another rank failed")
    else:
        message = _one_line(state.job, err)
    _close_log(state, message)
    if not shared_verdict:
        # Not for a verdict every rank reached (a NaN loss): its input is healthy, and freeing it took
        # 6.6 s on a loaded two-core machine while the other ranks waited for this rank's line.
        _stop_input_threads(err)
    if caused_elsewhere:
        _write(sys.stderr, f"rank {rank}: {message}")
    elif isinstance(err, KeyboardInterrupt):
        _write(sys.stderr, f"rank {rank}: interrupted")
    else:
        if _is_unexpected(state.job, err):
            message += _save_traceback(state.run_dir, rank, err)
        _write(sys.stderr, f"error (rank {rank}): {message}")
    _tell_peers(watch, world, err, message, caused_elsewhere)
    if world is not None:
        dist.shutdown()
        if not world.is_root and not caused_elsewhere:
            # Give rank 0 time to write run_stop before the launcher tears the job down (it tells this
            # rank to end as soon as it has).
            time.sleep(PEER_GRACE_SECONDS if state.started else 3)
    return 1


def _blamed_by_backend(state, err):
    """The rank the backend's own error names (TensorFlow's coordination service names a task that
    stopped answering before the rank watch's silence bound has passed), with its host; or None."""
    rank = dist.rank_named_in(err)
    hosts = [r["host"] for r in state.ranks]
    if rank is None:
        return None
    host = f" on host {hosts[rank]}" if rank < len(hosts) else ""
    backend = state.world.distribution
    return f"rank {rank}{host} stopped answering ({type(err).__name__} from the {backend} backend)"


def _tell_peers(watch, world, err, message, caused_elsewhere):
    if watch is None:
        return
    if world.is_root:
        # Not `abort`: a rank that ended at once would make the launcher kill this one before its
        # error line is out. The others fail at their next collective, or the launcher ends them.
        watch.done()
    elif isinstance(err, KeyboardInterrupt):
        watch.stopped("SIGINT")
    elif caused_elsewhere:
        watch.done()
    else:
        watch.failed(message)


def _on_signal(state, signum):
    """The launcher is ending the job (or Ctrl-C): rank 0 closes the log as aborted, in this thread."""
    world, name, watch = state.world, signals.name(signum), state.watch
    if not state.claim():
        # The main thread or the rank watch is closing the log: end once it has.
        state.closed.wait(PEER_GRACE_SECONDS)
        return
    if world is not None and not world.is_root:
        if watch:
            watch.stopped(name)
        return
    # A launcher stops every rank once one has died; the rank watch has usually heard of it first.
    # No waiting for it: the launcher's SIGKILL follows (Open MPI: timeouts.kill_grace_seconds).
    cause = watch.cause() if watch else None
    _close_log(state, f"stopped by {name} {_signal_source(world, cause)}")
    if watch:
        watch.done()  # every rank has the signal too
    closed = " (run_stop aborted written)" if state.started else ""
    _write(sys.stderr, f"rank {world.rank if world else 0}: stopped by {name}{closed}")


def _signal_source(world, cause):
    """Where a signal that ends the job came from, and why, as far as this rank can tell."""
    who = "Slurm" if world is not None and world.launcher == "srun" else "the launcher"
    if cause:
        return f"from {who} after {cause.describe()}"
    if who == "Slurm":
        # slurmstepd signals every task at once when the job is cancelled, reaches its time limit or is
        # preempted; a rank that had failed would have told the rank watch first.
        return "from Slurm (scancel, the time limit or a preemption; no rank had reported a failure)"
    return "from the launcher (another rank may have failed: see its error)"


def _is_unexpected(job, err):
    """A bug rather than bad input: neither a user error nor one the workload can explain."""
    explained = job is not None and job.describe_error is not None and job.describe_error(err)
    return not isinstance(err, USER_ERRORS) and not explained


def _save_traceback(run_dir, rank, err):
    """Keeps the full traceback of an unexpected error beside the log; returns a pointer to it."""
    text = "".join(traceback.format_exception(err))
    if run_dir and os.path.isdir(run_dir):
        path = os.path.join(run_dir, f"traceback-rank{rank}.txt")
        with open(path, "w") as handle:
            handle.write(text)
        return f" (traceback: {path})"
    _write(sys.stderr, text.rstrip("\n"))
    return ""


def _stop_input_threads(err):
    """Frees the data iterators held by the failed frames, so their threads stop before the error line.

    Left running, tf.data's threads go on decoding (the bad record again, on the next repeat) and
    libjpeg's warnings land after the one-line error.
    """
    while err is not None:
        traceback.clear_frames(err.__traceback__)
        err = err.__context__
    gc.collect()


def _one_line(job, err):
    described = job.describe_error(err) if job and job.describe_error else None
    if described:
        return described
    if getattr(err, "on_every_rank", False):
        return str(err)  # already one line that names its cause
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def division_of_run(division, config, cache_cleared):
    """The workload's verdict plus the rules every benchmark shares."""
    reasons, statements = list(division.reasons), list(division.statements)
    if config.resume_from:
        reasons.append(f"resumed from {config.resume_from} (closed: one uninterrupted run)")
    if config.poison_weights_at_step:
        reasons.append("weights poisoned with NaN for a test (poison_weights_at_step)")
    if not cache_cleared:
        # The rules (Data State at Start of Run): flush the cache or restart the system before the run.
        why = ("clear_cache is false" if not config.clear_cache
               else "a host could not drop its page cache (not root, or a container)")
        if config.system_restarted:
            statements.append(f"cache_clear false ({why}); the operator states that every node was "
                              f"restarted before the run (system_restarted=true)")
        else:
            reasons.append(f"cache_clear false: {why} (closed: flush the page cache or restart every node "
                           f"before the run; set system_restarted=true when they were restarted)")
    return Division("open" if reasons else "closed", tuple(reasons), tuple(statements))


def draw_seed():
    return random.SystemRandom().randrange(1, 2**31 - 1)


def _on_root(world, fn, name):
    """Runs fn on rank 0 and shares its result, or its error, with every rank."""
    result, error = None, None
    if world.is_root:
        try:
            result = fn()
        except USER_ERRORS as err:
            error = str(err)
    error = dist.broadcast_value(error, f"{name}_error")
    if error:
        raise rundir.RunDirError(error) if world.is_root else _PeerFailed(error)
    return result


class _PeerFailed(RuntimeError):
    """Rank 0 failed a shared decision; the other ranks stop quietly."""


def _clear_page_cache_on_every_host(world):
    """Drops the page cache once per host (by its local rank 0); True only if every host managed it."""
    attempt = _clear_page_cache() if world.local_rank == 0 else None
    return cleared_on_every_host(dist.allgather_object(attempt, "cache_clear"))


def cleared_on_every_host(attempts):
    """attempts: one entry per rank, True/False from each host's local rank 0 and None from the rest."""
    made = [ok for ok in attempts if ok is not None]
    return bool(made) and all(made)


def _clear_page_cache():
    """Drops the OS page cache when allowed (root on bare metal); False in most containers."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return True
    except OSError:
        return False


def _write(stream, line):
    # One write per line: print() writes the text and the newline separately, and mpirun's
    # --tag-output (used by horovodrun) then tags the lone newline as a line of its own.
    stream.write(line + "\n")
    stream.flush()


def _say(message):
    _write(sys.stdout, message)


def _silent(message):
    pass
