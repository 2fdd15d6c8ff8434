"""suite.cluster.sweep: dry runs per scale, bad input one by one, a local sweep through MLPerf's tools."""
import argparse
import contextlib
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

from helpers.jobs import processes_of, started, wait_for
from helpers.launch_cli import OCI_ENV, node_hostfile
from helpers.running import REPO, run, subprocess_env
from helpers.runs import read_json, read_log
from helpers.sweep import ASK_FOR_TIMELINE, STOP_BOUND_SECONDS, SUBMITTER, temp_files
from suite.cluster import guardian, hostfile
from suite.cluster.sweep import planning, submission
from suite.common import profiles

OCI = ["--profile", "oci-bm-gpu-gm4-8", "--network-interface", "eth0"]
CLOSED = "8=closed_8xA100_gbs3264,16=closed_16xA100_gbs3264,32=closed_32xA100_gbs3264"
LOCAL = ["--profile", "local-cpu", "--hostfile", "hostfiles/localhost", "--scales", "1,2",
         "--preset", "sweep_cpu"]
SYSTEMS = ("local-cpu_n1_np1", "local-cpu_n1_np2")
MODEL_ARGS = ["--data-dir", "/data"]
ENV_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def sweep_cli(*args, timeout=60, **env):
    return run([sys.executable, "-m", "suite.cluster.sweep", *args], timeout=timeout, **env)


def dry_run(*args, notes=None):
    """[(header, [command argv], {variable: value})] per scale, from --dry-run's output; notes, a list,
    gets each scale's comment lines after its header (the RCP check) as (header, [lines])."""
    result = sweep_cli("--dry-run", *args)
    assert result.returncode == 0, result.stderr
    blocks = []
    for line in result.stdout.splitlines():
        if line.startswith("# scale"):
            blocks.append((line, [], {}))
            if notes is not None:
                notes.append((line, []))
        elif line.startswith("# "):
            if notes is not None:
                notes[-1][1].append(line[2:])
        elif ENV_LINE.match(line):
            key, value = line.split("=", 1)
            blocks[-1][2][key] = value
        else:
            blocks[-1][1].append(shlex.split(line))
    return blocks


def flag(command, name):
    return command[command.index(name) + 1]


def one_line_error(result, *culprits, code=2):
    assert result.returncode == code, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for culprit in culprits:
        assert culprit in lines[0], lines[0]
    return lines[0]


# ---- dry runs ----

def test_dry_run_localhost_lists_every_run():
    blocks = dry_run("--out", "/tmp/never-written", *LOCAL, "--", "models.resnet50", "--data-dir", "/data")
    assert [len(commands) for _, commands, _ in blocks] == [5, 5]  # resnet: 5 runs, as MLPerf asks
    for (header, commands, env), np, system in zip(blocks, (1, 2), SYSTEMS):
        assert f"system {system}, {np} processes on 1 host(s), preset sweep_cpu, 5 runs" in header
        for index, command in enumerate(commands):
            assert command[:5] == ["horovodrun", "-np", str(np), "-H", "localhost:2"]
            assert command[command.index("-m") + 1] == "models.resnet50"
            assert flag(command, "--data-dir") == "/data"
            assert flag(command, "--preset") == "sweep_cpu"
            assert flag(command, "--run-dir") == f"/tmp/never-written/runs/{system}/run_{index}"
            sets = [command[i + 1] for i, arg in enumerate(command) if arg == "--set"]
            assert sets == [f"submission_org={SUBMITTER}", f"submission_platform={system}",
                            "submission_status=onprem"]
        # local-cpu's one variable, and the profile the launcher applied, for the ranks to record.
        local = profiles.load("local-cpu")
        assert env == {"OMPI_MCA_mpi_yield_when_idle": "1", "HOROVOD_CYCLE_TIME": "20.0",
                       **local.timeouts.env(), "SUITE_PROFILE": local.path,
                       "SUITE_PROFILE_RESOLVED": "1"}
    assert not os.path.exists("/tmp/never-written")


def test_dry_run_for_1_2_4_nodes_under_the_oci_profile(tmp_path):
    files = ",".join(node_hostfile(tmp_path, n) for n in (1, 2, 4))
    blocks = dry_run("--out", str(tmp_path / "out"), "--hostfiles", files, "--preset-per-scale", CLOSED,
                     *OCI, "--skip-host-check", "--allreduce", "--", "models.resnet50",
                     "--data-dir", "/data/imagenet")
    assert len(blocks) == 3
    for (header, commands, env), nodes in zip(blocks, (1, 2, 4)):
        np, system = 8 * nodes, f"oci-bm-gpu-gm4-8_n{nodes}_np{8 * nodes}"
        assert f"system {system}, {np} processes on {nodes} host(s)" in header
        assert f"preset closed_{np}xA100_gbs3264, 5 runs" in header
        allreduce, runs = commands[0], commands[1:]
        assert len(runs) == 5
        assert allreduce[allreduce.index("-m") + 1] == "suite.train.allreduce"
        # The launcher hands the allreduce benchmark its profile, for the expected bus bandwidth.
        assert flag(allreduce, "--profile") == profiles.load("oci-bm-gpu-gm4-8").path
        for command in commands:
            assert command[0] == "horovodrun" and flag(command, "-np") == str(np)
            assert flag(command, "-H") == ",".join(f"node-{c}:8" for c in "abcd"[:nodes])
            assert flag(command, "--network-interfaces") == "eth0"
        for index, command in enumerate(runs):
            assert flag(command, "--preset") == f"closed_{np}xA100_gbs3264"
            assert flag(command, "--run-dir") == str(tmp_path / "out" / "runs" / system / f"run_{index}")
        for key, value in OCI_ENV.items():
            assert env[key] == value, key
        assert env["OMPI_MCA_btl_tcp_if_include"] == "eth0"
    assert not (tmp_path / "out").exists()


