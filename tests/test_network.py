"""The pre-run network check: NCCL's log lines read, the probe judged, and profiles applied in a rank."""
import os
import sys

import pytest

from helpers.running import run
from suite.common import profiles
from suite.train import network

# NCCL INFO lines in the forms NCCL 2.1x-2.2x prints them (host:pid:tid [device] NCCL INFO ...), one
# log per case: what the parser must tell apart.
ROCE = """\
gpu-1:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.3.11<0>
gpu-1:4242:4242 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so), using internal implementation
gpu-1:4242:4300 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/RoCE [1]mlx5_2:1/RoCE [RO]; OOB eth0:10.0.3.11<0>
gpu-1:4242:4300 [0] NCCL INFO Using network IB
gpu-1:4242:4300 [0] NCCL INFO comm 0x55e0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 7000 - Init START
gpu-1:4242:4300 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
gpu-1:4242:4300 [0] NCCL INFO Channel 01/0 : 8[0] -> 0[0] [receive] via NET/IB/1/GDRDMA
gpu-1:4242:4300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC
gpu-1:4242:4300 [0] NCCL INFO comm 0x55e0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 7000 - Init COMPLETE
"""
SOCKET_FALLBACK = """\
gpu-2:77:77 [0] NCCL INFO Bootstrap : Using eth0:10.0.3.12<0>
gpu-2:77:90 [0] NCCL INFO NET/IB : No device found.
gpu-2:77:90 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.3.12<0> [1]ens4:10.1.0.12<0>
gpu-2:77:90 [0] NCCL INFO Using network Socket
gpu-2:77:90 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0
"""
IB_DISABLED = """\
gpu-3:5:5 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
gpu-3:5:9 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.3.13<0>
gpu-3:5:9 [0] NCCL INFO Using network Socket
"""
PLUGIN = """\
pod-0:12:20 [0] NCCL INFO P2P plugin IBext_v8
pod-0:12:20 [0] NCCL INFO NET/IB : Using [0]mlx5_2:1/RoCE [RO]; OOB eth0:10.244.2.21<0>
pod-0:12:20 [0] NCCL INFO Using non-device net plugin version 0
pod-0:12:20 [0] NCCL INFO Using network IBext_v8
"""


def test_roce_over_ib_transport():
    found = network.parse_nccl_log(ROCE)
    assert (found["network"], found["rdma"], found["ib_found"]) == ("IB", True, True)
    assert found["devices"] == ["mlx5_1:1/RoCE", "mlx5_2:1/RoCE"]
    assert found["gpu_direct"] and found["via"] == {"NET/IB": 2, "P2P/IPC": 1}
    assert "Using network IB" in found["evidence"]


def test_socket_fallback_when_no_hca_is_found():
    found = network.parse_nccl_log(SOCKET_FALLBACK)
    assert (found["network"], found["rdma"], found["ib_found"]) == ("Socket", False, False)
    assert found["devices"] == ["eth0:10.0.3.12<0>", "ens4:10.1.0.12<0>"]
    assert found["via"] == {"NET/Socket": 1} and not found["gpu_direct"]
    assert "NET/IB : No device found." in found["evidence"]


def test_ib_disabled_and_plugins():
    disabled = network.parse_nccl_log(IB_DISABLED)
    assert disabled["ib_disabled"] and disabled["rdma"] is False
    plugin = network.parse_nccl_log(PLUGIN)
    assert (plugin["network"], plugin["rdma"]) == ("IBext_v8", True)
    # A log without the decision says nothing rather than guessing.
    silent = network.parse_nccl_log("gpu-1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n")
    assert (silent["network"], silent["rdma"]) == (None, None)


