"""bench/rank_scaling.py's arithmetic, commands and tables on hand-made rows; nothing is trained."""
import os
import sys

import pytest

from helpers.running import REPO

sys.path.append(os.path.join(REPO, "bench"))
import ceiling  # noqa: E402
import rank_scaling  # noqa: E402

SCALES = [rank_scaling.SCALES[key] for key in ("2", "8", "4x2")]


def _row(variant, value, round_index, model="bert", step_ms=500.0, rates=None, scale=None, wait=0.001):
    rates = rates or [value / 2, value / 2]
    per_process = [{"samples_per_second": rate, "step_ms_p50": step_ms, "input_wait_fraction": wait}
                   for rate in rates]
    return {"model": model, "variant": variant, "round": round_index, "samples_per_second": value,
            "per_process": per_process, "step_ms_p50": [step_ms] * len(rates), "copies": 1, "steps": 20,
            "per_rank_batch": 16, "scale": scale, "commands": [f"python {variant} --run-dir DIR"]}


def test_ceiling_threads_are_each_ranks_share_of_the_cores():
    assert rank_scaling.threads_per_rank(2, cores=2) == 1
    assert rank_scaling.threads_per_rank(8, cores=2) == 1  # never below one
    assert rank_scaling.threads_per_rank(2, cores=8) == 4


def test_steps_shrink_with_the_ranks_but_not_below_the_minimum():
    assert rank_scaling.scaled_steps(60, 2, 3) == 60
    assert rank_scaling.scaled_steps(60, 4, 3) == 30
    assert rank_scaling.scaled_steps(60, 8, 3) == 15
    assert rank_scaling.scaled_steps(10, 8, 3) == 3


def test_a_ceiling_shared_by_two_scales_runs_once_before_the_first():
    keys = [variant.key for variant in rank_scaling.run_list(SCALES)]
    assert keys == ["ceiling_2", "ranks_2", "ceiling_8", "ranks_8", "ranks_4x2"]
    eight = rank_scaling.ceiling_variant(8)
    assert eight.copies == 8 and eight.suite_sets == (f"cpu_threads={rank_scaling.threads_per_rank(8)}",)
    # the second round runs the same list backwards
    assert [v.key for v in ceiling.round_order(2, rank_scaling.run_list(SCALES))] == keys[::-1]


def test_commands_launch_n_ranks_on_one_host_or_on_the_hostfile(tmp_path):
    workload = rank_scaling.workload_for(ceiling.FULL, "resnet50", 4, 12, 4, str(tmp_path / "c.json"), "{}")
    assert "throughput_steps=6" in workload.suite_sets and "throughput_warmup_steps=2" in workload.suite_sets
    four = rank_scaling.Scale("4", 4)
    argv, = rank_scaling.job_argvs(workload, rank_scaling.ranks_variant(four), four, ["RUN"], None)
    assert argv[:6] == ["horovodrun", "-np", "4", "-H", "localhost:4", "python"]
    assert "global_batch_size=64" in argv and "image_size=224" in argv
    hosts = rank_scaling.SCALES["4x2"]
    variant = rank_scaling.ranks_variant(hosts)
    argv, = rank_scaling.job_argvs(workload, variant, hosts, ["RUN"], "/tmp/x/4node-2slots")
    assert argv[:5] == ["horovodrun", "-np", "8", "-hostfile", "/tmp/x/4node-2slots"]
    assert dict(variant.env) == {"OMPI_MCA_orte_keep_fqdn_hostnames": "1"}
    copies = rank_scaling.job_argvs(workload, rank_scaling.ceiling_variant(4), four, list("ABCD"), None)
    assert len(copies) == 4 and all(c[0] == "python" and "global_batch_size=16" in c for c in copies)
    assert copies[3][-2:] == ["--run-dir", "D"]


def test_the_tf_backend_runs_beside_horovod_in_each_scale_and_alternates_with_it():
    keys = [variant.key for variant in rank_scaling.run_list(SCALES, distributions=("horovod", "tf"))]
    assert keys == ["ceiling_2", "ranks_2", "ranks_2_tf", "ceiling_8", "ranks_8", "ranks_8_tf", "ranks_4x2",
                    "ranks_4x2_tf"]
    backwards = ceiling.round_order(2, rank_scaling.run_list(SCALES, distributions=("horovod", "tf")))
    assert [v.key for v in backwards][:3] == ["ranks_4x2_tf", "ranks_4x2", "ranks_8_tf"]


