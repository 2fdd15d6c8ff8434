"""suite.cluster.launch run in a subprocess: the OCI profile's variables typed in from the sources,
hostfiles/<n>node with names filled in, and the one-line error a refused launch gives."""
import re
import sys

from helpers.running import REPO, run


# The OCI BM.GPU.GM4.8 (A100-v2.8) settings, typed in from the sources rather than read from the
# profile, so a drifting profile fails here (oracle-quickstart/oci-hpc-oke
# docs/recommended-nccl-rccl-parameters-by-shape.md; oci-hpc nccl-conf role and nccl_run_allreduce.sh).
OCI_ENV = {
    "NCCL_IB_HCA": "=mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8,"
                   "mlx5_14,mlx5_15,mlx5_16,mlx5_17,mlx5_9,mlx5_10,mlx5_11,mlx5_12",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_IB_TC": "41",
    "NCCL_IB_SL": "0",
    "NCCL_IB_QPS_PER_CONNECTION": "4",
    "NCCL_IB_SPLIT_DATA_ON_QPS": "0",
    "NCCL_IB_TIMEOUT": "22",
    "NCCL_IGNORE_CPU_AFFINITY": "1",
    "UCX_NET_DEVICES": "mlx5_0:1",
}


def launch(*args, timeout=60):
    return run([sys.executable, "-m", "suite.cluster.launch", *args], timeout=timeout)


def node_hostfile(tmp_path, nodes):
    """The shipped hostfiles/<n>node with its placeholder names replaced by node-a, node-b, ..."""
    with open(f"{REPO}/hostfiles/{nodes}node") as handle:
        text = handle.read()
    assert text.count("REPLACE-ME") == nodes and text.count("slots=8") == nodes
    text = re.sub(r"gpu-node-0(\d)\.REPLACE-ME", lambda m: "node-" + "abcd"[int(m[1]) - 1], text)
    path = tmp_path / f"{nodes}node"
    path.write_text(text)
    return str(path)


def assert_one_line_error(result, *culprits):
    assert result.returncode != 0, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for culprit in culprits:
        assert culprit in lines[0], lines[0]
    assert result.stdout == ""
    return lines[0]
