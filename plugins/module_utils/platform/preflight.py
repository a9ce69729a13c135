# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Preflight findings for a real GPU cluster, from what the API server shows: pure functions.

Each function takes plain API objects (dicts) and returns facts; ``findings`` turns the facts into
problems with a fix, and ``report`` into text a human reads. The module gkm.cluster.hardware_preflight
gathers the objects, runs the ReadOnlyMany probe and applies the optional GPU labels.

GPU facts (design notes, section 1): NVIDIA nodes carry GPU feature discovery labels
``nvidia.com/gpu.present`` and ``nvidia.com/gpu.compute.major|minor`` (arch = major*10+minor, backend cuda,
warp 32); AMD nodes carry the AMD GPU operator's / node labeller's ``amd.com/gpu.*`` (or ``beta.amd.com/gpu.*``)
labels, whose device id gives the gfx architecture (warp 64 on CDNA); NFD's PCI labels
``feature.node.kubernetes.io/pci-<class>_<vendor>.present`` show a GPU of a vendor without its model; and the
extended resources ``nvidia.com/gpu`` / ``amd.com/gpu`` show GPUs a device plugin advertises.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    GPU_ARCH_LABEL,
    GPU_BACKEND_LABEL,
    GPU_WARP_SIZE_LABEL,
)

GKM_LABELS = (GPU_BACKEND_LABEL, GPU_ARCH_LABEL, GPU_WARP_SIZE_LABEL)

VENDOR_FACTS = {"nvidia": {"backend": "cuda", "warp_size": 32, "resource": "nvidia.com/gpu"},
                "amd": {"backend": "hip", "warp_size": 64, "resource": "amd.com/gpu"}}
PCI_VENDORS = {"10de": "nvidia", "1002": "amd"}
# AMD Instinct PCI device ids -> gfx architecture (public device tables).
AMD_DEVICE_ARCH = {
    "738c": "gfx908", "738e": "gfx908",                    # MI100
    "7408": "gfx90a", "740c": "gfx90a", "740f": "gfx90a",  # MI250X, MI250, MI210
    "74a0": "gfx942", "74a1": "gfx942", "74a5": "gfx942", "74a9": "gfx942", "74b5": "gfx942",  # MI300A/X, MI325X
    "75a0": "gfx950", "75a3": "gfx950",                    # MI350X, MI355X
}
_NFD_PCI = re.compile(r"^feature\.node\.kubernetes\.io/pci-(?:[0-9a-f]{4}_)?([0-9a-f]{4})\.present$")
_AMD_DEVICE_LABEL = re.compile(r"^(?:beta\.)?amd\.com/gpu\.device-id(?:\.([0-9a-f]{4}))?$")
# Taints the node lifecycle controller sets and clears by itself: not something a Job template should carry.
TRANSIENT_TAINT_PREFIX = "node.kubernetes.io/"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
OPENSHIFT_GROUP_SUFFIX = ".openshift.io"


# ------------------------------------------------------------------------------------------------- GPUs


def _amd_arch(labels):
    for key, value in labels.items():
        match = _AMD_DEVICE_LABEL.match(key)
        if match:
            device = (match.group(1) or value or "").lower().replace("0x", "")
            if device in AMD_DEVICE_ARCH:
                return AMD_DEVICE_ARCH[device]
    return None


