"""A real Slurm cluster on a namespace cluster's hosts, for the tests: munge, slurmctld and a slurmd a host.

    with TwoHosts(workdir) as hosts, SlurmCluster(hosts, workdir) as slurm:   # or BridgedHosts(...)
        job = slurm.submit(["--nodes=2", "--wrap", "srun hostname"])
        slurm.wait(job)

Debian's Slurm 22.05 and munge, configured afresh in a folder of the test's own (slurm.conf,
cgroup.conf, gres.conf, a munge key and socket): never the machine's /etc/slurm or its munge. The
controller and munged run on the first host, a slurmd on every host, each node named after its host;
every daemon is a child process of the test, stopped by its pid (the namespaces' teardown then ends
whatever a job left). The client commands run on the first host, as on a login node, with SLURM_CONF
pointing at the generated file. Works on any namespace cluster with `names`, `namespaces`,
`addresses`, `wrap()` and `run()` (the two-host one, or more hosts).
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from helpers.running import BIN, subprocess_env

# The daemons and the client commands the tests call, all from Debian's packages (scripts/setup.sh).
DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "scancel", "sinfo", "squeue")
PLUGIN_DIR = "/usr/lib/x86_64-linux-gnu/slurm-wlm"
PARTITION = "compute"  # oci-hpc's default queue
# What every node claims (config_overrides): a GPU node's shape, whatever this machine has.
CPUS_PER_NODE = 8
GPUS_PER_NODE = 8
# Slurm's wait between the SIGTERM of a cancelled job and its SIGKILL (oci-hpc's value).
KILL_WAIT_SECONDS = 30
ENDED_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE")


class SlurmUnavailable(RuntimeError):
    """This machine cannot run the test cluster (not root, a package missing); the message is one line."""


def unavailable(err):
    """CI must run the Slurm tests; elsewhere a machine without what they need skips them in one line."""
    if os.environ.get("CI"):
        pytest.fail(f"the Slurm test cluster is required in CI: {err}")
    pytest.skip(f"no Slurm test cluster on this machine: {err}")


class SlurmCluster:
    """One Slurm cluster whose nodes are the hosts of `hosts`; partition PARTITION holds them all."""

    def __init__(self, hosts, workdir, conf_extra=""):
        self.hosts = hosts
        self.conf_extra = conf_extra  # slurm.conf lines a test needs besides the usual ones
        self.nodes = list(hosts.names)
        self.login = self.nodes[0]  # the controller's host, and where clients run
        self.dir = str(workdir)
        self.conf = os.path.join(self.dir, "etc", "slurm.conf")
        # munged wants every folder above its socket searchable by all, which a test's temporary folder
        # (mode 0700) is not: the key and socket get a folder of their own in /tmp, removed on close,
        # named after the login host's namespace so that a session killed outright leaves it to the next.
        self.munge_dir = os.path.join(tempfile.gettempdir(), f"suite-munge-{hosts.namespaces[self.login]}")
        self.munge_socket = os.path.join(self.munge_dir, "socket")
        self._daemons = []  # (name, Popen), in start order
        self.bring_up_seconds = self.teardown_seconds = None

    # ---- set-up and tear-down ----

    def __enter__(self):
        started = time.monotonic()
        check_machine()
        try:
            self._write_config()
            self._start_munge()
            self._start("slurmctld", self.login, ["/usr/sbin/slurmctld", "-D", "-i", "-f", self.conf])
            for node in self.nodes:
                self._start(f"slurmd-{node}", node, ["/usr/sbin/slurmd", "-D", "-N", node, "-f", self.conf])
            self._wait_for_idle_nodes()
        except BaseException:
            self.close()
            raise
        self.bring_up_seconds = time.monotonic() - started
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Ends every job, then stops every daemon by its pid: the slurmds, the controller, munged."""
        started = time.monotonic()
        if any(name == "slurmctld" and daemon.poll() is None for name, daemon in self._daemons):
            self._end_jobs()
        slurmds = [(name, daemon) for name, daemon in self._daemons if name.startswith("slurmd")]
        others = [(name, daemon) for name, daemon in self._daemons if not name.startswith("slurmd")]
        _stop([daemon for _, daemon in slurmds])  # all at once: one can take seconds after SIGTERM
        _stop([daemon for name, daemon in reversed(others)])
        self._daemons = []
        shutil.rmtree(self.munge_dir, ignore_errors=True)
        self.teardown_seconds = time.monotonic() - started

    def _end_jobs(self, seconds=15):
        """Kills what a job still runs (a failed test's), so no task outlives its slurmd."""
        jobs = self.client(["squeue", "--noheader", "--format=%i"], timeout=30).stdout.split()
        if not jobs:
            return
        self.client(["scancel", "--full", "--signal=KILL", *jobs], timeout=30)
        self.client(["scancel", *jobs], timeout=30)
        deadline = time.monotonic() + seconds
        while self.client(["squeue", "--noheader", "--format=%i"], timeout=30).stdout.split():
            if time.monotonic() > deadline:
                return  # the namespaces' teardown kills whatever is left
            time.sleep(0.3)

    def _write_config(self):
        shutil.rmtree(self.munge_dir, ignore_errors=True)
        os.makedirs(self.munge_dir, mode=0o755)
        os.chmod(self.munge_dir, 0o755)  # whatever the umask
        for folder in ("etc", "state", "log", "dev", *(f"spool/{n}" for n in self.nodes),
                       *(f"tmp/{n}" for n in self.nodes)):
            os.makedirs(os.path.join(self.dir, folder), exist_ok=True)
        # gres/gpu accepts character devices only: /dev/null's numbers stand in for the GPUs.
        for index in range(GPUS_PER_NODE):
            device = os.path.join(self.dir, "dev", f"gpu{index}")
            if not os.path.exists(device):
                os.mknod(device, 0o666 | 0o020000, os.makedev(1, 3))
        with open(self.conf, "w") as handle:
            handle.write(slurm_conf(self.dir, self.login, self.nodes, self.hosts.addresses,
                                    self.munge_socket) + self.conf_extra)
        etc = os.path.dirname(self.conf)
        with open(os.path.join(etc, "cgroup.conf"), "w") as handle:
            # `ip netns exec` mounts a /sys without cgroups, and slurmd 22.05 loads a cgroup plugin
            # even when nothing uses one (proctrack/linuxproc, task/affinity): v1 loads without them.
            handle.write("CgroupPlugin=cgroup/v1\n")
        with open(os.path.join(etc, "gres.conf"), "w") as handle:
            handle.write(f"Name=gpu File={self.dir}/dev/gpu[0-{GPUS_PER_NODE - 1}]\n")

    def _start_munge(self):
        munge = self.munge_dir
        key = os.path.join(munge, "key")
        with open(key, "wb") as handle:
            handle.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self._start("munged", self.login, [
            "/usr/sbin/munged", "--foreground", "--socket", self.munge_socket, "--key-file", key,
            "--pid-file", os.path.join(munge, "pid"), "--seed-file", os.path.join(munge, "seed"),
            "--log-file", os.path.join(self.dir, "log", "munged.log"), "--num-threads", "4"])
        _wait_until(lambda: os.path.exists(self.munge_socket), 10, "munged's socket", self._logs)

    def _start(self, name, host, command):
        log = open(os.path.join(self.dir, "log", f"{name}.out"), "w")
        # A session of its own: a Ctrl-C at the terminal reaches pytest, whose teardown stops it.
        daemon = subprocess.Popen(self.hosts.wrap(host, command), stdout=log, stderr=subprocess.STDOUT,
                                  env=self.env(), start_new_session=True)
        log.close()
        self._daemons.append((name, daemon))

    def _wait_for_idle_nodes(self, seconds=30):
        def idle():
            for name, daemon in self._daemons:
                if daemon.poll() is not None:
                    raise SlurmUnavailable(f"{name} exited with {daemon.returncode} at start-up: "
                                           f"{self._logs(name)}")
            states = self.node_states()
            return states if states and all(s == "idle" for s in states.values()) else None
        _wait_until(idle, seconds, "every node idle", self._logs)

    def _logs(self, name=None):
        """The last lines a daemon wrote (all daemons without a name), for an error message."""
        names = [name] if name else [n for n, _ in self._daemons]
        tails = []
        for each in names:
            for path in (f"log/{each}.out", f"log/{each}.log"):
                path = os.path.join(self.dir, path)
                if os.path.exists(path):
                    with open(path, errors="replace") as handle:
                        lines = [line.strip() for line in handle if line.strip()]
                    if lines:
                        tails.append(f"{each}: {' | '.join(lines[-3:])}")
        return "; ".join(tails)[-1500:]

    def daemon(self, name):
        """The Popen of a daemon this cluster started (munged, slurmctld, slurmd-<node>)."""
        return next(daemon for each, daemon in self._daemons if each == name)

    # ---- using the cluster ----

    def env(self, **extra):
        """The test environment with this cluster's SLURM_CONF: what a user's login shell would have."""
        env = subprocess_env(SLURM_CONF=self.conf, **extra)
        env["PATH"] = BIN + os.pathsep + "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        return env

    def client(self, command, timeout=120, cwd=None, **extra):
        """A client command (sbatch, srun, scontrol, ...) run on the login host."""
        return self.hosts.run(self.login, command, timeout=timeout, env=self.env(**extra), cwd=cwd)

    def submit(self, sbatch_args, cwd=None, **extra):
        """`sbatch --parsable ARGS`; returns the job id (fails the test with sbatch's words otherwise)."""
        result = self.client(["sbatch", "--parsable", *sbatch_args], cwd=cwd or self.dir, **extra)
        assert result.returncode == 0, f"sbatch {' '.join(sbatch_args)}: {result.stderr.strip()}"
        return result.stdout.strip().split(";")[0]

    def job(self, job_id):
        """`scontrol show job` as a dict (JobState, ExitCode, NodeList, StdOut, ...)."""
        result = self.client(["scontrol", "show", "job", "--oneliner", str(job_id)], timeout=30)
        assert result.returncode == 0, result.stderr
        return dict(re.findall(r"(\w+)=(\S*)", result.stdout))

    def wait(self, job_id, timeout=600, states=ENDED_STATES):
        """Waits, through Slurm, until the job is in one of `states` (by default: ended); returns its
        record."""
        def reached():
            job = self.job(job_id)
            return job if job["JobState"] in states else None
        try:
            return _wait_until(reached, timeout, f"job {job_id} to reach {'/'.join(states)}", self._logs,
                               error=AssertionError)
        except AssertionError:
            # A job that outlived its test must not hold the nodes (and the cores) for the session's
            # next jobs: they would queue behind it and fail on their own timeouts.
            self.client(["scancel", str(job_id)], timeout=30)
            raise

    def hostnames(self, nodelist):
        """A Slurm node list (h[1-2]) as its names."""
        result = self.client(["scontrol", "show", "hostnames", nodelist], timeout=30)
        assert result.returncode == 0, result.stderr
        return result.stdout.split()

    def node_states(self):
        result = self.client(["sinfo", "--noheader", "--Node", "--format=%N %t"], timeout=30)
        if result.returncode != 0:
            return {}
        return dict(line.split() for line in result.stdout.splitlines() if line.strip())


