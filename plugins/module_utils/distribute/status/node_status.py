# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What one cache says about each node, for the per-node status objects (node_objects.py), pure.

From the facts a reconcile already has (the nodes, the planner's eligibility and reasons, the status
entries of every slot, the pods) to `{node: {digest: state}}` in GKM's CacheStatus shape: compatible
and incompatible GPU ids, per workload namespace the PVC, PV and Job names with one GKM
condition (Pending, Downloading, Extracted, Running, Outdated, Error), and the pods that mount it.
Our additions say what GKM leaves to the logs: `state` (the node's state of the cache), for a GPU
node that does not get the cache `reason` (NotSelected, NoGPU, GPULabelsUnusable, Incompatible,
UntoleratedTaint), `message` and `untoleratedTaints`, and while the cache rolls out in waves the node's
`upgradeState` on its entry of the current digest (upgrade_waves.py; the value of its state label).
Nodes without a GPU that do not get the cache have no entry: the cache's own status counts them (status_summary.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import resource_terms
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    ERROR,
    EXTRACTED,
    EXTRACTING,
    GPU_ARCH_LABEL,
    GPU_BACKEND_LABEL,
    INCOMPATIBLE,
    OUTDATED,
    PENDING,
    RUNNING,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.conflicts import CONFLICT
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import pod_mounts
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.scheduling import (
    NO_GPU_LABELS,
    format_taint,
    untolerated_taints,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.gpu_compat import (
    GPUSpecError,
    gpus_compatible,
    gpus_from_node_labels,
)

# GKM's condition types, from the slot phases of status.py.
DOWNLOADING = "Downloading"
_CONDITION_TYPES = {PENDING: PENDING, EXTRACTING: DOWNLOADING, EXTRACTED: EXTRACTED, ERROR: ERROR, OUTDATED: OUTDATED}
# A node's state of one digest is the worst of its namespaces'.
_STATE_ORDER = (ERROR, PENDING, DOWNLOADING, OUTDATED, RUNNING, EXTRACTED)
EXCLUDED = "Excluded"

NOT_SELECTED, NO_GPU, GPU_LABELS_UNUSABLE, UNTOLERATED_TAINT = (
    "NotSelected", "NoGPU", "GPULabelsUnusable", "UntoleratedTaint")
# The planner's reasons (scheduling.node_eligibility) by how they start; the first code in this order is
# the node's reason: a toleration would not help a node that no placement selects or whose GPU does not fit.
_REASON_PREFIXES = (
    ("not selected by node_selector", NOT_SELECTED),
    ("labels do not match pod_template.spec.nodeSelector", NOT_SELECTED),
    ("does not match the required node affinity", NOT_SELECTED),
    (NO_GPU_LABELS, NO_GPU),
    ("GPU labels unusable", GPU_LABELS_UNUSABLE),
    ("GPU ", INCOMPATIBLE),
    ("untolerated taint", UNTOLERATED_TAINT),
)
_REASON_ORDER = (NOT_SELECTED, NO_GPU, GPU_LABELS_UNUSABLE, INCOMPATIBLE, UNTOLERATED_TAINT)

# Extended resources that count a node's GPUs, and labels that name them (NVIDIA GPU feature discovery,
# AMD node labeller); a node with gkm.io/gpu-* labels and none of these has one GPU.
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
GPU_PRODUCT_LABELS = ("nvidia.com/gpu.product", "amd.com/gpu.product-name")
GPU_DRIVER_LABELS = ("nvidia.com/cuda.driver-version.full", "amd.com/gpu.driver-version")
# Messages are cut so an object with many caches stays small.
MAX_MESSAGE = 512


def reason_code(reason):
    """The machine-readable code of one of the planner's reasons (None for a reason it does not know)."""
    for prefix, code in _REASON_PREFIXES:
        if reason.startswith(prefix):
            return code
    return None


def exclusion_code(reasons):
    """The code that explains a node's exclusion best (see _REASON_ORDER)."""
    codes = {reason_code(reason) for reason in reasons}
    return next((code for code in _REASON_ORDER if code in codes), NOT_SELECTED)


def is_gpu_node(node):
    return GPU_BACKEND_LABEL in (node["metadata"].get("labels") or {})


def _gpu_count(node):
    capacity = (node.get("status") or {}).get("capacity") or {}
    for resource in GPU_RESOURCES:
        try:
            count = int(capacity.get(resource) or 0)
        except ValueError:
            count = 0
        if count:
            return count
    return 1


def node_gpus(node):
    """GKM's status.gpus of a GPU node: one group (type, driver version, ids); [] for a node without GPUs."""
    if not is_gpu_node(node):
        return []
    labels = node["metadata"].get("labels") or {}
    product = next((labels[key] for key in GPU_PRODUCT_LABELS if labels.get(key)), None)
    group = {"gpuType": product or ("%s %s" % (labels[GPU_BACKEND_LABEL], labels.get(GPU_ARCH_LABEL, ""))).strip(),
             "ids": list(range(_gpu_count(node)))}
    driver = next((labels[key] for key in GPU_DRIVER_LABELS if labels.get(key)), None)
    if driver:
        group["driverVersion"] = driver
    return [group]


def _gpu_fit(node, targets):
    """{compatibleGPUs, incompatibleGPUs} of the cache's targets on the node ({} when either is unknown)."""
    if not targets or not is_gpu_node(node):
        return {}
    try:
        gpus = gpus_from_node_labels(node["metadata"].get("labels"))
    except GPUSpecError:
        return {}
    ids = list(range(_gpu_count(node)))
    compatible, _incompatible = gpus_compatible(targets, gpus)
    return {"compatibleGPUs": ids} if compatible else {"incompatibleGPUs": ids}


def _message(entry):
    fixes = entry.get("fix") or []
    text = entry.get("message") or ""
    if fixes:
        text += " (fix: %s)" % (fixes if isinstance(fixes, str) else ", ".join(fixes))
    return resource_terms(text)[:MAX_MESSAGE]


def _condition(entry, running):
    kind = RUNNING if entry["phase"] == EXTRACTED and running else _CONDITION_TYPES[entry["phase"]]
    condition = {"type": kind, "status": "True", "reason": entry.get("reason") or kind}
    message = _message(entry)
    if message:
        condition["message"] = message
    return condition


def _digest_key(entry_digest, digest):
    """The full digest for the cache's current image; an older one is known only by its 12-character label."""
    return digest if digest and entry_digest == short_digest(digest) else entry_digest


class _NodeStates:
    """{node: {digest: state}} being filled in, states without timestamps."""

    def __init__(self):
        self.states = {}

    def state(self, node, key):
        return self.states.setdefault(node, {}).setdefault(key, {})

    def add_slot(self, node, key, entry, users):
        state = self.state(node, key)
        running = [u for u in users if u["node"] == node and u["phase"] == RUNNING]
        pvc = {"pvcName": entry["pvc"], "jobName": entry["job"], "pvcOwner": "Agent" if entry["node"] else "Operator",
               "conditions": [_condition(entry, running)]}
        if entry.get("pv"):
            pvc["pvName"] = entry["pv"]
        state.setdefault("pvcStatus", {})[entry["namespace"]] = pvc
        if running:
            pods = state.setdefault("pods", [])
            pods.extend({"podNamespace": u["namespace"], "podName": u["name"]} for u in running)

    def finish(self):
        for digests in self.states.values():
            for state in digests.values():
                if "state" not in state:
                    kinds = {pvc["conditions"][0]["type"] for pvc in state.get("pvcStatus", {}).values()}
                    state["state"] = next(kind for kind in _STATE_ORDER if kind in kinds)
                if "pods" in state:
                    state["pods"].sort(key=lambda pod: (pod["podNamespace"], pod["podName"]))
        return self.states


def node_cache_states(spec, eligibility, entries, nodes, pods, upgrade_states=None):
    """{node name: {digest: state}} of one cache.

    spec: the CacheSpec (digest, targets, tolerations). eligibility: the plan's Eligibility.
    entries: the status entries of every slot (status.cache_status). nodes, pods: the facts the plan used.
    upgrade_states: {node: state} of a rollout in waves (rollout.upgrade_states; none without one).
    A ReadOnlyMany cache's shared PVC is listed on every node that gets the cache.
    """
    by_name = {node["metadata"]["name"]: node for node in nodes}
    eligible = [node["metadata"]["name"] for node in eligibility.eligible]
    mounts = pod_mounts(pods)
    states = _NodeStates()
    for entry in entries:
        if entry["phase"] == INCOMPATIBLE:
            continue  # the planner's reasons below say more
        if entry.get("reason") == CONFLICT:
            continue  # a namespace where the cache is refused: on no node, said in the resource's status
        key = _digest_key(entry["digest"], spec.digest)
        users = mounts.get((entry["namespace"], entry["pvc"]), [])
        for node in [entry["node"]] if entry["node"] else eligible:
            states.add_slot(node, key, entry, users)
    tolerations = spec.pod_spec("tolerations", [])
    for name, reasons in eligibility.excluded.items():
        node = by_name.get(name)
        if node is None or (not is_gpu_node(node) and name not in states.states):
            continue
        code = exclusion_code(reasons)
        state = states.state(name, spec.digest)
        state.update(state=INCOMPATIBLE if code == INCOMPATIBLE else EXCLUDED, reason=code,
                     message=resource_terms("; ".join(reasons))[:MAX_MESSAGE])
        taints = [format_taint(taint) for taint in untolerated_taints(node, tolerations)]
        if taints:
            state["untoleratedTaints"] = taints
    for name, digests in states.states.items():
        current = digests.get(spec.digest)
        if current is not None and name in by_name:
            current.update(_gpu_fit(by_name[name], spec.targets))
        if current is not None and name in (upgrade_states or {}):
            current["upgradeState"] = upgrade_states[name]
    return states.finish()
