"""Running the suite's entry points from tests: the repository, the environment a subprocess gets, a
bounded run, the training command under a launcher, and the tiny settings that keep a run short."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


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


def imported_modules(importtime_stderr):
    """The modules `python -X importtime` (or PYTHONPROFILEIMPORTTIME=1) lists, as their imports end."""
    return [line.rsplit("|", 1)[1].strip() for line in importtime_stderr.splitlines()
            if line.startswith("import time:") and "|" in line]


def container_check_run():
    """container/check_run.py as a module: the image's checks, whose word lists the host's tests share."""
    import importlib.util
    path = os.path.join(REPO, "container", "check_run.py")
    spec = importlib.util.spec_from_file_location("check_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The generated BERT set: 64 tokens, 10 predictions a sequence.
BERT_SEQ, BERT_PRED = 64, 10


# Tiny training settings: 2 steps per epoch at batch 32, one epoch, evaluation at its end.
TINY = ["--preset", "tiny_cpu", "--set", "image_size=32", "--set", "epochs=1", "--set", "eval_offset=1",
        "--set", "epochs_between_evals=1", "--set", "log_every=1", "--set", "warmup_epochs=0.5"]
# BERT's tiny preset cut to a dozen steps, for runs whose launch path is under test, not the learning:
# its run_stop is then "aborted" (the target not reached), which the checker accepts as for any run out
# of budget. At the preset's global batch of 32 it evaluates once, after its last step.
SHORT_BERT = ["--preset", "tiny_cpu", "--set", "train_steps=12", "--set", "warmup_steps=2", "--set",
              "eval_interval_samples=384", "--set", "log_every=4"]