def test_the_dry_run_measures_each_per_gpu_batch_on_the_smallest_scale_first(tmp_path):
    # One global batch on 8, 16 and 32 GPUs: 408, 204 and 102 per GPU, each measured on the 8 first.
    files = ",".join(node_hostfile(tmp_path, n) for n in (1, 2, 4))
    result = sweep_cli("--dry-run", "--measure-rates", "--out", str(tmp_path / "out"), "--hostfiles", files,
                       "--preset-per-scale", CLOSED, *OCI, "--skip-host-check", "--", "models.resnet50",
                       "--data-dir", "/d")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# per-GPU rates first, on oci-bm-gpu-gm4-8_n1_np8: --throughput at per-GPU "
                               "batch 102, 204, 408")
    first_scale = next(i for i, line in enumerate(lines) if line.startswith("# scale 1/3"))
    commands = [shlex.split(line) for line in lines[1:first_scale]]
    assert len(commands) == 3
    for command, batch in zip(commands, (102, 204, 408)):
        assert flag(command, "-np") == "8" and "--throughput" in command
        sets = [command[i + 1] for i, arg in enumerate(command) if arg == "--set"]
        assert sets[-1] == f"global_batch_size={batch * 8}"
        assert flag(command, "--run-dir") == str(tmp_path / "out" / "rates" / f"per_gpu_batch_{batch}")


def test_dry_run_with_mpirun_passes_the_launcher_flags(tmp_path):
    blocks = dry_run("--out", str(tmp_path / "o"), "--hostfiles", node_hostfile(tmp_path, 2), "--preset",
                     "closed_16xA100_gbs3264", *OCI, "--skip-host-check", "--launcher", "mpirun",
                     "--runs", "2", "--", "models.resnet50", "--data-dir", "/d")
    (_, commands, env), = blocks
    assert len(commands) == 2 and all(c[0] == "mpirun" and flag(c, "-np") == "16" for c in commands)
    exported = {c[i + 1] for c in commands for i, arg in enumerate(c) if arg == "-x"}
    assert set(env) <= exported


def test_dry_run_runs_every_scale_under_each_distribution(tmp_path):
    """Each scale twice, horovod then tf, each a system of its own with every run's backend and the step
    split asked for; one backend given keeps its name unsuffixed only when it is horovod alone."""
    out = tmp_path / "out"
    blocks = dry_run("--out", str(out), *LOCAL, "--launcher", "mpirun", "--runs", "2",
                     "--distributions", "horovod,tf", "--", "models.resnet50", "--data-dir", "/data")
    expected = [(np, backend) for np in (1, 2) for backend in ("horovod", "tf")]
    assert len(blocks) == len(expected)
    for (header, commands, _), (np, backend) in zip(blocks, expected):
        system = f"local-cpu_n1_np{np}_{backend}"
        assert f"system {system}, {np} processes" in header and f"distribution {backend}" in header
        assert len(commands) == 2
        for index, command in enumerate(commands):
            assert command[0] == "mpirun" and flag(command, "-np") == str(np)
            assert flag(command, "--distribution") == backend
            assert flag(command, "--run-dir") == str(out / "runs" / system / f"run_{index}")
            sets = [command[i + 1] for i, arg in enumerate(command) if arg == "--set"]
            assert f"submission_platform={system}" in sets
            assert f"step_split_steps={planning.STEP_SPLIT_STEPS}" in sets
    assert not out.exists()


def plan_of(*args, model=MODEL_ARGS):
    return planning.plan_sweep(*planning.parse([*args, "--", "models.resnet50", *model]))


def test_the_step_split_is_the_users_when_given(tmp_path):
    two = ["--out", str(tmp_path / "o"), *LOCAL, "--launcher", "mpirun", "--distributions", "tf,horovod"]

    def step_sets(sweep):
        command = planning.model_command(sweep, sweep.scales[0], 0)
        return [command[i + 1] for i, arg in enumerate(command)
                if arg == "--set" and command[i + 1].startswith("step_split_steps=")]

    assert step_sets(plan_of(*two, "--step-split-steps", "3")) == ["step_split_steps=3"]
    assert step_sets(plan_of(*two, model=[*MODEL_ARGS, "--set", "step_split_steps=7"])) == \
        ["step_split_steps=7"]
    assert step_sets(plan_of(*two, "--step-split-steps", "0")) == []
    with pytest.raises(planning.SweepError, match="give one of them"):
        plan_of(*two, "--step-split-steps", "3", model=[*MODEL_ARGS, "--set", "step_split_steps=7"])
    # One backend: nothing to compare, so no step split unless asked for; names and commands as before.
    alone = plan_of("--out", str(tmp_path / "o"), *LOCAL)
    assert step_sets(alone) == [] and [s.system for s in alone.scales] == list(SYSTEMS)
    assert flag(planning.model_command(alone, alone.scales[0], 0), "--distribution") == "horovod"
    tf = plan_of("--out", str(tmp_path / "o"), *LOCAL, "--launcher", "srun", "--distributions", "tf")
    assert [s.system for s in tf.scales] == [f"{name}_tf" for name in SYSTEMS]
    env = {"versions": {"tensorflow": "2.18.1", "horovod": "0.28.1"}, "device": "cpu"}
    assert submission.system_description(tf, tf.scales[0], [], env)["framework"] == \
        "TensorFlow 2.18.1, its own collectives (MultiWorkerMirroredStrategy)"


