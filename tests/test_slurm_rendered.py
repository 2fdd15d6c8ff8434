"""The sbatch scripts `python -m suite.cluster.deploy slurm --bare-metal` renders, submitted unchanged.

On the session's Slurm clusters (tests/slurmcluster.py: two namespace hosts, and four on a bridge for
the 4-node script and the 1 -> 2 -> 4 sweep): the test renders a
script into a file and hands that file to `sbatch` as it is, then follows the job through `scontrol
show job` alone. A line of the script that cannot work on this CPU cluster is the renderer's to fix,
never this test's. One run of each scale is shared by every assertion on it.
"""
import sys
import time
from dataclasses import dataclass

import pytest

from helpers.running import REPO, SHORT_BERT
from helpers.runs import check_log, read_json, read_log
from slurmcluster import PARTITION

# The session's namespace Slurm cluster: `make test`'s second phase, alone (docs/testing.md).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

PROFILE = "local-cpu"
RANKS_PER_NODE = 1
# BERT's tiny preset for a dozen steps: the rendered script is under test, not the learning, and its
# start and steps are cheaper than ResNet-50's on two cores (ResNet-50 runs under srun in
# tests/test_slurm.py). The renderer writes --preset itself: SHORT_BERT's settings after it.
MODEL, PRESET = "models.bert", SHORT_BERT[1]
MODEL_SETTINGS = SHORT_BERT[2:]


def deploy(slurm, *flags, model_args=(), mode=("--bare-metal",)):
    """`python -m suite.cluster.deploy slurm --bare-metal ...` on the login node, as a user runs it there:
    the renderer's sinfo questions go to this cluster."""
    command = [sys.executable, "-m", "suite.cluster.deploy", "slurm", *mode, "--model", MODEL,
               "--preset", PRESET, "--profile", PROFILE, "--ntasks-per-node", str(RANKS_PER_NODE),
               *flags, "--", *model_args]
    return slurm.client(command, cwd=REPO, SUITE_CLUSTER_TOOLS="/usr/bin:/bin")


@dataclass
class RenderedRun:
    nodes: int
    cluster: object  # the SlurmCluster it ran on
    job_id: str
    record: dict
    results: object  # the --results folder
    run_dir: object


# The plain job (the template's own srun step, no sweep) on the four-node cluster: every node's node check
# and one step across them. One and two nodes render the same script with another --nodes, and the sweep
# job below runs 1-, 2- and 4-node steps inside one allocation.
RENDERED_NODES = 4


@pytest.fixture(scope="module")
def rendered_run(slurm4, bert_data, tmp_path_factory):
    slurm, nodes = slurm4, RENDERED_NODES
    folder = tmp_path_factory.mktemp(f"rendered{nodes}")
    results = folder / "results"
    results.mkdir()  # the script's header says so: Slurm opens --output there before the script runs
    script = folder / "job.sbatch"
    rendered = deploy(slurm, "--nodes", str(nodes), "--data", str(bert_data), "--results", str(results),
                      "--run-id", f"r{nodes}", "--out", str(script), model_args=MODEL_SETTINGS)
    assert rendered.returncode == 0, rendered.stderr
    job_id = slurm.submit([str(script)], cwd=REPO)
    record = slurm.wait(job_id, timeout=600)
    return RenderedRun(nodes, slurm, job_id, record, results, results / f"r{nodes}")


def batch_output(run):
    return run.results / f"r{run.nodes}.{run.job_id}.out"


def test_the_rendered_job_completes_with_its_output_in_the_results_folder(rendered_run):
    output = batch_output(rendered_run)
    said = output.read_text() if output.exists() else f"(no {output})"
    assert (rendered_run.record["JobState"], rendered_run.record["ExitCode"]) == ("COMPLETED", "0:0"), \
        said[-3000:]
    assert rendered_run.record["StdOut"] == str(output)
    assert f"run r{rendered_run.nodes}: job {rendered_run.job_id} on {rendered_run.nodes} nodes" in said
    # Step 2 ran on every node of the allocation.
    assert said.count(f"ready for profile {PROFILE}") == rendered_run.nodes, said[-3000:]


