"""BERT presets, the evaluation schedule in samples, and the closed-division rules (no training here)."""
import json
import re
from types import SimpleNamespace

import pytest

from models.bert.presets import PRESETS, BertRunConfig
from models.bert.workload import division, eval_steps, load_model_config, plan_blocks, rules_eval_interval
from suite.common.config import ConfigError, resolve
from suite.common.workload import local_batch_size

MLPERF_DATA = SimpleNamespace(generated=False, eval_records=10_000)


def make(preset="closed_8xA100_gbs448", sets=(), **extra):
    return resolve(BertRunConfig, PRESETS, preset, sets=list(sets),
                   extra={"data_dir": "/data", **extra})


@pytest.mark.parametrize("batch, interval", [(256, 150_000), (448, 150_000), (1536, 150_000),
                                             (2048, 150_000), (3072, 175_000), (4096, 175_000),
                                             (8192, 225_000)])
def test_eval_interval_follows_the_rules_formula(batch, interval):
    # The table in the v2.1 rules' reference README: 150k up to 2048, 175k at 3072/4096, 225k at 8192.
    assert rules_eval_interval(batch) == interval


def test_each_eval_point_is_the_first_step_reaching_k_intervals():
    # NVIDIA's v2.1 logs at batch 448 evaluate first at 150,080 samples: 335 steps.
    config = make()
    steps = eval_steps(config)
    assert steps[:3] == [335, 670, 1005]
    # Rounding each point up on its own keeps the grid from drifting: 6 x 150,000 samples are reached
    # at step 2009, not at 6 x 335 = 2010 as with an interval rounded up once.
    assert steps[5] == 2009
    for k, step in enumerate(steps, start=1):
        assert step * 448 >= k * 150_000 > (step - 1) * 448
    blocks = plan_blocks(config)
    assert [b.eval_epoch_num for b in blocks[:3]] == [150_080, 300_160, 450_240]
    assert blocks[0].first_epoch_num == 0 and blocks[1].first_epoch_num == 150_080
    assert all(b.epoch_count == b.steps * 448 for b in blocks)
    assert [b.eval_epoch_num for b in plan_blocks(make("closed_16xA100_gbs1536"))][:3] == [
        150_528, 301_056, 450_048]
    assert eval_steps(make("closed_32xA100_gbs3072"))[0] == 57  # 175,104 samples


