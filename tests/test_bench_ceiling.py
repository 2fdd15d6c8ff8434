"""bench/ceiling.py's arithmetic and commands on hand-made rows; the canonical scripts train for real."""
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers.running import REPO, run, subprocess_env
from helpers.runs import read_json

sys.path.append(os.path.join(REPO, "bench"))
import ceiling  # noqa: E402


def _row(variant, value, round_index=1, model="resnet50", per_process=None, copies=1):
    per_process = per_process or [{"samples_per_second": value}]
    return {"model": model, "variant": variant, "round": round_index, "samples_per_second": value,
            "per_process": per_process, "copies": copies, "timed_overlap": None,
            "commands": [f"python {variant}"] * copies}


def _two_rounds():
    """Round 1 and round 2 of every ResNet-50 variant, numbers chosen to make the ratios easy."""
    first = {"suite_1": 13.0, "canonical_1": 12.0, "suite_2": 12.0, "canonical_2": 9.0,
             "suite_ceiling": 13.0, "canonical_ceiling": 12.0, "suite_1_no_allreduce": 13.0,
             "suite_2_tf": 10.0, "suite_2_tf_one_pack": 8.0, "suite_2_cycle_100": 12.5}
    second = {"suite_1": 15.0, "canonical_1": 13.0, "suite_2": 14.0, "canonical_2": 9.0,
              "suite_ceiling": 15.0, "canonical_ceiling": 12.0, "suite_1_no_allreduce": 16.0,
              "suite_2_tf": 12.0, "suite_2_tf_one_pack": 8.0, "suite_2_cycle_100": 13.5}
    return ([_row(key, value, 1) for key, value in first.items()]
            + [_row(key, value, 2) for key, value in second.items()])


def _ratio(numerator):
    return next(ratio for ratio in ceiling.RATIOS if ratio.numerator == numerator[0]
                and ratio.denominator == numerator[1])


def test_spread_is_the_range_over_the_median():
    middle, low, high, percent = ceiling.spread([10.0, 12.0, 11.0])
    assert (middle, low, high) == (11.0, 10.0, 12.0)
    assert percent == pytest.approx(100 * 2 / 11)
    assert ceiling.spread([7.0])[3] == 0.0


def test_ratios_of_medians_and_per_round():
    rows = _two_rounds()
    efficiency = _ratio(("suite_2", "suite_ceiling"))
    # medians: suite_2 (12 + 14) / 2 = 13, ceiling (13 + 15) / 2 = 14
    assert ceiling.ratio_of_medians(efficiency, rows, "resnet50") == pytest.approx(13 / 14)
    assert ceiling.ratio_per_round(efficiency, rows, "resnet50") == pytest.approx([12 / 13, 14 / 15])
    versus = _ratio(("suite_2", "canonical_2"))
    assert ceiling.ratio_of_medians(versus, rows, "resnet50") == pytest.approx(13 / 9)
    # A model with no rows has no ratio rather than a division by zero.
    assert ceiling.ratio_of_medians(versus, rows, "bert") is None


def test_horovod_cost_is_the_share_lost_to_the_allreduce():
    cost = _ratio(("suite_1", "suite_1_no_allreduce"))
    assert cost.as_cost
    rows = _two_rounds()
    # round 1: 13 vs 13 costs nothing; round 2: 15 vs 16 costs 6.25 %
    assert ceiling.ratio_per_round(cost, rows, "resnet50") == pytest.approx([0.0, 6.25])
    assert ceiling.ratio_of_medians(cost, rows, "resnet50") == pytest.approx(100 * (1 - 14 / 14.5))
    assert ceiling.verdict(cost, "resnet50", 1.9).endswith(": met")
    assert ceiling.verdict(cost, "resnet50", 2.1).endswith("NOT met")


def test_targets_are_lower_bounds_and_only_where_given():
    efficiency = _ratio(("suite_2", "suite_ceiling"))
    assert ceiling.verdict(efficiency, "resnet50", 0.93).endswith(": met")
    assert ceiling.verdict(efficiency, "resnet50", 0.92).endswith("NOT met")
    assert ceiling.verdict(efficiency, "bert", 0.5) == "-"


