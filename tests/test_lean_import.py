"""suite.lean_tensorflow_import(): what a rank imports, without tf-keras's optional pandas and SciPy."""
import json
import os
import subprocess
import sys

import pytest

import suite
from helpers.running import REPO, imported_modules


def test_a_held_back_module_cannot_be_imported_inside_and_imports_after():
    # `json.tool` stands in for pandas: a module this interpreter has not imported yet.
    sys.modules.pop("json.tool", None)
    with suite.lean_tensorflow_import(held_back=("json.tool",)):
        with pytest.raises(ImportError):
            import json.tool  # noqa: F401
    import json.tool as tool
    assert callable(tool.main)


def test_a_module_already_imported_is_left_alone():
    with suite.lean_tensorflow_import(held_back=("json",)):
        import json as inside
    assert inside is json and sys.modules["json"] is json


def test_a_rank_imports_tensorflow_without_pandas_or_scipy_and_both_still_import_after():
    # A fresh interpreter: this test process may have loaded either already.
    probe = (
        "import json, sys\n"
        "import suite\n"
        "with suite.lean_tensorflow_import():\n"
        "    import suite.train.session\n"
        "    import tensorflow as tf\n"
        "seen = {'during': sorted(n for n in ('pandas', 'scipy') if n in sys.modules)}\n"
        "layer = tf.keras.layers.Dense(2)\n"
        "seen['keras_output'] = list(layer(tf.ones((1, 3))).shape)\n"
        "import pandas, scipy.sparse\n"
        "seen['after'] = [pandas.__name__, scipy.sparse.__name__]\n"
        "print(json.dumps(seen))\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"during": [], "keras_output": [1, 2], "after": ["pandas", "scipy.sparse"]}


def test_a_ranks_entry_point_loads_tensorflow_and_horovod_without_pandas_or_scipy(tmp_path):
    # The rank's own path through suite.train.runner: a missing data directory stops it right after
    # its imports, with the error named.
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "models.bert", "--preset", "tiny_cpu",
                           "--data-dir", str(tmp_path / "missing"), "--run-dir", str(tmp_path / "run")],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode != 0 and f"data directory not found: {tmp_path / 'missing'}" in done.stderr
    modules = imported_modules(done.stderr)
    assert {"tensorflow", "tf_keras.src.optimizers", "horovod.tensorflow"} <= set(modules)
    # A held-back import that tf-keras attempts still shows (`scipy.sparse`, a few microseconds); a
    # real load shows the packages' insides, which every import of them goes through.
    assert [name for name in modules if name.startswith(("pandas._", "pandas.core", "scipy._"))] == []


def test_without_the_context_tensorflow_loads_them_here():
    # The reason the context exists: if tf-keras stopped importing them, it would be dead weight.
    probe = ("import sys\nimport suite.train.session\n"
             "print(sorted(n for n in ('pandas', 'scipy') if n in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['pandas', 'scipy']"