def test_tf_commands_launch_mpirun_as_horovodrun_would_on_one_host_or_the_hostfile(tmp_path):
    workload = rank_scaling.workload_for(ceiling.FULL, "bert", 8, 48, 4, str(tmp_path / "c.json"), "{}")
    eight = rank_scaling.SCALES["8"]
    tf = rank_scaling.ranks_variant(eight, distribution="tf")
    argv, = rank_scaling.job_argvs(workload, tf, eight, ["RUN"], None)
    assert argv[:argv.index("python")] == ["mpirun", "--oversubscribe", "-np", "8", "--bind-to", "none",
                                           "--map-by", "slot"]
    assert argv[-4:] == ["--set", "distribution=tf", "--run-dir", "RUN"] and "global_batch_size=128" in argv
    horovod, = rank_scaling.job_argvs(workload, rank_scaling.ranks_variant(eight), eight, ["RUN"], None)
    assert "distribution=tf" not in horovod and horovod[0] == "horovodrun"
    # Four hosts: the 2-slot hostfile, Open MPI keeping its qualified names (read by mpirun itself, so
    # not forwarded), and what the ranks on the other hosts need handed on with -x, --rank-env's too.
    hosts = rank_scaling.SCALES["4x2"]
    tf = rank_scaling.ranks_variant(hosts, (("TF_ENABLE_ONEDNN_OPTS", "0"),), "tf")
    argv, = rank_scaling.job_argvs(workload, tf, hosts, ["RUN"], "/tmp/x/4node-2slots")
    assert argv[:argv.index("python")] == [
        "mpirun", "-np", "8", "-hostfile", "/tmp/x/4node-2slots", "--bind-to", "none", "--map-by", "slot",
        "-x", "PATH", "-x", "PYTHONPATH", "-x", "TF_ENABLE_ONEDNN_OPTS"]
    assert dict(tf.env) == {"OMPI_MCA_orte_keep_fqdn_hostnames": "1", "TF_ENABLE_ONEDNN_OPTS": "0"}
    assert "global_batch_size=128" in argv and tf.key == "ranks_4x2_tf"


def test_a_rows_backend_is_recorded_and_a_ceiling_has_none(monkeypatch, tmp_path):
    result = {"samples_per_second": 5.0, "per_rank": [{"samples_per_second": 5.0, "step_ms_p50": 100.0}],
              "timed_steps": 3, "per_rank_batch": 4}
    monkeypatch.setattr(ceiling, "run_at_once", lambda argvs, *rest: [result] * len(argvs))
    workload = rank_scaling.workload_for(ceiling.QUICK, "bert", 2, 48, 4, str(tmp_path / "c.json"), "{}")
    two = rank_scaling.SCALES["2"]
    for variant, backend in ((rank_scaling.ranks_variant(two, distribution="tf"), "tf"),
                             (rank_scaling.ranks_variant(two), "horovod"),
                             (rank_scaling.ceiling_variant(2), None)):
        row = rank_scaling.run_one(workload, variant, two, 1, str(tmp_path), None, None, 60)
        assert (row["variant"], row["distribution"]) == (variant.key, backend)


def test_resnet50_runs_8_processes_at_a_smaller_batch_unless_asked():
    at_8 = rank_scaling.workload_for(ceiling.FULL, "resnet50", 8, 12, 4, "c.json", "{}")
    assert at_8.per_rank_batch == rank_scaling.RESNET50_BATCH_AT_8
    asked = rank_scaling.workload_for(ceiling.FULL, "resnet50", 8, 12, 4, "c.json", "{}", 16)
    assert asked.per_rank_batch == 16
    assert rank_scaling.workload_for(ceiling.FULL, "bert", 8, 60, 4, "c.json", "{}").per_rank_batch == 16


