"""What the MPI Operator's own validation and Kubernetes require of a rendered v2beta1 MPIJob, field by
field (kubectl's strict field validation, the operator's validation.go, the pod rules): a schema check
without a cluster."""
import re

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# MPIJobSpec and ReplicaSpec fields (mpi-operator pkg/apis/kubeflow/v2beta1/types.go); kubectl's strict
# field validation rejects anything else.
SPEC_FIELDS = {"slotsPerWorker", "runLauncherAsWorker", "runPolicy", "mpiReplicaSpecs", "sshAuthMountPath",
               "launcherCreationPolicy", "mpiImplementation"}
REPLICA_FIELDS = {"replicas", "template", "restartPolicy"}
# The LauncherCreationPolicy constants of the same types.go (the only values the controller acts on).
LAUNCHER_CREATION_POLICIES = {"AtStartup", "WaitForWorkersReady"}
# validation.go's validMPIImplementations, validCleanPolicies, validRestartPolicies.
MPI_IMPLEMENTATIONS = {"OpenMPI", "Intel", "MPICH"}
# Kubernetes pkg/apis/core/types.go (DNSPolicy) and pkg/apis/core/validation/validation.go
# (supportedHostPathTypes).
DNS_POLICIES = {"ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"}
HOST_PATH_TYPES = {"", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice",
                   "BlockDevice"}
VOLUME_SOURCES = {"emptyDir", "hostPath", "persistentVolumeClaim"}
PROBE_HANDLERS = {"exec", "httpGet", "tcpSocket", "grpc"}
# Multus network selection: [namespace/]name[@interface], comma-separated.
NETWORK_ENTRY = re.compile(r"^([a-z0-9][-a-z0-9]*/)?[a-z0-9][-a-z0-9.]*(@[\w.-]+)?$")


def validate_mpijob(doc):
    """What the MPI Operator's own validation requires of a v2beta1 MPIJob (mpi-operator
    pkg/apis/kubeflow/validation/validation.go), with every field set rather than defaulted, and the
    pod-level rules of Kubernetes for the fields the renderer sets."""
    assert doc["apiVersion"] == "kubeflow.org/v2beta1" and doc["kind"] == "MPIJob"
    spec, name = doc["spec"], doc["metadata"]["name"]
    assert set(spec) <= SPEC_FIELDS, set(spec) - SPEC_FIELDS
    replicas = spec["mpiReplicaSpecs"]
    assert set(replicas) == {"Launcher", "Worker"}
    workers = replicas["Worker"]["replicas"]
    # validateMPIJobName: <name>-worker-<replicas-1> must be a DNS-1035 label.
    assert name[0].isalpha() and DNS_LABEL.match(f"{name}-worker-{workers - 1}"), name
    assert isinstance(spec["slotsPerWorker"], int) and spec["slotsPerWorker"] >= 0
    check_run_policy(spec["runPolicy"])
    assert spec["sshAuthMountPath"] and spec["mpiImplementation"] in MPI_IMPLEMENTATIONS
    assert spec.get("launcherCreationPolicy", "AtStartup") in LAUNCHER_CREATION_POLICIES
    assert replicas["Launcher"]["replicas"] == 1 and workers >= 1
    for replica in replicas.values():
        assert set(replica) <= REPLICA_FIELDS
        assert replica["restartPolicy"] in ("Never", "OnFailure")
        template = replica["template"]
        containers = template["spec"]["containers"]
        assert containers and all(c["name"] and c["image"] for c in containers)
        check_pod(template)
        for container in containers:
            check_container(container, template["spec"])
    # Workers are Guaranteed pods, their /dev/shm bounded and inside their memory limit; they run on the
    # nodes of one instance type where the renderer knows it.
    worker = replicas["Worker"]["template"]["spec"]
    assert guaranteed(worker), worker["containers"][0].get("resources")
    shm = next(v for v in worker["volumes"] if v["name"] == "dshm")["emptyDir"]
    assert quantity(shm["sizeLimit"]) < quantity(worker["containers"][0]["resources"]["limits"]["memory"])


def check_run_policy(policy):
    assert policy["cleanPodPolicy"] in ("None", "Running", "All")
    for key in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        assert policy.get(key, 0) >= 0, key


