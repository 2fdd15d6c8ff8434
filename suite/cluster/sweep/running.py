"""Runs a planned sweep: every launch under its guardian, the manifest kept, a re-run resuming."""
import json
import os
import shutil
import signal
import sys
import time

from suite.cluster import guardian, launch, preflight, preflight_links
from suite.cluster.sweep import rates, rcp_check, submission
from suite.cluster.sweep.planning import (SweepError, allreduce_command, allreduce_json, model_command,
                                          result_path, run_dir, too_few_runs, with_record)
from suite.common import linkprobe, results, runfiles

MANIFEST = "sweep.json"


class RunFailed(SweepError):
    """A run or the allreduce benchmark ended badly; the sweep stops (exit 1) and a re-run retries it."""


# A launch that ended because the sweep was told to stop: Ctrl-C, SIGTERM or SIGHUP (128 + number).
INTERRUPTED = (128 + signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGHUP)


class Interrupted(Exception):
    """Ctrl-C during a run: the manifest says so and a re-run resumes."""


def load_manifest(sweep):
    """The manifest of an earlier attempt with the same plan, or a new one; refuses other folders."""
    path = sweep.path(MANIFEST)
    if not os.path.exists(path):
        if os.path.isdir(sweep.out) and os.listdir(sweep.out):
            raise SweepError(f"--out {sweep.out} is not empty and holds no {MANIFEST}; choose a new folder")
        return {"tool": "suite.sweep", "created": _now(), "plan": sweep.plan(), "runs": {}, "allreduce": {}}
    try:
        with open(path) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError) as err:
        raise SweepError(f"{path}: cannot read the manifest ({err})") from None
    old = manifest.get("plan", {})
    for scale in old.get("scales") or []:
        # A sweep planned before scales recorded their backend ran them all under Horovod.
        if isinstance(scale, dict):
            scale.setdefault("distribution", "horovod")
    for key, value in sweep.plan().items():
        if old.get(key) != value:
            raise SweepError(f"{path}: this folder holds a sweep with another {key} ({old.get(key)!r}, now "
                             f"{value!r}); re-run with the same arguments, or choose another --out")
    return manifest


def save(sweep, manifest):
    os.makedirs(sweep.out, exist_ok=True)
    manifest["updated"] = _now()
    runfiles.write_json(sweep.path(MANIFEST), manifest)


def execute(sweep, say):
    """Runs what is not done yet; returns 0, or raises SweepError / Interrupted."""
    manifest = load_manifest(sweep)
    _warn_too_few_runs(sweep)
    for scale in sweep.scales:
        for line in rcp_check.scale_lines(sweep, scale):
            say(line)
    _remove_stale_temp_files(sweep, say)
    save(sweep, manifest)
    for scale in sweep.scales:
        _check_hosts(sweep, scale)
    if sweep.measure_rates:
        _measure_rates(sweep, say)
    total, done = len(sweep.scales) * sweep.runs, 0
    for scale in sweep.scales:
        os.makedirs(sweep.results_dir(scale), exist_ok=True)
        if sweep.allreduce_args is not None:
            _allreduce(sweep, scale, manifest, say)
        for index in range(sweep.runs):
            done += 1
            _one_run(sweep, scale, index, manifest, say, f"[{done}/{total}]")
        submission.write_system(sweep, scale)
    submission.write_implementation_readme(sweep)
    say(f"done: {total} runs in {sweep.path(sweep.submitter)}; "
        f"report: python -m suite.cluster.report {sweep.out}")
    _warn_too_few_runs(sweep)
    return 0


def _warn_too_few_runs(sweep):
    warning = too_few_runs(sweep.benchmark, sweep.runs)
    if warning:
        print(warning, file=sys.stderr, flush=True)


def _remove_stale_temp_files(sweep, say):
    """The temporary files of writes cut off by a kill: the package checker would trip on them."""
    if os.path.isdir(sweep.out):
        for path in runfiles.remove_stale_temp_files(sweep.out):
            say(f"removed {os.path.relpath(path, sweep.out)}, left by a write that was cut off")


def _check_hosts(sweep, scale):
    """The launcher's pre-flight of every host of a multi-host scale (under srun, the allocation and the
    MPI plugin), before any run of the sweep starts."""
    args = scale.launch_args
    plan = launch.plan_launch(args, model_command(sweep, scale, 0))
    # Under srun, a scale larger than the allocation or an MPI plugin the ranks cannot use would
    # otherwise fail only when its turn comes, after every smaller scale has run.
    problem = launch.srun_problem(plan) if plan.launcher == "srun" else None
    if problem:
        raise SweepError(f"scale {scale.system}: {problem}")
    if not launch.needs_host_check(args, plan):
        return
    _, problems = preflight.check_hosts(plan.hosts, python=args.python, profile=plan.profile)
    if problems:
        more = f" (and {len(problems) - 1} more: python -m suite.cluster.launch --check-hosts lists them)" \
            if len(problems) > 1 else ""
        raise SweepError(f"scale {scale.system}: {problems[0]}{more}")
    if len(plan.hosts) > 1:
        links, lines = preflight_links.check_links(plan.hosts, python=args.python, profile=plan.profile)
        for line in lines:
            print(f"warning: link probe, scale {scale.system}: {line}", file=sys.stderr, flush=True)
        scale.link_env = linkprobe.environment_entry(links)