def test_a_two_backend_sweep_resumes_and_refuses_other_backends(tmp_path):
    from suite.cluster.sweep import running
    args = ["--out", str(tmp_path / "o"), *LOCAL, "--launcher", "mpirun", "--distributions", "horovod,tf"]
    sweep = plan_of(*args)
    running.save(sweep, running.load_manifest(sweep))
    assert running.load_manifest(plan_of(*args))["plan"] == sweep.plan()
    with pytest.raises(planning.SweepError, match="another scales"):
        running.load_manifest(plan_of(*args[:-1], "horovod"))
    # A folder of a sweep planned before scales recorded their backend resumes under the default.
    old = plan_of("--out", str(tmp_path / "old"), *LOCAL)
    manifest = running.load_manifest(old)
    for scale in manifest["plan"]["scales"]:
        del scale["distribution"]
    running.save(old, manifest)
    running.load_manifest(plan_of("--out", str(tmp_path / "old"), *LOCAL))


# ---- bad input, one by one: one line, exit 2, nothing written ----

MODEL = ["--", "models.resnet50", "--data-dir", "/data"]
BAD = {
    "tf_under_horovodrun": ([*LOCAL, "--distributions", "horovod,tf"],
                            ["--distributions horovod,tf", "--launcher mpirun"]),
    "unknown_distribution": ([*LOCAL, "--distributions", "horovod,nccl"], ["'nccl'"]),
    "unknown_profile": (["--profile", "oci-gm4", "--hostfile", "hostfiles/localhost", "--scales", "1",
                         "--preset", "sweep_cpu"], ["unknown profile 'oci-gm4'"]),
    "np_beyond_slots": ([*LOCAL[:4], "--scales", "1,3", "--preset", "sweep_cpu"],
                        ["-np 3 is more than the 2 slots", "hostfiles/localhost"]),
    "preset_missing_for_a_scale": ([*LOCAL[:6], "--preset-per-scale", "1=sweep_cpu"],
                                   ["no preset for 2 processes"]),
    "unknown_preset": ([*LOCAL[:6], "--preset", "sweep_gpu"], ["unknown preset 'sweep_gpu'"]),
    "both_presets": ([*LOCAL, "--preset-per-scale", "1=sweep_cpu"], ["exactly one"]),
    "bad_scale": ([*LOCAL[:4], "--scales", "1,two", "--preset", "sweep_cpu"], ["'two'"]),
    "np_flag": ([*LOCAL, "-np", "2"], ["-np is not a sweep flag"]),
    "hostfiles_and_scales": ([*LOCAL, "--hostfiles", "hostfiles/localhost"], ["either --hostfiles"]),
    "no_scales": (["--profile", "local-cpu", "--preset", "sweep_cpu"], ["give the scales"]),
    "placeholder_host": (["--profile", "local-cpu", "--hostfiles", "hostfiles/2node",
                          "--preset", "sweep_cpu"], ["hostfiles/2node:1", "placeholder"]),
    "profile_placeholder": (["--profile", "oci-bm-gpu-gm4-8", "--hostfile", "hostfiles/localhost", "--scales",
                             "1", "--preset", "sweep_cpu"], ["network_interface is a placeholder"]),
}
BAD_MODEL = {
    "run_dir_after_dashes": (["--run-dir", "x"], ["--run-dir after --"]),
    "preset_after_dashes": (["--preset=tiny_cpu"], ["--preset after --"]),
    "seed": (["--set", "seed=3"], ["--set seed=3", "own seed"]),
    "platform": (["--set=submission_platform=x"], ["submission_platform"]),
    "dry_run_after_dashes": (["--dry-run"], ["--dry-run belongs before the --"]),
    "distribution_after_dashes": (["--distribution=tf"], ["--distribution after --", "--distributions"]),
    "distribution_set": (["--set", "distribution=horovod"],
                         ["--set distribution=horovod", "--distributions"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_flags(case, tmp_path):
    args, culprits = BAD[case]
    one_line_error(sweep_cli("--out", str(tmp_path / "out"), *args, *MODEL), *culprits)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", sorted(BAD_MODEL))
def test_model_flags_the_sweep_owns(case, tmp_path):
    extra, culprits = BAD_MODEL[case]
    one_line_error(sweep_cli("--out", str(tmp_path / "out"), *LOCAL, *MODEL, *extra), *culprits)
    assert not (tmp_path / "out").exists()


def test_remote_nodes_need_a_system_description(tmp_path):
    files = node_hostfile(tmp_path, 2)
    base = ["--out", str(tmp_path / "out"), "--hostfiles", files, "--preset", "closed_16xA100_gbs3264", *OCI,
            "--skip-host-check"]
    one_line_error(sweep_cli(*base, *MODEL), "--system-info", "host_processor_model_name",
                   "accelerator_model_name")
    info = tmp_path / "info.yaml"
    info.write_text("host_processor_model_name: REPLACE-ME\n")
    one_line_error(sweep_cli(*base, "--system-info", str(info), *MODEL), str(info),
                   "host_processor_model_name")
    info.write_text("system_name: mine\n")
    one_line_error(sweep_cli(*base, "--system-info", str(info), *MODEL), "'system_name'")
    info.write_text("host_processor_model_name: EPYC\n")
    one_line_error(sweep_cli(*base, "--system-info", str(info), *MODEL), "lacks", "host_memory_capacity")
    assert not (tmp_path / "out").exists()


def test_the_shipped_system_info_must_be_filled_in(tmp_path):
    shipped = os.path.join(REPO, "docs", "system-info", "oci-bm-gpu-gm4-8.yaml")
    base = ["--out", str(tmp_path / "out"), "--hostfiles", node_hostfile(tmp_path, 2), "--preset",
            "closed_16xA100_gbs3264", *OCI, "--skip-host-check"]
    one_line_error(sweep_cli(*base, "--system-info", shipped, *MODEL), "host_processors_per_node",
                   "REPLACE-ME")
    filled = tmp_path / "gm4.yaml"
    with open(shipped) as handle:
        filled.write_text(re.sub(r"REPLACE-ME", "2", handle.read()))
    args, passthrough, model = planning.parse([*base, "--system-info", str(filled), *MODEL])
    plan = planning.plan_sweep(args, passthrough, model)  # plans, runs nothing
    assert plan.system_info["accelerator_model_name"] == "NVIDIA A100-SXM4-80GB"
    desc = submission.system_description(plan, plan.scales[0], [], {"device": "gpu"})
    assert (desc["accelerators_per_node"], desc["number_of_nodes"], desc["host_processors_per_node"]) == \
        ("8", "2", "2")


def test_a_folder_that_is_not_a_sweep_is_left_alone(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    one_line_error(sweep_cli("--out", str(out), *LOCAL, *MODEL), "not empty", "no sweep.json")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


# ---- pure functions ----

def test_hosts_used_fill_slots_in_order():
    hosts = [hostfile.Host("a", 8), hostfile.Host("b", 8), hostfile.Host("c", 8)]
    assert [h.name for h in hostfile.hosts_used(hosts, 8)] == ["a"]
    assert [h.name for h in hostfile.hosts_used(hosts, 9)] == ["a", "b"]
    assert [h.name for h in hostfile.hosts_used(hosts, 24)] == ["a", "b", "c"]


def test_system_description_passes_the_checker(tmp_path):
    from mlperf_logging.system_desc_checker import system_desc_checker
    from suite.common.results import RunLog
    args, passthrough, model = planning.parse(["--out", str(tmp_path / "o"), *LOCAL, *MODEL])
    plan = planning.plan_sweep(args, passthrough, model)
    logs = [RunLog("x", "resnet", "open", "aborted", 0, 60000)]
    env = {"versions": {"tensorflow": "2.18.1", "horovod": "0.28.1", "python": "3.11"}, "device": "cpu",
           "git_revision": "abc", "launcher": "mpirun", "controller": "mpi"}
    desc = submission.system_description(plan, plan.scales[1], logs, env)
    assert set(desc) == set(planning.SYSTEM_FIELDS)
    assert (desc["system_name"], desc["number_of_nodes"], desc["division"]) == (SYSTEMS[1], "1", "open")
    assert desc["accelerators_per_node"] == "0" and desc["framework"] == "TensorFlow 2.18.1, Horovod 0.28.1"
    assert int(desc["host_processors_per_node"]) >= 1
    assert desc["host_processor_vcpu_count"] == str(os.cpu_count())
    assert all(isinstance(value, str) for value in desc.values())
    path = tmp_path / "sys.json"
    path.write_text(json.dumps(desc))
    for ruleset in ("2.1.0", "4.1.0"):
        assert system_desc_checker.check_system_desc(str(path), "training", ruleset)[0]


# ---- a real localhost sweep: 2 scales x 5 runs of the sweep_cpu preset, through faults ----

# Each fault lands in a named phase of the sweep, one for each way a resume recovers, and a few at seeded
# random moments for what the phases do not name. A phase waits for its moment in whatever the sweep is
# doing next, so the faults spread over both scales by themselves (the second allreduce needs the first
# scale done) and the last resume still has runs to do.
#   start-up   0.5 s after the sweep started: its manifest and temporary files being written
#   allreduce  the allreduce benchmark of a scale launched: its entry left running, redone on resume
#   launch     a run launched and not yet at run_start: the guardian stops it, the resume sets its
#              directory aside and launches it again
#   training   a run past run_start: SIGKILL (the guardian stops the ranks, the log is cut off) or a stop
#              signal (exit 130, the run's log closed as aborted, the manifest says interrupted)
#   random     a seeded moment within KILL_MOMENTS after the sweep (re)started
# A run cut off by a fault is redone from its start: that is each fault's cost, so the phases are few.
FAULTS = [(signal.SIGKILL, "start-up"), (signal.SIGKILL, "allreduce"), (signal.SIGTERM, "training"),
          (signal.SIGKILL, "launch"), (signal.SIGKILL, "random"), (signal.SIGKILL, "allreduce"),
          (signal.SIGINT, "training"), (signal.SIGKILL, "training"), (signal.SIGKILL, "random")]
KILLS = sum(signum == signal.SIGKILL for signum, _ in FAULTS)
KILL_MOMENTS = (0.5, 8.0)


@dataclass
class Fault:
    """One signal to the sweep and what was found after it."""

    signum: int
    phase: str  # where in the sweep it landed (FAULTS)
    signalled: float  # when (time.time())
    runs: dict  # the manifest's runs at the signal: {key: (status, attempts)}
    allreduce: dict = None  # the manifest's allreduce entries at the signal: {system: status}
    moment: float = None  # seconds after the sweep (re)started
    exit_code: int = None
    stop_seconds: float = None  # from the signal until nothing of the job was left
    left: list = field(default_factory=list)  # command lines still there after the bound
    half_written: list = field(default_factory=list)  # result files without exactly one run_stop
    changed: list = field(default_factory=list)  # finished results that are no longer as they were
    temp_files: list = field(default_factory=list)  # what this fault's cut-off writes left
    stale: list = field(default_factory=list)  # temporary files of earlier faults, after a resume began
    run: tuple = None  # a fault while training: (key, run directory) of the run that was training
    last_event: dict = None  # SIGTERM/SIGINT: that run's last log event
    run_start_ms: int = None  # SIGTERM/SIGINT: that run's run_start


# Every test of the swept folder is marked serial: the sweep goes through its faults against 30 s bounds,
# which a second test worker sharing the two cores could break; one fixture, so all in one phase.
@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    data = root / "data"
    made = run([sys.executable, "-m", "models.resnet50.data_cli", "generate", str(data), "--classes", "2",
                "--train-per-class", "32", "--eval-per-class", "8", "--image-size", "32",
                "--train-shards", "2", "--eval-shards", "2", "--seed", "1"], timeout=120)
    assert made.returncode == 0, made.stderr
    out = root / "out"
    args = ["--out", str(out), *LOCAL, "--allreduce", "--allreduce-args",
            "--min-bytes 4K --max-bytes 256K --iters 5", "--", "models.resnet50", "--data-dir", str(data)]
    seed = int(os.environ.get("SWEEP_FAULT_SEED") or random.SystemRandom().randrange(2 ** 32))
    print(f"faults: seed {seed} (SWEEP_FAULT_SEED={seed} repeats the random moments)")
    started = time.time()
    faults, finished = sweep_through_faults(args, out, random.Random(seed), root / "faults")
    faults_seconds = time.time() - started
    result = sweep_cli(*args, timeout=1800, **ASK_FOR_TIMELINE)
    seconds = time.time() - started
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(f"sweep of 2 scales x 5 runs through {len(faults)} faults: {seconds:.0f} s "
          f"({faults_seconds:.0f} s until the last fault)")
    # What the tests below check, taken now: later tests change the folder.
    changed = [path for path, data in finished.items() if open(path, "rb").read() != data]
    return argparse.Namespace(root=root, out=out, args=args, result=result, seconds=seconds, seed=seed,
                              faults=faults, changed=changed, temp_files=temp_files(out),
                              manifest=read_json(out / "sweep.json"))


def sweep_through_faults(args, out, rng, logs):
    """Starts the sweep, signals it in each phase of FAULTS in turn, checks what is left, resumes.

    Returns the faults and the finished result files seen ({path: bytes}).
    """
    logs.mkdir()
    faults, finished = [], {}
    for number, (signum, phase) in enumerate(FAULTS):
        log = logs / f"{number:02d}-{signal.Signals(signum).name}-{phase}.txt"
        job = subprocess.Popen([sys.executable, "-m", "suite.cluster.sweep", *args], cwd=REPO,
                               env=subprocess_env(**ASK_FOR_TIMELINE), stdout=log.open("w"),
                               stderr=subprocess.STDOUT)
        started = time.time()
        if phase == "start-up":
            fault = _kill_at(job, out, started + 0.5, phase)
        elif phase == "random":
            fault = _kill_at(job, out, started + rng.uniform(*KILL_MOMENTS), phase)
        elif phase == "training" and signum != signal.SIGKILL:
            fault = _stop_while_training(job, out, signum)
        else:
            found = wait_for(lambda: PHASE_MOMENTS[phase](job, out), 900, f"the sweep's {phase} phase")
            fault = _kill_now(job, out, phase)
            if phase == "training":
                fault.run = found
        fault.moment = round(fault.signalled - started, 1)
        if faults and "sweep: " in log.read_text():  # this sweep got past its clean-up
            fault.stale = [path for earlier in faults for path in earlier.temp_files if os.path.exists(path)]
        _settle(fault, out, finished)
        faults.append(fault)
        print(f"fault {number + 1}: {signal.Signals(signum).name} in {phase} at {fault.moment} s, exit "
              f"{fault.exit_code}, gone after {fault.stop_seconds:.1f} s, runs in progress "
              f"{[k for k, (status, _) in fault.runs.items() if status in ('running', 'interrupted')]}, "
              f"temporary files left {len(fault.temp_files)}")
    return faults, finished


def _statuses(out):
    return {key: (record.get("status"), record.get("attempts")) for key, record in _runs(out).items()}


def _runs(out):
    return _manifest_section(out, "runs")


def _manifest_section(out, name):
    """The manifest's runs or allreduce entries as the sweep last wrote them ({} before its first write)."""
    try:
        return read_json(out / "sweep.json")[name]
    except (OSError, ValueError):
        return {}  # not written yet


def _kill_at(job, out, when, phase):
    try:
        job.wait(timeout=max(0.0, when - time.time()))
        pytest.fail(f"the sweep ended (exit {job.returncode}) before its SIGKILL ({phase})")
    except subprocess.TimeoutExpired:
        pass
    return _kill_now(job, out, phase)


def _kill_now(job, out, phase):
    runs, allreduce = _statuses(out), _allreduce_statuses(out)
    signalled = time.time()
    job.kill()
    job.wait()
    return Fault(signal.SIGKILL, phase, signalled, runs, allreduce, exit_code=job.returncode)


def _allreduce_statuses(out):
    return {system: entry.get("status") for system, entry in _manifest_section(out, "allreduce").items()}


def _launched_by(job, record):
    """Whether this sweep's guardian launched the manifest record now (and not an earlier sweep's)."""
    launcher = (record.get("job") or {}).get("guardian")
    table = guardian.processes()
    return launcher in table and table[launcher][1] == job.pid


def _allreduce_launched(job, out):
    """A scale's allreduce benchmark launched by this sweep: its entry running."""
    assert job.poll() is None, f"the sweep ended (exit {job.returncode}) before an allreduce launched"
    return any(entry.get("status") == "running" and _launched_by(job, entry)
               for entry in _manifest_section(out, "allreduce").values())


def _launched_not_started(job, out):
    """(key, run directory) of a run this sweep launched that has not reached run_start yet."""
    assert job.poll() is None, f"the sweep ended (exit {job.returncode}) before a run launched"
    for key, record in _runs(out).items():
        if record.get("status") == "running" and _launched_by(job, record) \
                and not started(out / record["run_dir"]):
            return key, out / record["run_dir"]
    return None


def _stop_while_training(job, out, signum):
    """Waits for a run of this sweep to reach run_start, signals the sweep, and takes the run's log."""
    key, run_dir = wait_for(lambda: _training(job, out), 900, "a run of the sweep to start training")
    fault = Fault(signum, "training", time.time(), _statuses(out), _allreduce_statuses(out),
                  run=(key, run_dir))
    job.send_signal(signum)
    try:
        fault.exit_code = job.wait(timeout=STOP_BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
    log = read_log(run_dir / "result_0.txt")
    fault.last_event = log[-1]
    fault.run_start_ms = next(e["time_ms"] for e in log if e["key"] == "run_start")
    fault.runs[key] = (_runs(out)[key].get("status"), fault.runs[key][1])
    return fault


def _training(job, out):
    """(key, run directory) of the run this sweep launched once it has logged run_start."""
    assert job.poll() is None, f"the sweep ended (exit {job.returncode}) before any run trained"
    for key, record in _runs(out).items():
        if record.get("status") == "running" and _launched_by(job, record) \
                and started(out / record["run_dir"]):
            return key, out / record["run_dir"]
    return None


# What each waited-for phase waits for: a true value once this sweep is in it.
PHASE_MOMENTS = {"allreduce": _allreduce_launched, "launch": _launched_not_started, "training": _training}


def _settle(fault, out, finished):
    """Waits (within the bound) for nothing of the job to be left; then checks the results folder."""
    deadline = fault.signalled + STOP_BOUND_SECONDS
    while processes_of(out) and time.time() < deadline:
        time.sleep(0.2)
    fault.stop_seconds = time.time() - fault.signalled
    for pid in processes_of(out):
        fault.left.append(_cmdline(pid))
        guardian.signal_process(pid, signal.SIGKILL)  # so that the next resume starts clean
    for path in (out / SUBMITTER / "results").glob("*/resnet/result_*.txt"):
        if path.read_text().count('"key": "run_stop"') != 1:
            fault.half_written.append(str(path))
        else:
            finished.setdefault(str(path), path.read_bytes())
    fault.changed = [path for path, data in finished.items() if open(path, "rb").read() != data]
    fault.temp_files = temp_files(out)


def _cmdline(pid):
    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().replace(b"\0", b" ").decode(errors="replace")
    return str(pid)


def results_dir(out, system):
    return out / SUBMITTER / "results" / system / "resnet"


@pytest.mark.slow
@pytest.mark.serial
def test_sweep_writes_the_submission_layout(swept):
    out = swept.out
    manifest = read_json(out / "sweep.json")
    assert manifest["plan"]["runs"] == 5
    assert [s["system"] for s in manifest["plan"]["scales"]] == list(SYSTEMS)
    assert {record["status"] for record in manifest["runs"].values()} == {"done"}
    assert len(manifest["runs"]) == 10
    for system, np in zip(SYSTEMS, (1, 2)):
        assert sorted(os.listdir(results_dir(out, system))) == [f"result_{i}.txt" for i in range(5)]
        desc = read_json(out / SUBMITTER / "systems" / f"{system}.json")
        assert desc["system_name"] == system and desc["division"] == "open" and desc["number_of_nodes"] == "1"
        seeds = set()
        for index in range(5):
            run_dir = out / "runs" / system / f"run_{index}"
            for name in ("config.json", "env.json", "summary.json", "launch.json", "output.txt"):
                assert (run_dir / name).exists(), (run_dir, name)
            assert read_json(run_dir / "summary.json")["world_size"] == np
            assert read_json(run_dir / "launch.json")["exit_code"] == 0
            seeds.add(read_json(run_dir / "config.json")["seed"])
            with open(results_dir(out, system) / f"result_{index}.txt") as copy, \
                    open(run_dir / "result_0.txt") as original:
                assert copy.read() == original.read()
        assert len(seeds) == 5  # every run drew its own seed
        if np == 2:
            assert_launched_through_the_launcher(out / "runs" / system / "run_0")
        assert read_json(out / "runs" / system / "allreduce.json")["world_size"] == np
    implementation = out / SUBMITTER / "benchmarks" / "resnet" / "implementations" / "tensorflow-horovod"
    assert (implementation / "README.md").exists()


def assert_launched_through_the_launcher(run_dir):
    """A 2-process model run made by `suite.cluster.launch` (as every sweep run is): record and outcome."""
    summary = read_json(run_dir / "summary.json")
    assert summary["world_size"] == 2 and summary["weights_in_sync"]
    env = read_json(run_dir / "env.json")
    # horovodrun without --gloo runs Horovod's MPI controller through mpirun.
    assert (env["launcher"], env["controller"]) == ("mpirun", "mpi")
    record = read_json(run_dir / "launch.json")
    assert record["exit_code"] == 0 and record["np"] == 2 and record["profile"]["name"] == "local-cpu"
    assert record["command"][:5] == ["horovodrun", "-np", "2", "-H", "localhost:2"]


@pytest.mark.slow
@pytest.mark.serial
def test_sigkill_in_every_phase_loses_nothing(swept):
    """SIGKILL to the sweep in each phase of FAULTS, each resumed: nothing of the job left within the bound,
    no result half-written or changed, no temporary file once resumed, no finished run launched again, and
    what was cut off (the allreduce benchmark, a launch, a training run) redone."""
    kills = [fault for fault in swept.faults if fault.signum == signal.SIGKILL]
    print(f"seed {swept.seed}; SIGKILL in {[(fault.phase, fault.moment) for fault in kills]} (phase, s after "
          f"each (re)start); job gone after {[round(fault.stop_seconds, 1) for fault in kills]} s")
    assert len(kills) == KILLS
    for fault in kills:
        assert fault.exit_code == -signal.SIGKILL
        assert fault.stop_seconds < STOP_BOUND_SECONDS and not fault.left, fault
        assert not fault.half_written and not fault.changed and not fault.stale, fault
    final = swept.manifest
    # Each phase was where it was meant to be, and the resume redid what it cut off.
    cut_allreduce = [system for fault in kills if fault.phase == "allreduce"
                     for system, status in fault.allreduce.items() if status == "running"]
    assert sorted(cut_allreduce) == list(SYSTEMS), cut_allreduce  # one for each scale, in turn
    assert all(final["allreduce"][system]["status"] == "done" for system in SYSTEMS)
    # A run cut off in its launch or its training was launched again. (A kill elsewhere may find a run
    # "running" that had in fact finished: the resume copies its result without a relaunch.)
    for fault in kills:
        if fault.phase not in ("launch", "training"):
            continue
        cut_off = [key for key, (status, _) in fault.runs.items() if status == "running"]
        assert cut_off, fault
        for key in cut_off:
            redone = final["runs"][key]
            assert redone["status"] == "done" and redone["attempts"] > fault.runs[key][1], (key, fault)
    training, = [fault for fault in kills if fault.phase == "training"]
    key, run_dir = training.run
    assert training.runs[key][0] == "running" and '"key": "run_start"' in _set_aside_log(run_dir)
    assert not swept.changed and not swept.temp_files
    assert_done_runs_never_relaunched(swept)


def _set_aside_log(run_dir):
    """The MLPerf log of the attempt a resume set aside (run_N.attempt, .attempt.2, ...) in run_dir's
    place, of all of them: the training run's, which had its run_start."""
    return "".join(path.read_text() for path in run_dir.parent.glob(f"{run_dir.name}.attempt*/result_0.txt"))


def assert_done_runs_never_relaunched(swept):
    final = {key: record["attempts"] for key, record in swept.manifest["runs"].items()}
    for fault in swept.faults:
        for key, (status, attempts) in fault.runs.items():
            if status == "done":
                assert final[key] == attempts, (key, fault)


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_sweep_stops_the_training_run_and_a_resume_redoes_it(swept, signum):
    """Within the bound: exit 130, the run's log closed as aborted, nothing left, the manifest says
    interrupted; the resume launched that run again and no finished one."""
    fault, = [fault for fault in swept.faults if fault.signum == signum]
    key, run_dir = fault.run
    name = signal.Signals(signum).name
    print(f"{name} to the sweep while {key} trained: exit {fault.exit_code}, job gone after "
          f"{fault.stop_seconds:.1f} s")
    assert fault.exit_code == 130
    assert fault.stop_seconds < STOP_BOUND_SECONDS and not fault.left, fault
    assert fault.last_event["key"] == "run_stop" and fault.last_event["metadata"]["status"] == "aborted"
    # Whichever signal stopped the sweep, the launcher got SIGTERM, and passed it on to the ranks at once.
    assert fault.last_event["metadata"]["reason"].startswith("stopped by SIGTERM from the launcher")
    assert fault.runs[key][0] == "interrupted"
    record = swept.manifest["runs"][key]
    assert record["status"] == "done" and record["attempts"] > fault.runs[key][1]
    redone = read_log(swept.out / record["run_dir"] / "result_0.txt")
    assert next(e["time_ms"] for e in redone if e["key"] == "run_start") != fault.run_start_ms
    assert_done_runs_never_relaunched(swept)


@pytest.mark.slow
@pytest.mark.serial
def test_package_checker_accepts_the_open_submission(swept, tmp_path):
    result = run([sys.executable, "-m", "mlperf_logging.package_checker", str(swept.out / SUBMITTER),
                  "training", "2.1.0", "--log_output", str(tmp_path / "package_checker.log")], timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "PACKAGE CHECKER FOUND NO ERRORS, SUCCESS" in output, output[-3000:]
    assert not [line for line in output.splitlines() if line.startswith("ERROR")], output[-3000:]
    for system in SYSTEMS:
        assert f"System description checker passed for {system}" in output


@pytest.mark.slow
@pytest.mark.serial
def test_result_summarizer_scores_every_system(swept, tmp_path):
    from suite.common import mlperf_rules, results
    # It prints a header and writes its table as CSV and JSON (without --csv: summary.json in its
    # working directory, hence the cwd).
    summarize = [sys.executable, "-m", "mlperf_logging.result_summarizer", str(swept.out / SUBMITTER),
                 "training", "2.1.0", "--csv", str(tmp_path / "scores.csv")]
    result = subprocess.run(summarize, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Strong Scaling Scores" in result.stdout and "CRITICAL" not in result.stdout, result.stdout
    assert (tmp_path / "scores.csv").exists()
    scores = {row["system"]: row for row in read_json(tmp_path / "scores.json")}
    assert set(scores) == set(SYSTEMS)
    for system in SYSTEMS:
        logs = [results.read_run(str(path), "resnet") for path in
                sorted(results_dir(swept.out, system).glob("result_*.txt"))]
        # Its arithmetic: every compliant run, status not checked, fastest and slowest dropped.
        expected = mlperf_rules.olympic_mean([log.minutes for log in logs])
        assert scores[system]["resnet"] == pytest.approx(expected, abs=1e-9)  # its JSON keeps 10 decimals
        assert scores[system]["division"] == "open" and scores[system]["submitter"] == SUBMITTER


@pytest.mark.slow
@pytest.mark.serial
def test_report_of_the_sweep(swept):
    from PIL import Image
    result = run([sys.executable, "-m", "suite.cluster.report", str(swept.out)], timeout=300)
    assert result.returncode == 0, result.stderr
    report = swept.out / "report"
    for png in report.glob("*.png"):
        with Image.open(png) as image:
            image.verify()
    text = (report / "report.md").read_text()
    for system in SYSTEMS:
        for path in sorted(results_dir(swept.out, system).glob("result_*.txt")):
            with open(path) as handle:
                events = {e["key"]: e for e in (json.loads(line.split(":::MLLOG ", 1)[1]) for line in handle)}
            minutes = (events["run_stop"]["time_ms"] - events["run_start"]["time_ms"]) / 60000
            start, stop = events["run_start"]["time_ms"], events["run_stop"]["time_ms"]
            assert f"| {start} | {stop} | {minutes:.4f} |" in text
    assert (report / "allreduce.png").exists() and "Projected beside measured" in text
    # The projection sizes the allreduce from the model the runs trained (2 classes), not ResNet-50's 1,000.
    from suite.cluster.scaling import max_bytes_for, model_parameters
    recorded = read_json(swept.out / "runs" / SYSTEMS[0] / "run_0" / "summary.json")
    assert recorded["gradient_bytes"] == 4 * recorded["trainable_parameters"] < 4 * model_parameters("resnet")
    assert f"S = {recorded['gradient_bytes']:,} bytes" in text
    # The fixture's allreduce stops at 256K, far below the gradient: the report must say so at the top.
    # Whether busbw still rose at 256K or looked flat there is down to the machine's noise; either way
    # the banner asks for a curve that reaches the gradient's size.
    from suite.cluster.report.formats import size
    top = text.split("\n## ", 1)[0]
    assert ("WARNING: ALLREDUCE CURVE NEVER REACHED ITS PLATEAU" in top
            or "WARNING: ALLREDUCE CURVE STOPS BELOW THE GRADIENT" in top)
    wanted = size(max_bytes_for(recorded["gradient_bytes"], 256 << 10))
    assert f'--max-bytes {wanted}" (at least the {recorded["gradient_bytes"] / 1e6:.1f} MB gradient)' in top
    # Every scale's step split: 2 processes from their timeline window, 1 process by definition.
    split = text.split("## Where the efficiency went (measured)", 1)[1].split("\n## ", 1)[0]
    assert all(f"| {system} |" in split for system in SYSTEMS), split


@pytest.mark.slow
@pytest.mark.serial
def test_other_arguments_on_the_same_folder_are_refused(swept):
    before = _snapshot(swept.out)
    args = [a if a != "1,2" else "1" for a in swept.args]
    one_line_error(sweep_cli(*args), "sweep.json", "another scales")
    assert _snapshot(swept.out) == before


@pytest.mark.slow
@pytest.mark.serial
def test_resume_redoes_only_the_unfinished_run(swept):
    """Run 1 lost its copied result only (its run finished): copied again, not rerun. Run 3 was cut off
    mid-run (no run_stop, no summary.json) and left a truncated result: rerun. Nothing else is touched."""
    out, first = swept.out, SYSTEMS[0]
    results = results_dir(out, first)
    kept = (results / "result_1.txt").read_bytes()
    (results / "result_1.txt").unlink()
    _truncate(results / "result_3.txt")
    _truncate(out / "runs" / first / "run_3" / "result_0.txt")
    (out / "runs" / first / "run_3" / "summary.json").unlink()
    before = {path: (path.read_bytes(), path.stat().st_mtime_ns) for system in SYSTEMS
              for path in results_dir(out, system).glob("result_*.txt") if path.name != "result_3.txt"
              or system != first}
    attempts_before = {key: r["attempts"] for key, r in read_json(out / "sweep.json")["runs"].items()}
    set_aside = len(list((out / "runs" / first).glob("run_3.attempt*")))
    result = sweep_cli(*swept.args, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("done earlier, skipped") == 8 + 2  # 8 runs and 2 allreduce checks
    assert f"{first} run 1: finished earlier, result copied now" in result.stdout
    assert re.search(rf"{first} run 3: aborted|{first} run 3: success", result.stdout)
    for path, (data, mtime) in before.items():
        assert path.read_bytes() == data and path.stat().st_mtime_ns == mtime, path
    assert (results / "result_1.txt").read_bytes() == kept
    manifest = read_json(out / "sweep.json")
    attempts = {key: record["attempts"] for key, record in manifest["runs"].items()}
    attempts_before[f"{first}/3"] += 1
    assert attempts == attempts_before
    # Kills of the sweep before may have set attempts aside already (run_3.attempt, .attempt.2, ...).
    assert len(list((out / "runs" / first).glob("run_3.attempt*"))) == set_aside + 1
    assert (out / "runs" / first / "result_3.incomplete.txt").exists()
    assert (results / "result_3.txt").read_text().count('"key": "run_stop"') == 1


def _truncate(path):
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for line in lines if '"run_stop"' not in line))


def _snapshot(folder):
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_too_few_runs_are_warned_about():
    assert planning.too_few_runs("resnet", 5) is None and planning.too_few_runs("bert", 12) is None
    assert planning.too_few_runs("unknown", 1) is None
    warning = planning.too_few_runs("resnet", 3)
    assert warning.startswith("warning: 3 run(s) per scale, MLPerf requires 5 for resnet")
    assert "found 3, expected 5" in warning
    assert "requires 10 for bert" in planning.too_few_runs("bert", 5)