QUANTITY = re.compile(r"^([0-9]+(\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
SUFFIXES = {None: 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "Ki": 2**10, "Mi": 2**20,
            "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
# Label values (Kubernetes apimachinery validation IsValidLabelValue): 63 characters at most.
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
LABEL_KEY = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
# The PodSpec fields the renderer sets (Kubernetes pkg/apis/core/types.go); strict validation rejects others.
POD_FIELDS = {"containers", "volumes", "hostNetwork", "dnsPolicy", "hostIPC", "nodeSelector",
              "imagePullSecrets"}


def quantity(value):
    if isinstance(value, int):
        return value
    match = QUANTITY.match(value)
    return float(match[1]) * SUFFIXES[match[3]]


def guaranteed(pod):
    """Kubernetes' Guaranteed QoS: every container has cpu and memory limits, and requests equal to them."""
    for container in pod["containers"]:
        resources = container.get("resources", {})
        limits, requests = resources.get("limits", {}), resources.get("requests", resources.get("limits", {}))
        if not {"cpu", "memory"} <= set(limits) or any(requests.get(k, v) != v for k, v in limits.items()):
            return False
    return True


def check_pod(template):
    pod = template["spec"]
    assert set(pod) <= POD_FIELDS, set(pod) - POD_FIELDS
    for key, value in pod.get("nodeSelector", {}).items():
        assert LABEL_KEY.match(key) and isinstance(value, str) and LABEL_VALUE.match(value), (key, value)
    for secret in pod.get("imagePullSecrets", []):
        assert set(secret) == {"name"} and K8S_NAME.match(secret["name"]), secret
    assert pod.get("dnsPolicy", "ClusterFirst") in DNS_POLICIES
    # kubelet resolves ClusterFirst like Default on a host-network pod: only ClusterFirstWithHostNet
    # reaches the cluster DNS that knows the worker names of the hostfile.
    if pod.get("hostNetwork"):
        assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    names = [volume["name"] for volume in pod.get("volumes", [])]
    assert len(names) == len(set(names)) and all(DNS_LABEL.match(n) for n in names), names
    for volume in pod.get("volumes", []):
        sources = set(volume) - {"name"}
        assert len(sources) == 1 and sources <= VOLUME_SOURCES, volume
        if "emptyDir" in volume:
            assert set(volume["emptyDir"]) <= {"medium", "sizeLimit"}
            assert QUANTITY.match(volume["emptyDir"].get("sizeLimit", "1")), volume
        if "hostPath" in volume:
            assert volume["hostPath"]["path"].startswith("/")
            assert volume["hostPath"].get("type", "") in HOST_PATH_TYPES
    networks = template["metadata"].get("annotations", {}).get("k8s.v1.cni.cncf.io/networks")
    if networks is not None:
        assert all(NETWORK_ENTRY.match(entry) for entry in networks.split(",")), networks


def check_container(container, pod_spec):
    names = [item["name"] for item in container.get("env", [])]
    assert len(names) == len(set(names)), names
    assert all(isinstance(item["value"], str) for item in container.get("env", []))
    volumes = {volume["name"]: volume for volume in pod_spec.get("volumes", [])}
    paths = [mount["mountPath"] for mount in container.get("volumeMounts", [])]
    assert len(paths) == len(set(paths)), paths
    for mount in container.get("volumeMounts", []):
        assert mount["name"] in volumes, mount
    probe = container.get("readinessProbe")
    if probe is not None:
        assert len(set(probe) & PROBE_HANDLERS) == 1, probe
        assert 1 <= probe["tcpSocket"]["port"] <= 65535 and probe.get("periodSeconds", 10) >= 1
    security = container.get("securityContext", {})
    assert isinstance(security.get("privileged", False), bool)
    assert all(isinstance(cap, str) for cap in security.get("capabilities", {}).get("add", []))
    resources = container.get("resources", {})
    assert set(resources) <= {"requests", "limits"}, resources
    for kind in resources.values():
        for key, value in kind.items():
            assert isinstance(value, int) and value > 0 or isinstance(value, str) and QUANTITY.match(value), \
                (key, value)
    # A request above its limit is refused by the API server.
    for key, value in resources.get("requests", {}).items():
        if key in resources.get("limits", {}):
            assert quantity(value) <= quantity(resources["limits"][key]), key
