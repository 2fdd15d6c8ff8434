"""The node check every rendered job runs first (suite/cluster/templates/node-check.sh): each refusal.

Run by bash with stand-ins on a PATH made here: nvidia-smi, ibdev2netdev and srun scripts, and an OCI
instance-metadata server on 127.0.0.1. No test contacts 169.254.169.254 or any other address: every
run points SUITE_METADATA_URL at the stand-in or at a closed port on 127.0.0.1.
"""
import json
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from helpers.deploy import CASES, render, workers_of
from suite.common import profiles

HOST = socket.gethostname()
GPU4_NICS = profiles.rdma_devices(profiles.load("oci-bm-gpu4-8").env)
GM4_NICS = profiles.rdma_devices(profiles.load("oci-bm-gpu-gm4-8").env)


class Metadata(BaseHTTPRequestHandler):
    """OCI's /opc/v2/instance/ for one shape; it answers only with the header Oracle's scripts send."""

    shape = "BM.GPU4.8"
    delay = 0.0
    seen = []

    def do_GET(self):  # noqa: N802 - the http.server name
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        time.sleep(self.delay)
        if self.headers.get("Authorization") != "Bearer Oracle":
            self.send_error(401)
            return
        body = json.dumps({"id": "ocid1.instance.oc1..x", "shape": self.shape,
                           "shapeConfig": {"gpus": 8}}, indent=2).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def metadata():
    """A stand-in metadata service on 127.0.0.1; yields a function that sets its shape and gives its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Metadata)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Metadata.seen, Metadata.delay = [], 0.0

    def serve(shape, delay=0.0):
        Metadata.shape, Metadata.delay = shape, delay
        return f"http://127.0.0.1:{server.server_port}/opc/v2/instance/"
    yield serve
    server.shutdown()
    server.server_close()


def closed_port():
    """A 127.0.0.1 URL where nothing listens: the metadata service of a machine off OCI."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/opc/v2/instance/"


def tools(tmp_path, gpus=8, gpu_name="NVIDIA A100-SXM4-40GB", nics=GPU4_NICS, pyxis=True):
    """A folder of stand-ins: nvidia-smi (None: absent), ibdev2netdev (None: absent) and srun."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if gpus is not None:
        listing = "".join(f"GPU {i}: {gpu_name} (UUID: GPU-{i})\\n" for i in range(gpus))
        (bin_dir / "nvidia-smi").write_text(
            "#!/bin/bash\n"
            f'if [[ $1 == -L ]]; then printf "{listing}"; exit 0; fi\n'
            f'if [[ $1 == --query-gpu=name ]]; then\n'
            f'  for _ in $(seq {gpus}); do echo "{gpu_name}"; done; exit 0\nfi\n'
            "exit 9\n")
    if nics is not None:
        lines = "".join(f"{nic} port 1 ==> rdma{i} (Up)\\n" for i, nic in enumerate(nics))
        (bin_dir / "ibdev2netdev").write_text(f'#!/bin/bash\nprintf "{lines}"\n')
    help_text = "      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH\\n" if pyxis else ""
    (bin_dir / "srun").write_text('#!/bin/bash\n'
                                  f'[[ $1 == --help ]] && printf "Usage: srun [OPTIONS...]\\n{help_text}"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir


def sbatch_check(argv):
    """The node check as the rendered sbatch script embeds it."""
    text = render(argv)
    return text.split("<<'NODE_CHECK_END'\n", 1)[1].split("\nNODE_CHECK_END\n", 1)[0]


def worker_check(argv):
    """The node check as the MPIJob's workers run it, without the sshd that follows."""
    script = workers_of(yaml.safe_load(render(argv)))["spec"]["containers"][0]["args"][0]
    return script.rsplit("exec /usr/local/bin/mlperf-sshd", 1)[0]


def run_check(script, bin_dir, url, tmp_path, **env):
    assert url.startswith("http://127.0.0.1:")  # never the real metadata service
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "SUITE_METADATA_URL": url,
               "ENROOT_SYSCONF_PATH": str(tmp_path / "etc-enroot"), **env}
    return subprocess.run(["bash", "-c", script], env=environ, capture_output=True, text=True, timeout=30)


