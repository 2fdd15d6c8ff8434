"""Shared test helpers: run the public entry points in subprocesses, make small datasets, run the checker."""
import json
import os
import subprocess
import sys

import pytest

# The session's Slurm cluster fixture (`slurm`), built only when a test asks for it; the CPU census of
# each test, when SUITE_TEST_CENSUS names a file (tests/census.py).
pytest_plugins = ("slurmcluster", "census")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)

# The session fixtures that build namespace clusters (four_hosts below, slurm and slurm4 in slurmcluster.py):
# a test that asks for one is serial wherever it lives, so `make test` runs it in its second phase, beside
# at most one other such test (each pytest-xdist worker's clusters have names of their own:
# twohosts.worker_prefix).
CLUSTER_FIXTURES = {"four_hosts", "slurm", "slurm4"}
# The runs too large for anything beside them: the 32-rank headline run (about 21 GB over its four hosts)
# and BERT-large's closed code path (about 14 GB in one process). `make test` runs a test that asks for
# one in its third phase, alone.
ALONE_FIXTURES = {"headline", "large_run"}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if CLUSTER_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.serial)
        if ALONE_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.serial)
            item.add_marker(pytest.mark.alone)


def subprocess_env(**extra):
    env = dict(os.environ)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = REPO
    # Open MPI refuses root without these; CI runs as root.
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    # The deploy renderer asks sinfo, sacctmgr and kubectl where they answer; a test asks stand-ins or
    # nothing, whatever this machine has installed.
    env.setdefault("SUITE_CLUSTER_TOOLS", os.devnull)
    env.update(extra)
    return env


# What a namespace host's command finds on PATH: the environment, then the system's, not this machine's
# own PATH (a host is a login of its own).
HOST_PATH = BIN + os.pathsep + "/usr/local/bin:/usr/bin:/bin"


def host_env(**extra):
    """subprocess_env for a command run on a namespace host."""
    env = subprocess_env(**extra)
    env["PATH"] = HOST_PATH
    return env


def on_first_host(cluster, command, timeout=900, extra_env=None):
    """`command` run on a namespace cluster's first host (h1 of two) from the repository, with this test
    environment (PATH, PYTHONPATH, Open MPI)."""
    env = host_env(**(extra_env or {}))
    return cluster.run(cluster.names[0], command, timeout=timeout, env=env, cwd=REPO)


def run(args, timeout=600, **env):
    """Runs a command from the repository root; a hang fails the test instead of the suite."""
    return subprocess.run(args, cwd=REPO, env=subprocess_env(**env), capture_output=True, text=True,
                          timeout=timeout)


def train_cmd(*args, launcher=(), np=1, module="models.resnet50"):
    """`python -m models.resnet50 ...` (or another model), optionally under a launcher with np processes."""
    prefix = {
        (): [],
        ("horovodrun",): ["horovodrun", "-np", str(np), "-H", f"localhost:{np}"],
        ("horovodrun", "--gloo"): ["horovodrun", "--gloo", "-np", str(np),
                                   "-hostfile", "hostfiles/localhost"],
        ("horovodrun", "--mpi"): ["horovodrun", "--mpi", "-np", str(np), "-H", f"localhost:{np}"],
        ("mpirun",): ["mpirun", "--oversubscribe", "-np", str(np)],
        # Each rank's lines tagged [1,<rank>]<stream>: as horovodrun runs mpirun, for tests that read them.
        ("mpirun", "--tag-output"): ["mpirun", "--oversubscribe", "--tag-output", "-np", str(np)],
    }[tuple(launcher)]
    return prefix + [sys.executable if not prefix else "python", "-m", module, *args]


def check_log(log_path, ruleset, config=None):
    """Runs the official compliance checker; returns (passed, its output)."""
    args = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
            "--ruleset", ruleset, "--log_output", str(log_path) + f".check-{ruleset}.txt"]
    if config:
        args += ["--config", config]
    result = run(args + [str(log_path)], timeout=120)
    return result.returncode == 0, result.stdout + result.stderr


def assert_fails_only_on_accuracy(log_path, ruleset, config):
    """The official checker with a closed config rejects the log, and only for eval_accuracy."""
    passed, output = check_log(log_path, ruleset, config=config)
    assert not passed
    failures = [line for line in output.splitlines() if line.startswith(("ERROR", "WARNING"))
                or "FAILED" in line or "failed" in line.lower()]
    assert any("eval_accuracy" in line for line in failures), output
    offending = [line for line in failures
                 if "eval_accuracy" not in line and "FAILED" not in line and "Logging output" not in line]
    assert not offending, output