def _rounds():
    """Two rounds: 2-rank BERT at 0.95 and 0.90 of its ceiling, four-host BERT at 0.9 and 0.8."""
    rows = []
    for round_index, (two, hosts) in enumerate(((57.0, 54.0), (54.0, 40.0)), start=1):
        rows += [_row("ceiling_2", 60.0, round_index, step_ms=500.0),
                 _row("ranks_2", two, round_index, step_ms=550.0, rates=[two * 0.6, two * 0.4]),
                 _row("ceiling_8", 50.0 + 10 * (round_index - 1), round_index, step_ms=2000.0),
                 _row("ranks_4x2", hosts, round_index, step_ms=2400.0)]
    return rows


def test_efficiency_per_round_and_how_far_the_rounds_lie_apart():
    rows = _rounds()
    two = rank_scaling.efficiency_ratio(rank_scaling.SCALES["2"])
    per_round = ceiling.ratio_per_round(two, rows, "bert")
    assert per_round == pytest.approx([0.95, 0.90])
    assert ceiling.ratio_of_medians(two, rows, "bert") == pytest.approx(55.5 / 60)
    assert rank_scaling.round_disagreement(per_round) == pytest.approx(100 * 0.05 / 0.925)
    assert rank_scaling.round_disagreement([0.9]) == 0.0


def test_targets_name_the_bound_and_the_rounds_agreement():
    assert rank_scaling.target_text("2", "bert", 0.96, [0.95, 0.97]) == \
        "at least 0.95: met; rounds within 3 %: met"
    assert rank_scaling.target_text("2", "bert", 0.925, [0.95, 0.90]) == \
        "at least 0.95: NOT met; rounds within 3 %: NOT met"
    assert rank_scaling.target_text("4x2", "resnet50", 0.9, [0.9]) == "at least 0.9: met"
    assert rank_scaling.target_text("4", "bert", 0.5, [0.5]) == "-"


def test_the_split_compares_steps_and_names_the_widest_spread():
    rows = _rounds()
    ranks = rank_scaling.rows_of(rows, "bert", "ranks_2")
    assert rank_scaling.median_step_ms(ranks) == 550.0
    # 0.6 and 0.4 of the total: (0.6 - 0.4) / 0.5
    assert rank_scaling.rank_spread(ranks) == pytest.approx(40.0)
    assert rank_scaling.highest_input_wait(ranks) == pytest.approx(0.1)


def test_the_report_has_every_scale_the_targets_and_the_commands():
    workload = rank_scaling.workload_for(ceiling.FULL, "bert", 2, 60, 4, "bert_config.json", "{}")
    facts = {"date_utc": "2026-12-02 07:00 UTC", "nproc": 2, "cpu_model": "Some CPU", "memory_gib": 8.0,
             "python": "3.11", "tensorflow": "2.18.1", "horovod": "0.28.1", "git_revision": "abc",
             "load_average_start": [1.0, 2.0, 3.0], "load_average_end": [0.5, 0.5, 0.5]}
    text = rank_scaling.markdown(_rounds(), ["bert"], SCALES, facts, "bench/rank_scaling.py", 2,
                                 {"bert": workload})
    assert "2026-12-02 07:00 UTC" in text and "nproc 2, Some CPU" in text
    assert ("| 2 ranks, one host | 16 | 20 | 55.50 | 60.00 | 0.925 | 0.950, 0.900 | 5.4 % | "
            "at least 0.95: NOT met; rounds within 3 %: NOT met |") in text
    # 45 / 55 = 0.818; round 1: 54 / 50 = 1.08, round 2: 40 / 60 = 0.667
    assert "| 8 ranks, 4 hosts x 2 | 16 | 20 | 47.00 | 55.00 | 0.855 | 1.080, 0.667 |" in text
    assert "| 8 ranks, one host |" not in text  # no rows, no line
    assert "| 2 ranks, one host | 550 | 500 | +50 ms (+9.1 %) | 40.0 % | 0.0 % | 0.10 % |" in text
    assert "for i in $(seq 8); do python ceiling_8 --run-dir DIR & done; wait" in text


def _with_tf(rows):
    """The rows of _rounds() (no distribution in them: Horovod's, as rows written before the choice)
    and a tf run beside each N-rank run, 1.2 times its rate, 100 ms shorter a step."""
    tf_rows = [_row(row["variant"] + "_tf", 1.2 * row["samples_per_second"], row["round"],
                    step_ms=row["step_ms_p50"][0] - 100.0)
               for row in rows if row["variant"].startswith("ranks_")]
    return rows + tf_rows


