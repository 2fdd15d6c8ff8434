"""The benchmarks the suite can run, found by looking in models/: every package there whose presets.py
exports BENCHMARK (suite.common.workload.Benchmark) is one. No list of them is written anywhere else.

A presets module is plain data (the suite's config machinery, never TensorFlow), so looking is fast and
safe on a login node.
"""
import functools
import importlib
import importlib.util
import pkgutil

from suite.common.workload import Benchmark

PACKAGE = "models"


def of_module(module):
    """The Benchmark of `python -m MODULE`, or None for a script, one of the suite's own entry points
    (the allreduce benchmark) or a package without a presets module."""
    if module.endswith(".py") or module.startswith("suite."):
        # Looking would import the rank side, and the suite's own entry points have no presets.
        return None
    try:
        # Only a package can hold one: importing MODULE.presets imports MODULE itself first, which
        # for a plain module may load TensorFlow.
        spec = importlib.util.find_spec(module)
        if spec is None or spec.submodule_search_locations is None:
            return None
        presets = importlib.import_module(f"{module}.presets")
    except ModuleNotFoundError as err:
        if err.name in (module, f"{module}.presets") or module.startswith(f"{err.name}."):
            return None
        raise
    found = getattr(presets, "BENCHMARK", None)
    if not isinstance(found, Benchmark):
        raise TypeError(f"{module}.presets: BENCHMARK must be a suite.common.workload.Benchmark, "
                        f"not {type(found).__name__}")
    return found


@functools.lru_cache(maxsize=None)
def discovered():
    """Every benchmark under models/, by MLPerf name, in the order of their folders' names."""
    package = importlib.import_module(PACKAGE)
    found = {}
    for entry in sorted(pkgutil.iter_modules(package.__path__), key=lambda entry: entry.name):
        if not entry.ispkg:
            continue
        benchmark = of_module(f"{PACKAGE}.{entry.name}")
        if benchmark is None:
            continue
        if benchmark.name in found:
            raise ValueError(f"{benchmark.module} and {found[benchmark.name].module} both call themselves "
                             f"MLPerf benchmark {benchmark.name!r}")
        found[benchmark.name] = benchmark
    return found


def named(name):
    """The benchmark MLPerf calls `name` (as result logs and results folders spell it), or None."""
    return discovered().get(name)


def modules():
    """The entry points' modules (models.<folder>), for flags that choose one."""
    return tuple(benchmark.module for benchmark in discovered().values())


def folder(benchmark):
    """The benchmark's folder name under models/ (models.resnet50 -> resnet50)."""
    return benchmark.module.rpartition(".")[2]
