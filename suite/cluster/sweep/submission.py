"""The MLPerf submission a sweep writes: system descriptions, result logs, the implementation README."""
import os
import shlex

from suite.common import results
from suite.cluster.sweep.planning import STATUS, SYSTEM_FIELDS, SweepError, is_local, run_dir
from suite.common import runfiles

IMPLEMENTATION = "tensorflow-horovod"
SOFTWARE = ("python", "tf-keras", "numpy", "mpi4py", "mlperf-logging")


def local_host_facts():
    """This machine's CPUs and memory from /proc, for localhost sweeps."""
    cpuinfo = _proc_fields("/proc/cpuinfo")
    meminfo = _proc_fields("/proc/meminfo")
    sockets = len(set(cpuinfo.get("physical id", []))) or 1
    vcpus = os.cpu_count() or 1
    cores = int(cpuinfo["cpu cores"][0]) if cpuinfo.get("cpu cores") else vcpus // sockets
    memory_kb = int(meminfo["MemTotal"][0].split()[0]) if meminfo.get("MemTotal") else 0
    return {
        "host_processors_per_node": sockets,
        "host_processor_model_name": (cpuinfo.get("model name") or ["unknown"])[0],
        "host_processor_core_count": cores,
        "host_processor_vcpu_count": vcpus,
        "host_processor_frequency": f"{float(cpuinfo['cpu MHz'][0]):.0f} MHz" if "cpu MHz" in cpuinfo else "",
        "host_processor_caches": (cpuinfo.get("cache size") or [""])[0],
        "host_memory_capacity": f"{memory_kb / 1024 ** 2:.0f} GB" if memory_kb else "",
    }


def _proc_fields(path):
    fields = {}
    try:
        with open(path) as handle:
            for line in handle:
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), []).append(value.strip())
    except OSError:
        pass
    return fields


def system_description(sweep, scale, logs, env):
    """One scale's <system>.json: the checker's fields from flags, logs, env.json and --system-info."""
    versions = env.get("versions", {})
    cpu = env.get("device") == "cpu" or sweep.profile.gpus_per_node == 0
    desc = {name: "" for name in SYSTEM_FIELDS}
    desc.update({
        "submitter": sweep.submitter,
        "division": "closed" if logs and all(log.division == "closed" for log in logs) else "open",
        "status": STATUS[sweep.status],
        "system_name": scale.system,
        "number_of_nodes": scale.nodes,
        "host_networking": sweep.profile.description,
        # One GPU a rank; the first host gets the most ranks when the processes fill slots in order.
        "accelerators_per_node": 0 if cpu else min(scale.np, scale.hosts[0].slots),
        "accelerator_model_name": "N/A" if cpu else "",
        "hw_notes": f"{scale.np} process(es) on {scale.nodes} host(s) "
                    f"({', '.join(h.name for h in scale.hosts)}); cluster profile {sweep.profile.name} "
                    f"v{sweep.profile.version}",
        "framework": f"TensorFlow {versions.get('tensorflow', '?')}, " + (
            f"Horovod {versions.get('horovod', '?')}" if scale.distribution == "horovod" else
            "its own collectives (MultiWorkerMirroredStrategy)"),
        "other_software_stack": ", ".join(f"{k} {versions[k]}" for k in SOFTWARE if versions.get(k)),
        "operating_system": versions.get("platform", ""),
        "sw_notes": f"mlperf-hvd-suite {env.get('git_revision', 'unknown')}; launched by "
                    f"{env.get('launcher')} ({env.get('controller')} controller)",
    })
    if all(is_local(host.name) for host in scale.hosts):
        desc.update(local_host_facts())
    desc.update(sweep.system_info)
    # Strings throughout, as in published systems files: the checker joins some fields as text.
    return {key: str(value) for key, value in desc.items()}


def copy_result(source, target):
    """Copies a finished log into the results folder atomically; never replaces a finished result."""
    if results.has_run_stop(target):
        raise SweepError(f"{target} already holds a finished run; it is never overwritten")
    runfiles.copy_atomic(source, target)


def write_system(sweep, scale):
    """<submitter>/systems/<system>.json from the scale's logs and the first env.json of its runs."""
    files = results.result_files(sweep.results_dir(scale))
    logs = [results.read_run(path, sweep.benchmark) for path in files]
    envs = (runfiles.read_json(os.path.join(run_dir(sweep, scale, i), "env.json")) for i in range(sweep.runs))
    env = next((e for e in envs if e), {})
    path = sweep.path(sweep.submitter, "systems", f"{scale.system}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    runfiles.write_json(path, system_description(sweep, scale, logs, env))


def write_implementation_readme(sweep):
    """The README of the implementation folder: the code's revision and how each run was started."""
    folder = sweep.path(sweep.submitter, "benchmarks", sweep.benchmark, "implementations", IMPLEMENTATION)
    os.makedirs(folder, exist_ok=True)
    text = (f"# {sweep.benchmark}: TensorFlow + Horovod (mlperf-hvd-suite)\n\n"
            f"The code is the suite at git revision {runfiles.git_revision()}; the entry point is "
            f"`python -m {sweep.model[0]}`.\n\nEach run was started as\n\n"
            f"    python -m suite.cluster.launch ... -- {shlex.join(sweep.model)} --preset PRESET "
            f"--run-dir DIR\n\n"
            f"with the preset and launcher command of each scale recorded in `sweep.json` and in each run "
            f"directory's `launch.json` (under `runs/` of the sweep folder).\n")
    runfiles.write_text(os.path.join(folder, "README.md"), text)
