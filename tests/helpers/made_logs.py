"""Hand-made MLPerf result logs for the pure-Python tests: MLLOG lines with exact times, written as
mlperf_logging.mllog writes them, and the results/<system>/<benchmark> layout around them."""
import json
import os

START_MS = 1_600_000_000_000


def line(key, time_ms, value=None, event_type="POINT_IN_TIME", **metadata):
    """One MLLOG line in mllog's own JSON form."""
    event = {"namespace": "", "time_ms": time_ms, "event_type": event_type, "key": key, "value": value,
             "metadata": {"file": "made.py", "lineno": 1, **metadata}}
    return ":::MLLOG " + json.dumps(event)


def run_lines(benchmark="resnet", batch=3264, blocks=4, epochs_per_block=4, block_ms=60_000, eval_ms=5_000,
              gap_ms=1_000, startup_ms=2_000, status="success", epoch_samples=1000, start_ms=START_MS):
    """A run's lines: header, run_start, `startup_ms` to the first block, then per block its epochs and an
    evaluation inside it (as MXNet and this suite log it: eval_start..eval_stop before block_stop), then
    `gap_ms` to the next block. BERT-style (benchmark "bert") evaluations count samples and
    train_samples at the end is the samples trained; otherwise train_samples is the epoch's samples.

    Training takes blocks x block_ms, evaluation blocks x eval_ms, the rest startup + gaps.
    """
    samples = benchmark == "bert"
    out = [line("submission_benchmark", start_ms - 10, benchmark),
           line("submission_division", start_ms - 10, "closed"),
           line("global_batch_size", start_ms - 9, batch),
           line("init_start", start_ms - 8, event_type="INTERVAL_START"),
           line("init_stop", start_ms - 1, event_type="INTERVAL_END"),
           line("run_start", start_ms, event_type="INTERVAL_START")]
    if not samples:
        out.append(line("train_samples", start_ms, epoch_samples))
    t = start_ms + startup_ms
    for block in range(blocks):
        first = block * epochs_per_block + 1
        last = first + epochs_per_block - 1
        point = last * epoch_samples if samples else last
        out.append(line("block_start", t, event_type="INTERVAL_START", first_epoch_num=first,
                        epoch_count=epochs_per_block))
        t += block_ms
        out.append(line("eval_start", t, event_type="INTERVAL_START", epoch_num=point))
        t += eval_ms
        out.append(line("eval_stop", t, event_type="INTERVAL_END", epoch_num=point))
        out.append(line("eval_accuracy", t, 0.5 + block / 100, epoch_num=point))
        out.append(line("block_stop", t, event_type="INTERVAL_END", first_epoch_num=first))
        t += gap_ms if block < blocks - 1 else 0
    if samples:
        out.append(line("train_samples", t, blocks * epochs_per_block * epoch_samples))
    out.append(line("run_stop", t, event_type="INTERVAL_END", status=status))
    return out


def write_folder(root, runs, system="made_system", benchmark="resnet", nodes=1, per_node=8):
    """root/made/results/<system>/<benchmark>/result_<i>.txt from lists of lines, and the system JSON
    beside results/ (None: no system description). Returns the benchmark folder."""
    folder = os.path.join(root, "made", "results", system, benchmark)
    os.makedirs(folder, exist_ok=True)
    for index, lines in enumerate(runs):
        with open(os.path.join(folder, f"result_{index}.txt"), "w") as handle:
            handle.write("\n".join(lines) + "\n")
    if nodes is not None:
        systems = os.path.join(root, "made", "systems")
        os.makedirs(systems, exist_ok=True)
        with open(os.path.join(systems, f"{system}.json"), "w") as handle:
            json.dump({"number_of_nodes": str(nodes), "accelerators_per_node": str(per_node)}, handle)
    return folder
