"""`python -m suite.cluster.launch`: dry-run commands per launcher and scale, bad input, local runs."""
import dataclasses
import json
import os
import re
import shlex
import socket
import sys
import types

import pytest

from helpers.launch_cli import OCI_ENV, assert_one_line_error, launch, node_hostfile
from helpers.running import REPO, run
from helpers.runs import read_json
from suite.common import profiles

# The suite's own choices for the OCI profile: HCOLL off as a variable (the source passes it to
# mpirun, which srun and the MPIJob would drop) and no silent fall-back to sockets.
SUITE_OCI_ENV = {"OMPI_MCA_coll": "^hcoll", "NCCL_NET": "IB"}
INTERFACE_VARIABLES = ("NCCL_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE", "OMPI_MCA_btl_tcp_if_include",
                       "OMPI_MCA_oob_tcp_if_include")
# The OCI profile leaves the front-end interface for the user to fill in.
MPI_IFACE = ["--network-interface", "eth0"]
OCI = ["--profile", "oci-bm-gpu-gm4-8", *MPI_IFACE]
MODEL = ["--", "models.resnet50", "--preset", "closed_16xA100_gbs3264", "--data-dir", "/data/imagenet"]
# This host's two slots: the CPU preset made for two processes.
LOCAL_MODEL = ["--", "models.resnet50", "--preset", "tiny_cpu", "--data-dir", "runs/demo/data"]


def model_for(np):
    """MODEL with the closed preset written for np processes (8, 16 or 32)."""
    return [*MODEL[:3], f"closed_{np}xA100_gbs3264", *MODEL[4:]]


PROFILES = ("generic-infiniband", "local-cpu", "oci-bm-gpu-gm4-8", "oci-bm-gpu4-8", "tcp-only")


def dry_run(*args):
    """(command argv, {variable: value}) from --dry-run's output: the command line, then KEY=VALUE lines
    (nothing left to fill in: exit 0 and no placeholder listing)."""
    result = launch("--dry-run", *args)
    assert result.returncode == 0, result.stderr
    assert "#" not in result.stdout, result.stdout
    first, *rest = result.stdout.splitlines()
    env = dict(line.split("=", 1) for line in rest)
    return shlex.split(first), env


def flag_value(command, flag):
    return command[command.index(flag) + 1]


def hosts_of(nodes):
    return ",".join(f"node-{c}:8" for c in "abcd"[:nodes])


# --- dry runs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_horovodrun_dry_run_under_oci_profile(nodes, tmp_path):
    command, env = dry_run("--hostfile", node_hostfile(tmp_path, nodes), "-np", str(8 * nodes), *OCI,
                           "--skip-host-check", *model_for(8 * nodes))
    assert command[0] == "horovodrun"
    assert flag_value(command, "-np") == str(8 * nodes)
    assert flag_value(command, "-H") == hosts_of(nodes)
    # horovodrun is told the interface, so it neither probes nor overrides the profile's variables.
    assert flag_value(command, "--network-interfaces") == "eth0"
    assert not [arg for arg in command if arg.startswith("--mpi-args")]
    # The model command follows the launcher's own flags, unchanged.
    assert command[-(len(MODEL) + 1):] == [sys.executable, "-m", *model_for(8 * nodes)[1:]]
    for key, value in {**OCI_ENV, **SUITE_OCI_ENV}.items():
        assert env.get(key) == value, key
    assert {key: env[key] for key in INTERFACE_VARIABLES} == dict.fromkeys(INTERFACE_VARIABLES, "eth0")
    # The ranks learn the profile, and that it is already applied.
    assert env["SUITE_PROFILE"] == f"{REPO}/suite/common/profiles/oci-bm-gpu-gm4-8.yaml"
    assert env["SUITE_PROFILE_RESOLVED"] == "1"


