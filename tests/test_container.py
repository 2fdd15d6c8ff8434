"""container/build.sh's buildah engine, scripts/image-test.sh and container/check_run.py, without building.

The real build and run of the images is CI's own step, `make image-test` (scripts/image-test.sh); these
are the fast checks of the pieces it is made of: the commands build.sh hands buildah, the one-line
refusals, the checker of the image's run against good and broken runs, and the git revision a run
records inside an image.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from helpers.running import REPO

CONTAINER = os.path.join(REPO, "container")
IMAGE_TEST = os.path.join(REPO, "scripts", "image-test.sh")
CHECK_RUN = os.path.join(CONTAINER, "check_run.py")
SUITE_DIR = "/opt/mlperf-hvd-suite"


def tool_dir(tmp_path, **stand_ins):
    """A PATH with the few tools the scripts need and stand-ins (name -> bash body) for the rest."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "sed", "head", "tail", "git", "mkdir", "printf", "cat", "sha256sum", "cut",
                 "mktemp", "rm", "tee", "id", "python3", "cp"):
        if shutil.which(tool):
            (bin_dir / tool).symlink_to(shutil.which(tool))
    for name, body in stand_ins.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    return str(bin_dir)


def script(path, *args, bin_dir, cache, **env):
    return subprocess.run(["/bin/bash", path, *args], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PATH": bin_dir, "HOME": os.environ.get("HOME", "/root"),
                               "SUITE_CACHE_DIR": str(cache), "SUITE_SKIP_APT": "1", **env})


def one_line_error(result, code, start, *culprits):
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), result.stderr
    for culprit in culprits:
        assert culprit in lines[0], lines[0]


# --- build.sh --engine buildah ---------------------------------------------------------------------

