"""Dry runs from the shipped files: placeholders marked and listed (exit 3), model flags checked first."""
import math
import re
import shlex
import sys

import pytest

from helpers.launch_cli import assert_one_line_error, launch, node_hostfile
from helpers.running import REPO, run
from suite.cluster import launch as launch_module
from suite.common import benchmarks, modelargs

OCI = ["--profile", "oci-bm-gpu-gm4-8"]
RESNET = ["models.resnet50", "--data-dir", "/data/imagenet"]
LISTED = re.compile(r"^# (<REPLACE-ME-\d+>) (.+?): (.+)$")


def listed(stdout):
    """{marker: (where, what to put there)} from a dry run's closing lines."""
    return {m[1]: (m[2], m[3]) for m in map(LISTED.match, stdout.splitlines()) if m}


@pytest.mark.parametrize("launcher", ["horovodrun", "mpirun", "srun"])
def test_every_launcher_prints_the_32_gpu_command_from_the_shipped_files(launcher):
    result = launch("--hostfile", "hostfiles/4node", "-np", "32", *OCI, "--launcher", launcher, "--dry-run",
                    "--", *RESNET, "--preset", "closed_32xA100_gbs3264")
    assert result.returncode == launch_module.PLACEHOLDERS_LEFT, result.stderr
    command = shlex.split(result.stdout.splitlines()[0])
    assert command[0] == launcher
    assert command[-7:] == [sys.executable, "-m", *RESNET, "--preset", "closed_32xA100_gbs3264"]
    found = listed(result.stdout)
    hosts = [marker for marker, (where, _) in found.items() if where.startswith("hostfiles/4node:")]
    assert [found[m][0] for m in hosts] == [f"hostfiles/4node:{n} host gpu-node-0{n}.REPLACE-ME"
                                            for n in range(1, 5)]
    assert all(marker in result.stdout.splitlines()[0] for marker in hosts)
    interface, = (m for m, (where, _) in found.items() if where.endswith("network_interface"))
    assert "oci-bm-gpu-gm4-8.yaml:" in found[interface][0]
    assert "--network-interface NAME" in found[interface][1]
    # One marker for the interface and every variable derived from it.
    env = dict(row.split("=", 1) for row in result.stdout.splitlines()[1:] if not row.startswith("#"))
    assert env["NCCL_SOCKET_IFNAME"] == env["OMPI_MCA_btl_tcp_if_include"] == interface
    assert len(found) == 5 and "REPLACE-ME" not in result.stderr


def test_markers_point_at_the_real_lines(tmp_path):
    """A placeholder on line 3 of an edited hostfile, and one env value of a profile, named by line."""
    hosts = tmp_path / "hosts"
    hosts.write_text("# my nodes\nnode-a slots=8\nnode-b.REPLACE-ME slots=8\n")
    with open(f"{REPO}/suite/common/profiles/tcp-only.yaml") as handle:
        text = handle.read().replace('NCCL_IB_DISABLE: "1"', 'NCCL_IB_HCA: "REPLACE-ME-hca"')
    profile = tmp_path / "tcp-edited.yaml"
    profile.write_text(text.replace("name: tcp-only", "name: tcp-edited"))
    hca_line = text.splitlines().index('  NCCL_IB_HCA: "REPLACE-ME-hca"') + 1
    result = launch("--hostfile", str(hosts), "--profile", str(profile), "--network-interface", "ens3",
                    "--skip-host-check", "--dry-run", "--", *RESNET, "--preset", "closed_16xA100_gbs3264")
    assert result.returncode == 3, result.stderr
    found = listed(result.stdout)
    assert sorted(where for where, _ in found.values()) == sorted([
        f"{hosts}:3 host node-b.REPLACE-ME", f"profile tcp-edited ({profile}:{hca_line}) env.NCCL_IB_HCA"])
    # Filled in: exit 0 and no listing.
    hosts.write_text("node-a slots=8\nnode-b slots=8\n")
    result = launch("--hostfile", str(hosts), "--profile", str(profile), "--network-interface", "ens3",
                    "--env", "NCCL_IB_HCA=mlx5_0", "--skip-host-check", "--dry-run", "--", *RESNET,
                    "--preset", "closed_16xA100_gbs3264")
    assert result.returncode == 0 and "REPLACE-ME" not in result.stdout and "#" not in result.stdout


def test_a_real_launch_still_refuses_placeholders():
    assert_one_line_error(launch("--hostfile", "hostfiles/4node", *OCI, "--", *RESNET, "--preset",
                                 "closed_32xA100_gbs3264"),
                          "hostfiles/4node:1", "gpu-node-01.REPLACE-ME", "is a placeholder")
    assert_one_line_error(launch("--hostfile", "hostfiles/localhost", *OCI, "--", *RESNET, "--preset",
                                 "tiny_cpu"), "oci-bm-gpu-gm4-8", "network_interface is a placeholder")


# Model args every rank would refuse: one line naming the flag, exit 2, nothing printed.
BAD_MODEL = {
    "unknown_setting": (["--preset", "closed_32xA100_gbs3264", "--set", "bogus=1"], "32",
                        ["--set bogus=1", "unknown setting 'bogus'"]),
    "bad_value": (["--preset", "closed_32xA100_gbs3264", "--set", "epochs=many"], "32",
                  ["--set epochs=many", "not a valid int"]),
    "unknown_flag": (["--preset", "closed_32xA100_gbs3264", "--bogus"], "32",
                     ["python -m models.resnet50", "unrecognized arguments: --bogus"]),
    "unknown_preset": (["--preset", "closed_64xA100"], "32", ["unknown preset 'closed_64xA100'"]),
    "preset_for_another_count": (["--preset", "closed_32xA100_gbs3264"], "16",
                                 ["preset closed_32xA100_gbs3264 is for 32 processes",
                                  "32 GPUs x 102 = 3264", "not 16;", "choose closed_16xA100_gbs3264"]),
    "batch_does_not_split": (["--preset", "closed_32xA100_gbs3264", "--set", "global_batch_size=3000"], "32",
                             ["global_batch_size 3000 is not divisible by 32 ranks"]),
    "invalid_config": (["--preset", "closed_32xA100_gbs3264", "--set", "precision=fp8"], "32",
                       ["precision must be one of"]),
}