def imported_modules(importtime_stderr):
    """The modules `python -X importtime` (or PYTHONPROFILEIMPORTTIME=1) lists, as their imports end."""
    return [line.rsplit("|", 1)[1].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:") and "|" in line]


def read_log(log_path):
    """MLPerf events as dicts, in order."""
    events = []
    with open(log_path) as handle:
        for line in handle:
            if ":::MLLOG " in line:
                events.append(json.loads(line.split(":::MLLOG ", 1)[1]))
    return events


def read_json(path):
    with open(path) as handle:
        return json.load(handle)


def container_check_run():
    """container/check_run.py as a module: the image's checks, whose word lists the host's tests share."""
    import importlib.util
    path = os.path.join(REPO, "container", "check_run.py")
    spec = importlib.util.spec_from_file_location("check_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def small_data(tmp_path_factory):
    """A learnable 4-class dataset with 32 px images: 64 train and 40 eval records, uneven shards."""
    from models.resnet50 import prepare
    out = tmp_path_factory.mktemp("small_data")
    prepare.write_learnable_dataset(str(out), num_classes=4, train_per_class=16, eval_per_class=10,
                                    image_size=32, train_shards=4, eval_shards=3, seed=1)
    return str(out)


# The generated BERT set: 64 tokens, 10 predictions a sequence.
BERT_SEQ, BERT_PRED = 64, 10


@pytest.fixture(scope="session")
def bert_data(tmp_path_factory):
    """The generated learnable set at 64 tokens / 10 predictions, with its tiny bert_config.json: one
    per test session (per worker), shared by every module that trains BERT."""
    from models.bert import prepare
    out = tmp_path_factory.mktemp("bert") / "data"
    prepare.write_learnable_dataset(str(out), seq_length=BERT_SEQ, max_predictions=BERT_PRED,
                                    train_records=2048, eval_records=512, train_shards=4, eval_shards=2,
                                    seed=1)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The report of a good sweep (a straggler, step splits) beside Dell's published 8-GPU ResNet-50
    folder (--compare), once per test_report_* file: (its sweep folder, report.md). The sweep is
    tests/test_report.py's, which every report test shares."""
    from suite.cluster import report
    from published import DELL_8
    from test_report import STRONG_SPLIT, make_sweep
    folder = make_sweep(str(tmp_path_factory.mktemp("built") / "sweep"), slow_rank=1, split=STRONG_SPLIT)
    assert report.main([folder, "--compare", DELL_8[0]]) == 0
    with open(os.path.join(folder, "report", "report.md")) as handle:
        return folder, handle.read()


# Tiny training settings: 2 steps per epoch at batch 32, one epoch, evaluation at its end.
TINY = ["--preset", "tiny_cpu", "--set", "image_size=32", "--set", "epochs=1", "--set", "eval_offset=1",
        "--set", "epochs_between_evals=1", "--set", "log_every=1", "--set", "warmup_epochs=0.5"]
# BERT's tiny preset cut to a dozen steps, for runs whose launch path is under test, not the learning:
# its run_stop is then "aborted" (the target not reached), which the checker accepts as for any run out
# of budget. At the preset's global batch of 32 it evaluates once, after its last step.
SHORT_BERT = ["--preset", "tiny_cpu", "--set", "train_steps=12", "--set", "warmup_steps=2", "--set",
              "eval_interval_samples=384", "--set", "log_every=4"]


# ---- the four-host cluster ------------------------------------------------------------------------

# The shipped hostfile of the headline command, and what its dry run asks a user to put for REPLACE-ME.
FOUR_NODE_HOSTFILE = os.path.join(REPO, "hostfiles", "4node")
CLUSTER_DOMAIN = "cluster.test"


def filled_hostfile(folder, slots=None):
    """A copy of hostfiles/4node with its placeholder replaced, as the dry run says; optionally with
    every host's slots=8 set to `slots` (the 8-rank copy)."""
    from suite.common.profiles import PLACEHOLDER
    with open(FOUR_NODE_HOSTFILE) as handle:
        text = handle.read().replace(PLACEHOLDER, CLUSTER_DOMAIN)
    if slots is not None:
        text = text.replace("slots=8", f"slots={slots}")
    path = os.path.join(str(folder), "4node" if slots is None else f"4node-{slots}slots")
    with open(path, "w") as handle:
        handle.write(text)
    return path


@pytest.fixture(scope="session")
def four_hosts(tmp_path_factory):
    """Four namespace hosts on one bridge, named as the filled hostfiles/4node names them; built once
    per session for every test that asks, torn down at its end (also after a failure)."""
    from suite.cluster import hostfile
    from twohosts import BridgedHosts, ClusterUnavailable
    folder = tmp_path_factory.mktemp("fourhosts")
    names = [host.name for host in hostfile.parse(filled_hostfile(folder))]
    try:
        with BridgedHosts(folder, names, prefix="mlq") as cluster:
            yield cluster
    except ClusterUnavailable as err:
        if os.environ.get("CI"):
            pytest.fail(f"the four-host cluster is required in CI: {err}")
        pytest.skip(f"no four-host cluster on this machine: {err}")