def test_the_rendered_jobs_log_passes_the_checker(rendered_run):
    log = rendered_run.run_dir / "result_0.txt"
    passed, output = check_log(log, "2.1.0")
    assert passed, output
    keys = [e["key"] for e in read_log(log)]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1


def test_env_json_names_srun_the_allocations_nodes_and_the_profiles_variables(rendered_run):
    env = read_json(rendered_run.run_dir / "env.json")
    nodes = rendered_run.cluster.hostnames(rendered_run.record["NodeList"])
    assert len(nodes) == rendered_run.nodes and env["launcher"] == "srun"
    assert env["hosts"] == nodes and env["world_size"] == rendered_run.nodes * RANKS_PER_NODE
    assert sorted((r["host"], r["local_rank"]) for r in env["ranks"]) == [
        (node, local) for node in nodes for local in range(RANKS_PER_NODE)]
    seen = env["environment"]
    assert (seen["SLURM_JOB_ID"], seen["SLURM_JOB_PARTITION"]) == (rendered_run.job_id, PARTITION)
    assert seen["SLURM_JOB_NODELIST"] == rendered_run.record["NodeList"]
    # The profile's variables, exported by the script and handed on by srun --export=ALL.
    assert (seen["OMPI_MCA_mpi_yield_when_idle"], seen["HOROVOD_CYCLE_TIME"]) == ("1", "20.0")
    assert (env["profile"]["name"], env["profile"]["applied_by"]) == (PROFILE, "launcher")


# ---- the sweep inside one allocation --------------------------------------------------------------

SWEEP_NODES = (1, 2, 4)  # on the four-node cluster


@dataclass
class SweepJob:
    job_id: str
    record: dict
    results: object
    sweep_dir: object


@pytest.fixture(scope="module")
def sweep_job(slurm4, bert_data, tmp_path_factory):
    slurm = slurm4
    from suite.cluster.sweep import planning
    folder = tmp_path_factory.mktemp("rendered_sweep")
    results = folder / "results"
    results.mkdir()
    info = folder / "system.yaml"  # the namespace hosts are not this machine to the sweep
    info.write_text("".join(f"{key}: '1'\n" for key in planning.HOST_FIELDS))
    script = folder / "sweep.sbatch"
    rendered = deploy(slurm, "--nodes", str(max(SWEEP_NODES)), "--sweep", ",".join(map(str, SWEEP_NODES)),
                      "--runs", "1", "--system-info", str(info), "--data", str(bert_data), "--results",
                      str(results), "--run-id", "sweep", "--out", str(script), model_args=MODEL_SETTINGS)
    assert rendered.returncode == 0, rendered.stderr
    job_id = slurm.submit([str(script)], cwd=REPO)
    record = slurm.wait(job_id, timeout=900)
    return SweepJob(job_id, record, results, results / "sweep")


def test_the_sweep_job_completes_in_one_allocation(sweep_job):
    output = sweep_job.results / f"sweep.{sweep_job.job_id}.out"
    said = output.read_text() if output.exists() else f"(no {output})"
    assert (sweep_job.record["JobState"], sweep_job.record["ExitCode"]) == ("COMPLETED", "0:0"), said[-3000:]
    assert sweep_job.record["NumNodes"] == str(max(SWEEP_NODES)), sweep_job.record


