"""What a rank's imports cost before it can start Horovod, and what one package version changes in it.

Each round starts fresh interpreters that import what a rank imports before `hvd.init`
(`suite.train.session`: TensorFlow, tf-keras, Horovod) and time it from outside (the interpreter's own
start-up included). With `--overlay DIR` every round also times the same import with DIR first on
PYTHONPATH (a folder made by `pip install --no-deps --target DIR <package>==<version>`), the two in
alternating order, so that a drift in the machine's load hits both alike.

    .venv/bin/python bench/startup_imports.py [--rounds 7] [--overlay DIR] [--module suite.train.session]
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
    parser.add_argument("--overlay", help="a folder put first on PYTHONPATH for the second variant")
    parser.add_argument("--out", help="write the rows as JSON here")
    return parser.parse_args(argv)


def _environment(overlay):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (overlay, REPO) if p)
    return env


def time_import(module, overlay=None):
    """(seconds, the versions the interpreter saw) for one fresh interpreter importing `module`."""
    probe = (f"import {module}, json, ml_dtypes, numpy;"
             "print(json.dumps({'ml_dtypes': ml_dtypes.__version__, 'numpy': numpy.__version__}))")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=_environment(overlay),
                          capture_output=True, text=True, check=True)
    return time.perf_counter() - started, json.loads(done.stdout.strip().splitlines()[-1])


def measure(args):
    variants = [("environment as installed", None)]
    if args.overlay:
        variants.append((f"{args.overlay} first on PYTHONPATH", args.overlay))
    seconds = {name: [] for name, _ in variants}
    seen = {}
    for round_number in range(args.rounds):
        order = variants if round_number % 2 == 0 else variants[::-1]
        for name, overlay in order:
            elapsed, versions = time_import(args.module, overlay)
            seconds[name].append(elapsed)
            seen[name] = versions
    return [{"variant": name, "versions": seen[name], "median_seconds": round(statistics.median(values), 3),
             "seconds": [round(value, 3) for value in values]} for name, values in seconds.items()]


def main(argv=None):
    args = parse_args(argv)
    rows = measure(args)
    print(f"import {args.module} in a fresh interpreter, {args.rounds} round(s), alternating order; "
          f"load average at the end {os.getloadavg()[0]:.2f}")
    print("| variant | ml_dtypes | median (s) | every round (s) |")
    print("|---|---|---:|---|")
    for row in rows:
        print(f"| {row['variant']} | {row['versions']['ml_dtypes']} | {row['median_seconds']:.2f} | "
              f"{', '.join(f'{value:.2f}' for value in row['seconds'])} |")
    if len(rows) == 2:
        print(f"ratio, second over first: {rows[1]['median_seconds'] / rows[0]['median_seconds']:.3f}")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