def slurm_conf(folder, controller, nodes, addresses, munge_socket):
    """The cluster's slurm.conf: root runs everything, no accounting, no cgroups, state in `folder`."""
    node_lines = "".join(f"NodeName={node} NodeAddr={addresses[node]} CPUs={CPUS_PER_NODE} "
                         f"Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN\n" for node in nodes)
    return f"""ClusterName=suitetest
SlurmctldHost={controller}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool/%n
SlurmctldPidFile={folder}/state/slurmctld.pid
SlurmdPidFile={folder}/spool/%n/slurmd.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd-%n.log
# Each node's own /tmp for its jobs: a shared one makes the second PMIx step fail on the first's folder.
TmpFS={folder}/tmp/%n
# More CPUs and GPUs than this machine has: the nodes of a GPU cluster.
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
# oci-hpc's choice (and Slurm's default): a job larger than its partition is queued, not refused.
EnforcePartLimits=NO
KillWait={KILL_WAIT_SECONDS}
InactiveLimit=0
MinJobAge=600
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmctldDebug=info
SlurmdDebug=info
{node_lines}PartitionName={PARTITION} Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP
"""


def check_machine():
    if os.geteuid() != 0:
        raise SlurmUnavailable("the daemons run as root here")
    for program in (*DAEMONS, *CLIENTS):
        if not shutil.which(program):
            raise SlurmUnavailable(f"{program} is not installed (scripts/setup.sh installs Debian's Slurm)")
    for plugin in ("mpi_pmix.so", "proctrack_linuxproc.so", "cgroup_v1.so"):
        if not os.path.exists(os.path.join(PLUGIN_DIR, plugin)):
            raise SlurmUnavailable(f"Slurm's {plugin} is missing from {PLUGIN_DIR} "
                                   f"(slurm-wlm-basic-plugins installs it)")


