"""The control plane's processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok."""

import os
import re

import yaml

from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes
from simcluster import api, guard_plan, kwok_nodes, real_nodes_plan
from simcluster.pki import write_kubeconfig
from simcluster.state_dir import (
    KUBECONFIG,
    LOG_DIR,
    SIM_DIR,
    bind_address,
    is_recorded_running,
    log,
    port,
    start_process,
    wait_for,
    write_file,
)

# Order matters: each component needs the ones before it.
CONTROL_PLANE = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
# $GKM_SIM_JOB_CONTROLLER=0 runs the controller manager without the Job controller: Jobs stay as created and
# make no pods, so the scale benchmark measures the collection's writes, not 15,000 simulated pod lifecycles
# (it writes each Job's Complete condition itself, as the Job controller would).
JOB_CONTROLLER = os.environ.get("GKM_SIM_JOB_CONTROLLER", "1") != "0"
# $GKM_SIM_AUDIT_READS=1 also audits reads (get, list, watch) by the admin's clients, which the controller benchmark
# counts; off by default, since every test and module reads far more than it writes.
AUDIT_READS = os.environ.get("GKM_SIM_AUDIT_READS", "0") == "1"
READ_VERBS = ["get", "list", "watch"]
# The ports each component listens on (state.json "ports"): one it could not bind is picked again.
COMPONENT_PORTS = {"etcd": ["etcd-client", "etcd-peer", "etcd-metrics"], "kube-apiserver": ["apiserver"],
                   "kube-controller-manager": ["controller-manager"], "kube-scheduler": ["scheduler"],
                   "kwok": ["kwok"]}
BIND_ATTEMPTS = 3


def write_audit_policy():
    """Audit writes (and reads with $GKM_SIM_AUDIT_READS) at Metadata level: tests count a module's writes from this
    log."""
    path = os.path.join(SIM_DIR, "audit-policy.yaml")
    verbs = ["create", "update", "patch", "delete", "deletecollection"] + (READ_VERBS if AUDIT_READS else [])
    write_file(path, yaml.safe_dump({
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "None", "users": ["system:kube-scheduler", "system:kube-controller-manager"]},
            {"level": "Metadata", "verbs": verbs, "userGroups": ["system:masters"]},
            {"level": "None"},
        ],
    }), 0o644)
    return path


def component_argv(name, state, binaries, pki):
    cfg = KUBECONFIG
    if name == "etcd":
        client, peer = port(state, "etcd-client"), port(state, "etcd-peer")
        return [os.path.join(binaries, "etcd"), "--name", "gkm-sim", "--data-dir", os.path.join(SIM_DIR, "etcd"),
                "--listen-client-urls", "http://127.0.0.1:%d" % client,
                "--advertise-client-urls", "http://127.0.0.1:%d" % client,
                "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                "--initial-cluster", "gkm-sim=http://127.0.0.1:%d" % peer,
                "--listen-metrics-urls", "http://127.0.0.1:%d" % port(state, "etcd-metrics"),
                # A throwaway test cluster: durability is not worth the fsync latency.
                "--unsafe-no-fsync", "--quota-backend-bytes", str(4 * 1024 ** 3), "--log-level", "warn"]
    if name == "kube-apiserver":
        return [os.path.join(binaries, "kube-apiserver"),
                "--etcd-servers", "http://127.0.0.1:%d" % port(state, "etcd-client"),
                "--bind-address", bind_address(state), "--advertise-address", bind_address(state),
                "--secure-port", str(port(state, "apiserver")),
                "--cert-dir", os.path.join(SIM_DIR, "apiserver-certs"),
                "--tls-cert-file", pki["apiserver.crt"], "--tls-private-key-file", pki["apiserver.key"],
                "--client-ca-file", pki["ca.crt"],
                "--service-account-key-file", pki["sa.pub"],
                "--service-account-signing-key-file", pki["sa.key"],
                "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range", guard_plan.SERVICE_CIDR,
                "--authorization-mode", "RBAC",
                "--enable-admission-plugins", "NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,"
                "PersistentVolumeClaimResize,Priority,DefaultTolerationSeconds,MutatingAdmissionWebhook,"
                "ValidatingAdmissionWebhook,ValidatingAdmissionPolicy,ResourceQuota,PodSecurity",
                "--allow-privileged=true",
                "--feature-gates", real_nodes_plan.feature_gates_flag(),
                # Real nodes: reach kubelets by IP (node names are not in DNS) as a client they trust, and call
                # webhook Services at their pod IPs (no kube-proxy runs).
                "--kubelet-preferred-address-types", "InternalIP,Hostname",
                "--kubelet-client-certificate", pki["kubelet-client.crt"],
                "--kubelet-client-key", pki["kubelet-client.key"],
                "--enable-aggregator-routing=true",
                # Benchmarks push thousands of objects and a 500-pod DaemonSet through one apiserver.
                "--max-requests-inflight", "2000", "--max-mutating-requests-inflight", "1000",
                "--audit-policy-file", write_audit_policy(),
                "--audit-log-path", os.path.join(LOG_DIR, "audit.log"),
                "--audit-log-maxsize", "200", "--audit-log-maxbackup", "1",
                "--profiling=false", "--v", "1"]
    if name == "kube-controller-manager":
        return [os.path.join(binaries, "kube-controller-manager"),
                "--kubeconfig", cfg, "--authentication-kubeconfig", cfg, "--authorization-kubeconfig", cfg,
                "--bind-address", "127.0.0.1", "--secure-port", str(port(state, "controller-manager")),
                "--service-account-private-key-file", pki["sa.key"], "--root-ca-file", pki["ca.crt"],
                "--service-cluster-ip-range", guard_plan.SERVICE_CIDR, "--leader-elect=false",
                "--controllers", "*" if JOB_CONTROLLER else "*,-job-controller",
                "--kube-api-qps", "500", "--kube-api-burst", "1000",
                "--concurrent-job-syncs", "20", "--concurrent-daemonset-syncs", "5",
                # A quota on a kind whose CRD was installed moments before is counted at the next full sync (5 min
                # by default): the tests install the CRDs, then a quota on GKMCaches (roles/gkm cache_quotas.yml).
                "--resource-quota-sync-period", "10s",
                "--node-monitor-grace-period", kwok_nodes.NODE_MONITOR_GRACE_PERIOD, "--v", "1"]
    if name == "kube-scheduler":
        return [os.path.join(binaries, "kube-scheduler"),
                "--kubeconfig", cfg, "--authentication-kubeconfig", cfg, "--authorization-kubeconfig", cfg,
                "--bind-address", "127.0.0.1", "--secure-port", str(port(state, "scheduler")),
                "--leader-elect=false", "--kube-api-qps", "500", "--kube-api-burst", "1000", "--v", "1"]
    if name == "kwok":
        return [os.path.join(binaries, "kwok"), "--kubeconfig", cfg, "--config", kwok_nodes.write_config(),
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector", "%s=%s" % (
                    gpu_nodes.KWOK_ANNOTATION, gpu_nodes.KWOK_ANNOTATION_VALUE),
                "--cidr", guard_plan.KWOK_POD_CIDR, "--node-ip", guard_plan.KWOK_NODE_IP,
                "--server-address", "127.0.0.1:%d" % port(state, "kwok")]
    raise ValueError(name)


