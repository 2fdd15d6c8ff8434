"""What Slurm can tell before any rank starts, through `suite.cluster.launch --launcher srun`.

Stand-in `srun` and `ompi_info` programs answer the questions as a cluster without the PMIx plugin,
an Open MPI without a PMI-2 client or a smaller allocation would; each case is one line and exit 2,
and no job step is started. The same checks on a real Slurm are in tests/test_slurm.py.
"""
import os
import sys

import pytest

from helpers.running import run
from suite.cluster import slurmcheck

# `srun --mpi=list` of Debian's Slurm 22.05 with slurm-wlm-basic-plugins, as printed on the test cluster.
DEBIAN_LIST = "MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\n" \
              "specific pmix plugin versions available: pmix_v4\n"
WITHOUT_PMIX = "MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2\n"
# `ompi_info --parsable` of Debian's Open MPI 4.1.4 (trimmed): PMIx clients only, no s1 or s2.
DEBIAN_OMPI = "ompi:version:full:4.1.4\n" + "".join(
    f'mca:pmix:{c}:version:"mca:2.1.0"\nmca:pmix:{c}:version:"component:4.1.4"\n'
    for c in ("ext3x", "isolated", "flux"))
LAUNCH = [sys.executable, "-m", "suite.cluster.launch", "--launcher", "srun", "--profile", "local-cpu",
          "--nodes", "2", "--ntasks-per-node", "1"]
MODEL = ["--", "models.resnet50", "--preset", "tiny_cpu", "--data-dir", "/nonexistent"]


@pytest.fixture
def stand_ins(tmp_path):
    """A folder of stand-in programs put first on PATH; a job step run by the stand-in srun leaves a mark."""
    folder = tmp_path / "bin"
    folder.mkdir()

    def make(mpi_list=DEBIAN_LIST, ompi=DEBIAN_OMPI):
        (folder / "mpi-list").write_text(mpi_list)
        (folder / "ompi").write_text(ompi)
        _program(folder / "srun", f'if [ "$1" = --mpi=list ]; then cat {folder}/mpi-list; exit 0; fi\n'
                                  f'echo "$@" > {folder}/step-started\n')
        _program(folder / "ompi_info", f"cat {folder}/ompi\n")
        return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
    make.step_started = lambda: (folder / "step-started").exists()
    return make


def _program(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def assert_one_error(result, *words):
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    for word in words:
        assert word in errors[0], errors[0]
    assert "launch:" not in result.stderr  # nothing was started
    return errors[0]


def test_a_slurm_without_the_pmix_plugin_is_named_before_any_rank_starts(stand_ins):
    env = stand_ins(mpi_list=WITHOUT_PMIX)
    line = assert_one_error(run([*LAUNCH, *MODEL], **env), "srun --mpi=pmix: this Slurm has no such plugin",
                            "(srun --mpi=list offers none, cray_shasta, pmi2)", "Slurm's PMIx plugin")
    assert "--launcher mpirun" in line
    assert not stand_ins.step_started()


def test_pmi2_with_an_open_mpi_that_has_no_pmi2_client_is_refused_in_one_line(stand_ins):
    env = stand_ins()
    result = run([*LAUNCH, "--launcher-args=--mpi=pmi2", *MODEL], **env)
    assert_one_error(result, "srun --mpi=pmi2: Open MPI 4.1.4 here (ompi_info) has no PMI-2 client",
                     "(its PMI components: ext3x, flux, isolated)", "use --mpi=pmix")
    assert not stand_ins.step_started()


def test_pmi2_goes_ahead_with_an_open_mpi_that_has_its_pmi2_client(stand_ins):
    env = stand_ins(ompi=DEBIAN_OMPI + 'mca:pmix:s2:version:"mca:2.1.0"\n')
    result = run([*LAUNCH, "--launcher-args=--mpi=pmi2", *MODEL], **env)
    assert result.returncode == 0, result.stderr
    assert stand_ins.step_started()


def test_more_nodes_than_the_allocation_has_are_named(stand_ins):
    env = stand_ins()
    result = run([*LAUNCH[:-4], "--nodes", "4", "--ntasks-per-node", "1", *MODEL], SLURM_JOB_ID="41",
                 SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="h[1-2]", **env)
    assert_one_error(result, "srun -N 4: job 41 has 2 nodes (h[1-2]); submit it with --nodes=4, or launch "
                             "on 2")
    assert not stand_ins.step_started()


def test_the_suites_own_srun_command_passes_on_debians_slurm(stand_ins):
    result = run([*LAUNCH, *MODEL], **stand_ins())
    assert result.returncode == 0, result.stderr
    assert stand_ins.step_started()


@pytest.mark.parametrize("command,kind", [
    (["srun", "--mpi=pmix", "-N", "2", "python"], "pmix"),
    (["srun", "--mpi=pmix", "--mpi", "pmi2", "python"], "pmi2"),  # srun takes the last
    (["srun", "-N", "2", "python"], None),
])
def test_the_mpi_type_of_an_srun_command(command, kind):
    assert slurmcheck.mpi_type(command) == kind


def test_the_pmix_versions_count_as_types(stand_ins, monkeypatch):
    versions = "specific pmix plugin versions available: pmix_v3,pmix_v4\n"
    monkeypatch.setenv("PATH", stand_ins(mpi_list=WITHOUT_PMIX + versions)["PATH"])
    assert slurmcheck.offered_types()[-2:] == ["pmix_v3", "pmix_v4"]


def test_a_sweep_names_a_scale_larger_than_the_allocation_before_its_first_run(stand_ins, tmp_path):
    from suite.cluster.sweep import planning
    hostfile = tmp_path / "four"
    hostfile.write_text("".join(f"n{i} slots=1\n" for i in range(1, 5)))
    info = tmp_path / "system.yaml"
    info.write_text("".join(f"{field}: '2'\n" for field in planning.HOST_FIELDS))
    result = run([sys.executable, "-m", "suite.cluster.sweep", "--out", str(tmp_path / "out"), "--hostfile",
                  str(hostfile), "--scales", "2,4", "--launcher", "srun", "--skip-host-check", "--profile",
                  "local-cpu", "--preset", "tiny_cpu", "--runs", "1", "--system-info", str(info), "--",
                  "models.resnet50", "--data-dir", "/nonexistent"],
                 SLURM_JOB_ID="41", SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="n[1-2]", **stand_ins())
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert "_n4_np4: srun -N 4: job 41 has 2 nodes (n[1-2])" in errors[0], errors[0]
    assert not stand_ins.step_started()