def test_nccl_log_goes_to_the_run_directory_and_is_read_back(tmp_path):
    run_dir = tmp_path / "runs" / "rn50"
    environ = {"NCCL_DEBUG": "WARN"}
    log = network.NcclLog(environ, str(run_dir))
    assert environ["NCCL_DEBUG"] == "INFO" and environ["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    # NCCL's own per-process file in the run directory, which the network check makes first (NCCL
    # falls back to stdout when it cannot open the file).
    assert environ["NCCL_DEBUG_FILE"] == str(run_dir / "nccl.%h.%p.log") and run_dir.is_dir()
    # NCCL expands %h and %p itself; here the test writes the file it would.
    path = environ["NCCL_DEBUG_FILE"].replace("%h", "gpu-1").replace("%p", "4242")
    with open(path, "w") as handle:
        handle.write(ROCE)
    found = log.read("gpu-1", 4242)
    # The file stays: NCCL's warnings of the whole run land in it, and env.json says where.
    assert found["network"] == "IB" and found["log"] == path and os.path.exists(path)
    # The renderers set the same value: still the suite's file, still INFO for its two subsystems.
    environ = {"NCCL_DEBUG_FILE": str(run_dir / "nccl.%h.%p.log"), "NCCL_DEBUG": "WARN"}
    network.NcclLog(environ, str(run_dir))
    assert environ["NCCL_DEBUG"] == "INFO"
    # A user's own NCCL_DEBUG_FILE is read in place and left alone.
    own = tmp_path / "nccl.%h.%p"
    environ = {"NCCL_DEBUG_FILE": str(own), "NCCL_DEBUG": "INFO"}
    log = network.NcclLog(environ, str(run_dir))
    (tmp_path / "nccl.gpu-2.77").write_text(SOCKET_FALLBACK)
    assert environ == {"NCCL_DEBUG_FILE": str(own), "NCCL_DEBUG": "INFO"}
    assert log.read("gpu-2", 77)["network"] == "Socket" and (tmp_path / "nccl.gpu-2.77").exists()
    assert "no NCCL log" in log.read("gpu-9", 1)["log_error"]


def probe_row(busbw):
    return {"bytes": 2**30, "busbw_gbps": busbw, "correct": True}


def oci():
    return profiles.load("oci-bm-gpu-gm4-8")


def test_a_healthy_two_node_run_passes():
    transports = [network.parse_nccl_log(ROCE)] * 16
    record, warnings = network.assess(transports, probe_row(190.0), oci(), 2, "nccl")
    assert warnings == [] and record["status"] == "ok" and record["rdma"] is True
    assert record["expected_busbw_gbps"] == 185.0 and record["networks"] == ["IB"]
    network.check_required(record, warnings)  # --require-rdma lets it through


def test_a_socket_rank_and_a_slow_probe_are_both_named():
    transports = [network.parse_nccl_log(ROCE)] * 4 + [network.parse_nccl_log(SOCKET_FALLBACK)] * 12
    record, warnings = network.assess(transports, probe_row(40.0), oci(), 2, "nccl")
    assert record["rdma"] is False and record["status"] == "below expectation"
    assert record["networks"] == ["IB", "Socket"]
    assert warnings[0].startswith("allreduce probe: bus bandwidth 40 GB/s at 1G is 22% of the 185 GB/s")
    assert warnings[1].startswith("no RDMA: NCCL on rank(s) 4, 5, 6, 7, 8, 9, 10, 11 ... uses network Socket")
    with pytest.raises(network.NetworkError, match="^--require-rdma: allreduce probe"):
        network.check_required(record, warnings)


def test_the_expectation_follows_the_node_count():
    transports = [network.parse_nccl_log(ROCE)] * 8
    # One node: 200 GB/s is below 0.8 of the NVSwitch figure (235), and no network is judged.
    record, warnings = network.assess(transports, probe_row(180.0), oci(), 1, "nccl")
    assert record["rdma"] is None and record["expected_busbw_gbps"] == 235.0 and len(warnings) == 1
    # Just above 0.8 of the four-node figure passes.
    transports = [network.parse_nccl_log(ROCE)] * 32
    record, warnings = network.assess(transports, probe_row(149.0), oci(), 4, "nccl")
    assert warnings == [] and record["status"] == "ok"


def test_cpu_controllers_and_unknown_transports():
    record, warnings = network.assess([None] * 4, probe_row(1.0), None, 2, "gloo")
    assert record["rdma"] is False and record["status"] == "below expectation"
    assert warnings == ["no RDMA: the gradients go over gloo on the CPU, through TCP between the hosts"]
    unknown = [network.parse_nccl_log("")] * 2
    record, warnings = network.assess(unknown, probe_row(1.0), None, 2, "nccl")
    assert record["rdma"] is None and "transport is unknown" in warnings[0]
    with pytest.raises(network.NetworkError):
        network.check_required(record, warnings)


# ---- a profile applied inside a rank ----

def local_profile(tmp_path, **lines):
    text = "name: p\nversion: 2\ndescription: d\ngpus_per_node: 8\n" + "".join(
        f"{key}: {value}\n" for key, value in lines.items())
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return profiles.load(str(path))


def test_apply_fills_in_what_is_unset_and_keeps_what_the_user_set(tmp_path):
    profile = local_profile(tmp_path, network_interface="ens3",
                            env="{NCCL_IB_TC: 41, NCCL_DEBUG: WARN}", horovod="{fusion_threshold_mb: 64}")
    # What horovodrun's own interface probe would have passed, and the user's NCCL_DEBUG.
    environ = {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "ens3,rdma0",
               "OMPI_MCA_btl_tcp_if_include": "ens3"}
    done = profiles.apply(profile, environ)
    assert environ["NCCL_IB_TC"] == "41" and environ["HOROVOD_FUSION_THRESHOLD"] == str(64 * 2**20)
    assert environ["NCCL_DEBUG"] == "INFO" and done["kept"] == {"NCCL_DEBUG": "INFO"}
    # The profile's interface wins over the launcher's guess, and says so.
    assert environ["NCCL_SOCKET_IFNAME"] == "ens3"
    assert done["replaced"] == {"NCCL_SOCKET_IFNAME": "ens3,rdma0"}
    assert environ["SUITE_PROFILE"] == profile.path and done["applied_by"] == "rank"
    assert "OMPI_MCA_btl_tcp_if_include" not in done["set"]  # already right


def test_apply_leaves_a_launcher_resolved_environment_alone(tmp_path):
    profile = local_profile(tmp_path, env="{NCCL_IB_TC: 41}")
    environ = {"SUITE_PROFILE_RESOLVED": "1", "NCCL_IB_TC": "106"}  # the user's --env override
    done = profiles.apply(profile, environ)
    assert environ == {"SUITE_PROFILE_RESOLVED": "1", "NCCL_IB_TC": "106"}
    assert done["applied_by"] == "launcher"


def test_apply_refuses_a_placeholder_unless_the_user_exported_it():
    with pytest.raises(profiles.ProfileError, match="network_interface is a placeholder .*export "):
        profiles.apply(oci(), {})
    exported = dict.fromkeys(profiles.INTERFACE_VARIABLES, "eth0")
    done = profiles.apply(oci(), exported)
    assert exported["NCCL_NET"] == "IB" and set(done["kept"]) == set(profiles.INTERFACE_VARIABLES)


def test_the_entry_point_names_a_bad_profile_in_one_line(tmp_path):
    synthetic = ["--preset", "tiny_cpu", "--set", "synthetic=true", "--run-dir", str(tmp_path / "r")]
    result = run([sys.executable, "-m", "models.resnet50", "--profile", "no-such-profile", *synthetic],
                 timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: unknown profile 'no-such-profile'; available: {', '.join(profiles.available())} "
        f"(or pass a path to a .yaml file)"]
    # The variable horovodrun forwards is the default, and the same check applies.
    result = run([sys.executable, "-m", "models.resnet50", *synthetic], timeout=120,
                 SUITE_PROFILE="oci-bm-gpu-gm4-8")
    assert result.returncode == 2 and "network_interface is a placeholder" in result.stderr
    assert not (tmp_path / "r").exists()
