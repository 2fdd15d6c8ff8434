"""container/build.sh with the docker engine (a stand-in docker: refusals, tags, push, a dirty tree),
and the container's scripts through bash and shellcheck; its buildah engine is test_container.py's."""
import configparser
import os
import re
import shutil
import subprocess

import pytest

from helpers.deploy import CONTAINER, bash_syntax, shellcheck
from helpers.running import REPO


@pytest.mark.parametrize("name", ["build.sh", "mlperf-sshd.sh"])
def test_container_scripts_pass_bash_and_shellcheck(name):
    path = os.path.join(CONTAINER, name)
    assert os.access(path, os.X_OK), f"{path} is not executable"
    bash_syntax(path)
    shellcheck(path)


def tool_dir(tmp_path, docker=None):
    """A PATH with only what build.sh needs, and optionally a stand-in docker."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "sed", "head", "git"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    if docker is not None:
        (bin_dir / "docker").write_text(docker)
        (bin_dir / "docker").chmod(0o755)
    return str(bin_dir)


def build_sh(*args, path, cwd=REPO, script=None):
    return subprocess.run(["/bin/bash", script or os.path.join(CONTAINER, "build.sh"), *args], cwd=cwd,
                          env={"PATH": path, "HOME": os.environ.get("HOME", "/root")},
                          capture_output=True, text=True, timeout=60)


def test_build_refuses_without_docker(tmp_path):
    result = build_sh("--device", "gpu", path=tool_dir(tmp_path))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("build.sh: error: docker not found")


def test_build_refuses_when_the_engine_does_not_answer(tmp_path):
    fake = '#!/bin/bash\n[[ $1 == info ]] && { echo "Cannot connect to the Docker daemon" >&2; exit 1; }\n'
    result = build_sh(path=tool_dir(tmp_path, docker=fake))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Docker engine does not answer" in result.stderr


def revision():
    sha = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain"], capture_output=True,
                           text=True).stdout
    return sha + ("-dirty" if dirty.strip() else "")


def suite_version():
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO, "setup.cfg"))
    return config["metadata"]["version"]


def test_build_and_push_with_a_stand_in_docker(tmp_path):
    calls = tmp_path / "calls"
    fake = f'#!/bin/bash\nprintf "%s\\n" "$*" >> {calls}\n'
    before = revision()
    result = build_sh("--device", "cpu", "--registry", "r.example.com/mlperf", "--push",
                      path=tool_dir(tmp_path, docker=fake))
    assert result.returncode == 0, result.stderr
    lines = calls.read_text().splitlines()
    tagged = re.search(r"SUITE_REVISION=(\S+)", lines[1])[1]
    assert tagged in {before, revision()}
    tag = f"r.example.com/mlperf/mlperf-hvd-suite:{suite_version()}-g{tagged}-cpu"
    assert lines[0] == "info"
    assert lines[1].startswith(f"build -f {CONTAINER}/Dockerfile.cpu ") and f"-t {tag} {REPO}" in lines[1]
    assert lines[2:] == [f"push {tag}"]
    assert result.stderr == f"image: {tag}\n"


def test_build_flags(tmp_path):
    path = tool_dir(tmp_path)
    before = revision()
    dry = build_sh("--dry-run", "--ngc-tag", "24.04-tf2-py3", path=path)
    assert dry.returncode == 0, dry.stderr
    gpu, cpu = dry.stdout.splitlines()
    tagged = re.search(r"SUITE_REVISION=(\S+)", gpu)[1]
    assert tagged in {before, revision()}
    assert "--build-arg NGC_TAG=24.04-tf2-py3" in gpu and "NGC_TAG" not in cpu
    for line, device in ((gpu, "gpu"), (cpu, "cpu")):
        assert line.endswith(f"-t mlperf-hvd-suite:{suite_version()}-g{tagged}-{device} {REPO}"), line
    for args, culprit in ((["--push"], "--push needs --registry"), (["--device", "tpu"], "--device must be"),
                          (["--registry"], "--registry needs a value"), (["--bogus"], "unknown argument")):
        result = build_sh(*args, path=path)
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and culprit in result.stderr, result


def test_build_tags_a_dirty_tree(tmp_path):
    """The revision part of the tag, in a throwaway repository holding build.sh and setup.cfg."""
    repo = tmp_path / "repo"
    (repo / "container").mkdir(parents=True)
    shutil.copy(os.path.join(CONTAINER, "build.sh"), repo / "container" / "build.sh")
    (repo / "setup.cfg").write_text("[metadata]\nname = x\nversion = 9.8.7\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    sha = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    path = tool_dir(tmp_path)
    script = str(repo / "container" / "build.sh")
    clean = build_sh("--dry-run", "--device", "gpu", path=path, script=script)
    assert clean.stdout.rstrip().endswith(f"-t mlperf-hvd-suite:9.8.7-g{sha}-gpu {repo}"), clean
    (repo / "new-file").write_text("x")
    dirty = build_sh("--dry-run", "--device", "gpu", path=path, script=script)
    assert dirty.stdout.rstrip().endswith(f"-t mlperf-hvd-suite:9.8.7-g{sha}-dirty-gpu {repo}"), dirty