def test_a_round_missing_one_side_is_left_out_of_the_per_round_ratios():
    rows = [row for row in _two_rounds() if not (row["round"] == 2 and row["variant"] == "canonical_2")]
    versus = _ratio(("suite_2", "canonical_2"))
    assert ceiling.ratio_per_round(versus, rows, "resnet50") == pytest.approx([12 / 9])


def test_overlap_of_timed_windows():
    both = [{"timed_window": [0.0, 10.0]}, {"timed_window": [2.0, 12.0]}]
    assert ceiling.timed_overlap(both) == pytest.approx(0.8)
    apart = [{"timed_window": [0.0, 1.0]}, {"timed_window": [5.0, 6.0]}]
    assert ceiling.timed_overlap(apart) == 0.0
    assert ceiling.timed_overlap([{"timed_window": [0.0, 1.0]}, {}]) is None


def test_rounds_alternate_the_order():
    assert ceiling.round_order(1) == ceiling.VARIANTS
    assert ceiling.round_order(2) == tuple(reversed(ceiling.VARIANTS))


def test_commands_follow_the_readme_and_give_the_ceiling_one_thread(tmp_path):
    sizes = ceiling.FULL
    resnet = ceiling.workloads(sizes, str(tmp_path / "bert_config.json"), "{}")["resnet50"]
    by_key = {variant.key: variant for variant in ceiling.VARIANTS}
    two = ceiling.command(resnet, by_key["suite_2"], "RUN")
    assert two[:6] == ["horovodrun", "-np", "2", "-H", "localhost:2", "python"]
    assert two[6:9] == ["-m", "models.resnet50", "--throughput"]
    assert "global_batch_size=32" in two and "image_size=224" in two and "num_classes=1000" in two
    single = ceiling.command(resnet, by_key["suite_ceiling"], "RUN")
    assert single[0] == "python" and "cpu_threads=1" in single and "global_batch_size=16" in single
    canonical = ceiling.command(resnet, by_key["canonical_ceiling"], "RUN")
    assert canonical[:2] == ["python", "bench/canonical_resnet50.py"]
    assert canonical[-2:] == ["--out", os.path.join("RUN", "throughput.json")]
    threads = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
    assert dict(by_key["canonical_ceiling"].env) == threads
    shown = ceiling.shown(canonical, by_key["canonical_ceiling"].env, {"RUN": "DIR2"})
    assert shown.startswith("TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 python "
                            "bench/canonical_resnet50.py ")
    assert shown.endswith("--out DIR2/throughput.json")


def test_the_report_shows_every_variant_ratio_and_the_machine():
    rows = _two_rounds()
    for row in rows:
        if row["variant"] == "suite_ceiling":
            row.update(copies=2, commands=["python a --run-dir DIR", "python a --run-dir DIR2"],
                       per_process=[{"samples_per_second": row["round"] + 6.0}, {"samples_per_second": 8.0}])
    workload = ceiling.workloads(ceiling.QUICK, "cfg.json", "{}")["resnet50"]
    facts = {"date_utc": "2026-12-01 10:00 UTC", "nproc": 2, "cpu_model": "Some CPU", "memory_gib": 8.0,
             "python": "3.11", "tensorflow": "2.18.1", "horovod": "0.28.1", "git_revision": "abc",
             "load_average_start": [1.0, 2.0, 3.0], "load_average_end": [0.5, 0.5, 0.5]}
    text = ceiling.markdown(rows, [workload], facts, "bench/ceiling.py", 2)
    assert "nproc 2, Some CPU" in text and "TensorFlow 2.18.1, Horovod 0.28.1" in text
    assert "2026-12-01 10:00 UTC" in text and "1.00, 2.00, 3.00" in text
    for variant in ceiling.VARIANTS:
        assert f"| {variant.label} |" in text
    # 13 / 14 = 0.9286: under the target although two decimals would show 0.93
    assert ("| 2-rank efficiency, suite (2 ranks / its ceiling) | 0.929 | 0.923, 0.933 | "
            "at least 0.93: NOT met |") in text
    assert "| suite / canonical, 2 ranks | 1.444 | 1.333, 1.556 | at least 1.3: met |" in text
    assert "| Horovod's cost at 1 rank, suite (1 - with / without allreduce) | 3.4 % | 0.0 %, 6.2 % |" \
        in text
    assert "| 8.00 + 8.00 |" in text  # the last round's processes of the ceiling
    assert "other work shared the machine" not in text
    rows[0]["load_average_after"] = [3.5, 1.0, 1.0]
    rows[1]["load_average_after"] = [1.5, 1.0, 1.0]
    busy = ceiling.markdown(rows, [workload], facts, "bench/ceiling.py", 2)
    assert "after 1 of 2 runs was above the 2 cores (highest 3.50): other work shared the machine" in busy
    assert "`python a --run-dir DIR & python a --run-dir DIR2; wait`" in text
    assert "suite, 2 independent processes at once, 1 thread each: its results give no timing window" in text