def apiserver_ready(state, pki):
    return api.http_ok("https://%s:%d/readyz" % (bind_address(state), port(state, "apiserver")), api.tls_context(pki))


def _ready(name, state, pki):
    if name == "etcd":
        return api.http_ok("http://127.0.0.1:%d/health" % port(state, "etcd-client"))
    if name == "kube-apiserver":
        return apiserver_ready(state, pki)
    return True


def start(state, binaries, pki):
    """Start each component that is not running, in order, waiting until it is ready; returns whether any started."""
    started_any = False
    for name in CONTROL_PLANE:
        if is_recorded_running(state, name):
            continue
        if name == "kwok":
            kwok_nodes.apply_stages(state, pki, binaries)
        if name == "kube-controller-manager":
            state["job_controller"] = JOB_CONTROLLER
        if name == "kube-apiserver":
            state["audit_reads"] = AUDIT_READS
        _start_component(name, state, binaries, pki)
        started_any = True
    return started_any


def _start_component(name, state, binaries, pki):
    """Start name and wait until it is ready; when another process took one of its ports between the pick and its
    bind, pick that port again and start it again."""
    log_path = os.path.join(LOG_DIR, name + ".log")
    for attempt in range(1, BIND_ATTEMPTS + 1):
        logged_before = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        start_process(state, name, component_argv(name, state, binaries, pki))
        try:
            wait_for(name, lambda: _ready(name, state, pki), 60, [name], state)
            return
        except SystemExit:
            in_use = _ports_in_use(log_path, logged_before)
            lost = [key for key in COMPONENT_PORTS[name] if state["ports"][key] in in_use]
            if attempt == BIND_ATTEMPTS or is_recorded_running(state, name) or not lost:
                raise
        log("%s found one of its ports taken (%s); starting it again on a new one" % (
            name, ", ".join("%s %d" % (key, state["ports"][key]) for key in lost)))
        for key in lost:
            del state["ports"][key]
        if name == "kube-apiserver":
            state["apiserver"] = write_kubeconfig(state, pki)


def _ports_in_use(log_path, offset):
    """The ports a component's log, from offset on, says it could not bind as they were in use."""
    with open(log_path, "rb") as handle:
        handle.seek(offset)
        return {int(number) for number in re.findall(rb":(\d+): bind: address already in use", handle.read())}


def ensure_default_storage_class(state, pki):
    """A storage class without a provisioner, as kind-like clusters without CSI have: PVs are made by hand."""
    body = {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "local-manual", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer",
    }
    api.create_if_missing(state, pki, "/apis/storage.k8s.io/v1/storageclasses", body)
