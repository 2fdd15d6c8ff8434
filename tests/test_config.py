"""Config resolution, validation and the ResNet-50 presets, schedule plan and division rules."""
import dataclasses
import json
import re
from types import SimpleNamespace

import pytest

from models.resnet50.presets import PRESETS, ResNetConfig
from models.resnet50.workload import division, plan_blocks
from suite.common.workload import local_batch_size
from suite.common.config import ConfigError, resolve


def make(preset="tiny_cpu", **kwargs):
    kwargs.setdefault("extra", {"data_dir": "/data"})
    return resolve(ResNetConfig, PRESETS, preset, **kwargs)


def test_precedence_is_preset_then_file_then_flags_then_set(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"epochs": 9, "base_lr": 3.0, "data_dir": "/from-file"}))
    config = make(config_file=str(path), sets=["base_lr=4.5"], extra={"data_dir": "/from-flag"})
    assert config.epochs == 9            # file over preset (8)
    assert config.base_lr == 4.5         # --set over file
    assert config.data_dir == "/from-flag"
    assert config.global_batch_size == 32  # preset over class default (3264)


def test_yaml_config_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("epochs: 3\nxla: true\n")
    config = make(config_file=str(path))
    assert (config.epochs, config.xla) == (3, True)


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        make().epochs = 1


@pytest.mark.parametrize("kwargs, message", [
    ({"preset": "nope"}, "unknown preset 'nope'"),
    ({"sets": ["epochz=3"]}, "unknown setting 'epochz'"),
    ({"sets": ["epochs=three"]}, "epochs=three: not a valid int"),
    ({"sets": ["xla=maybe"]}, "xla=maybe: not a valid bool"),
    ({"sets": ["epochs"]}, "expected key=value"),
    ({"sets": ["precision=fp8"]}, "precision must be one of"),
    ({"sets": ["eval_offset=7"]}, "eval_offset"),
    ({"sets": ["global_batch_size=0"]}, "global_batch_size must be positive"),
    ({"extra": {}}, "data_dir is empty"),
])
def test_bad_settings_name_the_culprit(kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        make(**kwargs)


def test_config_file_with_wrong_type_names_file_and_key(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"epochs": "many"}))
    with pytest.raises(ConfigError, match=r"c\.json: epochs must be int"):
        make(config_file=str(path))


def test_closed_presets_batch_arithmetic_adds_up():
    for name, preset in PRESETS.items():
        found = re.search(r"(\d+) \w+ x (\d+) = (\d+)", preset.batch_arithmetic)
        gpus, per_gpu, total = map(int, found.groups())
        assert gpus * per_gpu == total == preset.overrides["global_batch_size"], name
        config = make(name)
        assert local_batch_size(config.global_batch_size, gpus) == per_gpu


def test_batch_not_divisible_by_ranks_is_rejected():
    with pytest.raises(ValueError, match="global_batch_size 3264 is not divisible by 5 ranks"):
        local_batch_size(make("closed_8xA100_gbs3264").global_batch_size, 5)


def test_batch_not_divisible_by_accumulation_is_rejected():
    with pytest.raises(ValueError, match="per-rank batch 56 .* not divisible by accumulation_steps 3"):
        local_batch_size(448, 8, accumulation_steps=3)


def test_closed_8gpu_plan_evaluates_on_the_grid_only():
    # The learning rate decays over the preset's 37 epochs; evaluations stay on the grid 3, 7, ...:
    # the run goes on to epoch 39 rather than adding an evaluation at epoch 37.
    config = make("closed_8xA100_gbs3264")
    blocks = plan_blocks(config, steps_per_epoch=392)
    assert [b.eval_epoch_num for b in blocks] == [3, 7, 11, 15, 19, 23, 27, 31, 35, 39]
    assert (blocks[0].first_epoch_num, blocks[0].epoch_count) == (1, 3)
    assert (blocks[-1].first_epoch_num, blocks[-1].epoch_count) == (36, 4)
    assert [e for b in blocks for e, _ in b.epochs] == list(range(1, 40))
    assert sum(b.steps for b in blocks) == 39 * 392
    for name in PRESETS:
        config = make(name)
        first = config.eval_offset or config.epochs_between_evals
        points = [b.eval_epoch_num for b in plan_blocks(config, 10)]
        assert all((p - first) % config.epochs_between_evals == 0 for p in points), name
        assert points[-1] >= config.epochs > points[-1] - config.epochs_between_evals, name


def test_a_budget_on_the_grid_ends_there():
    assert [b.eval_epoch_num for b in plan_blocks(make("closed_32xA100_gbs4096"), 10)][-2:] == [38, 42]
    short = make("closed_8xA100_gbs3264", sets=["epochs=2"])
    assert [b.eval_epoch_num for b in plan_blocks(short, 10)] == [3]


def test_offset_zero_evaluates_every_fourth_epoch():
    config = make("closed_8xA100_gbs3264", sets=["eval_offset=0", "epochs=8"])
    assert [b.eval_epoch_num for b in plan_blocks(config, 10)] == [4, 8]


IMAGENET = SimpleNamespace(train_records=1_281_167, eval_records=50_000, bounding_boxes=False)


def test_closed_preset_on_imagenet_is_closed():
    for name in PRESETS:
        if name.startswith("closed_") and "cpu" not in name:
            verdict = division(make(name), IMAGENET)
            assert (verdict.name, verdict.reasons) == ("closed", ()), name


def test_departures_from_closed_rules_make_the_run_open_and_say_why():
    verdict = division(make("tiny_cpu"), SimpleNamespace(train_records=320, eval_records=80))
    assert verdict.name == "open"
    text = " ".join(verdict.reasons)
    for fragment in ("not ImageNet", "image_size 64", "num_classes 4", "every 4 epochs", "target_accuracy"):
        assert fragment in text
    bad_wd = division(make("closed_8xA100_gbs3264", sets=["weight_decay=3e-5"]), IMAGENET)
    assert bad_wd.name == "open" and any("weight" in r for r in bad_wd.reasons)
    synthetic = division(make("closed_8xA100_gbs3264", sets=["synthetic=true"]), None)
    assert synthetic.reasons == ("synthetic data",)