def _stop(daemons, seconds=20):
    """SIGTERM to each, then SIGKILL to any still running after `seconds`."""
    for daemon in daemons:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + seconds
    for daemon in daemons:
        try:
            daemon.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def _wait_until(predicate, seconds, what, logs, error=SlurmUnavailable):
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"timed out after {seconds} s waiting for {what}: {logs()}")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """The session's Slurm cluster on two namespace hosts of its own (prefix mls), torn down at the end,
    also after a failed test or a Ctrl-C (pytest's teardown)."""
    from twohosts import ClusterUnavailable, TwoHosts
    try:
        with TwoHosts(tmp_path_factory.mktemp("slurm-hosts"), prefix="mls") as hosts, \
                SlurmCluster(hosts, tmp_path_factory.mktemp("slurm")) as cluster:
            print(f"\nSlurm test cluster up in {cluster.bring_up_seconds:.1f} s")
            yield cluster
        print(f"\nSlurm test cluster down in {cluster.teardown_seconds:.1f} s")
    except (ClusterUnavailable, SlurmUnavailable) as err:
        unavailable(err)


@pytest.fixture(scope="session")
def slurm4(tmp_path_factory):
    """The session's second Slurm cluster: four nodes (r1 ... r4) on one bridge (prefix mlr), for the
    4-node script and the 1 -> 2 -> 4 sweep; torn down at the end like the first."""
    from twohosts import BridgedHosts, ClusterUnavailable
    try:
        with BridgedHosts(tmp_path_factory.mktemp("slurm4-hosts"), ("r1", "r2", "r3", "r4"), prefix="mlr") \
                as hosts, SlurmCluster(hosts, tmp_path_factory.mktemp("slurm4")) as cluster:
            print(f"\n4-node Slurm test cluster up in {cluster.bring_up_seconds:.1f} s")
            yield cluster
        print(f"\n4-node Slurm test cluster down in {cluster.teardown_seconds:.1f} s")
    except (ClusterUnavailable, SlurmUnavailable) as err:
        unavailable(err)
