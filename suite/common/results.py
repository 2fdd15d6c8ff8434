"""MLPerf result logs read back: a run's events and time to train (run_stop - run_start), and the logs of a
benchmark folder (the olympic mean over them is suite.common.mlperf_rules')."""
import json
import os
from dataclasses import dataclass, field

from mlperf_logging.compliance_checker import mlp_parser

from suite.common.mlperf_rules import RULESET

MARKER = ":::MLLOG "
SUCCESS = "success"


class LogError(ValueError):
    """A result log that cannot be scored; the message is one line naming the file (and line)."""


@dataclass(frozen=True)
class RunLog:
    """What the report and the sweep need from one result log; times in milliseconds since the epoch."""

    path: str
    benchmark: str
    division: str
    status: str
    run_start_ms: int
    run_stop_ms: int
    global_batch_size: int = None
    accuracies: list = field(default_factory=list)  # (epoch_num, accuracy) in log order
    events: tuple = field(default=(), repr=False, compare=False)  # (number, event) as read, to split its time

    @property
    def minutes(self):
        """Time to train as the result summarizer scores it: (run_stop - run_start) / 60000."""
        return (self.run_stop_ms - self.run_start_ms) / 60000.0

    @property
    def converged(self):
        return self.status == SUCCESS


def events(path):
    """(line number, event dict) for every MLPerf line; other lines are skipped as the checker does."""
    try:
        with open(path, errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError as err:
        raise LogError(f"{path}: {err.strerror}") from None
    found = []
    for number, line in enumerate(lines, start=1):
        if MARKER not in line:
            continue
        try:
            event = json.loads(line.split(MARKER, 1)[1])
        except json.JSONDecodeError:
            raise LogError(f"{path}:{number}: not an MLPerf log line (the JSON after ':::MLLOG' does not "
                           f"parse)") from None
        if not isinstance(event, dict) or "key" not in event or "time_ms" not in event:
            raise LogError(f"{path}:{number}: not an MLPerf log line (no key or time_ms)")
        found.append((number, event))
    return found


def has_run_stop(path):
    """True when the log holds a run_stop: the run finished, whatever its status."""
    try:
        return any(event["key"] == "run_stop" for _, event in events(path))
    except LogError:
        return False


def parsed_events(path, ruleset=RULESET):
    """(MLLOG line number, event dict) for every MLPerf line, read by mlperf_logging's own parser.

    Its parser takes the line from ':::MLLOG' on, so a rank prefix ("0: ") or other output before
    the marker does no harm, and skips lines without the marker; the dicts have the shape events()
    gives. A line it cannot parse is a LogError naming the file and that line.
    """
    try:
        loglines, failed = mlp_parser.parse_file(path, ruleset=ruleset)
    except OSError as err:
        raise LogError(f"{path}: {err.strerror}") from None
    except KeyError as err:
        raise LogError(f"{path}: an MLLOG line has no {err} field (the parser needs key, value, "
                       f"metadata and time_ms)") from None
    if failed:
        line, error = failed[0]
        raise LogError(f"{path}:{_line_number(path, line)}: not an MLPerf log line (mlperf_logging's parser: "
                       f"{error}): {line[:120]}")
    return [(line.lineno + 1, {"key": line.key, "value": line.value["value"],
                               "metadata": line.value["metadata"] or {},
                               "time_ms": _milliseconds(line.timestamp)})
            for line in loglines]


def _milliseconds(timestamp):
    """The parser's time_ms, a float, back to the integer the log wrote (a fraction is kept)."""
    return int(timestamp) if float(timestamp).is_integer() else timestamp


def _line_number(path, parsed):
    """The number of the file's line that mlp_parser gave back as `parsed` (the text from its last
    ':::MLLOG' on, stripped), for the message; "?" if none matches."""
    with open(path, encoding="latin-1") as handle:
        for number, text in enumerate(handle, start=1):
            if MARKER in text and (MARKER + text.rsplit(MARKER, 1)[1]).strip() == parsed:
                return number
    return "?"


def run_start_stop(found):
    """(run_start, run_stop) in ms, taken as result_summarizer takes them (the loop of its
    _query_run_start_stop): the scan stops once both have been seen, so of several run_start lines
    before the first run_stop (one per rank) the last counts. None for one not logged."""
    start = stop = None
    for _, event in found:
        if event["key"] == "run_start":
            start = event["time_ms"]
        elif event["key"] == "run_stop":
            stop = event
        if start is not None and stop is not None:
            break
    return start, stop


def read_run(path, benchmark=None):
    """Parses one result log; raises LogError for a foreign, truncated or other-benchmark log."""
    return run_from_events(path, events(path), benchmark)


def run_from_events(path, found, benchmark=None):
    """The RunLog of one log's events (from events() or parsed_events()); LogError as read_run."""
    if not found:
        raise LogError(f"{path}: not an MLPerf log (no ':::MLLOG' lines)")
    first = {}
    for number, event in found:
        first.setdefault(event["key"], (number, event))
    if "submission_benchmark" not in first:
        raise LogError(f"{path}: not an MLPerf training log (no submission_benchmark)")
    number, event = first["submission_benchmark"]
    if benchmark is not None and event.get("value") != benchmark:
        raise LogError(f"{path}:{number}: a log of benchmark {event.get('value')!r}, expected {benchmark!r}")
    start, stop = run_start_stop(found)
    if start is None:
        raise LogError(f"{path}: truncated log: no run_start (the run never started)")
    if stop is None:
        raise LogError(f"{path}: truncated log: no run_stop (the run did not finish)")
    return RunLog(
        path=path, benchmark=event.get("value"),
        division=_value(first, "submission_division"),
        status=(stop.get("metadata") or {}).get("status", ""),
        run_start_ms=start, run_stop_ms=stop["time_ms"],
        global_batch_size=_value(first, "global_batch_size"),
        accuracies=[((e.get("metadata") or {}).get("epoch_num"), e.get("value"))
                    for _, e in found if e["key"] == "eval_accuracy"],
        events=tuple(found))


def _value(first, key):
    return first[key][1].get("value") if key in first else None


def result_files(folder):
    """result_<i>.txt in a benchmark folder, by run index."""
    found = []
    for name in os.listdir(folder):
        stem, ext = os.path.splitext(name)
        if ext == ".txt" and stem.startswith("result_") and stem[len("result_"):].isdigit():
            found.append((int(stem[len("result_"):]), os.path.join(folder, name)))
    return [path for _, path in sorted(found)]