def test_each_scale_of_the_sweep_was_an_srun_step_of_its_own_node_count(sweep_job, slurm4):
    allocation = slurm4.hostnames(sweep_job.record["NodeList"])
    systems = read_json(sweep_job.sweep_dir / "sweep.json")["plan"]["scales"]
    assert [scale["nodes"] for scale in systems] == list(SWEEP_NODES)
    for nodes, scale in zip(SWEEP_NODES, systems):
        run = sweep_job.sweep_dir / "runs" / scale["system"] / "run_0"
        launched = read_json(run / "launch.json")
        assert launched["command"][:2] == ["srun", "--mpi=pmix"] and launched["exit_code"] == 0
        assert launched["command"][launched["command"].index("-N") + 1] == str(nodes)
        env = read_json(run / "env.json")
        assert env["launcher"] == "srun" and env["hosts"] == allocation[:nodes], env["hosts"]
        assert env["environment"]["SLURM_JOB_ID"] == sweep_job.job_id  # inside the one allocation
        passed, output = check_log(run / "result_0.txt", "2.1.0")
        assert passed, output


def test_the_report_built_in_the_job_holds_every_scale(sweep_job):
    report = (sweep_job.sweep_dir / "report" / "report.md").read_text()
    for scale in read_json(sweep_job.sweep_dir / "sweep.json")["plan"]["scales"]:
        assert scale["system"] in report


# ---- bad input, told before any rank starts -------------------------------------------------------

@pytest.mark.parametrize("flags,said", [
    (["--nodes", "2", "--partition", "gpu"], "error: --partition gpu: not a partition this cluster knows "
                                             "(compute)"),
    # (4: a rank count tiny_cpu's batch splits over, so the preset check lets it through to sinfo's.)
    (["--nodes", "4"], "error: --nodes 4: partition compute has 2 node(s) (sinfo); render with --nodes 2 "
                       "or fewer"),
    (["--nodes", "2", "--partition", "compute", "--sweep", "1,3"],
     "error: --sweep 1,3: 3 nodes is more than the allocation's --nodes 2; render with --nodes 3 or drop 3 "
     "from --sweep"),
], ids=["partition", "nodes", "sweep-scale"])
def test_what_the_cluster_lacks_is_refused_when_the_script_is_rendered(slurm, tmp_path, flags, said):
    """A partition or a node count this cluster lacks (sinfo tells), a sweep scale larger than the
    allocation: one line naming it and what to change, and no script to submit."""
    script = tmp_path / "job.sbatch"
    since = time.monotonic()
    result = deploy(slurm, *flags, "--data", str(tmp_path), "--results", str(tmp_path), "--out", str(script))
    print(f"{' '.join(flags)}: refused in {time.monotonic() - since:.1f} s")
    assert result.returncode == 2 and result.stderr.splitlines() == [said], result.stderr
    assert not script.exists()


def test_a_container_script_on_a_cluster_without_pyxis_stops_at_the_node_check(slurm, tmp_path):
    """The Pyxis (container) script, submitted unchanged to this cluster, which has no Pyxis: sbatch
    takes it (the --container-* options are srun's), and the node check on every node stops the job
    with one line naming the node and what to change, before the training step starts any rank."""
    results = tmp_path / "results"
    results.mkdir()
    script = tmp_path / "container.sbatch"
    rendered = deploy(slurm, "--nodes", "2", "--image", "/images/suite.sqsh", "--data", str(tmp_path),
                      "--results", str(results), "--run-id", "pyxis", "--out", str(script), mode=())
    assert rendered.returncode == 0, rendered.stderr
    since = time.monotonic()
    job_id = slurm.submit([str(script)], cwd=REPO)
    record = slurm.wait(job_id, timeout=60)
    print(f"no Pyxis: job {job_id} {record['JobState']} {time.monotonic() - since:.1f} s after sbatch")
    said = (results / f"pyxis.{job_id}.out").read_text()
    assert (record["JobState"], record["ExitCode"]) == ("FAILED", "1:0"), said
    errors = sorted(line for line in said.splitlines() if line.startswith("error: "))
    assert errors == [f"error: node {node}: srun has no --container-image: the Pyxis plugin is not loaded "
                      f"here (link pyxis.conf into /etc/slurm/plugstack.conf.d and restart slurmd, "
                      f"NVIDIA/pyxis README.md), or render with --bare-metal" for node in slurm.nodes], said
    assert not (results / "pyxis" / "result_0.txt").exists()