def gpu_node(node):
    """The GPU facts of one node, or None when nothing says it has a GPU."""
    labels = node["metadata"].get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    vendor, sources, arch = None, [], None
    if labels.get("nvidia.com/gpu.present") == "true" or "nvidia.com/gpu.compute.major" in labels:
        vendor = "nvidia"
        sources.append("nvidia labels")
        major, minor = labels.get("nvidia.com/gpu.compute.major"), labels.get("nvidia.com/gpu.compute.minor")
        if major and minor and major.isdigit() and minor.isdigit():
            arch = str(int(major) * 10 + int(minor))
    elif any(key.startswith(("amd.com/gpu", "beta.amd.com/gpu")) for key in labels):
        vendor = "amd"
        sources.append("amd labels")
        arch = _amd_arch(labels)
    for key, value in labels.items():
        match = _NFD_PCI.match(key)
        if match and value == "true" and match.group(1) in PCI_VENDORS:
            vendor = vendor or PCI_VENDORS[match.group(1)]
            sources.append("nfd pci")
            break
    for candidate, facts in VENDOR_FACTS.items():
        count = capacity.get(facts["resource"])
        if count not in (None, "0", 0):
            vendor = vendor or candidate
            sources.append("capacity %s" % facts["resource"])
    if vendor is None and not any(labels.get(key) for key in GKM_LABELS):
        return None
    present = dict((key, labels[key]) for key in GKM_LABELS if key in labels)
    if vendor is None:
        vendor = {"cuda": "nvidia", "hip": "amd"}.get(present.get(GPU_BACKEND_LABEL), "unknown")
        sources.append("gkm labels")
    derived = None
    if vendor in VENDOR_FACTS and arch:
        derived = {GPU_BACKEND_LABEL: VENDOR_FACTS[vendor]["backend"], GPU_ARCH_LABEL: arch,
                   GPU_WARP_SIZE_LABEL: str(VENDOR_FACTS[vendor]["warp_size"])}
    resource = VENDOR_FACTS.get(vendor, {}).get("resource")
    return {
        "name": node["metadata"]["name"],
        "vendor": vendor,
        "sources": sources,
        "gpus": int(capacity.get(resource, 0) or 0) if resource else 0,
        "arch": arch or present.get(GPU_ARCH_LABEL),
        "gkm_labels": present,
        "derived_labels": derived,
        "labels_to_apply": dict((key, value) for key, value in (derived or {}).items() if present.get(key) != value),
        "taints": list((node.get("spec") or {}).get("taints") or []),
    }


def gpu_nodes(nodes):
    return [facts for facts in (gpu_node(node) for node in nodes) if facts]


def gpu_summary(gpus):
    """Counts per vendor/arch, e.g. {'amd gfx90a': 3, 'nvidia 90': 2, 'nvidia (arch unknown)': 1}."""
    summary = {}
    for gpu in gpus:
        key = "%s %s" % (gpu["vendor"], gpu["arch"] or "(arch unknown)")
        summary[key] = summary.get(key, 0) + 1
    return summary


# ------------------------------------------------------------------------------------------------ taints


def tolerates(toleration, taint):
    """Kubernetes' rule: does one toleration tolerate one taint?"""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and (toleration.get("value") or "") == (taint.get("value") or "")


def _taint_text(taint):
    if taint.get("value"):
        return "%s=%s:%s" % (taint["key"], taint["value"], taint["effect"])
    return "%s:%s" % (taint["key"], taint["effect"])


def blocking_taints(gpus, tolerations):
    """Taints on GPU nodes that keep extraction Jobs off them, with the nodes, tolerated or not."""
    found = {}
    for gpu in gpus:
        for taint in gpu["taints"]:
            if taint["effect"] not in ("NoSchedule", "NoExecute") or taint["key"].startswith(TRANSIENT_TAINT_PREFIX):
                continue
            text = _taint_text(taint)
            entry = found.setdefault(text, {"taint": text, "key": taint["key"], "value": taint.get("value") or "",
                                            "effect": taint["effect"], "nodes": [],
                                            "tolerated": any(tolerates(t, taint) for t in tolerations)})
            entry["nodes"].append(gpu["name"])
    return sorted(found.values(), key=lambda entry: entry["taint"])


def pod_template(taints, tolerations):
    """The podTemplate (GKMCache format) whose tolerations let extraction Jobs onto every GPU node."""
    merged = list(tolerations)
    for taint in taints:
        if taint["tolerated"]:
            continue
        toleration = {"key": taint["key"], "operator": "Equal" if taint["value"] else "Exists",
                      "effect": taint["effect"]}
        if taint["value"]:
            toleration["value"] = taint["value"]
        merged.append(toleration)
    return {"spec": {"tolerations": merged}}


# ------------------------------------------------------------------------------------------------ storage


