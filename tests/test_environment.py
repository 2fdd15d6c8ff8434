"""The environment the set-up makes: exactly one TensorFlow distribution, and the pins it asked for.

tf-keras asks for `tensorflow`; installed with its requirements beside `tensorflow-cpu` it gives two
distributions writing one tensorflow/ folder, the CUDA build among them, whose start-up errors every
CPU rank then prints. scripts/setup.sh installs tf-keras without its requirements.
"""
import importlib.metadata
import os
import re

from conftest import REPO, container_check_run

# Every name under which PyPI ships a TensorFlow build (the list the image's check uses).
TENSORFLOW_DISTRIBUTIONS = container_check_run().TENSORFLOW_DISTRIBUTIONS


def _installed():
    names = {}
    for dist in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        names[name] = dist.version
    return names


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
    requirements = "requirements.txt" if "tf-keras" in installed else "requirements-tf2.15.txt"
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
    requirements = "requirements.txt" if "tf-keras" in installed else "requirements-tf2.15.txt"
    pinned = _pins(os.path.join(REPO, requirements))
    pins = {re.sub(r"[-_.]+", "-", name): version for name, version in pinned.items()}
    device = {"tensorflow-cpu": "tensorflow"} if installed.get("tensorflow") else {}
    wrong = {name: (version, installed.get(device.get(name, name))) for name, version in pins.items()
             if installed.get(device.get(name, name)) != version}
    assert not wrong, f"{requirements}: pinned and installed differ: {wrong}"
