"""Checks what the CPU image's own command left behind, seen from the host (make image-test).

    python3 container/check_run.py --config CONFIG.json --root ROOT --revision REV [--output LOG]
                                   [--distributions FILE] [--epochs N]

CONFIG.json is the image's configuration (the "config" of buildah inspect's "Docker"), ROOT
the container's file system mounted on the host, REV the git revision the image was built from.
Checked: the image runs `make demo` (no entry point before it) in the suite's folder, its environment
carries the revision and puts the suite's environment first on PATH; the demo's run directory under
that folder holds the MLPerf log and the run files, rank 0 recorded the revision, 2 ranks and the
suite's models.resnet50 in that folder as the program, and the run reached its target with the ranks'
weights in sync (with --epochs N, the command was run with DEMO_FLAGS="--set epochs=N": the run
records that budget, trained and evaluated, and ended at its target or, short of it, aborted at the
end of the budget, which the MLPerf checker accepts too); the demo's output has no line of
TensorFlow's start-up (the CUDA build's complaints on a machine without a GPU, TensorFlow's info
lines), and the image's environment holds exactly one TensorFlow distribution (FILE: the
distribution names the image's python lists, one a line). Prints
one line per problem and exits 1, or says what passed. Standard library only: it runs on the host,
outside the suite's environment.
"""
import argparse
import json
import os
import re
import sys

SUITE_DIR = "/opt/mlperf-hvd-suite"
COMMAND = ["make", "demo"]
RUN_DIR = "runs/demo/run"
RUN_FILES = ("result_0.txt", "config.json", "env.json", "summary.json")
WORLD_SIZE = 2
# What TensorFlow prints at start-up on a CPU machine when the CUDA build is installed (cuFFT, cuDNN and
# cuBLAS factories, "Could not find cuda drivers", "failed call to cuInit"), and its info and error
# lines, which the suite hides unless asked for; tests/test_main_job.py checks the same on the host.
START_UP_NOISE = ("cuda", "cuinit", "cudnn", "cublas", "cufft", "E0000", "I0000", "oneDNN",
                  "cpu_feature_guard")
# Every name under which PyPI ships a build that installs the `tensorflow` package
# (tests/test_environment.py holds the same list for the host's environment).
# What TensorFlow's CUDA build (the PyPI GPU image's) prints at every start, GPU or not, whatever
# TF_CPP_MIN_LOG_LEVEL says: its cuFFT, cuDNN and cuBLAS factories registered twice, absl's note that
# it logs before being set up, and on a machine without a GPU the failed cuInit. --cuda-build expects
# these and nothing else.
CUDA_BUILD_START_UP = ("Unable to register cuFFT factory", "Unable to register cuDNN factory",
                       "Unable to register cuBLAS factory", "All log messages before absl::InitializeLog()",
                       "failed call to cuInit")
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel",
                            "tensorflow-macos", "tensorflow-aarch64", "tf-nightly", "tf-nightly-cpu",
                            "intel-tensorflow")


def image_problems(config, revision):
    """What is wrong with the image's settings (its Docker config)."""
    problems = []
    if config.get("Entrypoint") or config.get("Cmd") != COMMAND:
        problems.append(f"image entry point and command are {config.get('Entrypoint')} {config.get('Cmd')}, "
                        f"not {COMMAND}")
    if config.get("WorkingDir") != SUITE_DIR:
        problems.append(f"image working directory is {config.get('WorkingDir')!r}, not {SUITE_DIR!r}")
    env = dict(item.split("=", 1) for item in config.get("Env") or [])
    if env.get("SUITE_GIT_REVISION") != revision:
        problems.append(f"image sets SUITE_GIT_REVISION={env.get('SUITE_GIT_REVISION')!r}, "
                        f"not the revision it was built from ({revision!r})")
    if not env.get("PATH", "").startswith(f"{SUITE_DIR}/.venv/bin:"):
        problems.append(f"image PATH does not start with the suite's environment: {env.get('PATH')!r}")
    return problems


def read_json(path, problems):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError) as err:
        problems.append(f"{path}: {err}")
        return {}


def run_problems(run_dir, revision, epochs=None):
    """What is wrong with the demo's run directory, as the image's command left it; epochs: the
    budget the command was given, None for the demo's own (train to the target)."""
    missing = [name for name in RUN_FILES if not os.path.isfile(os.path.join(run_dir, name))]
    if missing:
        return [f"{run_dir}: no {', '.join(missing)}"]
    problems = []
    env = read_json(os.path.join(run_dir, "env.json"), problems)
    summary = read_json(os.path.join(run_dir, "summary.json"), problems)
    config = read_json(os.path.join(run_dir, "config.json"), problems)
    if env.get("git_revision") != revision:
        problems.append(f"env.json records git_revision {env.get('git_revision')!r}, not {revision!r}")
    if env.get("world_size") != WORLD_SIZE:
        problems.append(f"env.json records world_size {env.get('world_size')!r}, not {WORLD_SIZE}")
    entry = f"{SUITE_DIR}/models/resnet50/__main__.py"
    if (env.get("command") or [None])[0] != entry:
        problems.append(f"env.json records the command {env.get('command')!r}, not {entry}")
    problems += outcome_problems(summary, config, epochs)
    if summary.get("weights_in_sync") is not True:
        problems.append("summary.json: the ranks' weights are not in sync")
    return problems