def one_error(result):
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: node {HOST}: "), result.stderr
    return lines[0]


GPU4_SLURM = CASES["slurm-2n-gpu4-pmix.sbatch"]
GM4_SLURM = CASES["slurm-2n.sbatch"]


def test_the_right_shape_passes_and_the_header_is_oracles(metadata, tmp_path):
    (tmp_path / "etc-enroot" / "hooks.d").mkdir(parents=True)
    (tmp_path / "etc-enroot" / "hooks.d" / "50-slurm-pmi.sh").write_text("# enabled\n")
    result = run_check(sbatch_check(GPU4_SLURM), tools(tmp_path), metadata("BM.GPU4.8"), tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"node {HOST}: ready for profile oci-bm-gpu4-8\n" and result.stderr == ""
    assert Metadata.seen == [("/opc/v2/instance/", "Bearer Oracle")]


def test_a_profile_for_another_shape_is_refused_naming_both(metadata, tmp_path):
    result = run_check(sbatch_check(GPU4_SLURM), tools(tmp_path), metadata("BM.GPU.A100-v2.8"), tmp_path)
    assert one_error(result) == (f"error: node {HOST}: shape BM.GPU.A100-v2.8 (instance metadata), but "
                                 f"profile "
                                 f"oci-bm-gpu4-8 is for BM.GPU4.8; render with --profile oci-bm-gpu-gm4-8")


def test_without_metadata_nvidia_smi_tells_the_shape(tmp_path):
    bin_dir = tools(tmp_path, gpu_name="NVIDIA A100-SXM4-80GB")
    result = run_check(worker_check(CASES["mpijob-2n-gpu4.yaml"]), bin_dir, closed_port(), tmp_path)
    assert one_error(result) == (f"error: node {HOST}: shape BM.GPU.A100-v2.8 (nvidia-smi: NVIDIA "
                                 f"A100-SXM4-80GB), but profile oci-bm-gpu4-8 is for BM.GPU4.8; render with "
                                 f"--profile oci-bm-gpu-gm4-8")


def test_a_40gb_a100_is_not_a_gm4(tmp_path):
    result = run_check(sbatch_check(GM4_SLURM), tools(tmp_path, nics=GM4_NICS), closed_port(), tmp_path)
    assert one_error(result) == (f"error: node {HOST}: shape BM.GPU4.8 or BM.GPU.B4.8 (nvidia-smi: NVIDIA "
                                 f"A100-SXM4-40GB), but profile oci-bm-gpu-gm4-8 is for BM.GPU.A100-v2.8 "
                                 f"BM.GPU.GM4.8; render with --profile oci-bm-gpu4-8 (or that of the other "
                                 f"candidate)")


def test_could_not_tell_the_shape_is_a_warning_in_bounded_time(metadata, tmp_path):
    """A metadata service that never answers costs at most curl's bound; an unknown GPU names no shape."""
    bin_dir = tools(tmp_path, gpu_name="Tesla T4")
    url = metadata("BM.GPU4.8", delay=20)
    started = time.monotonic()
    result = run_check(worker_check(CASES["mpijob-2n-gpu4.yaml"]), bin_dir, url, tmp_path)
    assert time.monotonic() - started < 10
    assert result.returncode == 0, result.stderr
    assert result.stderr == (f"warning: node {HOST}: could not tell the shape (no answer from {url}, and "
                             f"no GPU "
                             f"that names one); profile oci-bm-gpu4-8 is for BM.GPU4.8, not checked\n")


def test_no_pyxis(metadata, tmp_path):
    result = run_check(sbatch_check(GM4_SLURM), tools(tmp_path, gpu_name="NVIDIA A100-SXM4-80GB",
                                                      nics=GM4_NICS, pyxis=False),
                       metadata("BM.GPU.A100-v2.8"), tmp_path)
    assert one_error(result) == (f"error: node {HOST}: srun has no --container-image: the Pyxis plugin "
                                 f"is not "
                                 f"loaded here (link pyxis.conf into /etc/slurm/plugstack.conf.d and restart "
                                 f"slurmd, NVIDIA/pyxis README.md), or render with --bare-metal")


def test_no_pmix_hook(metadata, tmp_path):
    """--mpi pmix in a container: enroot's 50-slurm-pmi.sh must be in a hooks.d it runs from."""
    (tmp_path / "etc-enroot" / "hooks.d").mkdir(parents=True)
    result = run_check(sbatch_check(GPU4_SLURM), tools(tmp_path), metadata("BM.GPU4.8"), tmp_path)
    system = tmp_path / "etc-enroot" / "hooks.d"
    assert one_error(result) == (f"error: node {HOST}: enroot's PMIx hook is not enabled (no 50-slurm-pmi.sh "
                                 f"in {system}), so srun --mpi=pmix cannot reach the container: ln -s "
                                 f"/usr/share/enroot/hooks.d/50-slurm-pmi.sh {system}/ on every node, or "
                                 f"render with --mpi pmi2")
    # pmi2, the container default, needs no hook.
    pmi2_script = sbatch_check([*GPU4_SLURM[:-3], "--no-numa-bind"])
    pmi2 = run_check(pmi2_script, tools(tmp_path), metadata("BM.GPU4.8"), tmp_path)
    assert pmi2.returncode == 0, pmi2.stderr


def test_missing_rdma_devices(metadata, tmp_path):
    """GM4.8's NICs on a node the BM.GPU4.8 profile expects: mlx5_0 and mlx5_13 are not there."""
    (tmp_path / "etc-enroot" / "hooks.d").mkdir(parents=True)
    (tmp_path / "etc-enroot" / "hooks.d" / "50-slurm-pmi.sh").write_text("# enabled\n")
    bin_dir = tools(tmp_path, nics=GM4_NICS)
    result = run_check(sbatch_check(GPU4_SLURM), bin_dir, metadata("BM.GPU4.8"), tmp_path)
    assert one_error(result) == (f"error: node {HOST}: RDMA device(s) mlx5_0 mlx5_13 of profile "
                                 f"oci-bm-gpu4-8's "
                                 f"NCCL_IB_HCA are missing (ibdev2netdev lists: {' '.join(GM4_NICS)}); wrong "
                                 f"profile for this shape, or the OS image numbers them otherwise: "
                                 f"render with "
                                 f"--env NCCL_IB_HCA==<the devices here>")


def test_missing_gpus(metadata, tmp_path):
    result = run_check(worker_check(CASES["mpijob-2n-gpu4.yaml"]), tools(tmp_path, gpus=4),
                       metadata("BM.GPU4.8"), tmp_path)
    assert one_error(result) == (f"error: node {HOST}: nvidia-smi lists 4 GPU(s), profile oci-bm-gpu4-8 "
                                 f"needs 8 a node")
    none = run_check(worker_check(CASES["mpijob-2n-gpu4.yaml"]), tools(tmp_path / "x", gpus=None),
                     metadata("BM.GPU4.8"), tmp_path)
    assert one_error(none) == (f"error: node {HOST}: nvidia-smi not found: no NVIDIA driver here, and "
                               f"profile "
                               f"oci-bm-gpu4-8 needs 8 GPUs a node")


def test_bare_metal_checks_the_suite_on_every_node(tmp_path):
    """A CPU profile checks no shape, GPU or device: only the suite and its interpreter on the node."""
    script = sbatch_check(CASES["slurm-2n-bare-metal-cpu.sbatch"])
    result = run_check(script, tools(tmp_path, gpus=None, nics=None, pyxis=False), closed_port(), tmp_path)
    assert one_error(result) == (f"error: node {HOST}: no suite at /shared/mlperf-hvd-suite: bare metal "
                                 f"runs it "
                                 f"from the shared file system; put the checkout there or render with "
                                 f"--suite-dir <its path on the nodes>")
    here = sbatch_check([*CASES["slurm-2n-bare-metal-cpu.sbatch"][:-4]])
    ready = run_check(here, tools(tmp_path, gpus=None, nics=None, pyxis=False), closed_port(), tmp_path)
    assert ready.returncode == 0 and ready.stderr == "", ready.stderr