def storage_classes(classes, csi_drivers):
    """Per class: provisioner, whether it provisions at all, and whether its CSI driver is registered."""
    drivers = set(csi_drivers)
    rows = []
    for item in classes:
        annotations = item["metadata"].get("annotations") or {}
        provisioner = item.get("provisioner", "")
        if provisioner == NO_PROVISIONER:
            installed = False
        elif provisioner.startswith("kubernetes.io/"):
            installed = None  # in-tree: nothing to look up
        else:
            installed = provisioner in drivers
        rows.append({
            "name": item["metadata"]["name"],
            "provisioner": provisioner,
            "default": annotations.get("storageclass.kubernetes.io/is-default-class") == "true",
            "binding_mode": item.get("volumeBindingMode", "Immediate"),
            "dynamic": provisioner != NO_PROVISIONER,
            "driver_installed": installed,
        })
    return rows


# ------------------------------------------------------------------------------------------------ proxies


def _env(container):
    return dict((entry["name"].lower(), entry.get("value") or "") for entry in container.get("env") or [])


def apiserver_proxy(pods):
    """Proxy settings of kube-apiserver pods; a proxy whose no_proxy lacks .svc breaks webhook calls."""
    rows = []
    for pod in pods:
        for container in (pod.get("spec") or {}).get("containers") or []:
            env = _env(container)
            proxy = env.get("https_proxy") or env.get("http_proxy")
            if not proxy:
                continue
            no_proxy = [part.strip() for part in env.get("no_proxy", "").split(",") if part.strip()]
            rows.append({"pod": pod["metadata"]["name"], "proxy": proxy, "no_proxy": no_proxy,
                         "svc_excluded": ".svc" in no_proxy or "svc" in no_proxy,
                         "cluster_local_excluded": ".svc.cluster.local" in no_proxy or ".cluster.local" in no_proxy})
    return rows


def client_proxy(environ, api_host):
    """Whether this host's proxy variables would send our own API requests through a proxy."""
    env = dict((key.lower(), value) for key, value in environ.items())
    proxy = env.get("https_proxy") or env.get("http_proxy")
    if not proxy:
        return None
    no_proxy = [part.strip() for part in env.get("no_proxy", "").split(",") if part.strip()]
    bypassed = any(api_host == entry or api_host.endswith(entry if entry.startswith(".") else "." + entry)
                   for entry in no_proxy) or "*" in no_proxy
    return {"proxy": proxy, "api_host": api_host, "no_proxy": no_proxy, "bypassed": bypassed}


# ------------------------------------------------------------------------------------------------ summary


def openshift_groups(groups):
    return sorted(group for group in groups if group.endswith(OPENSHIFT_GROUP_SUFFIX))