def test_the_budget_ends_on_the_evaluation_grid():
    # 6700 steps at batch 448: the 20th point (3,000,000 samples) is step 6697; no extra evaluation
    # is added for the last 3 steps.
    blocks = plan_blocks(make())
    assert len(blocks) == 20 and blocks[-1].eval_epoch_num == 6697 * 448
    assert sum(b.steps for b in blocks) == 6697
    for name in PRESETS:
        config = make(name)
        points = [b.eval_epoch_num for b in plan_blocks(config)]
        interval = config.eval_interval_samples or rules_eval_interval(config.global_batch_size)
        assert all(-(-(k * interval) // config.global_batch_size) * config.global_batch_size == samples
                   for k, samples in enumerate(points, start=1)), name


def test_an_explicit_interval_follows_the_same_grid():
    config = make("tiny_cpu", sets=["eval_interval_samples=100", "global_batch_size=32", "train_steps=10"])
    assert [b.eval_epoch_num for b in plan_blocks(config)] == [128, 224, 320]
    short = make("tiny_cpu", sets=["eval_interval_samples=3200", "train_steps=50"])
    with pytest.raises(ValueError, match="train_steps 50 ends before the first evaluation at step 100"):
        plan_blocks(short)


def test_presets_batch_arithmetic_adds_up():
    for name, preset in PRESETS.items():
        numbers = list(map(int, re.findall(r"\d+", preset.batch_arithmetic)))
        ranks, total = numbers[0], numbers[-1]
        product = 1
        for factor in numbers[1:-1]:
            product *= factor
        config = make(name)
        assert ranks * product == total == config.global_batch_size, name
        local = local_batch_size(config.global_batch_size, ranks, config.accumulation_steps)
        assert local // config.accumulation_steps == numbers[1], name


def test_closed_presets_carry_their_reference_convergence_points():
    closed = {name: make(name) for name in PRESETS if name.startswith("closed_") and "cpu" not in name}
    assert {c.global_batch_size for c in closed.values()} == {448, 1536, 3072}
    rcp_path = pytest.importorskip("mlperf_logging.rcp_checker").__file__.replace(
        "__init__.py", "training_2.1.0/rcps_bert.json")
    with open(rcp_path) as handle:
        rcps = {entry["BS"]: entry["Hyperparams"] for entry in json.load(handle).values()}
    for name, config in closed.items():
        rcp = rcps[config.global_batch_size]
        assert (config.base_lr, config.train_steps, config.warmup_steps, config.start_warmup_step,
                config.beta_1, config.beta_2, config.weight_decay, config.epsilon) == (
            rcp["opt_base_learning_rate"], rcp["opt_learning_rate_training_steps"], rcp["num_warmup_steps"],
            rcp["start_warmup_step"], rcp["opt_lamb_beta_1"], rcp["opt_lamb_beta_2"],
            rcp["opt_lamb_weight_decay_rate"], rcp["opt_epsilon"]), name


def test_a_closed_preset_with_the_phase1_checkpoint_on_mlperf_data_is_closed():
    from models.bert.model import BERT_LARGE
    for name in PRESETS:
        if name.startswith("closed_") and "cpu" not in name:
            verdict = division(make(name, init_checkpoint="/ckpt/model.ckpt-28252"), BERT_LARGE, MLPERF_DATA)
            assert (verdict.name, verdict.reasons) == ("closed", ()), name


def test_departures_from_the_closed_rules_make_the_run_open_and_say_why():
    from models.bert.model import BertConfig, BERT_LARGE
    tiny = BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64)
    verdict = division(make("tiny_cpu"), tiny, SimpleNamespace(generated=True, eval_records=256))
    text = " ".join(verdict.reasons)
    assert verdict.name == "open"
    tiny_cpu = PRESETS["tiny_cpu"].overrides
    for fragment in ("not the MLPerf", "not BERT-large", "no initial checkpoint", "sequence length 64",
                     f"eval_interval_samples {tiny_cpu['eval_interval_samples']}",
                     f"target_accuracy {tiny_cpu['target_accuracy']}"):
        assert fragment in text, text
    synthetic = division(make(sets=["synthetic=true"], init_checkpoint="/c"), BERT_LARGE, None)
    assert synthetic.reasons == ("synthetic data",)


def test_model_config_comes_from_the_checkpoint_folder_then_the_data_folder(tmp_path):
    from models.bert.model import BERT_LARGE
    assert load_model_config(make()) == (BERT_LARGE, "")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    small = {"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
             "intermediate_size": 64}
    (data_dir / "bert_config.json").write_text(json.dumps(small))
    model_config, path = load_model_config(make(data_dir=str(data_dir)))
    assert (model_config.vocab_size, path) == (50, str(data_dir / "bert_config.json"))
    ckpt_dir = tmp_path / "ckpt"
    ckpt_dir.mkdir()
    (ckpt_dir / "bert_config.json").write_text(json.dumps({**small, "vocab_size": 60}))
    model_config, _ = load_model_config(make(data_dir=str(data_dir), init_checkpoint=str(ckpt_dir)))
    assert model_config.vocab_size == 60
    with pytest.raises(ValueError, match="bert_config .*missing.json: no such file"):
        load_model_config(make(bert_config=str(tmp_path / "missing.json")))


def test_bad_settings_are_refused_with_the_key_named():
    with pytest.raises(ConfigError, match="accumulation_steps must be positive"):
        make(sets=["accumulation_steps=0"])
    with pytest.raises(ConfigError, match="beta_2 must be within"):
        make(sets=["beta_2=1.0"])


def test_the_downloaded_checkpoint_folder_layout_is_understood(tmp_path):
    from models.bert.workload import init_checkpoint_path
    nested = tmp_path / "phase1" / "tf1_ckpt"
    nested.mkdir(parents=True)
    (nested / "model.ckpt-28252.index").write_text("")
    (tmp_path / "phase1" / "bert_config.json").write_text(json.dumps(
        {"vocab_size": 70, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
         "intermediate_size": 64}))
    assert init_checkpoint_path(str(tmp_path / "phase1")) == str(nested)
    assert init_checkpoint_path(str(nested)) == str(nested)
    model_config, path = load_model_config(make(init_checkpoint=str(tmp_path / "phase1")))
    assert (model_config.vocab_size, path) == (70, str(tmp_path / "phase1" / "bert_config.json"))