def test_horovodrun_says_that_ucx_settings_do_not_apply(tmp_path):
    result = launch("--dry-run", "--hostfile", node_hostfile(tmp_path, 2), *OCI, "--skip-host-check", *MODEL)
    assert result.returncode == 0
    assert "note: horovodrun's MPI path forces Open MPI's pml ob1" in result.stderr
    result = launch("--dry-run", "--hostfile", node_hostfile(tmp_path, 2), *OCI, "--launcher", "mpirun",
                    "--skip-host-check", *MODEL)
    assert result.returncode == 0 and "pml ob1" not in result.stderr


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_mpirun_dry_run_exports_every_variable(nodes, tmp_path):
    command, env = dry_run("--hostfile", node_hostfile(tmp_path, nodes), *OCI, "--launcher", "mpirun",
                           "--skip-host-check", *model_for(8 * nodes))
    assert command[0] == "mpirun"
    assert flag_value(command, "-np") == str(8 * nodes)  # all slots by default
    assert flag_value(command, "-H") == hosts_of(nodes)
    assert flag_value(command, "--bind-to") == "none" and flag_value(command, "--map-by") == "slot"
    exported = {command[i + 1] for i, arg in enumerate(command) if arg == "-x"}
    assert set(env) <= exported
    for key, value in OCI_ENV.items():
        assert env.get(key) == value, key
    assert env["HOROVOD_FUSION_THRESHOLD"] == str(128 * 1024 * 1024)
    assert ("--allow-run-as-root" in command) == (os.geteuid() == 0)


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_srun_dry_run(nodes, tmp_path):
    command, env = dry_run("--hostfile", node_hostfile(tmp_path, nodes), *OCI, "--launcher", "srun",
                           "--skip-host-check", *model_for(8 * nodes))
    assert command[:4] == ["srun", "--mpi=pmix", "-N", str(nodes)]
    assert "--ntasks-per-node=8" in command and f"--ntasks={8 * nodes}" in command
    assert "--export=ALL" in command
    assert f"--nodelist={','.join('node-' + c for c in 'abcd'[:nodes])}" in command
    for key, value in OCI_ENV.items():
        assert env.get(key) == value, key


def test_srun_runs_a_smaller_scale_on_the_nodes_it_fills(tmp_path):
    """One node's worth of processes from a 4-node hostfile: -N 1, or Slurm spreads them over 4 nodes."""
    command, _ = dry_run("--hostfile", node_hostfile(tmp_path, 4), "-np", "8", *OCI, "--launcher", "srun",
                         "--skip-host-check", *model_for(8))
    assert command[:4] == ["srun", "--mpi=pmix", "-N", "1"]
    assert "--ntasks=8" in command and "--nodelist=node-a" in command
    command, _ = dry_run("--launcher", "srun", "--nodes", "4", "--ntasks-per-node", "8", "-np", "16", *OCI,
                         *MODEL)
    assert command[:4] == ["srun", "--mpi=pmix", "-N", "2"] and "--ntasks=16" in command


def test_open_mpi_hostfile_forms(tmp_path):
    """Open MPI's spellings are read; a bare host gets one slot per GPU of the profile."""
    path = tmp_path / "hosts"
    path.write_text("node-a slots = 8   # spaces round '='\nnode-b max_slots=8 slots=8\nnode-c\n")
    command, _ = dry_run("--hostfile", str(path), *OCI, "--skip-host-check", *MODEL,
                         "--set", "global_batch_size=3264")
    assert flag_value(command, "-H") == "node-a:8,node-b:8,node-c:8"
    # Horovod's own -hostfile parser takes only '<host> slots=<N>': the printed form is what it reads.
    from horovod.runner.common.util.hosts import parse_host_files
    result = run([sys.executable, "-m", "suite.cluster.hostfile", str(path), "--default-slots", "8"])
    assert result.returncode == 0, result.stderr
    converted = tmp_path / "horovod-form"
    converted.write_text(result.stdout)
    assert parse_host_files(str(converted)) == "node-a:8,node-b:8,node-c:8"
    # Without a default, a bare host is refused in one line.
    result = run([sys.executable, "-m", "suite.cluster.hostfile", str(path)])
    assert result.returncode == 2 and result.stderr.startswith(f"error: {path}:3: host node-c gives no slots")


def test_srun_takes_its_shape_from_flags_without_a_hostfile():
    command, _ = dry_run("--launcher", "srun", "--nodes", "4", "--ntasks-per-node", "8", *OCI, *model_for(32))
    assert command[:5] == ["srun", "--mpi=pmix", "-N", "4", "--ntasks-per-node=8"]
    assert "--ntasks=32" in command and not any(arg.startswith("--nodelist") for arg in command)


