""".ci/run's report of itself (scripts/ci_steps.sh): one table of its steps and their wall times, also
when a step fails or the job is cancelled, a warning past 45 minutes, and the steps held to make test's.

The steps here are shell functions that move a fake clock (ci_now) instead of taking time, so a 50-minute
run takes milliseconds.
"""
import os
import re
import subprocess

from helpers.running import REPO

CI_STEPS = os.path.join(REPO, "scripts", "ci_steps.sh")


def run_steps(steps, **env):
    """bash with ci_steps.sh sourced as .ci/run sources it, then `steps`; a clock file in place of date."""
    script = f"""set -euo pipefail
source {CI_STEPS}
clock=$(mktemp)
echo 1000 >"$clock"
ci_now() {{ cat "$clock"; }}
# takes $1 seconds of the fake clock and ends with code ${{2:-0}}
work() {{ echo $(($(cat "$clock") + $1)) >"$clock"; return "${{2:-0}}"; }}
{steps}
"""
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], **env})


def table(stdout):
    """The report's rows: (step, wall time, result) after the header line."""
    lines = [line[len("[ci] "):] for line in stdout.splitlines()
             if line.startswith("[ci] ") and not line.startswith("[ci] warning:")]
    assert re.match(r"step +wall time +result$", lines[0]), lines
    return [tuple(re.split(r"\s{2,}", line.strip())) for line in lines[1:]]


def test_every_step_and_the_total_after_a_green_run():
    result = run_steps('ci_step "make setup lint" work 215\n'
                       'ci_step "make test-phase1" work 914\n'
                       'ci_step "make image-test" work 59\n'
                       'ci_report')
    assert result.returncode == 0, result.stderr
    assert table(result.stdout) == [("make setup lint", "3 min 35 s", "ok"),
                                    ("make test-phase1", "15 min 14 s", "ok"),
                                    ("make image-test", "59 s", "ok"),
                                    (".ci/run in all", "19 min 48 s")]
    assert "warning" not in result.stdout + result.stderr


def test_past_45_minutes_one_warning_and_still_green():
    result = run_steps('ci_step "make test-phase2" work 2700\nci_step "make test-phase3" work 1\nci_report')
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stdout.splitlines() if "warning" in line]
    assert warnings == ["[ci] warning: .ci/run took 45 min 1 s, past 45 min: its budget is 60 min on a fresh "
                        "machine and 40 with caches; CI stops it at 90"]
    # At 45 minutes exactly, not yet; the mark is a knob.
    assert "warning" not in run_steps('ci_step a work 2700\nci_report').stdout
    assert "warning" in run_steps('ci_step a work 601\nci_report', CI_WARN_MINUTES="10").stdout


def test_a_failing_step_prints_the_table_and_exits_with_its_code():
    result = run_steps('ci_step "make setup lint" work 200\n'
                       'ci_step "make test-phase1" work 3000 3\n'
                       'ci_step "never" work 1\n'
                       'echo after')
    assert result.returncode == 3
    assert table(result.stdout) == [("make setup lint", "3 min 20 s", "ok"),
                                    ("make test-phase1", "50 min 0 s", "failed (exit 3)"),
                                    (".ci/run in all", "53 min 20 s")]
    assert "never" not in result.stdout and "after" not in result.stdout
    assert "[ci] warning: .ci/run took 53 min 20 s" in result.stdout


def test_a_cancelled_job_prints_the_table_with_the_step_it_stopped_in():
    result = run_steps('ci_step "make setup lint" work 10\n'
                       'ci_step "make test-phase2" bash -c "kill -TERM $$; sleep 0.2"\n'
                       'echo after')
    assert result.returncode == 143, result.stderr
    assert table(result.stdout) == [("make setup lint", "10 s", "ok"),
                                    ("make test-phase2", "0 s", "stopped by TERM"),
                                    (".ci/run in all", "10 s")]
    assert "after" not in result.stdout


def test_the_real_ci_run_with_a_stand_in_make(tmp_path):
    """.ci/run itself: every step once, in order, its table at the end; a failing step ends it with
    that step's code and the table, the later steps not run."""
    calls = tmp_path / "calls"
    make = tmp_path / "make"
    make.write_text(f'#!/bin/bash\necho "$*" >> {calls}\n[[ $* != "$FAIL" ]]\n')
    make.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    result = subprocess.run(["bash", os.path.join(REPO, ".ci", "run")], capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    steps = calls.read_text().splitlines()
    assert steps == ["setup lint", "test-phase1", "test-phase2", "test-phase3", "setup-tf2.15", "test-tf2.15",
                     "image-test"]
    rows = table(result.stdout)
    assert [row[0].split(" (")[0] for row in rows[:-1]] == [f"make {step}" for step in steps]
    # The real clock: a stand-in step takes 0 s, or 1 s where it crosses a second.
    assert all(row[1] in ("0 s", "1 s") and row[2] == "ok" for row in rows[:-1])
    assert rows[-1][0] == ".ci/run in all"
    calls.unlink()
    result = subprocess.run(["bash", os.path.join(REPO, ".ci", "run")], capture_output=True, text=True,
                            timeout=60, env={**env, "FAIL": "test-phase2"})
    assert result.returncode == 1
    assert calls.read_text().splitlines() == ["setup lint", "test-phase1", "test-phase2"]
    assert table(result.stdout)[2][2] == "failed (exit 1)"


def make_targets(words):
    return [word for word in words if not word.startswith("-") and "=" not in word]


def test_ci_runs_what_make_test_runs_then_the_images():
    """.ci/run times make test's steps one by one: the same targets in the same order, then image-test."""
    with open(os.path.join(REPO, ".ci", "run")) as handle:
        ci = [make_targets(line.split('"')[2].split()[1:]) for line in handle
              if line.startswith("ci_step ")]
    ci = [target for targets in ci for target in targets]
    with open(os.path.join(REPO, "Makefile")) as handle:
        makefile = handle.read()
    rule = re.search(r"^test: (.*)\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    recipe = [make_targets(line.split("$(MAKE)", 1)[1].split()) for line in rule[2].splitlines()]
    assert all(len(targets) == 1 for targets in recipe), rule[2]
    make_test = rule[1].split() + [targets[0] for targets in recipe]
    # setup-tf2.15 is test-tf2.15's own prerequisite: its own row of the table, then a cached no-op.
    assert re.search(r"^test-tf2\.15: setup-tf2\.15$", makefile, re.MULTILINE)
    assert ci[-1] == "image-test" and ci[ci.index("test-tf2.15") - 1] == "setup-tf2.15"
    assert [target for target in ci[:-1] if target != "setup-tf2.15"] == make_test
    assert make_test == ["setup", "lint", "test-phase1", "test-phase2", "test-phase3", "test-tf2.15"]
