"""A real Slurm on two namespace hosts (tests/slurmcluster.py), met the way a user's job meets one.

A batch job on both nodes; ResNet-50 under `suite.cluster.launch --launcher srun` inside an sbatch
allocation, its ranks joined through PMIx, its log passing the checker and env.json naming the
allocation's nodes; the launch's srun checks against what srun really does with --mpi=pmix and
--mpi=pmi2 here; faults (scancel, a task killed on the second node); and the bad input Slurm can tell
before any rank starts. The suite has no command that submits (deploy renders, the user runs
sbatch), so the submit-side cases test what sbatch itself says.
"""
import os
import re
import shlex
import signal
import sys
import time
from dataclasses import dataclass

import pytest

from helpers.jobs import alive, long_training, processes_of, started, wait_for
from helpers.running import REPO, TINY
from helpers.runs import check_log, read_json, read_log
from slurmcluster import PARTITION, SlurmCluster, SlurmUnavailable, unavailable
from suite.cluster import slurmcheck

# The session's namespace Slurm cluster: `make test`'s second phase, alone (docs/testing.md).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

# Every process of a job must be gone this long after the fault.
FAULT_BOUND_SECONDS = 60
# Each launch puts one rank on each node: the fewest processes that still cross between the nodes.
RANKS_PER_NODE = 1
NODES = 2
# Model flags for a launch refused before any rank starts: valid for any rank count, no data needed.
NO_RUN = ["--preset", "tiny_cpu", "--data-dir", "/nonexistent"]


def write_script(path, commands, nodes=NODES, ntasks_per_node=RANKS_PER_NODE, output=None):
    """An sbatch script as a user writes one: the shape in #SBATCH lines, then the commands."""
    lines = ["#!/bin/bash", f"#SBATCH --nodes={nodes}", f"#SBATCH --ntasks-per-node={ntasks_per_node}",
             f"#SBATCH --output={output or str(path) + '.out'}", "set -euo pipefail",
             *(shlex.join(command) for command in commands)]
    path.write_text("\n".join(lines) + "\n")
    return path


def launch_command(model_args, *launch_flags, nodes=NODES):
    return [sys.executable, "-m", "suite.cluster.launch", "--launcher", "srun", "--profile", "local-cpu",
            "--nodes", str(nodes), "--ntasks-per-node", str(RANKS_PER_NODE), *launch_flags, "--",
            "models.resnet50", *model_args]


@dataclass
class Job:
    id: str
    output: object  # the job's --output file

    def text(self):
        return self.output.read_text() if self.output.exists() else ""


def submit(slurm, script):
    """sbatch from the repository, as a user in their clone; the job's output beside the script."""
    return Job(slurm.submit([str(script)], cwd=REPO), script.with_name(script.name + ".out"))


def errors_in(text, prefix="error: "):
    return [line for line in text.splitlines() if line.startswith(prefix)]


# ---- a batch job ----------------------------------------------------------------------------------

def test_a_batch_job_runs_on_both_nodes_and_completes(slurm, tmp_path):
    job = submit(slurm, write_script(tmp_path / "hello.sbatch", [["srun", "hostname"]]))
    record = slurm.wait(job.id, timeout=60)
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), record
    assert slurm.hostnames(record["NodeList"]) == slurm.nodes
    assert sorted(job.text().split()) == slurm.nodes


# ---- ResNet-50 under srun in an allocation --------------------------------------------------------

@dataclass
class SrunRun:
    job: Job
    record: dict
    run_dir: object


