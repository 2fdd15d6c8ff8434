"""The test census: what each test cost in CPU seconds, not only in wall seconds.

pytest's --durations gives wall time, which on a shared 2-core machine says as much about the other
worker as about the test. With SUITE_TEST_CENSUS=FILE, every test appends one JSON line to FILE: its
node id, its wall seconds (set-up, call and tear-down) and the CPU seconds (user + system) spent in
that time by the pytest process itself and by the child processes it reaped (every launcher, rank and
data command a test runs and waits for). Processes a test does not reap count where they are reaped:
a namespace cluster's SSH servers at the session's end, so a cluster's runs are charged to its last
test. At the session's end the controller prints the CPU seconds by module, largest first.

`python tests/census.py FILE [FILE ...]` prints the same table for files written before.
"""
import collections
import json
import os
import resource
import sys
import time

import pytest

CENSUS = "SUITE_TEST_CENSUS"


def _cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get(CENSUS)
    if not path:
        yield
        return
    wall, (own, reaped) = time.monotonic(), _cpu()
    yield
    own_after, reaped_after = _cpu()
    record = {"test": item.nodeid, "wall": round(time.monotonic() - wall, 2),
              "cpu_own": round(own_after - own, 2), "cpu_children": round(reaped_after - reaped, 2),
              "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
    # One short line in append mode: the workers' lines do not interleave.
    with open(path, "a") as handle:
        handle.write(json.dumps(record) + "\n")


def by_module(paths):
    """{module: [tests, wall seconds, CPU seconds]} from census files."""
    table = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for path in paths:
        with open(path) as handle:
            for line in handle:
                record = json.loads(line)
                row = table[record["test"].split("::", 1)[0]]
                row[0] += 1
                row[1] += record["wall"]
                row[2] += record["cpu_own"] + record["cpu_children"]
    return dict(table)


def table_lines(paths, most=25):
    table = by_module(paths)
    total_cpu = sum(row[2] for row in table.values())
    lines = [f"{'module':<44} {'tests':>5} {'wall s':>8} {'CPU s':>8}"]
    for module, (tests, wall, cpu) in sorted(table.items(), key=lambda item: -item[1][2])[:most]:
        lines.append(f"{module:<44} {tests:>5} {wall:>8.0f} {cpu:>8.0f}")
    lines.append(f"{'all ' + str(len(table)) + ' modules':<44} {sum(r[0] for r in table.values()):>5} "
                 f"{sum(r[1] for r in table.values()):>8.0f} {total_cpu:>8.0f}")
    return lines


def pytest_terminal_summary(terminalreporter):
    path = os.environ.get(CENSUS)
    if not path or os.environ.get("PYTEST_XDIST_WORKER") or not os.path.exists(path):
        return
    terminalreporter.section(f"CPU seconds by module (census: {path})")
    for line in table_lines([path]):
        terminalreporter.write_line(line)


if __name__ == "__main__":
    print("\n".join(table_lines(sys.argv[1:], most=200)))
