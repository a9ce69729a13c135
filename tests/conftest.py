"""Session fixtures: the local simulated cluster, its registry, API clients and per-test namespaces.

The cluster and registry are real (tools/sim-cluster/sim.py). A running one is reused; otherwise the
session starts it and stops it again at the end, so the machine is left as it was found.
"""

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".cache", "collections"))
sys.path.insert(0, ROOT)

# The suite runs the collection's Jobs and webhook for real on two real nodes (one AMD, one NVIDIA) beside the
# kwok ones; GKM_SIM_REAL_NODES=0 leaves them out (the tests that need them then skip).
os.environ.setdefault("GKM_SIM_REAL_NODES", "2")

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (  # noqa: E402
    SIM_NODE_LABEL,
)
from tests.helpers.sim import SIM_SCRIPT, sim_control  # noqa: E402


@dataclass
class Registry:
    host: str
    storage: str  # the registry's filesystem root, for tests that tamper with stored blobs

    @property
    def url(self):
        return "http://%s" % self.host


@dataclass
class SimCluster:
    kubeconfig: str
    registry: str
    state: dict = field(repr=False)


def _run_sim(command):
    """Run sim.py COMMAND; when it fails, the error ends with what it printed, as CI's summary shows only the error."""
    result = subprocess.run([sys.executable, SIM_SCRIPT, command], cwd=ROOT, stderr=subprocess.PIPE, text=True,
                            check=False)
    sys.stderr.write(result.stderr)
    if result.returncode:
        raise RuntimeError("sim.py %s exited with %d: %s" % (command, result.returncode, result.stderr.strip()[-2000:]))


def _running(name):
    return sim_control.is_running(sim_control.load_state()["processes"].get(name))


def _other_live_sessions(users_dir):
    """Pids of other test sessions that use the simulated cluster right now."""
    others = []
    for name in os.listdir(users_dir):
        pid = int(name)
        if pid != os.getpid() and os.path.exists("/proc/%d" % pid):
            others.append(pid)
    return others


@pytest.fixture(scope="session")
def _sim_lifecycle():
    """Stops at the end what the session found stopped, unless another live test session still uses it.

    Sessions register under .sim/users/<pid>, so parallel runs (or a developer's shell) never lose the
    cluster under them.
    """
    found = {name: _running(name) for name in [*sim_control.CONTROL_PLANE, "registry"]}
    users_dir = os.path.join(sim_control.SIM_DIR, "users")
    os.makedirs(users_dir, exist_ok=True)
    marker = os.path.join(users_dir, str(os.getpid()))
    open(marker, "w").close()
    yield found
    os.unlink(marker)
    if not any(found.values()) and not _other_live_sessions(users_dir) and any(_running(name) for name in found):
        _run_sim("down")


@pytest.fixture(scope="session")
def registry(_sim_lifecycle):
    if not _running("registry"):
        _run_sim("registry-up")
    return Registry(host=sim_control.load_state()["registry"], storage=os.path.join(sim_control.SIM_DIR, "registry"))


@pytest.fixture(scope="session")
def sim(_sim_lifecycle, registry):
    if not all(_running(name) for name in sim_control.CONTROL_PLANE):
        _run_sim("up")
    state = sim_control.load_state()
    return SimCluster(kubeconfig=state["kubeconfig"], registry=registry.host, state=state)


@pytest.fixture(scope="session")
def real_nodes(sim):
    """The cluster's real nodes as state.json records them (name, bridge, subnet, gateway, containerd socket, ...)."""
    nodes = sim.state.get("real_nodes") or []
    if not nodes:
        pytest.skip("the simulated cluster runs without real nodes: stop it (sim.py down) and run with "
                    "GKM_SIM_REAL_NODES=2 (the default of the test suite)")
    return nodes


def _pushed_image(command):
    """The reference sim.py COMMAND (tools-image, workload-image) prints after pushing this checkout's image."""
    result = subprocess.run([sys.executable, SIM_SCRIPT, command], check=True, cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def tools_image(sim):
    """The tools image of this checkout's code in the cluster's registry (sim.py tools-image; cached builds)."""
    return _pushed_image("tools-image")


@pytest.fixture(scope="session")
def workload_image(sim):
    """The workload image (Triton and the kernel set's warm-up) in the cluster's registry (sim.py workload-image)."""
    return _pushed_image("workload-image")


@pytest.fixture(scope="session")
def kube(sim):
    from kubernetes import config

    return config.new_client_from_config(config_file=sim.kubeconfig)


@pytest.fixture
def namespace(kube, request):
    """A fresh namespace named after the test; deleted (without waiting) afterwards."""
    from kubernetes import client

    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = "t-%s-%s" % (base, uuid.uuid4().hex[:5])
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": name, "labels": {"gkm.io/test": "true"}}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def tenant(kube, request):
    """A tenant of issue 31's tests: a fresh namespace at Pod Security `restricted`, ServiceAccount `tenant` with
    `edit` there (tests/fixtures/tenant), and a Tenant whose clients carry that ServiceAccount's TokenRequest token,
    never the admin's certificate. The namespace is deleted (without waiting) afterwards."""
    from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
    from tests.helpers.tenant import tenant_namespace

    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:36].strip("-")
    name = "tn-%s-%s" % (base, uuid.uuid4().hex[:5])
    yield tenant_namespace(kube, name, "restricted")
    Kube(kube).request("DELETE", "/api/v1/namespaces/%s" % name)


@pytest.fixture(scope="session")
def crds(kube):
    """The collection's CRDs applied as the gkm role applies them; a CustomObjectsApi once Established."""
    from tests.helpers.crds import apply_crds

    return apply_crds(kube)


@pytest.fixture
def sim_nodes(kube):
    """Adds simulated nodes (node groups as in gpu_nodes.py), waits until Ready, removes them afterwards."""
    from kubernetes import client

    from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes

    core = client.CoreV1Api(kube)
    added = []

    def add(groups, timeout=60):
        nodes = gpu_nodes.render_nodes(groups)
        for node in nodes:
            core.create_node(node)
            added.append(node["metadata"]["name"])
        names = {node["metadata"]["name"] for node in nodes}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = {
                node.metadata.name for node in core.list_node(label_selector="%s=true" % SIM_NODE_LABEL).items
                if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
            }
            if names <= ready:
                return sorted(names)
            time.sleep(0.2)
        raise TimeoutError("simulated nodes not Ready after %ss: %s" % (timeout, sorted(names - ready)))

    def remove(name):
        core.delete_node(name)
        added.remove(name)

    add.remove = remove
    yield add
    for name in added:
        core.delete_node(name)
