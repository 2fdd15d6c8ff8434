"""The GPU image from PyPI (container/Dockerfile.gpu-pypi) without building it: its stages, its pins
against requirements.txt, its build's refusals in one line (no NCCL, another nvcc), the node check's
refusal of a driver older than the image's minimum, and the GPU self-test's refusal without a GPU.
That the committed file is the rendering and passes the parser-level checks is tested with the other
Dockerfiles (helpers.deploy.DOCKERFILES, test_deploy.py, test_dockerfile.py). `make image-gpu-test`
builds and runs the image itself (docs/testing.md)."""
import os
import re
import socket
import subprocess
import sys

import pytest

from helpers.running import REPO
from suite.cluster import deploy
from suite.cluster.deploy import dockerfile

CONTAINER = os.path.join(REPO, "container")
GPU_BUILD = os.path.join(CONTAINER, "gpu-build.sh")
RENDER = ["dockerfile", "--device", "gpu", "--base", "pypi"]
PYPI_IMAGE = "registry.example.com/mlperf/mlperf-hvd-suite:0.1.0-gabc1234-gpu-pypi"
NGC_IMAGE = "registry.example.com/mlperf/mlperf-hvd-suite:0.1.0-gabc1234-gpu"
HOST = socket.gethostname()


def render(argv):
    args = deploy.build_parser().parse_args(argv)
    files, _ = deploy.render(args, [], argv)
    return files


def committed():
    with open(os.path.join(CONTAINER, "Dockerfile.gpu-pypi")) as handle:
        return handle.read()


def pins(name):
    """{distribution: version} of a requirements file (extras dropped from the name)."""
    with open(os.path.join(REPO, name)) as handle:
        lines = [line.split("#", 1)[0].strip() for line in handle]
    named = (line.split("==") for line in lines if "==" in line)
    return {re.sub(r"\[.*\]", "", name).lower(): version for name, version in named}


# --- the Dockerfile --------------------------------------------------------------------------------

def test_the_cli_names_it_dockerfile_gpu_pypi():
    assert list(render(RENDER)) == ["Dockerfile.gpu-pypi"]