def outcome_problems(summary, config, epochs):
    """How the run ended: at its target, or (given a budget of epochs) aborted with that budget spent."""
    status = summary.get("status")
    accuracy, target = summary.get("accuracy"), summary.get("target_accuracy")
    reached = isinstance(accuracy, (int, float)) and isinstance(target, (int, float)) and accuracy >= target
    if epochs is None:
        problems = [] if status == "success" else [f"summary.json status is {status!r}, not 'success'"]
        if not reached:
            problems.append(f"summary.json accuracy {accuracy!r} is below the target {target!r}")
        return problems
    problems = []
    given = (config.get("config") or {}).get("epochs")
    if given != epochs:
        problems.append(f"config.json records epochs {given!r}, not the {epochs} the command was given")
    if not (isinstance(summary.get("steps"), int) and summary["steps"] > 0 and summary.get("evals")):
        problems.append(f"summary.json: {summary.get('steps')!r} steps and {len(summary.get('evals') or [])} "
                        "evaluations, not a run that trained and evaluated")
    if status not in ("success", "aborted") or (status == "success") != reached:
        problems.append(f"summary.json status is {status!r} at accuracy {accuracy!r} (target {target!r}): "
                        "neither the target reached nor the budget spent short of it")
    elif status == "aborted":
        # Training runs on to the first evaluation at or after the budget's last epoch.
        last = (summary.get("evals") or [{}])[-1].get("epoch_num")
        if not (isinstance(last, int) and last >= epochs):
            problems.append(f"summary.json: the last evaluation at epoch {last!r}, before the end of the "
                            f"{epochs}-epoch budget")
    return problems


def output_problems(path, epochs=None, cuda_build=False):
    """The demo's own last words: how the run ended, the checker's SUCCESS and where the log is; with
    cuda_build, the lines every start of TensorFlow's CUDA build prints are not counted as noise."""
    try:
        with open(path, errors="replace") as handle:
            text = handle.read()
    except OSError as err:
        return [f"{path}: {err.strerror}"]
    ended = "run success" if epochs is None or "run success" in text else "run aborted"
    wanted = (ended, "INFO - SUCCESS", f"MLPerf log: {RUN_DIR}/result_0.txt")
    problems = [f"{path}: the demo's output has no {line!r}" for line in wanted if line not in text]
    expected = CUDA_BUILD_START_UP if cuda_build else ()
    noisy = [line.strip() for line in text.splitlines()
             if any(word.lower() in line.lower() for word in START_UP_NOISE)
             and not any(known in line for known in expected)]
    if noisy:
        problems.append(f"{path}: TensorFlow's start-up is not quiet ({len(noisy)} lines), "
                        f"first: {noisy[0]!r}")
    return problems


def distribution_problems(path):
    """Exactly one TensorFlow distribution among the image's installed ones (names, one a line)."""
    try:
        with open(path) as handle:
            names = {re.sub(r"[-_.]+", "-", line.strip()).lower() for line in handle if line.strip()}
    except OSError as err:
        return [f"{path}: {err.strerror}"]
    found = sorted(names.intersection(TENSORFLOW_DISTRIBUTIONS))
    if len(found) != 1:
        return [f"{path}: the image's environment holds {len(found)} TensorFlow distributions {found}, "
                "not one"]
    return []


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the image's Docker config as JSON")
    parser.add_argument("--root", required=True, help="the container's file system, mounted")
    parser.add_argument("--revision", required=True, help="the git revision the image was built from")
    parser.add_argument("--output", help="what the image's command printed")
    parser.add_argument("--distributions", metavar="FILE",
                        help="the distribution names the image's python lists, one a line")
    parser.add_argument("--epochs", type=int, metavar="N",
                        help='the command was run with DEMO_FLAGS="--set epochs=N" (default: the demo\'s own '
                             "run, to its target)")
    parser.add_argument("--cuda-build", action="store_true",
                        help="the image's TensorFlow is the CUDA build: its start-up lines are expected")
    args = parser.parse_args(argv)
    problems = []
    config = read_json(args.config, problems)
    problems += image_problems(config, args.revision)
    run_dir = os.path.join(args.root, (config.get("WorkingDir") or SUITE_DIR).lstrip("/"), RUN_DIR)
    problems += run_problems(run_dir, args.revision, args.epochs)
    if args.output:
        problems += output_problems(args.output, args.epochs, args.cuda_build)
    if args.distributions:
        problems += distribution_problems(args.distributions)
    for problem in problems:
        print(f"check_run: {problem}", file=sys.stderr)
    if problems:
        return 1
    budget = f" (epochs={args.epochs})" if args.epochs is not None else ""
    print(f"check_run: the image runs {' '.join(COMMAND)} in {SUITE_DIR}; {RUN_DIR}{budget} passed; "
          f"revision {args.revision}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
