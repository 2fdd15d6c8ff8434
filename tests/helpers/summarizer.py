"""result_summarizer's arithmetic on a results folder without its compliance step, and a log as a
launcher with two ranks prints it: what the folder readers are checked against."""
import glob
import json
import os

from mlperf_logging.compliance_checker.mlp_parser import parse_file
from mlperf_logging.result_summarizer import result_summarizer


def summarizer_arithmetic(folder, ruleset):
    """result_summarizer's own start/stop query and olympic average on the parsed logs, without its
    compliance step (every run counted)."""
    scores = []
    for path in glob.glob(os.path.join(folder, "result_*.txt")):
        start, stop = result_summarizer._query_run_start_stop(parse_file(path, ruleset=ruleset)[0])
        scores.append((stop - start) / 60 / 1000)
    return result_summarizer._compute_olympic_average(scores, 0, 1)


def ranks_and_noise(lines):
    """The log as a launcher with two ranks prints it: rank prefixes, each MLLOG line twice (the other
    rank's copy a millisecond later), and framework output in between."""
    out = ["+ srun -N 2 python train.py", "WARNING: tensorflow: some framework warning"]
    for text in lines:
        event = json.loads(text.split(":::MLLOG ", 1)[1])
        copy = dict(event, time_ms=event["time_ms"] + 1)
        out += [f"0: {text}", f"1: :::MLLOG {json.dumps(copy)}", "epoch 3 step 40 loss 1.234 (12.5 img/s)"]
    return out
