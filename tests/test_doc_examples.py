"""Every dry-run example the docs and --help texts give runs as written, from a fresh clone.

A fresh clone has only the tracked files: the shipped hostfiles and profiles with their placeholders,
no data, no runs. Each example is run in such a copy through bash, exactly as written, and must print
the whole command of every launch (the model and its flags included), list every placeholder it
marked, and exit with the code its comment documents ("exit 3", "exit 0").
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from helpers.running import REPO, imported_modules, subprocess_env

DOCS = ("docs/launching.md", "hostfiles/README.md")
# Pages whose every bash block is marked on the line above it: `<!-- doc-test: run -->` blocks run in
# page order, as written, in one fresh clone per page (a git checkout, so build.sh can tag); each
# command must exit 0, or the code a comment right above it states ("exit 3"). `<!-- doc-test: skip:
# why -->` blocks need what this machine lacks (GPUs, a cluster, Docker). A new page is one line here.
RUN_DOCS = ("docs/scaling-study.md", "docs/gpu-workflow.md")
MARKED_BLOCK = re.compile(r"(?:<!-- doc-test: (run|skip: [^>]*?) -->\n)?```bash\n(.*?)```", re.S)
ENTRY_POINTS = ("suite.cluster.launch", "suite.cluster.sweep")
LAUNCHERS = ("horovodrun", "mpirun", "srun")
EXIT = re.compile(r"\bexit (\d+)\b")
MARKER = re.compile(r"<REPLACE-ME-\d+>")
ENV_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def doc_examples(text):
    """[(command, the text before it)] for every dry run of the entry points in text's bash blocks."""
    examples = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        examples += _dry_runs(block.replace("\\\n", " ").splitlines())
    return examples


def help_examples(text):
    """The same for an argparse --help text: indented command lines, `\\` continued."""
    return _dry_runs(re.sub(r"\\\n\s*", " ", text).splitlines())


def _dry_runs(lines):
    found = []
    for number, line in enumerate(lines):
        command = line.strip()
        if "--dry-run" in command and any(f"-m {name} " in command for name in ENTRY_POINTS) \
                and not command.startswith("#"):
            found.append((command, "\n".join(lines[max(0, number - 3):number])))
    return found


def documented_exit(command, before):
    """The exit code the nearest comment above the example states."""
    codes = EXIT.findall(before)
    assert codes, f"the example does not say its exit code in the lines above it: {command}"
    return int(codes[-1])


def _all_examples():
    examples = []
    for doc in DOCS:
        with open(os.path.join(REPO, doc)) as handle:
            examples += [(doc, *example) for example in doc_examples(handle.read())]
    for name in ENTRY_POINTS:
        text = subprocess.run([sys.executable, "-m", name, "--help"], cwd=REPO, capture_output=True,
                              text=True, env=subprocess_env(), timeout=60).stdout
        examples += [(f"{name} --help", *example) for example in help_examples(text)]
    return examples


EXAMPLES = _all_examples()


def test_the_docs_and_help_texts_give_dry_run_examples():
    """Each place has at least one, and the launching page shows every launcher and the sweep."""
    places = {place for place, _, _ in EXAMPLES}
    assert places == {*DOCS, *(f"{name} --help" for name in ENTRY_POINTS)}
    readme = " ".join(command for place, command, _ in EXAMPLES if place == "docs/launching.md")
    assert "--launcher srun" in readme and "--launcher mpirun" in readme and "suite.cluster.sweep" in readme


@pytest.fixture(scope="module")
def clean_clone(tmp_path_factory):
    return make_clone(tmp_path_factory)


def make_clone(tmp_path_factory):
    """The tracked files as they are in the working tree, and the .venv link scripts/setup.sh makes."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    root = tmp_path_factory.mktemp("clone")
    for name in filter(None, listed.stdout.split("\0")):
        source = os.path.join(REPO, name)
        if os.path.isfile(source):
            os.makedirs(os.path.dirname(root / name), exist_ok=True)
            shutil.copy2(source, root / name)
    os.symlink(sys.prefix, root / ".venv")
    # A bare login node: the dry run must not need TensorFlow or Horovod.
    blocked = tmp_path_factory.mktemp("no_tensorflow")
    for name in ("tensorflow", "horovod"):
        (blocked / name).mkdir()
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed here')\n")
    return root, f"{blocked}{os.pathsep}{root}"


def run_as_written(command, root, pythonpath, **env):
    """The command line through bash in the clean clone, `python` being this environment's."""
    return subprocess.run(["bash", "-c", command], cwd=root, capture_output=True, text=True, timeout=120,
                          env=subprocess_env(PYTHONPATH=pythonpath, **env))


@pytest.mark.parametrize("place,command,before", EXAMPLES,
                         ids=[f"{place}:{i}" for i, (place, _, _) in enumerate(EXAMPLES)])