@pytest.mark.parametrize("case", sorted(BAD_MODEL))
def test_a_dry_run_checks_the_model_args_first(case):
    model_args, np, culprits = BAD_MODEL[case]
    result = launch("--hostfile", "hostfiles/4node", "-np", np, *OCI, "--dry-run", "--",
                    "models.resnet50", "--data-dir", "/d", *model_args)
    assert result.returncode == 2
    assert_one_line_error(result, *culprits)


def test_bert_accumulation_and_a_batch_given_by_hand():
    # 3000 over 24 ranks is 125 a rank, which 2 micro-batches cannot split.
    base = ["--hostfile", "hostfiles/4node", "-np", "24", *OCI, "--dry-run", "--", "models.bert",
            "--data-dir", "/d", "--preset", "closed_32xA100_gbs3072"]
    assert_one_line_error(launch(*base, "--set", "global_batch_size=3000"),
                          "per-rank batch 125", "accumulation_steps 2")
    # A batch given by hand lifts the preset's process count.
    assert launch(*base, "--set", "global_batch_size=3072").returncode == 3


def test_the_sweep_dry_run_marks_and_checks_the_same(tmp_path):
    sweep = [sys.executable, "-m", "suite.cluster.sweep", "--out", str(tmp_path / "out"), *OCI,
             "--hostfiles", "hostfiles/2node,hostfiles/4node", "--dry-run"]
    result = run([*sweep, "--preset-per-scale", "16=closed_16xA100_gbs3264,32=closed_32xA100_gbs3264",
                  "--runs", "2", "--", *RESNET], timeout=60)
    assert result.returncode == 3, result.stderr
    found = listed(result.stdout)
    assert len(found) == 2 + 4 + 1  # the hosts of both files, the interface once
    commands = [line for line in result.stdout.splitlines() if line.startswith("horovodrun")]
    interfaces = {shlex.split(c)[shlex.split(c).index("--network-interfaces") + 1] for c in commands}
    assert len(commands) == 4 and len(interfaces) == 1 and interfaces <= set(found)
    assert not (tmp_path / "out").exists()
    # The preset of a scale is checked against that scale's process count.
    result = run([*sweep, "--preset", "closed_16xA100_gbs3264", "--", *RESNET], timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert "preset closed_16xA100_gbs3264 is for 16 processes" in result.stderr
    assert "not 32;" in result.stderr


def test_the_sweep_dry_run_lists_the_system_description_left_to_fill_in(tmp_path):
    shipped = "docs/system-info/oci-bm-gpu-gm4-8.yaml"
    result = run([sys.executable, "-m", "suite.cluster.sweep", "--out", str(tmp_path / "out"), *OCI,
                  "--network-interface", "eth0", "--hostfiles", node_hostfile(tmp_path, 2),
                  "--skip-host-check", "--preset", "closed_16xA100_gbs3264", "--runs", "1",
                  "--system-info", shipped, "--dry-run", "--", *RESNET], timeout=60)
    assert result.returncode == 3, result.stderr
    with open(f"{REPO}/{shipped}") as handle:
        expected = [f"{shipped}:{number} {line.split(':')[0]}"
                    for number, line in enumerate(handle, start=1) if ": REPLACE-ME" in line]
    assert len(expected) == 5
    assert [where for where, _ in listed(result.stdout).values()] == expected


def test_placeholders_are_numbered_once_per_place():
    marks = launch_module.Placeholders()
    first = marks.mark("hostfiles/2node:1 host a.REPLACE-ME", "a name")
    assert marks.mark("hostfiles/4node:1 host a.REPLACE-ME", "a name") == "<REPLACE-ME-2>"
    assert marks.mark("hostfiles/2node:1 host a.REPLACE-ME", "a name") == first == "<REPLACE-ME-1>"
    assert len(marks) == 2 and marks.listing()[0].startswith("# 2 placeholders left")
    assert launch_module.Placeholders().listing() == []


@pytest.mark.parametrize("model", ["models.resnet50", "models.bert"])
def test_each_closed_preset_names_the_process_count_of_its_arithmetic(model):
    """ranks, batch_arithmetic ("16 GPUs x 48 x 2 accumulation = 1536") and the settings agree."""
    benchmark = benchmarks.of_module(model)
    closed = {name: p for name, p in benchmark.presets.items() if re.match(r"closed_\d+x", name)}
    assert closed
    for name, preset in closed.items():
        *factors, total = [int(n) for n in re.findall(r"\d+", preset.batch_arithmetic)]
        assert preset.ranks == (factors[0],) and name.startswith(f"closed_{factors[0]}x"), name
        settings = benchmark.config_cls(**preset.overrides)
        assert settings.global_batch_size == total == math.prod(factors), name
        assert getattr(settings, "accumulation_steps", 1) == (factors[2] if len(factors) == 3 else 1), name
        modelargs.check_scale(model, benchmark.presets, name, settings, factors[0])
