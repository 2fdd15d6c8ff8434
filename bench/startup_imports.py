"""What a rank's imports cost before it can start Horovod, and what one change to them saves.

Each round starts fresh interpreters that import what a rank imports before `hvd.init`
(`suite.train.session`: TensorFlow, tf-keras, Horovod) and time it from outside (the interpreter's own
start-up included). Every round times the variants in alternating order, so that a drift in the
machine's load hits them alike:

- the plain import;
- with `--overlay DIR`, the same with DIR first on PYTHONPATH (a folder made by
  `pip install --no-deps --target DIR <package>==<version>`);
- with `--lean`, the import as the entry points make it, inside `suite.lean_tensorflow_import()`
  (tf-keras's optional pandas and SciPy held back).

    .venv/bin/python bench/startup_imports.py [--rounds 7] [--overlay DIR] [--lean] [--module M]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="fresh interpreters per variant")
    parser.add_argument("--module", default="suite.train.session", help="what each interpreter imports")
    parser.add_argument("--overlay", help="a folder put first on PYTHONPATH for a variant of its own")
    parser.add_argument("--lean", action="store_true",
                        help="also time the import inside suite.lean_tensorflow_import(), as a rank makes it")
    parser.add_argument("--out", help="write the rows as JSON here")
    return parser.parse_args(argv)


def _environment(overlay):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (overlay, REPO) if p)
    return env


def time_import(module, overlay=None, lean=False):
    """(seconds, what the interpreter saw) for one fresh interpreter importing `module`: the versions
    of ml-dtypes and NumPy, and whether pandas and SciPy were loaded."""
    importing = (f"import suite\nwith suite.lean_tensorflow_import():\n    import {module}\n" if lean
                 else f"import {module}\n")
    probe = importing + (
        "import json, sys, ml_dtypes, numpy\n"
        "print(json.dumps({'ml_dtypes': ml_dtypes.__version__, 'numpy': numpy.__version__,\n"
        "                  'pandas_and_scipy_loaded': 'pandas' in sys.modules or 'scipy' in sys.modules}))")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=_environment(overlay),
                          capture_output=True, text=True, check=True)
    return time.perf_counter() - started, json.loads(done.stdout.strip().splitlines()[-1])


def measure(args):
    variants = [("environment as installed", None, False)]
    if args.overlay:
        variants.append((f"{args.overlay} first on PYTHONPATH", args.overlay, False))
    if args.lean:
        variants.append(("inside suite.lean_tensorflow_import()", None, True))
    seconds = {name: [] for name, _, _ in variants}
    seen = {}
    for round_number in range(args.rounds):
        order = variants if round_number % 2 == 0 else variants[::-1]
        for name, overlay, lean in order:
            elapsed, versions = time_import(args.module, overlay, lean)
            seconds[name].append(elapsed)
            seen[name] = versions
    return [{"variant": name, "versions": seen[name], "median_seconds": round(statistics.median(values), 3),
             "seconds": [round(value, 3) for value in values]} for name, values in seconds.items()]


def main(argv=None):
    args = parse_args(argv)
    rows = measure(args)
    print(f"import {args.module} in a fresh interpreter, {args.rounds} round(s), alternating order; "
          f"load average at the end {os.getloadavg()[0]:.2f}")
    print("| variant | ml_dtypes | pandas, SciPy loaded | median (s) | every round (s) |")
    print("|---|---|---|---:|---|")
    for row in rows:
        loaded = "yes" if row["versions"]["pandas_and_scipy_loaded"] else "no"
        rounds = ", ".join(f"{value:.2f}" for value in row["seconds"])
        print(f"| {row['variant']} | {row['versions']['ml_dtypes']} | {loaded} | "
              f"{row['median_seconds']:.2f} | {rounds} |")
    for row in rows[1:]:
        print(f"ratio, {row['variant']} over {rows[0]['variant']}: "
              f"{row['median_seconds'] / rows[0]['median_seconds']:.3f}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