def test_the_tf_backend_against_horovod_and_the_same_ceiling():
    rows = _with_tf(_rounds())
    two = rank_scaling.SCALES["2"]
    assert ceiling.ratio_per_round(rank_scaling.backend_ratio(two), rows, "bert") == pytest.approx([1.2, 1.2])
    tf = rank_scaling.efficiency_ratio(two, "tf")
    assert ceiling.ratio_per_round(tf, rows, "bert") == pytest.approx([1.2 * 0.95, 1.2 * 0.90])
    # Horovod's rows are found as before
    horovod = rank_scaling.efficiency_ratio(two)
    assert ceiling.ratio_per_round(horovod, rows, "bert") == pytest.approx([0.95, 0.9])


def test_the_report_gives_each_backend_its_efficiency_ratio_and_split():
    workload = rank_scaling.workload_for(ceiling.FULL, "bert", 2, 60, 4, "bert_config.json", "{}")
    facts = {"date_utc": "2026-12-02 07:00 UTC", "nproc": 2, "cpu_model": "Some CPU", "memory_gib": 8.0,
             "python": "3.11", "tensorflow": "2.18.1", "horovod": "0.28.1", "git_revision": "abc",
             "load_average_start": [1.0, 1.0, 1.0], "load_average_end": [0.5, 0.5, 0.5]}
    text = rank_scaling.markdown(_with_tf(_rounds()), ["bert"], SCALES, facts, "bench/rank_scaling.py", 2,
                                 {"bert": workload}, distributions=("horovod", "tf"))
    assert "| 2 ranks, one host | horovod | 16 | 20 | 55.50 | 60.00 | 0.925 | 0.950, 0.900 |" in text
    # 1.2 * 55.5 / 60 = 1.110; round 1: 68.4 / 60, round 2: 64.8 / 60
    assert "| 2 ranks, one host | tf | 16 | 20 | 66.60 | 60.00 | 1.110 | 1.140, 1.080 |" in text
    assert "| 8 ranks, 4 hosts x 2 | tf / horovod | 1.200 | 1.200, 1.200 |" in text
    assert "| 2 ranks, one host | tf | 450 | 500 | -50 ms (-11.1 %) |" in text
    assert "| 8 ranks, 4 hosts x 2 | horovod | 2400 | 2000 | +400 ms (+16.7 %) |" in text
    assert "- 8 ranks, 4 hosts x 2, tf backend (mpirun): `python ranks_4x2_tf --run-dir DIR`" in text
    # Horovod alone: the tables as before there was a choice, no backend column
    alone = rank_scaling.markdown(_with_tf(_rounds()), ["bert"], SCALES, facts, "x", 2, {"bert": workload})
    assert "tf" not in alone and "| 2 ranks, one host | 16 | 20 |" in alone


def test_bad_flags_are_one_line_naming_the_flag():
    for flags, named in ((["--scales", "16"], "--scales 16"), (["--steps", "bert=x"], "--steps bert=x"),
                         (["--models", "gpt"], "--models gpt"), (["--rounds", "0"], "--rounds 0"),
                         (["--distributions", "gloo"], "--distributions gloo"),
                         (["--distributions", "tf,tf"], "--distributions tf,tf")):
        with pytest.raises(SystemExit) as stop:
            rank_scaling.parse_args(flags)
        assert stop.value.code == 2, named
    args = rank_scaling.parse_args(["--quick"])
    assert [scale.key for scale in args.scales] == ["2", "4x2"] and args.rounds == 1
    args = rank_scaling.parse_args(["--steps", "bert=40", "--rank-env", "HOROVOD_CYCLE_TIME=5"])
    assert args.rank_env == (("HOROVOD_CYCLE_TIME", "5"),)
    assert dict(rank_scaling.ranks_variant(rank_scaling.SCALES["2"], args.rank_env).env) == {
        "HOROVOD_CYCLE_TIME": "5"}
    assert args.steps == {"resnet50": rank_scaling.DEFAULT_STEPS["resnet50"], "bert": 40}
    assert [scale.key for scale in args.scales] == ["2", "4", "8", "4x2"]
    assert args.distributions == ("horovod",)
    assert rank_scaling.parse_args(["--distributions", "tf, horovod"]).distributions == ("tf", "horovod")