def _one_run(sweep, scale, index, manifest, say, counter):
    key = f"{scale.system}/{index}"
    result, directory = result_path(sweep, scale, index), run_dir(sweep, scale, index)
    record = manifest["runs"].setdefault(key, {"system": scale.system, "index": index, "attempts": 0})
    record.update(result=os.path.relpath(result, sweep.out), run_dir=os.path.relpath(directory, sweep.out))
    if record.get("status") == "running":
        _stop_leftover(record, directory, _rank_pids(directory), say, f"{counter} {scale.system} run {index}")
    if results.has_run_stop(result):
        record["status"] = "done"
        save(sweep, manifest)
        say(f"{counter} {scale.system} run {index}: done earlier, skipped")
        return
    if os.path.exists(result):
        # A result without run_stop is no result; keep it beside the runs, out of the results folder.
        _set_aside(result, os.path.join(sweep.runs_dir(scale), f"result_{index}.incomplete.txt"))
    if _finished(directory):
        say(f"{counter} {scale.system} run {index}: finished earlier, result copied now")
    else:
        if os.path.exists(directory):
            _set_aside(directory, directory + ".attempt")
        _launch_run(sweep, scale, index, record, manifest, say, counter)
    submission.copy_result(os.path.join(directory, runfiles.LOG_NAME), result)
    record["status"] = "done"
    save(sweep, manifest)


def _stop_leftover(record, marker, ranks, say, what):
    """A launch that an earlier sweep recorded as running may still be running (that sweep was killed
    too hard for its guardian to act, or its guardian is still stopping it): it is stopped before its
    directory is set aside, so that no two jobs write there or share the CPUs."""
    found = guardian.stop_leftover(record.get("job") or {}, marker, ranks)
    if found:
        say(f"{what}: stopped {found} process(es) an earlier sweep left running")
    record.pop("job", None)


def _rank_pids(directory):
    env = runfiles.read_json(os.path.join(directory, "env.json")) or {}
    return [rank["pid"] for rank in env.get("ranks", []) if isinstance(rank, dict) and rank.get("pid")]


def _finished(directory):
    """A run that ended normally: its log has run_stop and rank 0 wrote summary.json after it."""
    return (results.has_run_stop(os.path.join(directory, runfiles.LOG_NAME))
            and os.path.exists(os.path.join(directory, "summary.json")))


def _launch_run(sweep, scale, index, record, manifest, say, counter):
    directory = run_dir(sweep, scale, index)
    os.makedirs(directory)
    plan = launch.plan_launch(with_record(scale.launch_args, directory), model_command(sweep, scale, index))
    plan.env.update(scale.link_env)
    record.update(status="running", attempts=record["attempts"] + 1, started=_now(), exit_code=None)
    save(sweep, manifest)
    launch.record(plan, directory, dry_run=False)
    started = time.time()
    code = run_logged(plan, os.path.join(directory, "output.txt"), sweep.verbose,
                      on_job=lambda job: _save_job(sweep, manifest, record, job))
    seconds = round(time.time() - started, 1)
    launch.record(plan, directory, False, code, seconds)
    record.pop("job", None)
    record.update(exit_code=code, seconds=seconds, finished=_now())
    if code in INTERRUPTED:
        record["status"] = "interrupted"
        save(sweep, manifest)
        raise Interrupted()
    if code != 0 or not _finished(directory):
        record["status"] = "failed"
        save(sweep, manifest)
        raise RunFailed(f"{scale.system} run {index} failed (exit {code}); its output: "
                        f"{os.path.join(directory, 'output.txt')}; re-run the same command to retry")
    log = results.read_run(os.path.join(directory, runfiles.LOG_NAME), sweep.benchmark)
    record.update(run_stop_status=log.status, time_to_train_minutes=log.minutes)
    say(f"{counter} {scale.system} run {index}: {log.status}, {log.minutes:.3f} min from run_start to "
        f"run_stop ({seconds:.0f} s with start-up)")


def _save_job(sweep, manifest, record, job):
    # The pids a resume needs to stop this launch, should the sweep die without its guardian.
    record["job"] = job
    save(sweep, manifest)