def test_bad_flags_are_one_line_naming_the_flag(tmp_path):
    for flags, named in ((["--models", "resnet"], "--models resnet"), (["--rounds", "0"], "--rounds 0"),
                         (["--out", str(tmp_path / "missing" / "rows.json")], "--out")):
        result = run([sys.executable, "bench/ceiling.py", *flags], timeout=60)
        assert result.returncode == 2, result.stderr
        assert named in result.stderr.strip().splitlines()[-1]


def _children(pid):
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid):
            found.append(int(entry))
    return found


def test_sigterm_ends_the_running_job_and_reports_what_was_measured(tmp_path):
    out = tmp_path / "rows.json"
    bench = subprocess.Popen([sys.executable, "bench/ceiling.py", "--quick", "--models", "resnet50", "--out",
                              str(out)], cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not _children(bench.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    started = _children(bench.pid)
    assert started, "the bench started no run within 30 s"
    bench.send_signal(signal.SIGTERM)
    stdout, stderr = bench.communicate(timeout=30)
    assert bench.returncode == 128 + signal.SIGTERM, stderr
    assert "interrupted after 0 run(s)" in stderr
    assert "Interrupted after 0 run(s)" in stdout
    assert not [pid for pid in started if os.path.exists(f"/proc/{pid}")]
    assert read_json(out)["rows"] == []


@pytest.mark.slow
def test_canonical_resnet50_trains_one_process_and_writes_its_json(tmp_path):
    out = tmp_path / "canonical.json"
    result = run([sys.executable, "bench/canonical_resnet50.py", "--image-size", "32", "--num-classes", "10",
                  "--batch-size", "2", "--warmup-steps", "1", "--steps", "3", "--out", str(out)],
                 timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    written = read_json(out)
    assert written["world_size"] == 1 and len(written["per_rank"]) == 1
    # it trained: the weights moved, so the loss on the same batch did too, and stayed finite
    assert written["loss_first"] != written["loss_last"]
    assert all(abs(loss) < 1e6 for loss in (written["loss_first"], written["loss_last"]))
    rank = written["per_rank"][0]
    assert rank["samples_per_second"] > 0
    assert written["samples_per_second"] == pytest.approx(rank["samples_per_second"])
    # the rate is the timed steps' images over their time: 3 steps of 2 images inside the timed window,
    # which holds those steps and nothing else (a loaded machine stretches steps, not this arithmetic)
    start, end = rank["timed_window"]
    assert 0 < rank["step_ms_p50"] / 1000 < end - start
    over_window = 3 * 2 / (end - start)
    assert over_window <= 1.001 * rank["samples_per_second"]  # the window: wall clock; steps: perf_counter
    assert rank["samples_per_second"] == pytest.approx(over_window, rel=0.2)
    assert '"samples_per_second"' in result.stdout  # rank 0 prints what it writes


def test_canonical_bert_is_a_masked_lm_over_the_full_vocabulary():
    """A tiny model in this process: logits for each masked position over 30,522 words, and a few
    training steps on the same batch lower the loss."""
    import canonical_bert
    size = canonical_bert.BertSize(layers=1, hidden=32, seq_length=16, predictions=3)
    canonical_bert.start_horovod()
    model = canonical_bert.MaskedLM(size)
    features, labels = canonical_bert.synthetic_batch(size, 2, seed=0)
    assert tuple(model(features).shape) == (2, 3, 30522)
    optimizer = canonical_bert.tf.keras.optimizers.Adam(1e-2)
    step = canonical_bert.make_train_step(model, optimizer, features, labels)
    losses = [float(step()) for _ in range(4)]
    assert losses[-1] < losses[0]


def test_canonical_scripts_refuse_bad_flags_in_one_line(capsys, tmp_path):
    import canonical_bert
    for flags, named in ((["--out", str(tmp_path / "no" / "x.json")], "--out"),
                         (["--hidden", "100"], "--hidden 100"), (["--steps", "0"], "--steps")):
        with pytest.raises(SystemExit) as ended:
            canonical_bert.parse_args(flags)
        assert ended.value.code == 2
        assert named in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("flags, said", [
    ("fpu sse2 avx avx2 fma", "AVX2, no AVX-512"),
    ("sse2 avx avx2 avx512f avx512bw avx512_vnni avx512_bf16", "AVX-512 with VNNI, BF16"),
    ("sse2 avx2 avx512f amx_tile", "AVX-512 with AMX"),
    ("sse2 sse4_2", "no AVX2")])
def test_the_machine_line_says_the_cpus_vector_instructions(flags, said):
    # Same model name, a factor of three apart in a ResNet-50 step: the line must tell them apart.
    facts = {"nproc": 2, "cpu_model": "AMD EPYC", "cpu_vectors": ceiling.cpu_vectors(flags.split()),
             "memory_gib": 23.5, "python": "3.11", "tensorflow": "2.18.1", "horovod": "0.28.1",
             "git_revision": "abc", "load_average_start": [1, 1, 1], "load_average_end": [1, 1, 1]}
    assert ceiling.machine_line(facts).startswith(f"Machine: nproc 2, AMD EPYC ({said}), 23.5 GiB;")


def test_the_tf_backend_runs_under_mpirun_with_its_setting():
    workload = ceiling.workloads(ceiling.QUICK, "bert_config.json", "{}")["resnet50"]
    variant = next(v for v in ceiling.VARIANTS if v.key == "suite_2_tf")
    argv = ceiling.command(workload, variant, "DIR")
    assert argv[:4] == ["mpirun", "--oversubscribe", "-np", "2"] and "distribution=tf" in argv
    assert argv[4:8] == ["--bind-to", "none", "--map-by", "slot"]  # unbound, as under horovodrun
    assert "global_batch_size=8" in argv  # 4 per rank, 2 ranks


def test_the_step_split_takes_the_ceilings_step_as_compute():
    def row(variant, steps, round_index):
        return {**_row(variant, 1.0, round_index), "step_ms_p50": steps}
    rows = [row("suite_2", [110.0, 130.0], 1), row("suite_ceiling", [95.0, 105.0], 1),
            row("suite_2", [140.0, 140.0], 2), row("suite_ceiling", [100.0, 100.0], 2),
            row("suite_2_tf", [None, 150.0], 1)]
    # suite_2: per-round means 120 and 140, median 130; the ceiling's 100 and 100.
    split = ceiling.step_split(rows, "resnet50", "suite_2", "suite_ceiling")
    assert split == pytest.approx((130.0, 100.0, 30.0))
    # A round whose ranks did not all time a step is left out; with none left there is no split.
    assert ceiling.step_split(rows, "resnet50", "suite_2_tf", "suite_ceiling") is None
