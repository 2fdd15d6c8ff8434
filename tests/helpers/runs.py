"""Reading what a run wrote: its MLPerf log, its JSON records, and the official compliance checker's
verdict."""
import json
import sys

from helpers.running import run


def read_log(log_path):
    """MLPerf events as dicts, in order."""
    events = []
    with open(log_path) as handle:
        for line in handle:
            if ":::MLLOG " in line:
                events.append(json.loads(line.split(":::MLLOG ", 1)[1]))
    return events


def read_json(path):
    with open(path) as handle:
        return json.load(handle)


def check_log(log_path, ruleset, config=None):
    """Runs the official compliance checker; returns (passed, its output)."""
    args = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
            "--ruleset", ruleset, "--log_output", str(log_path) + f".check-{ruleset}.txt"]
    if config:
        args += ["--config", config]
    result = run(args + [str(log_path)], timeout=120)
    return result.returncode == 0, result.stdout + result.stderr


def assert_fails_only_on_accuracy(log_path, ruleset, config):
    """The official checker with a closed config rejects the log, and only for eval_accuracy."""
    passed, output = check_log(log_path, ruleset, config=config)
    assert not passed
    failures = [line for line in output.splitlines() if line.startswith(("ERROR", "WARNING"))
                or "FAILED" in line or "failed" in line.lower()]
    assert any("eval_accuracy" in line for line in failures), output
    offending = [line for line in failures
                 if "eval_accuracy" not in line and "FAILED" not in line and "Logging output" not in line]
    assert not offending, output