def setup_sh(body, *, stand_ins=None, **env):
    """bash with scripts/setup.sh sourced (its functions, not its main) and `body` run after it; the
    stand-ins (name -> bash body) first on PATH."""
    path = os.environ["PATH"]
    if stand_ins:
        bin_dir = stand_ins.pop("_dir")
        os.makedirs(bin_dir, exist_ok=True)
        for name, text in stand_ins.items():
            with open(os.path.join(bin_dir, name), "w") as handle:
                handle.write("#!/bin/bash\n" + text)
            os.chmod(os.path.join(bin_dir, name), 0o755)
        path = f"{bin_dir}:{path}"
    return subprocess.run(["bash", "-c", f"source {REPO}/scripts/setup.sh\n{body}"], cwd=REPO,
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": path, "HOME": os.environ.get("HOME", "/root"), **env})


def setup_sh_wheel_cache():
    """Where scripts/setup.sh keeps the Horovod wheel in an image build (root, no SUITE_CACHE_DIR)."""
    result = setup_sh('printf "%s" "$cache_dir/wheels"', HOME="/root")
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_buildah_build_caches_the_horovod_wheel_where_setup_looks(tmp_path):
    calls = tmp_path / "calls"
    bin_dir = tool_dir(tmp_path, buildah=f'printf "%s\\n" "$*" >> {calls}\n')
    cache = tmp_path / "cache"
    ca_bundle = tmp_path / "proxy-ca.crt"
    ca_bundle.write_text("-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n")
    result = script(os.path.join(CONTAINER, "build.sh"), "--engine", "buildah", "--device", "cpu",
                    "--base-image", "localhost/base:1", "--registry", "r.example.com/m", "--push",
                    bin_dir=bin_dir, cache=cache, SSL_CERT_FILE=str(ca_bundle))
    assert result.returncode == 0, result.stderr
    bud, push = calls.read_text().splitlines()
    tag = re.search(r"-t (\S+) ", bud)[1]
    assert tag.startswith("r.example.com/m/mlperf-hvd-suite:") and tag.endswith("-cpu")
    assert result.stderr == f"image: {tag}\n" and push == f"push {tag}"
    words = bud.split()
    assert words[:2] == ["bud", "--format"] and words[2] == "docker"  # SHELL is kept only in docker format
    assert "--isolation chroot" in bud and "--layers" in bud
    # make setup's own wheel cache on this host, where the image's setup.sh looks for its wheel.
    host = setup_sh('printf "%s" "$cache_dir/wheels"', SUITE_CACHE_DIR=str(cache)).stdout
    assert host == f"{cache}/wheels"
    assert f"--volume {host}:{setup_sh_wheel_cache()} " in bud
    assert "--build-arg BASE_IMAGE=localhost/base:1 " in bud
    assert f"-f {CONTAINER}/Dockerfile.cpu " in bud and bud.endswith(f" {REPO}")
    # The cache exists on the host before the build mounts it; pip in the build trusts the host's CAs
    # (the site-wide pip configuration is read from /etc/xdg/pip/pip.conf).
    assert (cache / "wheels").is_dir() and not (cache / "images" / "wheels").exists()
    assert f"--volume {cache}/images/pip-config:/etc/xdg/pip:ro " in bud
    pip_config = cache / "images" / "pip-config"
    assert (pip_config / "pip.conf").read_text() == "[global]\ncert = /etc/xdg/pip/ca.crt\n"
    assert (pip_config / "ca.crt").read_text() == ca_bundle.read_text()


def test_buildah_target_builds_one_stage(tmp_path):
    result = script(os.path.join(CONTAINER, "build.sh"), "--dry-run", "--engine", "buildah",
                    "--device", "gpu", "--target", "suite-check", bin_dir=tool_dir(tmp_path), cache=tmp_path)
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert line.startswith("buildah bud ") and "--target suite-check " in line
    assert re.search(r"-t mlperf-hvd-suite:\S+-gpu-suite-check ", line), line
    assert not (tmp_path / "images").exists()  # a dry run writes nothing


@pytest.mark.parametrize("args, culprit", [
    (["--engine", "podman"], "--engine must be docker or buildah, not 'podman'"),
    (["--target", "suite-check"], "--target names a stage of one Dockerfile"),
    (["--engine"], "--engine needs a value"),
])
def test_build_refuses_bad_engine_flags(tmp_path, args, culprit):
    result = script(os.path.join(CONTAINER, "build.sh"), *args, bin_dir=tool_dir(tmp_path), cache=tmp_path)
    one_line_error(result, 2, "build.sh: error: ", culprit)


def test_build_refuses_without_buildah(tmp_path):
    result = script(os.path.join(CONTAINER, "build.sh"), "--engine", "buildah", "--device", "cpu",
                    bin_dir=tool_dir(tmp_path), cache=tmp_path)
    one_line_error(result, 2, "build.sh: error: buildah not found", "apt-get install buildah")


# --- the Horovod wheel that make setup and the image build share -----------------------------------

# What a Debian bookworm host with Python 3.11.7 and the image on it (Debian's 3.11.2) both answer.
BOOKWORM = {"soabi": "cpython-311-x86_64-linux-gnu", "glibc": "glibc 2.36", "gxx": "12.2.0",
            "mpirun": "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/"}


def wheel_setup(tmp_path, body, machine=BOOKWORM, **env):
    """setup.sh's functions on a stand-in machine: its venv's python answers the SOABI, getconf, g++
    and mpirun their versions, and pip wheel (counted in pip.calls) writes a wheel where it is told."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    for name, text in (("python", f'echo {machine["soabi"]}\n'),
                       ("pip", f'echo "$*" >> {tmp_path}/pip.calls\n'
                               'while [[ $1 != -w ]]; do shift; done\n'
                               'touch "$2/horovod-0.28.1-cp311-cp311-linux_x86_64.whl"\n')):
        (venv / "bin" / name).write_text("#!/bin/bash\n" + text)
        (venv / "bin" / name).chmod(0o755)
    stand_ins = {"_dir": str(tmp_path / "bin"), "getconf": f'echo "{machine["glibc"]}"\n',
                 "g++": f'echo {machine["gxx"]}\n', "mpirun": f'printf "%s\\n" "{machine["mpirun"]}"\n'}
    return setup_sh(body.replace("VENV", str(venv)), stand_ins=stand_ins,
                    SUITE_CACHE_DIR=str(tmp_path / "cache"), **env)


def wheel_key(tmp_path, **changes):
    result = wheel_setup(tmp_path, "wheel_key VENV cpu", {**BOOKWORM, **changes})
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_wheel_key_names_what_the_binary_depends_on(tmp_path):
    with open(os.path.join(REPO, "requirements.txt")) as handle:
        tensorflow = re.search(r"^tensorflow-cpu==(\S+)$", handle.read(), re.MULTILINE)[1]
    key = wheel_key(tmp_path)
    assert key == (f"horovod-0.28.1-tf{tensorflow}-cpu-cpython-311-x86_64-linux-gnu-glibc2.36-gcc12.2.0"
                   "-ompi4.1.4")
    # Each of them, changed alone, is another wheel: another Python ABI, C library, compiler or MPI.
    others = {wheel_key(tmp_path, soabi="cpython-312-x86_64-linux-gnu"),
              wheel_key(tmp_path, glibc="glibc 2.41"), wheel_key(tmp_path, gxx="14.2.0"),
              wheel_key(tmp_path, mpirun="mpirun (Open MPI) 5.0.7"),
              wheel_key(tmp_path, mpirun="HYDRA build details:")}
    assert key not in others and len(others) == 5
    assert "-mpi" in wheel_key(tmp_path, mpirun="HYDRA build details:")


def test_this_machine_has_a_wheel_key():
    """The real tools of this machine: nothing in the key is empty (an unanswered part reads 'none')."""
    result = setup_sh(f"wheel_key {os.path.dirname(os.path.dirname(sys.executable))} cpu")
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"horovod-[0-9.]+-tf[0-9.]+-cpu-cpython-\d+-\S+-glibc[0-9.]+-gcc[0-9.]+-ompi[0-9.]+",
                        result.stdout), result.stdout


def test_a_wheel_of_the_same_key_is_reused_not_compiled(tmp_path):
    key = wheel_key(tmp_path)
    wheel = tmp_path / "cache" / "wheels" / key / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    wheel.parent.mkdir(parents=True)
    wheel.touch()
    result = wheel_setup(tmp_path, "build_horovod_wheel VENV cpu")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{wheel}\n"
    assert result.stderr == f"[setup] reusing the Horovod wheel {wheel}\n"
    assert not (tmp_path / "pip.calls").exists()


def test_without_a_wheel_of_its_key_it_compiles_one_into_the_cache(tmp_path):
    key = wheel_key(tmp_path)
    other = tmp_path / "cache" / "wheels" / key.replace("glibc2.36", "glibc2.41") / "horovod-0.28.1.whl"
    other.parent.mkdir(parents=True)
    other.touch()  # another machine's wheel: not this one's
    result = wheel_setup(tmp_path, "build_horovod_wheel VENV cpu")
    assert result.returncode == 0, result.stderr
    wheel_dir = tmp_path / "cache" / "wheels" / key
    assert result.stdout == f"{wheel_dir}/horovod-0.28.1-cp311-cp311-linux_x86_64.whl\n"
    assert result.stderr.startswith(f"[setup] building Horovod 0.28.1 from source into {wheel_dir} ")
    assert (tmp_path / "pip.calls").read_text().startswith("wheel --no-deps ")
    assert sorted(os.listdir(tmp_path / "cache" / "wheels")) == sorted([key, other.parent.name])


# horovodrun --check-build's report as Horovod 0.28.1 prints it (the [X] PyTorch as in this suite's
# environment, which has no torch).
CHECK_BUILD = """Horovod v0.28.1:

Available Frameworks:
    [X] TensorFlow
    [X] PyTorch
    [ ] MXNet

Available Controllers:
    [X] MPI
    [X] Gloo

Available Tensor Operations:
    [ ] NCCL
    [ ] DDL
    [ ] CCL
    [X] MPI
    [X] Gloo
"""


@pytest.mark.parametrize("report, passes, line", [
    (CHECK_BUILD, True, "frameworks: TensorFlow PyTorch; controllers: MPI Gloo; tensor operations: MPI Gloo"),
    # A reused wheel whose TensorFlow extension does not load: --check-build still exits 0.
    (CHECK_BUILD.replace("[X] TensorFlow", "[ ] TensorFlow"), False,
     "frameworks: PyTorch; controllers: MPI Gloo; tensor operations: MPI Gloo"),
    (CHECK_BUILD.replace("    [X] Gloo\n\nAvailable Tensor", "    [ ] Gloo\n\nAvailable Tensor"), False,
     "frameworks: TensorFlow PyTorch; controllers: MPI; tensor operations: MPI Gloo"),
])
def test_the_check_build_line_and_verdict(tmp_path, report, passes, line):
    (tmp_path / "report").write_text(report)
    result = setup_sh(f'check_build_summary < {tmp_path}/report || echo "rc=$?"')
    assert result.stdout == line + "\n" + ("" if passes else "rc=1\n"), result.stderr


# --- the GPU image's suite-check stage -----------------------------------------------------------

def test_every_gpu_build_runs_the_suite_check_stage():
    """The stage make image-test builds without NGC is one every real GPU build needs too."""
    with open(os.path.join(CONTAINER, "Dockerfile.gpu")) as handle:
        text = handle.read()
    froms = re.findall(r"^FROM (\S+)(?: AS (\S+))?$", text, re.MULTILINE)
    assert froms == [("${BASE_IMAGE}", "suite-check"), ("nvcr.io/nvidia/tensorflow:${NGC_TAG}", "")]
    final = text.split("FROM nvcr.io", 1)[1]
    assert re.search(r"^COPY --from=suite-check /opt/suite-check\.txt ", final, re.MULTILINE)
    check = text.split("FROM ${BASE_IMAGE} AS suite-check", 1)[1].split("FROM nvcr.io", 1)[0]
    assert "> /opt/suite-check.txt" in check
    # It installs the same pins as the NGC stage, and the suite the same way.
    pins = re.search(r"--no-binary=mpi4py -c /tmp/keep.txt \\\n\s+(.+) \\\n", final)[1]
    assert f"pip install --no-cache-dir {pins} " in check
    assert "pip install --no-cache-dir --no-deps --no-build-isolation /opt/mlperf-hvd-suite" in check


def test_suite_check_renders_the_dockerfile_from_its_header(tmp_path):
    """The stage's stale-rendering check, run here as the stage runs it (bash, the header's command)."""
    with open(os.path.join(CONTAINER, "Dockerfile.gpu")) as handle:
        text = handle.read()
    check = text.split("FROM ${BASE_IMAGE} AS suite-check", 1)[1].split("FROM nvcr.io", 1)[0]
    steps = re.search(r"(render=.*?\| diff - container/Dockerfile\.gpu)", check, re.DOTALL)[1]
    steps = steps.replace("\\\n", "\n").replace("/opt/suite-check/bin/python", sys.executable)
    commands = [line.strip().removeprefix("&& ") for line in steps.splitlines()]
    stale = tmp_path / "repo"
    shutil.copytree(REPO, stale, ignore=shutil.ignore_patterns(".git", ".venv*", "runs", "__pycache__"))
    for repo, expected in ((REPO, 0), (stale, 1)):
        if repo == stale:  # a pin changed without rendering again
            requirements = stale / "requirements.txt"
            requirements.write_text(re.sub(r"tqdm==\S+", "tqdm==0.0.1", requirements.read_text()))
        result = subprocess.run(["bash", "-c", " && ".join(commands)], cwd=repo, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == expected, result.stdout + result.stderr
    assert "tqdm==0.0.1" in result.stdout


# --- scripts/image-test.sh -----------------------------------------------------------------------

def test_image_test_passes_bash_and_shellcheck():
    assert os.access(IMAGE_TEST, os.X_OK)
    for command in (["bash", "-n"], ["shellcheck", "--shell=bash"]):
        result = subprocess.run([*command, IMAGE_TEST], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_image_test_says_in_one_line_when_chroot_isolation_is_refused(tmp_path):
    refusing = ('case $1 in\n'
                '  inspect) exit 0 ;;\n'
                '  from) echo working-container ;;\n'
                '  run) echo "error running container: setrlimit: operation not permitted" >&2; exit 1 ;;\n'
                'esac\n')
    result = script(IMAGE_TEST, bin_dir=tool_dir(tmp_path, buildah=refusing, debootstrap="exit 1"),
                    cache=tmp_path)
    one_line_error(result, 1, "[image-test] error: this machine refuses buildah's chroot isolation",
                   "setrlimit: operation not permitted")


def test_image_test_names_missing_tools_it_may_not_install(tmp_path):
    result = script(IMAGE_TEST, bin_dir=tool_dir(tmp_path), cache=tmp_path)
    one_line_error(result, 1, "[image-test] error: buildah debootstrap not installed and SUITE_SKIP_APT=1")


# --- container/check_run.py ----------------------------------------------------------------------

REVISION = "1a2b3c4"


def good_run(tmp_path):
    """What a passing image leaves: its config, its file system with the demo's run, the demo's output."""
    config = {"Cmd": ["make", "demo"], "WorkingDir": SUITE_DIR,
              "Env": [f"PATH={SUITE_DIR}/.venv/bin:/usr/bin:/bin", f"SUITE_GIT_REVISION={REVISION}"]}
    run_dir = tmp_path / "root" / SUITE_DIR.lstrip("/") / "runs" / "demo" / "run"
    run_dir.mkdir(parents=True)
    (run_dir / "result_0.txt").write_text(':::MLLOG {"key": "run_stop"}\n')
    (run_dir / "config.json").write_text("{}")
    (run_dir / "env.json").write_text(json.dumps({
        "git_revision": REVISION, "world_size": 2,
        "command": [f"{SUITE_DIR}/models/resnet50/__main__.py", "--preset", "tiny_cpu"]}))
    (run_dir / "summary.json").write_text(json.dumps({
        "status": "success", "accuracy": 0.95, "target_accuracy": 0.9, "weights_in_sync": True}))
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "demo.log").write_text("run success: accuracy 0.95\nINFO - SUCCESS\n"
                                       "MLPerf log: runs/demo/run/result_0.txt\n")
    return run_dir


def check_run(tmp_path, *args):
    distributions = tmp_path / "distributions.txt"
    if not distributions.exists():
        distributions.write_text("numpy\ntensorflow-cpu\ntf_keras\nhorovod\n")
    return subprocess.run([sys.executable, CHECK_RUN, "--config", str(tmp_path / "config.json"),
                           "--root", str(tmp_path / "root"), "--revision", REVISION,
                           "--output", str(tmp_path / "demo.log"), "--distributions", str(distributions),
                           *args], capture_output=True, text=True, timeout=60)


def test_check_run_passes_a_good_run(tmp_path):
    good_run(tmp_path)
    result = check_run(tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert f"revision {REVISION}" in result.stdout


# name: (file, its new values, what the checker says); config.json is the image's, the rest the run's.
JSON_BREAKAGES = {
    "revision unknown in env.json": ("env.json", {"git_revision": "unknown"},
                                     "env.json records git_revision 'unknown', not '1a2b3c4'"),
    "one rank": ("env.json", {"world_size": 1}, "world_size 1"),
    "another program": ("env.json", {"command": ["/tmp/x.py"]},
                        "not /opt/mlperf-hvd-suite/models/resnet50/__main__.py"),
    "aborted": ("summary.json", {"status": "aborted"}, "status is 'aborted'"),
    "below target": ("summary.json", {"accuracy": 0.5}, "accuracy 0.5 is below the target 0.9"),
    "weights apart": ("summary.json", {"weights_in_sync": False}, "not in sync"),
    "other command": ("config.json", {"Cmd": ["bash"]}, "command are None ['bash']"),
    "an entry point": ("config.json", {"Entrypoint": ["/bin/sh", "-c"]},
                       "entry point and command are ['/bin/sh', '-c'] ['make', 'demo']"),
    "other folder": ("config.json", {"WorkingDir": "/srv"}, "image working directory is '/srv'"),
    "no revision in the image": ("config.json", {"Env": [f"PATH={SUITE_DIR}/.venv/bin:/bin"]},
                                 "SUITE_GIT_REVISION=None"),
}


def checker_says(tmp_path, *args):
    result = check_run(tmp_path, *args)
    assert result.returncode == 1 and result.stdout == ""
    assert all(line.startswith("check_run: ") for line in result.stderr.splitlines())
    return result.stderr


@pytest.mark.parametrize("breakage", sorted(JSON_BREAKAGES))
def test_check_run_names_what_is_wrong(tmp_path, breakage):
    run_dir = good_run(tmp_path)
    name, changes, culprit = JSON_BREAKAGES[breakage]
    path = (tmp_path if name == "config.json" else run_dir) / name
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    assert culprit in checker_says(tmp_path)


def test_check_run_wants_the_log_and_the_checkers_success(tmp_path):
    run_dir = good_run(tmp_path)
    (run_dir / "result_0.txt").unlink()
    (tmp_path / "demo.log").write_text("run success\nERROR - FAILED\n")
    said = checker_says(tmp_path)
    assert "no result_0.txt" in said and "no 'INFO - SUCCESS'" in said


def test_check_run_wants_a_quiet_start(tmp_path):
    good_run(tmp_path)
    demo_log = tmp_path / "demo.log"
    demo_log.write_text("E0000 00:00:1 cuda_executor.cc] failed call to cuInit: UNKNOWN ERROR (303)\n"
                        + demo_log.read_text())
    said = checker_says(tmp_path)
    assert "start-up is not quiet (1 lines)" in said and "cuInit" in said


@pytest.mark.parametrize("names, culprit", [
    ("tensorflow\ntensorflow-cpu\ntf-keras\n", "2 TensorFlow distributions ['tensorflow', 'tensorflow-cpu']"),
    ("tf_keras\nnumpy\n", "0 TensorFlow distributions []"),
])
def test_check_run_wants_one_tensorflow_distribution(tmp_path, names, culprit):
    good_run(tmp_path)
    (tmp_path / "distributions.txt").write_text(names)
    assert culprit in checker_says(tmp_path)


def budget_run(tmp_path, epochs=1, **summary):
    """What make image-test's shorter demo leaves (DEMO_FLAGS="--set epochs=1"): one epoch trained and
    evaluated, short of the target, run_stop aborted."""
    run_dir = good_run(tmp_path)
    (run_dir / "config.json").write_text(json.dumps({"preset": "tiny_cpu", "config": {"epochs": epochs}}))
    (run_dir / "summary.json").write_text(json.dumps({
        "status": "aborted", "accuracy": 0.4, "target_accuracy": 0.9, "weights_in_sync": True, "steps": 10,
        "evals": [{"epoch_num": 1, "accuracy": 0.4, "step": 10}], **summary}))
    (tmp_path / "demo.log").write_text("run aborted: accuracy 0.4000 after 10 steps\nINFO - SUCCESS\n"
                                       "MLPerf log: runs/demo/run/result_0.txt\n")
    return run_dir


def test_check_run_takes_a_run_cut_to_its_budget_only_when_told(tmp_path):
    budget_run(tmp_path)
    result = check_run(tmp_path, "--epochs", "1")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "runs/demo/run (epochs=1) passed" in result.stdout
    said = checker_says(tmp_path)  # the demo's own run must reach its target
    assert "status is 'aborted'" in said and "below the target" in said and "no 'run success'" in said


def test_check_run_passes_a_budget_run_that_reached_its_target(tmp_path):
    budget_run(tmp_path, status="success", accuracy=0.95)
    (tmp_path / "demo.log").write_text("run success: accuracy 0.95\nINFO - SUCCESS\n"
                                       "MLPerf log: runs/demo/run/result_0.txt\n")
    assert check_run(tmp_path, "--epochs", "1").returncode == 0


@pytest.mark.parametrize("breakage, culprit", [
    (dict(epochs=8), "config.json records epochs 8, not the 1 the command was given"),
    (dict(steps=0), "0 steps and 1 evaluations, not a run that trained and evaluated"),
    (dict(evals=[]), "10 steps and 0 evaluations"),
    (dict(status="success"), "status is 'success' at accuracy 0.4 (target 0.9)"),
    (dict(accuracy=0.95), "status is 'aborted' at accuracy 0.95"),
    (dict(status="error"), "status is 'error'"),
    (dict(weights_in_sync=False), "not in sync"),
])
def test_check_run_still_fails_a_budget_run(tmp_path, breakage, culprit):
    budget_run(tmp_path, **breakage)
    assert culprit in checker_says(tmp_path, "--epochs", "1")


def test_check_run_wants_the_whole_budget_spent_before_an_abort(tmp_path):
    budget_run(tmp_path, epochs=2)  # its one evaluation at epoch 1: stopped before the budget's end
    assert "the last evaluation at epoch 1, before the end of the 2-epoch budget" in checker_says(
        tmp_path, "--epochs", "2")


def test_check_run_wants_how_a_budget_run_ended_in_its_output(tmp_path):
    budget_run(tmp_path)
    (tmp_path / "demo.log").write_text("INFO - SUCCESS\nMLPerf log: runs/demo/run/result_0.txt\n")
    assert "the demo's output has no 'run aborted'" in checker_says(tmp_path, "--epochs", "1")


# --- the revision a run records inside an image ---------------------------------------------------

def recorded_revision(suite_parent, **env):
    code = "from suite.common.runfiles import git_revision; print(git_revision())"
    clean = {k: v for k, v in os.environ.items() if k != "SUITE_GIT_REVISION"}
    return subprocess.run([sys.executable, "-c", code], cwd=suite_parent, env={**clean, **env},
                          capture_output=True, text=True, timeout=60, check=True).stdout.strip()


def test_a_run_outside_a_checkout_records_the_image_revision(tmp_path):
    """An image has no .git: env.json's revision is SUITE_GIT_REVISION there, git's in a checkout."""
    shutil.copytree(os.path.join(REPO, "suite"), tmp_path / "suite",
                    ignore=shutil.ignore_patterns("__pycache__"))
    assert recorded_revision(tmp_path, SUITE_GIT_REVISION=REVISION) == REVISION
    assert recorded_revision(tmp_path) == "unknown"
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert recorded_revision(REPO, SUITE_GIT_REVISION=REVISION).startswith(head.strip())