def test_example_runs_as_written(place, command, before, clean_clone):
    root, pythonpath = clean_clone
    # Python lists every module it imports on stderr: the rank side must not be among them.
    result = run_as_written(command, root, pythonpath, PYTHONPROFILEIMPORTTIME="1")
    said = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert result.returncode == documented_exit(command, before), result.stdout[-2000:] + "\n".join(said)
    assert not [line for line in said if line.startswith("error")], said
    imported = set(imported_modules(result.stderr))
    assert "suite.common.modelargs" in imported  # the model check ran
    assert not {name for name in imported if name.split(".")[0] in ("tensorflow", "horovod")
                or name.startswith("suite.train")}
    launches = [line for line in result.stdout.splitlines() if line.split(" ", 1)[0] in LAUNCHERS]
    _check_full_commands(command, launches)
    _check_placeholders(result.stdout, launches, marked=result.returncode == 3)
    assert not os.path.exists(root / "runs"), "a dry run wrote something"


def _check_full_commands(example, launches):
    """Every launch line ends with the model command as the example gives it (the sweep adds its own)."""
    assert launches, "no launcher command printed"
    model = shlex.split(example.split(" -- ", 1)[1])
    for line in launches:
        argv = shlex.split(line)
        module_args = argv[argv.index("-m") + 1:]  # no launcher here has a -m flag of its own
        if module_args[0] == model[0]:
            assert module_args[:len(model)] == model, line
        else:
            assert module_args[0] == "suite.train.allreduce", line  # a sweep's --allreduce
    if "suite.cluster.sweep" in example:
        assert sum(model[0] in line for line in launches) >= 5  # every run of every scale
    else:
        assert len(launches) == 1


def _check_placeholders(stdout, launches, marked):
    """Marked placeholders: each one in the commands is listed once with its source; none otherwise."""
    listed = [line for line in stdout.splitlines() if line.startswith("# <REPLACE-ME-")]
    in_commands = set(MARKER.findall("\n".join(launches + [line for line in stdout.splitlines()
                                                           if ENV_LINE.match(line)])))
    if not marked:
        assert not listed and "REPLACE-ME" not in stdout, stdout
        return
    assert in_commands, "exit 3 without a marked placeholder"
    assert sorted(MARKER.match(line[2:])[0] for line in listed) == sorted(in_commands)
    for line in listed:
        assert re.search(r"(hostfiles/\w+:\d+ host|profile \S+ \(\S+\.yaml:\d+\)) ", line), line


def test_the_docs_show_the_listing_the_first_example_prints(clean_clone):
    """The sample placeholder listing on the launching page is what its first dry-run example prints
    (up to '...')."""
    root, pythonpath = clean_clone
    with open(os.path.join(REPO, "docs", "launching.md")) as handle:
        text = handle.read()
    sample = re.search(r"```\n(# \d+ placeholders? left.*?)```", text, flags=re.S)[1].splitlines()
    result = run_as_written(doc_examples(text)[0][0], root, pythonpath)
    printed = [line for line in result.stdout.splitlines() if line.startswith("#")]
    shown = [line.split("...")[0].rstrip(" (;") for line in sample if line != "..."]
    assert len(shown) >= 3 and len(printed) == int(sample[0].split()[1]) + 1
    for line in shown:
        assert any(out.startswith(line) for out in printed), line


def marked_blocks(text):
    """[(marker, body)] of every bash block: marker "run", "skip: <why>", or None when unmarked."""
    return [(marker or None, body) for marker, body in MARKED_BLOCK.findall(text)]


def block_commands(body):
    """[(command, expected exit)]: `\\` continuations and open parentheses (bash arrays) joined; the
    exit code from an "exit N" comment in the lines right above a command, else 0."""
    found, pending, comments = [], "", []
    for line in body.replace("\\\n", " ").splitlines():
        if not pending and line.lstrip().startswith("#"):
            comments.append(line)
            continue
        if not pending and not line.strip():
            comments = []
            continue
        pending = f"{pending}\n{line}" if pending else line
        if pending.count("(") > pending.count(")"):
            continue
        codes = EXIT.findall("\n".join(comments))
        found.append((pending, int(codes[-1]) if codes else 0))
        pending, comments = "", []
    return found


@pytest.mark.parametrize("doc", RUN_DOCS)
def test_every_bash_block_of_the_pages_is_marked(doc):
    with open(os.path.join(REPO, doc)) as handle:
        blocks = marked_blocks(handle.read())
    unmarked = [body[:80] for marker, body in blocks if not marker]
    assert blocks and not unmarked, unmarked
    assert any(marker == "run" for marker, _ in blocks)


@pytest.mark.parametrize("doc", RUN_DOCS)
def test_every_runnable_command_of_the_pages_runs_as_written(doc, tmp_path_factory):
    """The page's run blocks in order, in one bash, in a fresh clone: each command's exit is checked."""
    root, pythonpath = make_clone(tmp_path_factory)
    git = ["git", "-C", str(root), "-c", "user.name=doc", "-c", "user.email=doc@example.com"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "clone"]):
        subprocess.run([*git, *step], check=True, capture_output=True)
    with open(os.path.join(REPO, doc)) as handle:
        commands = [command for marker, body in marked_blocks(handle.read()) if marker == "run"
                    for command in block_commands(body)]
    exits = root / ".doc-exits"
    script = "".join(f"{command}\necho $? >> {shlex.quote(str(exits))}\n" for command, _ in commands)
    result = run_as_written(script, root, pythonpath)
    said = [line for line in result.stderr.splitlines() if line.startswith("error")]
    got = [int(code) for code in exits.read_text().split()] if exits.exists() else []
    assert got == [code for _, code in commands], (list(zip(commands, got)), result.stderr[-3000:])
    assert not said, said