def _allreduce(sweep, scale, manifest, say):
    path = allreduce_json(sweep, scale)
    entry = manifest["allreduce"].setdefault(scale.system, {"json": os.path.relpath(path, sweep.out)})
    if entry.get("status") == "running":
        _stop_leftover(entry, path, (), say, f"{scale.system} allreduce")
    if os.path.exists(path):
        entry["status"] = "done"
        say(f"{scale.system} allreduce: done earlier, skipped")
        return
    os.makedirs(sweep.runs_dir(scale), exist_ok=True)
    plan = launch.plan_launch(scale.launch_args, allreduce_command(sweep, scale))
    entry.update(status="running", exit_code=None)
    save(sweep, manifest)
    code = run_logged(plan, os.path.join(sweep.runs_dir(scale), "allreduce-output.txt"), sweep.verbose,
                      on_job=lambda job: _save_job(sweep, manifest, entry, job))
    entry.pop("job", None)
    entry.update(exit_code=code, finished=_now(), status=_status(code, os.path.exists(path)))
    save(sweep, manifest)
    if code in INTERRUPTED:
        raise Interrupted()
    if code != 0 or not os.path.exists(path):
        raise RunFailed(f"{scale.system}: the allreduce benchmark failed (exit {code}); its output: "
                        f"{os.path.join(sweep.runs_dir(scale), 'allreduce-output.txt')}")
    _allreduce_verdict(path, scale, say)


def _measure_rates(sweep, say):
    """--throughput at each per-GPU batch on the smallest scale; rates.json lists the points. A point
    measured by an earlier attempt of this sweep is kept."""
    scale, points = rates.smallest(sweep), []
    for batch in rates.per_gpu_batches(sweep):
        directory = rates.rate_dir(sweep, batch)
        found = os.path.join(directory, "throughput.json")
        if not os.path.exists(found):
            os.makedirs(directory, exist_ok=True)
            plan = launch.plan_launch(with_record(scale.launch_args, directory),
                                      rates.rate_command(sweep, batch))
            code = run_logged(plan, os.path.join(directory, "output.txt"), sweep.verbose)
            if code in INTERRUPTED:
                raise Interrupted()
            if code != 0 or not os.path.exists(found):
                raise RunFailed(f"{scale.system}: the throughput run at per-GPU batch {batch} failed (exit "
                                f"{code}); its output: {os.path.join(directory, 'output.txt')}")
        points.append(rates.point(sweep, batch, runfiles.read_json(found)))
        say(f"{scale.system} per-GPU rate at batch {batch}: {points[-1]['samples_per_second_per_gpu']:,.1f} "
            f"samples/s per GPU")
    note = "measured with --throughput on the smallest scale, with its communication"
    runfiles.write_json(sweep.path(rates.RATES_JSON), {"note": note, "points": points})


def _status(code, finished):
    if code in INTERRUPTED:
        return "interrupted"
    return "done" if code == 0 and finished else "failed"


def _allreduce_verdict(path, scale, say):
    from suite.common.busbw import banner
    data = runfiles.read_json(path) or {}
    if data.get("warning"):
        # The run's own banner went to its output file; this one reaches the person at the terminal.
        print(banner(f"{scale.system}:\n{data['warning']}"), file=sys.stderr, flush=True)
    status = (data.get("expectation") or {}).get("status") or data.get("expected_busbw_source") \
        or "no expected bandwidth"
    say(f"{scale.system} allreduce: peak busbw {data.get('peak_busbw_gbps', 0):.3g} GB/s ({status})")


def run_logged(plan, output, verbose, on_job=None):
    """Runs the launch plan under a guardian, its output in a file (and on stdout when verbose); returns
    the exit code.

    The guardian stops the launch should this process die, even of SIGKILL. Ctrl-C, SIGTERM or SIGHUP
    to the sweep is passed on (as SIGTERM) to the guardian, which passes it on to the launcher's process
    group, whose ranks close their logs; it gives 128 + the signal's number: the run is then redone on resume.
    on_job(job) gets the pids to record: {"guardian": pid}, then with "launcher_group" too.
    """
    if shutil.which(plan.command[0]) is None:
        raise SweepError(f"{plan.command[0]} not found on PATH")
    process = guardian.start(plan.command, {**os.environ, **plan.env}, output, tee=verbose)
    group = None
    with launch.forwarding_signals(process) as received:
        try:
            job = {"guardian": process.pid}
            if on_job:
                on_job(job)
            group = guardian.launcher_group(process)
            if on_job and group:
                on_job({**job, "launcher_group": group})
            for line in process.stdout:
                sys.stdout.write(line)  # only with --tee, i.e. verbose
            process.wait()
        except BaseException:
            # Whatever stops this side (a full disk while saving the manifest) stops the launch too.
            guardian.stop(process, group)
            raise
    if received:
        return 128 + received[0]
    code = process.returncode
    return 128 - code if code < 0 else code


def _set_aside(path, base):
    """Renames an unfinished attempt out of the way, keeping earlier ones: base, base.2, base.3, ..."""
    target, n = base, 1
    while os.path.exists(target):
        n += 1
        target = f"{base}.{n}"
    os.rename(path, target)


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