def test_resolvable_names_pass_the_host_check(tmp_path):
    """No --skip-host-check: localhost and this machine's own name resolve."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"# two names of this machine\nlocalhost slots=8\n\n{socket.gethostname()} slots=8\n")
    # 12 processes are not the preset's 16: its batch, given by hand, splits over them.
    command, _ = dry_run("--hostfile", str(hostfile), *OCI, "-np", "12", *MODEL,
                         "--set", "global_batch_size=3264")
    assert flag_value(command, "-H") == f"localhost:8,{socket.gethostname()}:8"
    assert flag_value(command, "-np") == "12"


def test_tuning_flags_override_the_profile(tmp_path):
    hostfile = node_hostfile(tmp_path, 2)
    base = ["--hostfile", hostfile, *OCI, "--skip-host-check"]
    _, env = dry_run(*base, *MODEL)
    assert (env["HOROVOD_FUSION_THRESHOLD"], env["HOROVOD_CYCLE_TIME"],
            env["HOROVOD_HIERARCHICAL_ALLREDUCE"]) == (str(128 * 1024 * 1024), "1.0", "0")
    assert "HOROVOD_TIMELINE" not in env

    timeline = tmp_path / "tl.json"
    command, env = dry_run(*base, "--fusion-threshold-mb", "64", "--cycle-time-ms", "2.5",
                           "--hierarchical-allreduce", "--timeline", str(timeline),
                           "--env", "NCCL_IB_TIMEOUT=23", *MODEL)
    assert env["HOROVOD_FUSION_THRESHOLD"] == str(64 * 1024 * 1024)
    assert env["HOROVOD_CYCLE_TIME"] == "2.5"
    assert env["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "1"
    assert env["HOROVOD_TIMELINE"] == str(timeline)
    assert env["NCCL_IB_TIMEOUT"] == "23"
    # horovodrun gets the same values as its own flags.
    assert flag_value(command, "--fusion-threshold-mb") == "64"
    assert flag_value(command, "--cycle-time-ms") == "2.5"
    assert "--hierarchical-allreduce" in command and "--no-hierarchical-allreduce" not in command
    assert flag_value(command, "--timeline-filename") == str(timeline)


def test_a_profile_file_and_the_launch_record(tmp_path):
    profile = tmp_path / "my-cluster.yaml"
    profile.write_text("name: my-cluster\nversion: 3\ndescription: test\ngpus_per_node: 8\n"
                       "env: {NCCL_SOCKET_IFNAME: ens3, NCCL_IB_DISABLE: 1}\n"
                       "mpi_args: [--mca, btl_tcp_if_include, ens3]\n"
                       "horovod: {cycle_time_ms: 4, timeline: true}\n")
    record = tmp_path / "rec"
    command, env = dry_run("--hostfile", node_hostfile(tmp_path, 2), "--profile", str(profile),
                           "--skip-host-check", "--launcher", "mpirun", "--record", str(record), *MODEL)
    assert env["NCCL_SOCKET_IFNAME"] == "ens3" and env["NCCL_IB_DISABLE"] == "1"
    assert env["HOROVOD_CYCLE_TIME"] == "4.0"
    # timeline: true puts the trace next to the launch record.
    assert env["HOROVOD_TIMELINE"] == str(record / "horovod_timeline.json")
    mca = command.index("--mca")
    assert command[mca:mca + 3] == ["--mca", "btl_tcp_if_include", "ens3"]
    saved = read_json(record / "launch.json")
    assert saved["command"] == command and saved["env"] == env
    assert saved["profile"]["name"] == "my-cluster" and saved["profile"]["version"] == 3
    assert saved["hosts"] == [{"name": "node-a", "slots": 8}, {"name": "node-b", "slots": 8}]
    assert saved["dry_run"] is True and saved["exit_code"] is None
    assert [p.name for p in record.iterdir()] == ["launch.json"]  # no temp file left behind


def test_every_shipped_profile_loads():
    assert set(PROFILES) <= set(profiles.available())
    for name in PROFILES:
        profile = profiles.load(name)
        assert profile.name == name and profile.version >= 1
    oci = profiles.load("oci-bm-gpu-gm4-8")
    assert oci.gpus_per_node == 8 and oci.expected_busbw_gbps == {1: 235.0, 2: 185.0, 4: 185.0}
    assert oci.placeholders() == sorted(INTERFACE_VARIABLES) and oci.env["NCCL_NET"] == "IB"
    assert oci.mpi_args == () and oci.env["OMPI_MCA_coll"] == "^hcoll"
    assert profiles.load("generic-infiniband").env["NCCL_NET"] == "IB"
    assert "NCCL_NET" not in profiles.load("tcp-only").env
    assert profiles.load("tcp-only").env["NCCL_IB_DISABLE"] == "1"
    assert not [k for k in profiles.load("local-cpu").env if k.startswith(("NCCL_", "UCX_"))]


def test_the_two_a100_profiles_name_their_shapes_and_their_own_nics():
    """BM.GPU4.8's RDMA NICs are not GM4.8's: each profile says its shape, and neither list is the other's
    (oracle-quickstart/oci-hpc playbooks/roles/nccl-conf/templates/a100_b4.8 and bm.gpu4.8)."""
    gm4, gpu4 = profiles.load("oci-bm-gpu-gm4-8"), profiles.load("oci-bm-gpu4-8")
    assert gm4.shapes == ("BM.GPU.A100-v2.8", "BM.GPU.GM4.8") and gpu4.shapes == ("BM.GPU4.8",)
    gm4_nics, gpu4_nics = set(profiles.rdma_devices(gm4.env)), set(profiles.rdma_devices(gpu4.env))
    assert len(gm4_nics) == len(gpu4_nics) == 16
    assert gm4_nics - gpu4_nics == {"mlx5_4", "mlx5_5"} and gpu4_nics - gm4_nics == {"mlx5_0", "mlx5_13"}
    # The NIC Oracle gives UCX on each shape is not one NCCL uses there.
    assert gpu4.env["UCX_NET_DEVICES"] == "mlx5_4:1" and "mlx5_4" not in gpu4_nics
    assert gm4.env["UCX_NET_DEVICES"] == "mlx5_0:1" and "mlx5_0" not in gm4_nics
    tcp = profiles.load("tcp-only")
    assert tcp.shapes == () and profiles.rdma_devices(tcp.env) == ()


def test_a_bad_shape_is_refused(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nversion: 1\ndescription: x\ngpus_per_node: 8\nshapes: [\"BM GPU\"]\n")
    with pytest.raises(profiles.ProfileError, match=r"shapes\[0\] 'BM GPU' is not a shape name"):
        profiles.load(str(path))


def test_shipped_profiles_show_the_suite_default_timeouts_and_pass_them_on():
    """The bounds RELIABILITY.md states are the ones every shipped profile writes out."""
    for name in PROFILES:
        with open(profiles.load(name).path) as handle:
            written = profiles.read_yaml(handle.name)["timeouts"]
        assert written == dataclasses.asdict(profiles.Timeouts()), name
    edited = profiles.Timeouts(gloo_seconds=45, mpi_keepalive_seconds=7)
    env = edited.env()
    assert env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "45"
    assert env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "300"
    assert (env["OMPI_MCA_oob_tcp_keepalive_time"], env["OMPI_MCA_oob_tcp_keepalive_intvl"]) == ("7", "3")
    assert edited.mpi_daemon_seconds() == 7 + 3 * 3


# --- validation errors, one by one ---------------------------------------------------------------

HOSTFILE_ERRORS = {
    "bad_slots": ("node-a slots=8\nnode-b slots=x\n", [":2:", "slots=x is not a whole number"]),
    "gpus_keyword": ("node-a gpus=8\n", [":1:", "unknown setting 'gpus'"]),
    "extra_token": ("# header\nnode-a slots=8 cpus=8\n", [":2:", "unknown setting 'cpus'"]),
    "above_max_slots": ("node-a slots=8 max_slots=4\n", [":1:", "slots=8 above max_slots=4"]),
    "slots_twice": ("node-a slots=8 slots=4\n", [":1:", "slots given twice"]),
    "zero_slots": ("node-a slots=0\n", [":1:", "slots must be positive"]),
    "duplicate": ("node-a slots=4\nnode-b slots=4\nNODE-A slots=4\n",
                  [":3:", "duplicate host NODE-A", "line 1"]),
    "empty": ("# nothing here\n\n", ["no hosts"]),
}


@pytest.mark.parametrize("case", sorted(HOSTFILE_ERRORS))
def test_hostfile_errors(case, tmp_path):
    text, culprits = HOSTFILE_ERRORS[case]
    path = tmp_path / f"hosts-{case}"
    path.write_text(text)
    assert_one_line_error(launch("--hostfile", str(path), *OCI, "--skip-host-check", *MODEL),
                          str(path), *culprits)


def test_np_beyond_slots(tmp_path):
    assert_one_line_error(launch("--hostfile", node_hostfile(tmp_path, 2), "-np", "17", *OCI,
                                 "--skip-host-check", *MODEL), "-np 17", "16 slots")


def test_placeholder_host_names_the_file_to_edit():
    # The shipped file itself, even with --skip-host-check.
    assert_one_line_error(launch("--hostfile", "hostfiles/2node", *OCI, "--skip-host-check", *MODEL),
                          "hostfiles/2node:1", "gpu-node-01.REPLACE-ME", "placeholder", "edit")


def test_unresolvable_host(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("localhost slots=8\nno-such-host.invalid slots=8\n")
    assert_one_line_error(launch("--hostfile", str(path), *OCI, *MODEL),
                          f"{path}:2", "no-such-host.invalid", "does not resolve", "--skip-host-check")
    # The escape hatch for names that resolve only on the nodes.
    assert launch("--hostfile", str(path), *OCI, "--skip-host-check", "--dry-run", *MODEL).returncode == 0


def test_more_slots_than_the_profile_has_gpus(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("node-a slots=16\n")
    assert_one_line_error(launch("--hostfile", str(path), *OCI, "--skip-host-check", *MODEL),
                          "node-a", "16 slots", "8 GPUs")


def test_unknown_profile_lists_the_available_ones():
    line = assert_one_line_error(launch("--hostfile", "hostfiles/localhost", "--profile", "oci-gm4", *MODEL),
                                 "unknown profile 'oci-gm4'")
    for name in PROFILES:
        assert name in line


def test_profile_placeholder_must_be_filled(tmp_path):
    assert_one_line_error(launch("--hostfile", "hostfiles/localhost", "--profile", "tcp-only", *LOCAL_MODEL),
                          "network_interface is a placeholder", "--network-interface <name>")
    command, env = dry_run("--hostfile", "hostfiles/localhost", "--profile", "tcp-only",
                           "--network-interface", "ens3", *LOCAL_MODEL)
    # On this machine alone horovodrun insists on loopback: it is not told the interface.
    assert "--network-interfaces" not in command
    assert env == {"NCCL_IB_DISABLE": "1", **dict.fromkeys(INTERFACE_VARIABLES, "ens3"),
                   **profiles.Timeouts().env(), "SUITE_PROFILE": profiles.load("tcp-only").path,
                   "SUITE_PROFILE_RESOLVED": "1"}
    # Other placeholders still name the variable and --env.
    profile = f"{REPO}/suite/common/profiles/tcp-only.yaml"
    with open(profile) as handle:
        text = handle.read().replace('NCCL_IB_DISABLE: "1"', 'NCCL_IB_HCA: "REPLACE-ME-hca"')
    edited = tmp_path / "tcp-edited.yaml"
    edited.write_text(text.replace("name: tcp-only", "name: tcp-edited"))
    assert_one_line_error(launch("--hostfile", "hostfiles/localhost", "--profile", str(edited),
                                 "--network-interface", "ens3", *LOCAL_MODEL),
                          "NCCL_IB_HCA is a placeholder", "--env NCCL_IB_HCA=<value>")


GOOD_PROFILE = "name: p\nversion: 1\ndescription: d\ngpus_per_node: 8\n"
PROFILE_ERRORS = {
    "unknown_key": (GOOD_PROFILE + "nccl: {}\n", ["unknown key 'nccl'"]),
    "unknown_horovod_key": (GOOD_PROFILE + "horovod: {fusion_mb: 64}\n", ["horovod.fusion_mb"]),
    "wrong_type": (GOOD_PROFILE.replace("8", "eight"), ["gpus_per_node must be int", "str"]),
    "horovod_type": (GOOD_PROFILE + "horovod: {cycle_time_ms: fast}\n", ["horovod.cycle_time_ms"]),
    "bool_env": (GOOD_PROFILE + "env: {NCCL_IB_DISABLE: yes}\n", ["env.NCCL_IB_DISABLE"]),
    "mpi_args_string": (GOOD_PROFILE + "mpi_args: --mca pml ob1\n", ["mpi_args must be list"]),
    "missing_key": ("name: p\nversion: 1\ndescription: d\n", ["missing key 'gpus_per_node'"]),
    "not_yaml": (GOOD_PROFILE + "env: [unclosed\n", ["not valid YAML"]),
    "interface_conflict": (GOOD_PROFILE + "network_interface: eth0\nenv: {NCCL_SOCKET_IFNAME: eth1}\n",
                           ["env.NCCL_SOCKET_IFNAME (eth1) contradicts network_interface (eth0)"]),
    "bad_interface": (GOOD_PROFILE + "network_interface: eth0 eth1\n", ["'eth0 eth1' is not an interface"]),
    "unknown_timeout": (GOOD_PROFILE + "timeouts: {peer: 5}\n", ["unknown key 'timeouts.peer'"]),
    "zero_timeout": (GOOD_PROFILE + "timeouts: {peer_seconds: 0}\n",
                     ["timeouts.peer_seconds must be a positive"]),
    "timeout_in_env": (GOOD_PROFILE + "env: {HOROVOD_GLOO_TIMEOUT_SECONDS: 9}\n",
                       ["env.HOROVOD_GLOO_TIMEOUT_SECONDS is set by the timeouts section"]),
}


@pytest.mark.parametrize("case", sorted(PROFILE_ERRORS))
def test_profile_file_errors(case, tmp_path):
    text, culprits = PROFILE_ERRORS[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    assert_one_line_error(launch("--hostfile", "hostfiles/localhost", "--profile", str(path), *MODEL),
                          str(path), *culprits)


def test_launcher_flags_that_do_not_fit():
    assert_one_line_error(launch("--profile", "local-cpu", "--launcher", "mpirun", *MODEL),
                          "needs --hostfile")
    assert_one_line_error(launch("--hostfile", "hostfiles/localhost", "--profile", "local-cpu"), "no model")
    # --dry-run after `--` would go to the model while the job really starts.
    assert_one_line_error(launch("--hostfile", "hostfiles/localhost", "--profile", "local-cpu", *MODEL,
                                 "--dry-run"), "--dry-run belongs before")
    assert_one_line_error(launch("--hostfile", "hostfiles/localhost", "--profile", "local-cpu",
                                 "--launcher", "mpirun", "--controller", "gloo", *LOCAL_MODEL),
                          "--controller gloo")


TF_ASKED = {"flag": ["--distribution", "tf"], "flag=": ["--distribution=tf"],
            "set": ["--set", "distribution=tf"], "config": ["--config", "CONFIG"]}


@pytest.mark.parametrize("how", sorted(TF_ASKED))
def test_tf_backend_is_refused_under_horovodrun_and_named(how, tmp_path):
    """However the model asks for TensorFlow's collectives, horovodrun (the default) refuses it, naming
    where the setting came from, in a dry run too; mpirun takes the same model command."""
    config = tmp_path / "tf.yaml"
    config.write_text("distribution: tf\n")
    model = [*LOCAL_MODEL, *(str(config) if arg == "CONFIG" else arg for arg in TF_ASKED[how])]
    named = {"flag": "--distribution tf", "flag=": "--distribution tf", "set": "--set distribution=tf",
             "config": f"--config {config}"}[how]
    for dry in ([], ["--dry-run"]):
        line = assert_one_line_error(launch("--hostfile", "hostfiles/localhost", "--profile", "local-cpu",
                                            *dry, *model), named, "--launcher mpirun")
        assert "horovodrun" in line
    command, _ = dry_run("--hostfile", "hostfiles/localhost", "--profile", "local-cpu", "--launcher",
                         "mpirun", *model)
    assert command[0] == "mpirun" and command[-len(model) + 1:] == model[1:]


# --- launcher detection and Horovod start-up inside a rank ----------------------------------------

DETECT = [
    ({"HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOROVOD_RANK": "1"}, "horovodrun-gloo"),
    ({"OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_RANK": "3", "PMIX_RANK": "3"}, "mpirun"),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "32", "PMIX_RANK": "5"}, "srun"),
    ({"PMI_RANK": "2", "PMI_SIZE": "4"}, "mpiexec"),
    ({"PMIX_RANK": "0"}, "mpiexec"),
    ({"SLURM_JOB_ID": "7", "PATH": "/bin"}, "single"),
    ({}, "single"),
]


@pytest.fixture(scope="module")
def dist():
    from suite.train import dist
    return dist


@pytest.mark.parametrize("env,expected", DETECT)
def test_detect_launcher(dist, env, expected):
    assert dist.detect_launcher(env) == expected


def test_launcher_size(dist):
    assert dist.launcher_size({"OMPI_COMM_WORLD_SIZE": "16"}) == 16
    assert dist.launcher_size({"PMI_SIZE": "4"}) == 4
    assert dist.launcher_size({"SLURM_NTASKS": "8"}) is None


MPI_INIT = [("mpirun", True), ("srun", True), ("mpiexec", True),
            ("horovodrun-gloo", False), ("single", False)]


@pytest.mark.parametrize("launcher,uses_comm", MPI_INIT)
def test_horovod_joins_mpi_comm_world_under_mpi_launchers(monkeypatch, launcher, uses_comm):
    """A stand-in mpi4py, so the test process itself never starts MPI."""
    from suite.train import horovod_backend
    calls = []
    world = object()
    fake_mpi = types.SimpleNamespace(COMM_WORLD=world)
    monkeypatch.setitem(sys.modules, "mpi4py", types.SimpleNamespace(MPI=fake_mpi))
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", fake_mpi)
    monkeypatch.setattr(horovod_backend.hvd, "init", lambda **kwargs: calls.append(kwargs))
    horovod_backend._start_horovod(launcher)
    assert calls == ([{"comm": world}] if uses_comm else [{}])


WORKER = """
import json, sys
from suite.train import dist
world = dist.initialize()
mpi = sys.modules.get("mpi4py.MPI")  # loaded by initialize() under MPI launchers only
print("WORLD " + json.dumps({"rank": world.rank, "size": world.size, "local_rank": world.local_rank,
                             "launcher": world.launcher, "controller": world.controller,
                             "comm_world_size": mpi.COMM_WORLD.Get_size() if mpi else None}), flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("launcher_args,seen", [(["--launcher", "mpirun"], ("mpirun", "mpi")),
                                                (["--controller", "gloo"], ("horovodrun-gloo", "gloo"))])
def test_ranks_start_horovod_on_the_right_communicator(tmp_path, launcher_args, seen):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    result = launch("--hostfile", "hostfiles/localhost", "-np", "2", "--profile", "local-cpu", *launcher_args,
                    "--", str(script), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # Found anywhere in the output: mpirun may put two ranks' lines together when they print at once.
    worlds = sorted((json.loads(found) for found in re.findall(r"WORLD (\{[^{}]*\})", result.stdout)),
                    key=lambda w: w["rank"])
    assert [w["rank"] for w in worlds] == [0, 1] and {w["size"] for w in worlds} == {2}
    assert [w["local_rank"] for w in worlds] == [0, 1]
    assert {(w["launcher"], w["controller"]) for w in worlds} == {seen}
    # Under MPI, Horovod joined mpi4py's COMM_WORLD; under Gloo, mpi4py stays out of the way.
    assert {w["comm_world_size"] for w in worlds} == ({2} if seen[1] == "mpi" else {None})


# A real model run through this launcher: every run of tests/test_sweep.py's localhost sweep is one
# (its 2-process runs are checked there for the launch record, the launcher seen and identical weights).