def findings(facts):
    """Problems found, each with severity, message and fix."""
    found = []

    def add(severity, message, fix):
        found.append({"severity": severity, "message": message, "fix": fix})

    if not facts["gpu_nodes"]:
        add("error", "no GPU nodes found (no NVIDIA/AMD labels, NFD PCI labels or GPU capacity)",
            "install the GPU operator or device plugin (and NFD) so GPU nodes are labelled")
    for gpu in facts["gpu_nodes"]:
        if not gpu["arch"]:
            add("warning", "GPU node %s (%s): architecture unknown, so cache compatibility cannot be checked"
                % (gpu["name"], gpu["vendor"]),
                "label it with %s, %s and %s (or install GPU feature discovery / the AMD node labeller)"
                % GKM_LABELS)
        elif gpu["labels_to_apply"]:
            add("info", "GPU node %s lacks or differs in %s" % (gpu["name"], ", ".join(sorted(gpu["labels_to_apply"]))),
                "set hardware_label_gpu_nodes: true to label it from its vendor labels")
    classes = facts["storage_classes"]
    if not classes:
        add("error", "no storage classes", "install a CSI driver with a storage class, or pre-create PVs")
    elif not any(row["default"] for row in classes):
        add("warning", "no default storage class", "name the class in each GKMCache (storageClassName)")
    for row in classes:
        if not row["dynamic"]:
            add("warning", "storage class %s has no provisioner (%s): PVCs bind only to PVs made by hand"
                % (row["name"], row["provisioner"]), "use a class with a provisioner, or let gkm.cluster create PVs")
        elif row["driver_installed"] is False:
            add("error", "storage class %s names CSI driver %s, which is not registered (no CSIDriver object)"
                % (row["name"], row["provisioner"]), "install the driver or remove the class")
    for name, probe in sorted(facts["rox_probe"].items()):
        if probe["result"] == "unbound":
            add("warning", "storage class %s: a ReadOnlyMany PVC did not bind (%s)" % (name, probe["detail"]),
                "use accessModes [ReadWriteOnce] (per-node PVCs) with this class")
    for taint in facts["taints"]:
        if not taint["tolerated"]:
            add("warning", "taint %s on %d GPU node(s) is not tolerated: extraction Jobs cannot run there"
                % (taint["taint"], len(taint["nodes"])),
                "add the tolerations of pod_template to the cache's podTemplate")
    for row in facts["proxy"]["apiserver"]:
        if not row["svc_excluded"]:
            add("error", "kube-apiserver pod %s uses proxy %s and its no_proxy lacks .svc: admission webhook calls "
                "(cert-manager, Kyverno, gkm webhook) go to the proxy" % (row["pod"], row["proxy"]),
                "append .svc and .svc.cluster.local to no_proxy in the kube-apiserver manifest")
    client = facts["proxy"]["client"]
    if client and not client["bypassed"]:
        add("warning", "this host's proxy %s is used for the API server %s (not in no_proxy)"
            % (client["proxy"], client["api_host"]), "add the API server host to no_proxy")
    if facts["openshift"]:
        add("info", "OpenShift detected (%s)" % ", ".join(facts["openshift_groups"][:3]),
            "the extraction ServiceAccount gets the SecurityContextConstraints it needs (hardware_openshift_scc)")
    return found


def report(facts):
    """The readable report: one block per topic, then the findings."""
    lines = ["Kubernetes %s%s" % (facts["kubernetes_version"], " (OpenShift)" if facts["openshift"] else "")]
    lines.append("Storage classes:")
    for row in facts["storage_classes"]:
        probe = facts["rox_probe"].get(row["name"])
        lines.append("  %s%s: provisioner %s (%s), binding %s%s" % (
            row["name"], " [default]" if row["default"] else "", row["provisioner"],
            {True: "driver registered", False: "no provisioner" if not row["dynamic"] else "driver NOT registered",
             None: "in-tree"}[row["driver_installed"]], row["binding_mode"],
            "; ReadOnlyMany probe: %s (%s)" % (probe["result"], probe["detail"]) if probe else ""))
    lines.append("GPU nodes: %d (%s)" % (len(facts["gpu_nodes"]), ", ".join(
        "%s x%d" % item for item in sorted(facts["gpu_summary"].items())) or "none"))
    # One line per kind of GPU node, so a 500-node cluster gives a few lines, not 500.
    kinds = {}
    for gpu in facts["gpu_nodes"]:
        key = (gpu["vendor"], gpu["arch"] or "unknown", gpu["gpus"], ", ".join(gpu["sources"]))
        kinds.setdefault(key, []).append(gpu["name"])
    for (vendor, arch, count, sources), names in sorted(kinds.items()):
        shown = ", ".join(names[:3]) + (", +%d more" % (len(names) - 3) if len(names) > 3 else "")
        lines.append("  %d node(s) %s arch %s, %d GPU(s) each, from %s: %s" % (
            len(names), vendor, arch, count, sources, shown))
    lines.append("Taints on GPU nodes:")
    for taint in facts["taints"]:
        lines.append("  %s on %d node(s): %s" % (taint["taint"], len(taint["nodes"]),
                                                 "tolerated" if taint["tolerated"] else "NOT tolerated"))
    if not facts["taints"]:
        lines.append("  none")
    lines.append("Findings:")
    for finding in facts["findings"]:
        lines.append("  [%s] %s -> %s" % (finding["severity"], finding["message"], finding["fix"]))
    if not facts["findings"]:
        lines.append("  none")
    return lines
