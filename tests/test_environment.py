"""The environment the set-up makes: exactly one TensorFlow distribution, and the pins it asked for.

tf-keras asks for `tensorflow`; installed with its requirements beside `tensorflow-cpu` it gives two
distributions writing one tensorflow/ folder, the CUDA build among them, whose start-up errors every
CPU rank then prints. scripts/setup.sh installs tf-keras without its requirements.
"""
import importlib.metadata
import os
import re
import subprocess

from helpers.running import REPO, container_check_run

# Every name under which PyPI ships a TensorFlow build (the list the image's check uses).
TENSORFLOW_DISTRIBUTIONS = container_check_run().TENSORFLOW_DISTRIBUTIONS


def _installed():
    names = {}
    for dist in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        names[name] = dist.version
    return names


def _requirements_file(installed):
    """The requirements file the running environment was made from: tf-keras is only in 2.18's."""
    return "requirements.txt" if "tf-keras" in installed else "requirements-tf2.15.txt"


def _pins(path):
    pins = {}
    with open(path) as handle:
        for line in handle:
            name, sep, version = line.split("#", 1)[0].strip().partition("==")
            if sep:
                pins[name.lower()] = version
    return pins


def test_one_tensorflow_distribution():
    installed = _installed()
    found = sorted(f"{name}=={installed[name]}" for name in TENSORFLOW_DISTRIBUTIONS if name in installed)
    assert len(found) == 1, f"TensorFlow distributions in {os.path.dirname(os.__file__)}: {found}"


def test_the_pinned_tensorflow_is_the_one_installed():
    """tensorflow-cpu on this CPU machine (the GPU set-up swaps in `tensorflow` of the same version)."""
    installed = _installed()
    requirements = _requirements_file(installed)
    pins = _pins(os.path.join(REPO, requirements))
    tensorflow = {name: version for name, version in pins.items() if name in TENSORFLOW_DISTRIBUTIONS}
    (name, version), = tensorflow.items()
    device_name = "tensorflow" if installed.get("tensorflow") else name
    assert installed.get(device_name) == version, (device_name, installed.get(device_name))
    if "tf-keras" in pins:
        assert installed.get("tf-keras") == pins["tf-keras"]


def test_every_pin_is_the_version_installed():
    """A pin pip resolved around (another package asking for a different version) would go unnoticed
    otherwise: ml-dtypes, for one, is pinned for its import time, below what pip would pick."""
    installed = _installed()
    requirements = _requirements_file(installed)
    pinned = _pins(os.path.join(REPO, requirements))
    pins = {re.sub(r"[-_.]+", "-", name): version for name, version in pinned.items()}
    device = {"tensorflow-cpu": "tensorflow"} if installed.get("tensorflow") else {}
    wrong = {name: (version, installed.get(device.get(name, name))) for name, version in pins.items()
             if installed.get(device.get(name, name)) != version}
    assert not wrong, f"{requirements}: pinned and installed differ: {wrong}"


def test_a_repeated_setup_leaves_the_environment_it_runs_from_alone():
    """`make demo` runs the set-up again while other processes start from `.venv` (a test run beside it):
    the link is not remade and the suite not reinstalled when nothing they depend on changed."""
    legacy = "tf-keras" in _installed()
    link = os.path.join(REPO, ".venv" if legacy else ".venv-tf2.15")
    knobs = {} if legacy else {"SUITE_REQUIREMENTS": "requirements-tf2.15.txt",
                               "SUITE_ENV_LINK": ".venv-tf2.15"}

    def set_up():
        result = subprocess.run(["bash", "scripts/setup.sh"], cwd=REPO, env={**os.environ, **knobs},
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        return result.stderr.strip().splitlines()[-1]

    set_up()  # brings an install older than this clone's packaging up to date first
    environment = os.path.realpath(link)
    link_before, log_before = os.lstat(link), os.stat(environment + ".pip.log").st_mtime_ns
    ready = rf"\[setup\] ready: {re.escape(link)} -> {re.escape(environment)} \((cpu|gpu)\)"
    assert re.fullmatch(ready, set_up())
    link_after = os.lstat(link)
    assert (link_after.st_ino, link_after.st_mtime_ns) == (link_before.st_ino, link_before.st_mtime_ns)
    assert os.stat(environment + ".pip.log").st_mtime_ns == log_before, "pip ran again"