@pytest.fixture(scope="module")
def srun_run(slurm, small_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("srun_run")
    run_dir = folder / "run"
    model = [*TINY, "--set", "seed=9", "--data-dir", small_data, "--run-dir", str(run_dir)]
    job = submit(slurm, write_script(folder / "train.sbatch", [
        launch_command(model, "--record", str(run_dir))]))
    record = slurm.wait(job.id, timeout=600)
    assert record["JobState"] == "COMPLETED", job.text()[-3000:]
    return SrunRun(job, record, run_dir)


def test_the_training_job_completes_and_its_log_passes_the_checker(srun_run):
    passed, output = check_log(srun_run.run_dir / "result_0.txt", "2.1.0")
    assert passed, output
    keys = [e["key"] for e in read_log(srun_run.run_dir / "result_0.txt")]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1
    summary = read_json(srun_run.run_dir / "summary.json")
    assert summary["world_size"] == NODES * RANKS_PER_NODE and summary["weights_in_sync"], summary["ranks"]


def test_env_json_names_srun_the_allocations_nodes_and_the_profiles_variables(srun_run, slurm):
    env = read_json(srun_run.run_dir / "env.json")
    nodes = slurm.hostnames(srun_run.record["NodeList"])
    assert (env["launcher"], env["controller"]) == ("srun", "mpi")
    assert env["hosts"] == nodes
    assert sorted((r["host"], r["local_rank"]) for r in env["ranks"]) == [
        (node, local) for node in nodes for local in range(RANKS_PER_NODE)]
    seen = env["environment"]
    assert (seen["SLURM_JOB_ID"], seen["SLURM_JOB_PARTITION"]) == (srun_run.job.id, PARTITION)
    assert seen["SLURM_JOB_NODELIST"] == srun_run.record["NodeList"]
    # local-cpu's own variable and Horovod tuning, as the ranks saw them through srun --export=ALL.
    assert (seen["OMPI_MCA_mpi_yield_when_idle"], seen["HOROVOD_CYCLE_TIME"]) == ("1", "20.0")
    assert (env["profile"]["name"], env["profile"]["applied_by"]) == ("local-cpu", "launcher")


def test_the_launch_record_holds_the_srun_command_and_its_exit(srun_run):
    launched = read_json(srun_run.run_dir / "launch.json")
    assert launched["command"][:4] == ["srun", "--mpi=pmix", "-N", str(NODES)]
    assert launched["exit_code"] == 0 and launched["launcher"] == "srun"


# ---- the MPI plugins: the launch's check against what srun really does ----------------------------

MPI_WORLD = "from mpi4py import MPI; print('world', MPI.COMM_WORLD.Get_size(), flush=True)"


@pytest.mark.parametrize("kind", ["pmix", "pmi2"])
def test_the_launchs_mpi_check_agrees_with_srun(slurm, kind):
    """pmix forms one MPI world over both nodes; pmi2 fails in MPI_Init with Debian's Open MPI (no s1/s2
    component), and the launch's check refuses it in one line before any rank starts."""
    result = slurm.client(["srun", f"--mpi={kind}", f"--nodes={NODES}", "--ntasks-per-node=1", sys.executable,
                           "-c", MPI_WORLD], timeout=120)
    problem = slurmcheck.mpi_problem(["srun", f"--mpi={kind}"], slurm.env())
    print(f"srun --mpi={kind}: exit {result.returncode}; the launch's check: {problem or 'no problem'}")
    if problem is None:
        assert result.returncode == 0 and result.stdout.split().count(str(NODES)) == NODES, result.stderr
    else:
        assert result.returncode != 0 and "MPI_Init" in result.stderr, result.stdout + result.stderr


def test_pmi2_is_refused_in_one_line_inside_a_job(slurm, tmp_path):
    job = submit(slurm, write_script(tmp_path / "pmi2.sbatch", [
        launch_command(NO_RUN, "--launcher-args=--mpi=pmi2")]))
    record = slurm.wait(job.id, timeout=60)
    assert (record["JobState"], record["ExitCode"]) == ("FAILED", "2:0"), job.text()
    errors = errors_in(job.text())
    assert len(errors) == 1 and errors[0].startswith("error: srun --mpi=pmi2: Open MPI"), job.text()
    assert "use --mpi=pmix" in errors[0] and "launch:" not in job.text()


# ---- faults ---------------------------------------------------------------------------------------

def start_long_job(slurm, small_data, folder, *model_flags):
    """A job that trains far longer than any test waits; returns once its run has started."""
    run_dir = folder / "run"
    model_args = [*long_training(small_data, run_dir), *model_flags]
    job = submit(slurm, write_script(folder / "long.sbatch", [launch_command(model_args)]))
    wait_for(lambda: started(run_dir) or slurm.job(job.id)["JobState"] not in ("PENDING", "RUNNING"),
             600, "run_start")
    assert slurm.job(job.id)["JobState"] == "RUNNING", job.text()[-3000:]
    return job, run_dir


def assert_all_ended(slurm, job, run_dir, since, state):
    """The job reached `state`, every rank and launcher of it ended within the bound, the log is closed."""
    pids = [rank["pid"] for rank in read_json(run_dir / "env.json")["ranks"]]
    record = slurm.wait(job.id, timeout=FAULT_BOUND_SECONDS)
    wait_for(lambda: not processes_of(run_dir), FAULT_BOUND_SECONDS - (time.time() - since),
             "every process of the job to end")
    elapsed = time.time() - since
    assert elapsed < FAULT_BOUND_SECONDS and not [pid for pid in pids if alive(pid)]
    print(f"every task of job {job.id} ended {elapsed:.1f} s after the fault (bound {FAULT_BOUND_SECONDS} s)")
    assert record["JobState"] == state, (record, job.text()[-3000:])
    last = read_log(run_dir / "result_0.txt")[-1]
    assert last["key"] == "run_stop" and last["metadata"]["status"] == "aborted", (last, job.text()[-3000:])
    return last


def test_scancel_ends_every_task_with_the_log_closed_and_the_signal_named(slurm, small_data, tmp_path):
    job, run_dir = start_long_job(slurm, small_data, tmp_path)
    since = time.time()
    cancelled = slurm.client(["scancel", job.id], timeout=30)
    assert cancelled.returncode == 0, cancelled.stderr
    last = assert_all_ended(slurm, job, run_dir, since, "CANCELLED")
    # Slurm ended it, not a rank: the reason must not send the user looking for a failed one.
    assert last["metadata"]["reason"] == ("stopped by SIGTERM from Slurm (scancel, the time limit or a "
                                          "preemption; no rank had reported a failure)"), last
    wait_for(lambda: "rank 0: stopped by SIGTERM (run_stop aborted written)" in job.text(), 10,
             "rank 0's line in the job's output")


def test_a_task_killed_on_the_second_node_ends_the_step_and_the_job(slurm, small_data, tmp_path):
    """Under the tf backend (TensorFlow's collectives, TF_CONFIG from srun's MPI world, started by
    suite.cluster.launch --launcher srun): the rank watch names the task as under Horovod, whose runs
    under srun are the rest of this file's."""
    job, run_dir = start_long_job(slurm, small_data, tmp_path, "--distribution", "tf")
    second = slurm.nodes[1]
    victim = next(r for r in read_json(run_dir / "env.json")["ranks"] if r["host"] == second)
    since = time.time()
    os.kill(victim["pid"], signal.SIGKILL)
    last = assert_all_ended(slurm, job, run_dir, since, "FAILED")
    named = f"rank {victim['rank']} on host {second} ended without a word (killed, or crashed)"
    assert last["metadata"]["reason"] == named, last
    wait_for(lambda: f"srun: error: {second}: task {victim['rank']}: Killed" in job.text(), 10,
             "srun's line for the killed task")
    errors = errors_in(job.text(), "error (rank 0)")
    assert len(errors) == 1 and named in errors[0], job.text()[-3000:]
    env = read_json(run_dir / "env.json")
    assert (env["launcher"], env["controller"]) == ("srun", "grpc")


# ---- bad input Slurm can tell before any rank starts ----------------------------------------------

def test_a_partition_the_cluster_does_not_have_is_refused_by_sbatch(slurm, tmp_path):
    script = write_script(tmp_path / "job.sbatch", [["srun", "hostname"]])
    result = slurm.client(["sbatch", "--partition=gpu", str(script)])
    assert result.returncode != 0
    assert errors_in(result.stderr, "sbatch: error: ")[0] == "sbatch: error: invalid partition specified: gpu"
    assert not queued(slurm)


def test_more_nodes_than_the_cluster_has_are_queued_for_ever(slurm, tmp_path):
    """Slurm's default and oci-hpc's EnforcePartLimits=NO: sbatch accepts the job, which never starts;
    only `scontrol show job` says why. A renderer or a submit step would have to compare the
    partition's size itself (sinfo) to say it sooner."""
    too_many = len(slurm.nodes) + 1
    job = submit(slurm, write_script(tmp_path / "big.sbatch", [["srun", "hostname"]], nodes=too_many))
    try:
        record = slurm.wait(job.id, timeout=30, states=("PENDING",))
        wait_for(lambda: slurm.job(job.id)["Reason"] == "PartitionNodeLimit", 30, "the pending reason")
    finally:
        slurm.client(["scancel", job.id])
    assert record["NumNodes"].startswith(str(too_many)), record


@pytest.mark.parametrize("header,said", [
    ("", "sbatch: error: This does not look like a batch script."),
    # (sbatch cuts an #SBATCH line at a '#', so an enroot URI, registry#image, cannot go there.)
    ("#!/bin/bash\n#SBATCH --container-image=/images/suite.sqsh\n",
     "sbatch: unrecognized option '--container-image=/images/suite.sqsh'"),
])
def test_a_script_sbatch_refuses_is_named_in_its_first_line(slurm, tmp_path, header, said):
    """No interpreter line; a Pyxis option in the header on a cluster without Pyxis."""
    script = tmp_path / "bad.sbatch"
    script.write_text(header + "srun hostname\n")
    result = slurm.client(["sbatch", str(script)])
    assert result.returncode != 0 and result.stderr.splitlines()[0].startswith(said), result.stderr
    assert not queued(slurm)


def test_an_output_folder_that_does_not_exist_fails_the_job_with_no_word_of_why(slurm, tmp_path):
    """Slurm opens --output on the first node before the script runs and makes no folder for it: the
    job fails at once, `scontrol show job` says JobLaunchFailure and no file a user sees says why
    (slurmd's log does). The rendered scripts' results folder must exist before sbatch."""
    missing = tmp_path / "results"
    script = write_script(tmp_path / "job.sbatch", [["srun", "hostname"]], output=f"{missing}/%j.out")
    job_id = slurm.submit([str(script)], cwd=REPO)
    record = slurm.wait(job_id, timeout=60)
    assert (record["JobState"], record["Reason"]) == ("FAILED", "JobLaunchFailure"), record
    assert not missing.exists()
    print(f"a missing --output folder: job {job_id} {record['JobState']}, exit {record['ExitCode']}, "
          f"reason {record['Reason']}")


def test_a_launch_on_more_nodes_than_its_allocation_is_named_before_srun(slurm, tmp_path):
    wide = 2 * NODES  # a rank count the preset's batch splits over
    job = submit(slurm, write_script(tmp_path / "wide.sbatch", [
        launch_command(NO_RUN, nodes=wide)]))
    record = slurm.wait(job.id, timeout=60)
    assert (record["JobState"], record["ExitCode"]) == ("FAILED", "2:0"), job.text()
    assert errors_in(job.text()) == [f"error: srun -N {wide}: job {job.id} has {NODES} nodes "
                                     f"({record['NodeList']}); submit it with --nodes={wide}, or "
                                     f"launch on {NODES}"], job.text()


def queued(slurm):
    return slurm.client(["squeue", "--noheader", "--format=%i %j"]).stdout.split()


# A node is declared down this long after its slurmd stops answering (Slurm's default is 300 s).
SLURMD_TIMEOUT_SECONDS = 10


def test_a_node_that_drops_out_ends_the_job_and_is_named(tmp_path):
    """slurmd killed on the second node mid-job, on a cluster of the test's own (the session's keeps
    its nodes): Slurm declares the node down, ends the job NODE_FAIL, and names the node."""
    from twohosts import ClusterUnavailable, TwoHosts
    try:
        # JobRequeue=0: the batch job ends on the node failure instead of waiting to run again.
        conf = f"SlurmdTimeout={SLURMD_TIMEOUT_SECONDS}\nJobRequeue=0\n"
        with TwoHosts(tmp_path / "hosts", prefix="mlsn") as hosts, \
                SlurmCluster(hosts, tmp_path / "slurm", conf_extra=conf) as slurm:
            job = submit(slurm, write_script(tmp_path / "sleep.sbatch", [["srun", "sleep", "300"]]))
            slurm.wait(job.id, timeout=30, states=("RUNNING",))
            second = slurm.nodes[1]
            wait_for(lambda: len(processes_named("sleep", tmp_path)) == NODES, 30, "both tasks")
            since = time.monotonic()
            slurmd = slurm.daemon(f"slurmd-{second}")
            slurmd.kill()
            slurmd.wait()
            record = slurm.wait(job.id, timeout=SLURMD_TIMEOUT_SECONDS * 3 + 30)
            elapsed = time.monotonic() - since
            shown = slurm.client(["scontrol", "show", "node", "--oneliner", second]).stdout
            node = dict(re.findall(r"(\w+)=(\S*)", shown))
            print(f"slurmd killed on {second}: job {job.id} {record['JobState']} after {elapsed:.1f} s "
                  f"(SlurmdTimeout={SLURMD_TIMEOUT_SECONDS}); node {node.get('State')}, "
                  f"reason {shown.split('Reason=')[-1].strip()}")
    except (ClusterUnavailable, SlurmUnavailable) as err:
        unavailable(err)
    assert record["JobState"] == "NODE_FAIL", record
    assert node["State"].startswith("DOWN"), node
    assert f"Node failure on {second}" in job.text() or second in record.get("Reason", ""), \
        (record, job.text()[-2000:])


# ---- the cluster itself ---------------------------------------------------------------------------

def test_the_cluster_is_torn_down_with_nothing_left_even_with_a_job_running(tmp_path):
    from twohosts import ClusterUnavailable, TwoHosts
    try:
        with TwoHosts(tmp_path / "hosts", prefix="mlst") as hosts:
            with SlurmCluster(hosts, tmp_path / "slurm") as slurm:
                job = submit(slurm, write_script(tmp_path / "sleep.sbatch", [["srun", "sleep", "300"]]))
                slurm.wait(job.id, timeout=30, states=("RUNNING",))
                wait_for(lambda: len(processes_named("sleep", tmp_path)) == NODES, 30, "both tasks")
                tasks = processes_named("sleep", tmp_path)
                # What the check below must find gone is found while the cluster runs (slurmctld 22.05
                # forks a slurmscriptd of the same name).
                found = {name: len(processes_named(name, tmp_path))
                         for name in ("munged", "slurmd", "slurmctld")}
                assert (found["munged"], found["slurmd"], found["slurmctld"] >= 1) == (1, NODES, True), found
                munge_dir = slurm.munge_dir
            print(f"\nbring-up {slurm.bring_up_seconds:.1f} s, teardown with a job running "
                  f"{slurm.teardown_seconds:.1f} s")
            namespaces = list(hosts.namespaces.values())
    except (ClusterUnavailable, SlurmUnavailable) as err:
        unavailable(err)
    assert not [pid for pid in tasks if alive(pid)]
    assert not processes_named("", tmp_path), "a process of the cluster outlived it"
    assert not os.path.exists(munge_dir)
    listed = os.popen("ip netns list").read()
    assert not [ns for ns in namespaces if ns in listed]


def processes_named(program, folder):
    """Pids of `program` (any, for "") whose command line or environment names `folder` (the daemons'
    -f, the tasks' SLURM_CONF)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        named = str(folder).encode() in cmdline + environ
        # srun hands its tasks the program's full path.
        if os.path.basename(cmdline.split(b"\0")[0]).startswith(program.encode()) and named and alive(entry):
            found.append(int(entry))
    return found
