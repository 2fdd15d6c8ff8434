"""The two worlds stay apart: the login-node side (suite.cluster, suite.common, the models' presets) runs
without TensorFlow or Horovod."""
import ast
import importlib
import os
import pkgutil
import sys

import pytest

import suite.cluster
import suite.common
from suite.common import benchmarks
from helpers.deploy import CASES
from helpers.report import make_sweep
from helpers.running import REPO, run

HEAVY = ("tensorflow", "horovod", "tf_keras", "keras")


def login_node_modules():
    names = ["suite"]
    for package in (suite.cluster, suite.common):
        names.append(package.__name__)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
    names += [f"{benchmark.module}.presets" for benchmark in benchmarks.discovered().values()]
    return names


def test_login_node_modules_load_neither_tensorflow_nor_horovod_nor_the_rank_side():
    # One fresh interpreter imports each module in turn and names the first that pulls in a heavy one.
    code = "\n".join([
        "import importlib, sys",
        f"for name in {login_node_modules()!r}:",
        "    importlib.import_module(name)",
        f"    loaded = [m for m in sys.modules if m.split('.')[0] in {HEAVY!r}",
        "              or m.startswith('suite.train')]",
        "    if loaded:",
        "        print(f'{name} loaded {sorted(loaded)[:3]}')",
        "        sys.exit(1)",
        "print('clean')",
    ])
    result = run([sys.executable, "-c", code], timeout=120)
    assert result.stdout.strip() == "clean", result.stdout + result.stderr[-2000:]


def test_the_rank_side_never_imports_the_login_node_side():
    import suite.train
    names = [m.name for m in pkgutil.walk_packages(suite.train.__path__, "suite.train.")]
    for benchmark in benchmarks.discovered().values():
        package = importlib.import_module(benchmark.module)
        names += [m.name for m in pkgutil.walk_packages(package.__path__, f"{benchmark.module}.")]
    code = "\n".join([
        "import importlib, sys",
        f"for name in {names!r}:",
        "    importlib.import_module(name)",
        "print(sorted(m for m in sys.modules if m.startswith('suite.cluster')))",
    ])
    result = run([sys.executable, "-c", code], timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_the_list_of_login_node_modules_is_complete():
    # A new cluster module is covered by the test above without anyone adding it by hand.
    names = login_node_modules()
    for module in ("suite.cluster.launch", "suite.cluster.sweep", "suite.cluster.report",
                   "suite.cluster.deploy", "suite.cluster.scaling", "suite.common.results",
                   "suite.cluster.hostfile", "suite.cluster.results_folder",
                   "suite.cluster.measured_time_to_train", "suite.common.time_to_train_split",
                   "suite.common.mlperf_rules",
                   "suite.cluster.rcp", "suite.common.profiles", "suite.common.busbw",
                   "suite.common.runfiles", "suite.common.config",
                   *(f"suite.cluster.sweep.{name}" for name in ("planning", "running", "submission", "cli")),
                   *(f"suite.cluster.report.{name}" for name in ("sweep_folder", "figures", "projection",
                                                                 "published", "formats", "document", "plots",
                                                                 "cli"))):
        assert module in names


def import_graph():
    """{module: the suite modules it imports}, from the source: imports inside functions count too."""
    files = {}
    for folder, _, names in os.walk(os.path.join(REPO, "suite")):
        for name in names:
            if name.endswith(".py"):
                module = os.path.relpath(os.path.join(folder, name), REPO)[:-3].replace(os.sep, ".")
                files[module.removesuffix(".__init__")] = os.path.join(folder, name)
    graph = {}
    for module, path in files.items():
        with open(path) as handle:
            tree = ast.parse(handle.read())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                # `from package import module` names the module; `from module import name` the module.
                found.update(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in files
                             else node.module for alias in node.names)
        graph[module] = sorted(found & set(files) - {module})
    return graph


def test_no_module_imports_itself_through_others():
    graph, done, path = import_graph(), set(), []

    def visit(module):
        path.append(module)
        for imported in graph[module]:
            assert imported not in path, " -> ".join(path[path.index(imported):] + [imported])
            if imported not in done:
                visit(imported)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module)


@pytest.fixture(scope="module")
def without_tensorflow(tmp_path_factory):
    """PYTHONPATH entries that make `import tensorflow` and `import horovod` fail, as on a bare login node."""
    blocked = tmp_path_factory.mktemp("no_tensorflow")
    for name in ("tensorflow", "horovod"):
        (blocked / name).mkdir()
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed here')\n")
    return f"{blocked}{os.pathsep}{REPO}"


def console(script, *args, pythonpath):
    return run([os.path.join(os.path.dirname(sys.executable), script), *args], timeout=120,
               PYTHONPATH=pythonpath)


def test_the_blocker_really_blocks(without_tensorflow):
    result = run([sys.executable, "-c", "import tensorflow"], timeout=60, PYTHONPATH=without_tensorflow)
    assert result.returncode != 0 and "tensorflow is not installed here" in result.stderr


def test_login_node_console_scripts_work_without_tensorflow(without_tensorflow, tmp_path):
    launch = console("mlperf-launch", "--hostfile", "hostfiles/localhost", "-np", "2", "--profile",
                     "local-cpu", "--dry-run", "--", "models.resnet50", "--preset", "tiny_cpu",
                     "--data-dir", "runs/demo/data", pythonpath=without_tensorflow)
    assert launch.returncode == 0 and "horovodrun" in launch.stdout, launch.stderr
    sweep = console("mlperf-sweep", "--dry-run", "--out", str(tmp_path / "sweep"), "--profile", "local-cpu",
                    "--hostfile", "hostfiles/localhost", "--scales", "1,2", "--preset", "sweep_cpu", "--",
                    "models.resnet50", "--data-dir", "runs/sweep-data", pythonpath=without_tensorflow)
    assert sweep.returncode == 0 and "# scale" in sweep.stdout, sweep.stderr
    deploy = console("mlperf-deploy", *CASES["slurm-2n.sbatch"], pythonpath=without_tensorflow)
    assert deploy.returncode == 0 and "#SBATCH" in deploy.stdout, deploy.stderr
    scaling = console("mlperf-scaling", "--model", "resnet50", "--per-gpu-throughput", "2400",
                      "--per-gpu-batch", "256", "--busbw", "185", pythonpath=without_tensorflow)
    assert scaling.returncode == 0 and "projected" in scaling.stdout.lower(), scaling.stderr
    report = console("mlperf-report", make_sweep(str(tmp_path / "made")), pythonpath=without_tensorflow)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "made" / "report" / "report.html").is_file()
