"""How the simulated cluster runs the collection's operator: ansible-operator's command line and environment, pure.

The operator runs here as a local process against the kubeconfig (out of cluster), like the local webhook. Every
server it starts binds loopback. Its runs reach the API server through its proxy at the port the engine hard-codes in
their kubeconfig (v1.42.2 ignores --proxy-port there), and its event server always takes localhost:5050: one process
per network namespace, so a second replica cannot run beside it on this machine (in a cluster each pod has its own).
ansible-operator starts ansible-runner per event, which runs the role gkm.cluster.operator_events with this
checkout's collection and the venv's Python.
The in-cluster operator (roles/gkm/templates/operator.yaml.j2) runs the engine with the same flags and concurrency:
a change here belongs there too.
"""

import os

# The Lease the replicas compete for, in the namespace of the collection's bookkeeping objects.
LEADER_ELECTION_ID = "gkm-cluster-operator"
NAMESPACE = "gkm-system"
PROXY_PORT = 8888
# The engine's work directory for ansible-runner (fixed in v1.42.2). A run of an earlier process can leave a
# `latest` link to a rotated-away run, on which ansible-runner's artifact rotation fails: a new process starts clean.
RUNNER_DIR = "/tmp/ansible-operator/runner"
# The fixed ports (the proxy's and the event server's) and RUNNER_DIR make the local operator one per machine. A run's
# operator holds this lock while it lives (its process inherits the locked file), so another run's operator-up waits
# for it instead of colliding: the lanes of `make test` run several clusters at once.
HOST_LOCK = "/run/lock/gkm-sim-operator.lock"
HOST_LOCK_WAIT_SECONDS = 1200
# Runs per kind at once. A cache run mostly waits for its extraction Jobs, so several may overlap. Node events come
# with every node heartbeat (the engine cannot filter status-only updates) and most change nothing: one at a time
# bounds their cost to one run (about 2 s of CPU) at once, and the first run of a burst of joins reconciles every node
# that joined by then.
CACHE_CONCURRENCY = 4
NODE_CONCURRENCY = 1


def watches_file(root):
    return os.path.join(root, "roles", "gkm", "files", "operator", "watches.yaml")


def extra_vars(tools_image, kubeconfig, run_vars=None):
    """The caches role's options for every run (given to ansible-playbook with -e @file).

    kubeconfig: the cluster's own. The runs' modules reach the API server with it, not through the engine's proxy,
    which answers reads from its informer cache: stale for the resourceVersion-guarded writes of the per-node
    objects, and it does not page lists.
    run_vars: the caches_* variables the playbooks run with (the gkm role passes the inventory's), so the
    operator distributes exactly as they do and neither undoes the other's objects, and operator_events_*.
    """
    return dict({
        "caches_kubeconfig": kubeconfig,
        "caches_extract_image": tools_image,
        "caches_registry_plain_http": True,
        "caches_wait": True,
        "caches_wait_timeout": 120,
    }, **(run_vars or {}))


def environment(base, root, venv_bin, kubeconfig):
    """The cluster (controller-runtime reads KUBECONFIG); ansible-runner and ansible-playbook from the venv, the
    checkout's collection, no fact gathering."""
    environment = dict(base)
    environment.update({
        "KUBECONFIG": kubeconfig,
        "PATH": venv_bin + os.pathsep + base.get("PATH", ""),
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(root, ".cache", "collections"),
        "ANSIBLE_GATHERING": "explicit",
        "ANSIBLE_PYTHON_INTERPRETER": os.path.join(venv_bin, "python"),
        # The engine's per-GVK concurrency (its environment variable names).
        "MAX_CONCURRENT_RECONCILES_GKMCACHE_GKM_IO": str(CACHE_CONCURRENCY),
        "MAX_CONCURRENT_RECONCILES_CLUSTERGKMCACHE_GKM_IO": str(CACHE_CONCURRENCY),
    })
    return environment


def argv(binary, root, vars_file, ports):
    """ports: metrics and health ports of this process."""
    return [
        binary, "run",
        "--watches-file", watches_file(root),
        "--leader-elect", "--leader-election-id", LEADER_ELECTION_ID,
        "--leader-election-namespace", NAMESPACE,
        # Our reconcile sets its own owner references (never on PVs, which must wait for the scrub).
        "--inject-owner-ref=false",
        "--max-concurrent-reconciles", str(NODE_CONCURRENCY),
        "--proxy-port", str(PROXY_PORT),
        "--metrics-bind-address", "127.0.0.1:%d" % ports["metrics"],
        "--health-probe-bind-address", "127.0.0.1:%d" % ports["health"],
        "--ansible-args", "-e @%s" % vars_file,
    ]