def test_its_first_line_renders_it():
    """The header's command, run as a user would, gives the file back."""
    command = committed().splitlines()[0].removeprefix("# Rendered by: python ").split()
    result = subprocess.run([sys.executable, *command], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == committed()


def test_it_is_two_stages_and_the_run_stage_takes_only_the_environment():
    stages = re.split(r"^FROM ", committed(), flags=re.MULTILINE)[1:]
    assert [stage.split("\n", 1)[0] for stage in stages] == ["${BASE_IMAGE} AS build", "${BASE_IMAGE}"]
    run_stage = stages[1]
    copied = re.findall(r"^COPY --from=\S+ .*$", run_stage, re.MULTILINE)
    assert copied == ["COPY --from=build /opt/venv /opt/venv"]
    for build_only in ("cmake", "g++", "libopenmpi-dev", "gpu-build.sh compiler", "gpu-build.sh horovod"):
        assert build_only not in run_stage, build_only
    assert 'CMD ["make", "demo"]' in run_stage


def test_the_cpu_image_has_no_pypi_base():
    with pytest.raises(deploy.DeployError, match="--base chooses the GPU image's base"):
        render(["dockerfile", "--device", "cpu", "--base", "pypi"])


def test_its_pins_agree_with_the_cpu_environment():
    """The GPU image runs the TensorFlow and the run-time pins every test ran on."""
    gpu, cpu = pins("requirements-gpu.txt"), pins("requirements.txt")
    assert gpu.pop("tensorflow") == cpu["tensorflow-cpu"]
    horovod_own = {"cloudpickle", "psutil", "packaging", "cffi"}
    shared = set(gpu) - horovod_own
    assert {name: gpu[name] for name in shared} == {name: cpu.get(name) for name in shared}
    text = committed()
    assert f"TensorFlow {cpu['tensorflow-cpu']} with" in text
    assert f"ARG HOROVOD_VERSION={dockerfile.horovod_version()}\n" in text
    assert all(version.startswith("13.0.") for version in pins("requirements-gpu-build.txt").values())


def test_the_minimum_driver_is_a_label_and_the_environment():
    text = committed()
    assert f'LABEL org.mlperf-hvd-suite.min-nvidia-driver="{dockerfile.PYPI_MIN_DRIVER}"' in text
    assert f"SUITE_MIN_NVIDIA_DRIVER={dockerfile.PYPI_MIN_DRIVER} " in text


def test_env_json_records_the_images_minimum_driver(monkeypatch):
    from suite.train import rundir

    class World:
        launcher, controller, device, size = "horovodrun", "gloo", "gpu", 1
    monkeypatch.setenv("SUITE_MIN_NVIDIA_DRIVER", "580.65.06")
    assert rundir.environment(World(), [{"host": "h"}])["min_nvidia_driver"] == "580.65.06"
    monkeypatch.delenv("SUITE_MIN_NVIDIA_DRIVER")
    assert rundir.environment(World(), [{"host": "h"}])["min_nvidia_driver"] is None


# --- the build's refusals (container/gpu-build.sh) -------------------------------------------------

def gpu_build(tmp_path, script, **env):
    """bash with gpu-build.sh sourced (its functions only), in tmp_path."""
    environ = {"PATH": "/usr/bin:/bin", "SUITE_BUILD_LOGS": str(tmp_path), **env}
    return subprocess.run(["bash", "-c", f"source {GPU_BUILD}; {script}"], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=60)


def one_line(result):
    assert result.returncode != 0, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def fake_build_environment(tmp_path, build_log):
    """A venv whose pip "builds" Horovod leaving build_log's text as its log, NCCL's wheel beside it."""
    venv = tmp_path / "venv"
    nccl = venv / "lib" / "python3.11" / "site-packages" / "nvidia" / "nccl"
    (nccl / "include").mkdir(parents=True)
    (nccl / "include" / "nccl.h").write_text("")
    (nccl / "lib").mkdir()
    (nccl / "lib" / "libnccl.so.2").write_text("")
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("#!/bin/bash\necho cpython-311-x86_64-linux-gnu\n")
    (venv / "bin" / "pip").write_text(
        "#!/bin/bash\n"
        'if [[ $1 == wheel ]]; then\n'
        f'  printf "%s\\n" "{build_log}"\n'
        '  while (($#)); do\n'
        '    [[ $1 == -w ]] && touch "$2/horovod-0.28.1-cp311-cp311-linux_x86_64.whl"; shift\n'
        '  done\n'
        "fi\n")
    for tool in (venv / "bin").iterdir():
        tool.chmod(0o755)
    (tmp_path / "requirements-gpu.txt").write_text("tensorflow[and-cuda]==2.18.1\n")
    (tmp_path / "requirements-gpu-build.txt").write_text("nvidia-cuda-nvcc==13.0.88\n")
    return {"SUITE_VENV": str(venv), "SUITE_WHEELS": str(tmp_path / "wheels"), "SUITE_CUDA_DIR": "/opt/cuda",
            "HOROVOD_VERSION": "0.28.1", "HOROVOD_BUILD_CUDA_CC_LIST": "80,90"}


def test_a_horovod_built_without_the_cuda_compiler_stops_the_build(tmp_path):
    """CMake without nvcc: Horovod compiles, but without NCCL; no wheel may reach the image."""
    env = fake_build_environment(tmp_path, "-- The CXX compiler identification is GNU 12.2.0")
    result = gpu_build(tmp_path, "horovod", **env)
    assert one_line(result) == ("error: Horovod's build log names no nvcc: CMake found no CUDA compiler, so "
                                f"no NCCL operations ({tmp_path}/horovod-build.log)")
    assert not list((tmp_path / "wheels").glob("*-gpu/*.whl"))
    assert os.path.islink(f"{env['SUITE_VENV']}/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so")


def test_a_horovod_built_by_another_nvcc_stops_the_build(tmp_path):
    other = "/usr/local/cuda-12.4/bin/nvcc"
    env = fake_build_environment(tmp_path, f"-- Check for working CUDA compiler: {other}")
    result = gpu_build(tmp_path, "horovod", **env)
    assert one_line(result) == f"error: Horovod's CMake used the CUDA compiler {other}, not the image's " \
                               "/opt/cuda/bin/nvcc"


def test_a_horovod_built_by_the_images_nvcc_is_kept_and_reused(tmp_path):
    env = fake_build_environment(tmp_path, "-- Check for working CUDA compiler: /opt/cuda/bin/nvcc - skipped")
    first = gpu_build(tmp_path, "horovod", **env)
    assert first.returncode == 0, first.stderr
    assert "building Horovod 0.28.1 with NCCL" in first.stderr
    wheels = list((tmp_path / "wheels").glob("*-gpu/horovod-*.whl"))
    assert len(wheels) == 1 and "-cc80.90-" in str(wheels[0])
    again = gpu_build(tmp_path, "horovod", **env)
    assert again.returncode == 0 and f"reusing the Horovod wheel {wheels[0]}" in again.stderr


@pytest.mark.parametrize("missing", ["NCCL", "MPI"])
def test_a_check_build_report_without_nccl_or_mpi_is_refused(tmp_path, missing):
    report = "\n".join(f"    [{' ' if name == missing else 'X'}] {name}"
                       for name in ("TensorFlow", "MPI", "Gloo", "NCCL"))
    result = gpu_build(tmp_path, f"check_build_report {repr(report)}")
    assert one_line(result).startswith(f"error: horovodrun --check-build does not list {missing}: ")
    if missing == "NCCL":
        assert "CPU allreduce on GPUs" in result.stderr


def test_gpu_build_passes_shellcheck():
    result = subprocess.run(["shellcheck", GPU_BUILD, os.path.join(REPO, "scripts", "image-test.sh")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    result = subprocess.run(["shellcheck", "-x", "scripts/image-gpu-test.sh"], cwd=REPO, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout


# --- the node check's minimum driver ---------------------------------------------------------------

def test_the_image_tag_tells_the_minimum_driver():
    assert dockerfile.min_nvidia_driver(PYPI_IMAGE) == dockerfile.PYPI_MIN_DRIVER
    assert dockerfile.min_nvidia_driver("/shared/images/mlperf-hvd-suite+0.1.0-gabc-gpu-pypi.sqsh") \
        == dockerfile.PYPI_MIN_DRIVER
    assert dockerfile.min_nvidia_driver(NGC_IMAGE) == ""
    assert dockerfile.min_nvidia_driver(None) == ""


def slurm_node_check(image):
    """The node check of a Slurm job on the tcp-only profile (8 GPUs, no shapes, no RDMA devices)."""
    text = render(["slurm", "--model", "models.resnet50", "--preset", "closed_16xA100_gbs3264",
                   "--nodes", "2", "--profile", "tcp-only", "--network-interface", "eth0", "--image", image,
                   "--data", "/shared/data", "--results", "/shared/results", "--run-id", "rn50-2n"])
    text = text["slurm.sbatch"]
    return text.split("<<'NODE_CHECK_END'\n", 1)[1].split("\nNODE_CHECK_END\n", 1)[0]


def stand_ins(tmp_path, driver):
    """nvidia-smi with 8 GPUs on driver `driver`, and an srun with Pyxis."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "nvidia-smi").write_text(
        "#!/bin/bash\n"
        'case $1 in\n'
        '  -L) for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; done ;;\n'
        f'  --query-gpu=driver_version) for i in 0 1 2 3 4 5 6 7; do echo "{driver}"; done ;;\n'
        '  *) exit 9 ;;\n'
        "esac\n")
    (bin_dir / "srun").write_text('#!/bin/bash\necho "      --container-image=IMAGE"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return bin_dir


def node_check(script, tmp_path, driver, **env):
    environ = {"PATH": f"{stand_ins(tmp_path, driver)}:/usr/bin:/bin", "HOME": str(tmp_path), **env}
    return subprocess.run(["bash", "-c", script], env=environ, capture_output=True, text=True, timeout=30)


def test_the_node_check_refuses_a_driver_older_than_the_images(tmp_path):
    script = slurm_node_check(PYPI_IMAGE)
    assert f"min_driver=${{SUITE_MIN_NVIDIA_DRIVER:-{dockerfile.PYPI_MIN_DRIVER}}}" in script
    result = node_check(script, tmp_path, "535.183.01")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: node {HOST}: NVIDIA driver 535.183.01, older than {dockerfile.PYPI_MIN_DRIVER}, the image's "
        "minimum (its CUDA code needs it): update the driver, or use the NGC image (docs/containers.md)"]


@pytest.mark.parametrize("driver", ["580.65.06", "580.95.05", "590.44.01"])
def test_the_node_check_passes_the_minimum_driver_and_newer(tmp_path, driver):
    result = node_check(slurm_node_check(PYPI_IMAGE), tmp_path, driver)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"node {HOST}: ready for profile tcp-only\n"


def test_inside_the_image_its_own_minimum_decides(tmp_path):
    """Kubernetes runs the check in the image: its SUITE_MIN_NVIDIA_DRIVER counts whatever the tag says."""
    script = slurm_node_check(NGC_IMAGE)
    assert node_check(script, tmp_path / "ngc", "535.183.01").returncode == 0
    result = node_check(script, tmp_path / "pypi", "575.57.08", SUITE_MIN_NVIDIA_DRIVER="580.65.06")
    assert result.returncode == 1 and "NVIDIA driver 575.57.08, older than 580.65.06" in result.stderr


# --- the GPU self-test's refusal without a GPU -----------------------------------------------------

def test_the_gpu_selftest_refuses_a_host_without_gpus_in_one_line():
    result = subprocess.run([sys.executable, "-m", "suite.train.gpu_selftest"], capture_output=True,
                            text=True, cwd=REPO, timeout=120, env={**os.environ, "PYTHONPATH": REPO})
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: host {HOST}: TensorFlow sees no GPU (")
    assert "the GPU self-test runs on a GPU node" in lines[0]


class FakeTensorFlow:
    """Just what the refusal asks of TensorFlow: a CUDA build that sees no GPU."""

    __version__ = "2.18.1"

    class config:  # noqa: N801 - tf.config's name
        @staticmethod
        def list_physical_devices(kind):
            return []

    class test:  # noqa: N801 - tf.test's name
        @staticmethod
        def is_built_with_cuda():
            return True


@pytest.mark.parametrize("nvidia_smi, why", [
    (None, "nvidia-smi not found: no NVIDIA driver"),
    ("exit 9", "nvidia-smi lists no GPU (exit 9)"),
    ('echo 535.183.01; echo 535.183.01', "NVIDIA driver 535.183.01"),
])
def test_the_refusal_says_why_a_cuda_build_sees_no_gpu(tmp_path, monkeypatch, nvidia_smi, why):
    from suite.train import gpu_selftest
    if nvidia_smi:
        (tmp_path / "nvidia-smi").write_text(f"#!/bin/bash\n{nvidia_smi}\n")
        (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    refusal = gpu_selftest.no_gpu_refusal(FakeTensorFlow, "node7")
    assert refusal.startswith(f"host node7: TensorFlow sees no GPU ({why}); ")


def test_only_rank_0_says_it():
    command = [sys.executable, "-m", "suite.train.gpu_selftest", "--profile", "no-such-profile"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120,
                            env={**os.environ, "PYTHONPATH": REPO, "OMPI_COMM_WORLD_RANK": "3"})
    assert (result.returncode, result.stdout, result.stderr) == (2, "", "")


# --- container/check_run.py on the CUDA build's start-up -------------------------------------------

CUDA_START_UP = (
    "2026-12-04 22:44:14.242717: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:477] Unable to "
    "register cuFFT factory: Attempting to register factory for plugin cuFFT when one has already been "
    "registered\n"
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    "E0000 00:00:1796424254.396880   30797 cuda_dnn.cc:8310] Unable to register cuDNN factory: Attempting "
    "to register factory for plugin cuDNN when one has already been registered\n"
    "2026-12-04 22:44:29.553254: E external/local_xla/xla/stream_executor/cuda/cuda_driver.cc:152] failed "
    "call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n")
DEMO_END = ("run aborted: accuracy 0.2500 after 10 steps\n:::MLLOG ...\nINFO - SUCCESS\n"
            "MLPerf log: runs/demo/run/result_0.txt\n")


def check_run_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("check_run", os.path.join(CONTAINER, "check_run.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cuda_builds_start_up_is_expected_only_when_told(tmp_path):
    check_run = check_run_module()
    output = tmp_path / "demo.log"
    output.write_text(CUDA_START_UP + DEMO_END)
    assert check_run.output_problems(str(output), epochs=1, cuda_build=True) == []
    [problem] = check_run.output_problems(str(output), epochs=1)
    assert "start-up is not quiet (3 lines)" in problem


def test_other_noise_is_still_noise_in_the_cuda_build(tmp_path):
    check_run = check_run_module()
    output = tmp_path / "demo.log"
    output.write_text(CUDA_START_UP + "I0000 00:00:1 gpu_device.cc] Created device /GPU:0\n" + DEMO_END)
    [problem] = check_run.output_problems(str(output), epochs=1, cuda_build=True)
    assert "(1 lines)" in problem and "Created device" in problem


def test_the_horovod_wheels_key_is_what_it_is_compiled_from(tmp_path):
    env = fake_build_environment(tmp_path, "")
    key = gpu_build(tmp_path, "horovod_key", **env).stdout
    with open(tmp_path / "requirements-gpu.txt", "a") as handle:
        handle.write("pillow==13.0.0\n")
    assert gpu_build(tmp_path, "horovod_key", **env).stdout == key
    (tmp_path / "requirements-gpu.txt").write_text("tensorflow[and-cuda]==2.18.2\npillow==13.0.0\n")
    assert gpu_build(tmp_path, "horovod_key", **env).stdout != key
    assert gpu_build(tmp_path, "horovod_key", **{**env, "HOROVOD_BUILD_CUDA_CC_LIST": "90"}).stdout != key
