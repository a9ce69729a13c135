"""Real nodes of the simulated cluster, pure part: names, addresses and the files each node runs with.

Everything a run creates on the host is named after a short hash of its state directory (the run id), so
two checkouts side by side never share an interface, a chain, a cgroup root or a subnet. The I/O is in
real_nodes.py; this file only computes, so the naming rules have unit tests.
"""

import hashlib
import ipaddress
import json
import os
import re

import yaml

# Second octets of 10.X.0.0/16 a run may take: clear of what the cluster uses without any interface showing it,
# the service range (10.96), kwok's pod range (10.244) and kwok's node IP (10.89).
PREFIX_RANGE = range(100, 200)
SERVICE_IP = "10.96.0.1"
SERVICE_PORT = 443
# Pulls of images from anywhere but the local registry go to this proxy, which is a closed loopback port:
# a pod that names an outside image fails to pull instead of sending a packet off the machine.
DEAD_PROXY = "http://127.0.0.1:9"
HOST_RUN_DIR = "/run/gkm-sim"
# Beta and off by default in 1.34: pods' `volumes[].image` (the API server takes the same gates, sim.py).
FEATURE_GATES = {"ImageVolume": True}
MAX_INTERFACE_NAME = 15
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating zero


def feature_gates_flag():
    """FEATURE_GATES as a --feature-gates value: ImageVolume=true."""
    return ",".join("%s=%s" % (gate, str(on).lower()) for gate, on in sorted(FEATURE_GATES.items()))


def run_id(sim_dir):
    """Six hex digits of the state directory's absolute path: the same checkout always gets the same id."""
    return hashlib.sha256(os.path.abspath(sim_dir).encode()).hexdigest()[:6]


def host_interface(run):
    return "gkm%sh" % run


def bridge(run, index):
    name = "gkm%sn%d" % (run, index)
    if len(name) > MAX_INTERFACE_NAME:
        raise ValueError("bridge name %r is longer than the kernel's %d characters" % (name, MAX_INTERFACE_NAME))
    return name


def bridge_wildcard(run):
    """iptables' interface pattern matching every bridge of the run and nothing else."""
    return "gkm%sn+" % run


def chains(run):
    return {"forward": "GKM-%s-FWD" % run, "service": "GKM-%s-SVC" % run}


def cgroup_root(run, index):
    return "/gkm-%s-n%d" % (run, index)


def cni_network(run, index):
    return "gkm-%s-n%d" % (run, index)


def used_second_octets(ip_output):
    """Second octets of every 10.X address or route in `ip -4 -o addr` / `ip -4 route` output."""
    return {int(match) for match in re.findall(r"\b10\.(\d{1,3})\.\d{1,3}\.\d{1,3}", ip_output)}


def pick_second_octet(used):
    for octet in PREFIX_RANGE:
        if octet not in used:
            return octet
    raise RuntimeError("no free 10.X.0.0/16 in 10.%d-10.%d: every one is on an interface or a route"
                       % (PREFIX_RANGE[0], PREFIX_RANGE[-1]))


def host_address(octet):
    return "10.%d.0.1" % octet


def node_network(run, octet, index):
    subnet = ipaddress.ip_network("10.%d.%d.0/24" % (octet, index + 1))
    return {"bridge": bridge(run, index), "subnet": str(subnet), "gateway": str(subnet[1]),
            "cni_network": cni_network(run, index)}


# ---------------------------------------------------------------- node groups

def default_real_groups(count):
    """count real nodes, AMD and NVIDIA in turn: gkm-real-amd-1, gkm-real-nvidia-1, gkm-real-amd-2, ..."""
    amd, nvidia = (count + 1) // 2, count // 2
    groups = [{"name": "gkm-real-amd", "count": amd, "vendor": "amd", "real": True},
              {"name": "gkm-real-nvidia", "count": nvidia, "vendor": "nvidia", "real": True}]
    return [group for group in groups if group["count"]]


def split_groups(groups, extra_real_count):
    """(kwok groups, real groups): groups marked `real: true` plus the default real groups of the env count."""
    kwok = [group for group in groups if not group.get("real")]
    real = [group for group in groups if group.get("real")] + default_real_groups(extra_real_count)
    return kwok, real


def real_node_object(kwok_node, sim_label, real_label):
    """The labels, taints and GPU capacity of a rendered kwok node, without what marks it as kwok's."""
    metadata = kwok_node["metadata"]
    labels = {key: value for key, value in metadata["labels"].items() if key not in (sim_label, "type")}
    labels[real_label] = "true"
    gpu_capacity = {key: value for key, value in kwok_node["status"]["capacity"].items() if key.endswith("/gpu")}
    return {"name": metadata["name"], "labels": labels, "taints": kwok_node["spec"].get("taints", []),
            "gpu_capacity": gpu_capacity}


# ---------------------------------------------------------------- files

def containerd_config(directory, sandbox_image, runc):
    """containerd 2.x (version 3 config): every path under the node's directory, CRI with our CNI and registry.

    Version 3 split the CRI plugin: images (snapshotter, pause image, registry) and runtime (runc, CNI, OOM).
    """
    images = "plugins.'io.containerd.cri.v1.images'"
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    return "\n".join([
        "version = 3",
        'root = "%s/root"' % directory,
        'state = "%s/state"' % directory,
        "oom_score = 0",
        "[grpc]",
        '  address = "%s/containerd.sock"' % directory,
        "[ttrpc]",
        '  address = "%s/containerd.sock.ttrpc"' % directory,
        "[debug]",
        '  address = ""',
        "[metrics]",
        '  address = ""',
        "[plugins.'io.containerd.internal.v1.opt']",
        '  path = "%s/opt"' % directory,
        # NRI (on by default in 2.x) serves one socket at a fixed host path that two nodes would share; nothing here
        # uses it.
        "[plugins.'io.containerd.nri.v1.nri']",
        "  disable = true",
        "[%s]" % images,
        '  snapshotter = "overlayfs"',
        "[%s.pinned_images]" % images,
        '  sandbox = "%s"' % sandbox_image,
        # Read by the transfer service too, which pulls for the CRI since containerd 2.1.
        "[%s.registry]" % images,
        '  config_path = "%s/certs.d"' % directory,
        "[%s]" % runtime,
        # Without it containerd writes oom_score_adj values the sandbox this runs in refuses.
        "  restrict_oom_score_adj = true",
        "  enable_selinux = false",
        "[%s.containerd]" % runtime,
        '  default_runtime_name = "runc"',
        "[%s.containerd.runtimes.runc]" % runtime,
        '  runtime_type = "io.containerd.runc.v2"',
        "[%s.containerd.runtimes.runc.options]" % runtime,
        # The runc built with this containerd, not whichever one PATH finds.
        '  BinaryName = "%s"' % runc,
        '  Root = "%s/runc"' % directory,
        "  SystemdCgroup = false",
        "[%s.cni]" % runtime,
        '  bin_dirs = ["/usr/lib/cni"]',
        '  conf_dir = "%s/cni"' % directory,
        "  max_conf_num = 1",
        "",
    ])


def registry_hosts_toml(registry):
    """certs.d/<registry>/hosts.toml: the local registry speaks plain HTTP."""
    return 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' % (registry, registry)


def cni_conflist(network, host):
    """A bridge with the node's subnet and no way off it: no default route, no masquerading.

    The only routes beside the subnet: the run's host address (registry, API server) and the API server's
    service IP, both through the bridge's gateway (the host).
    """
    return json.dumps({
        "cniVersion": "0.4.0",
        "name": network["cni_network"],
        "plugins": [{
            "type": "bridge",
            "bridge": network["bridge"],
            "isGateway": True,
            "isDefaultGateway": False,
            "ipMasq": False,
            "hairpinMode": False,
            "ipam": {
                "type": "host-local",
                "dataDir": host["ipam_dir"],
                "ranges": [[{"subnet": network["subnet"], "gateway": network["gateway"]}]],
                "routes": [{"dst": "%s/32" % host["address"], "gw": network["gateway"]},
                           {"dst": "%s/32" % SERVICE_IP, "gw": network["gateway"]}],
            },
        }],
    }, indent=2)


def kubelet_config(node, host_address, pki):
    return yaml.safe_dump({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": host_address,
        "port": node["kubelet_port"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node["healthz_port"],
        "containerRuntimeEndpoint": "unix://%s" % node["containerd_socket"],
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node["cgroup_root"],
        # cgroup v1 is in maintenance mode in 1.34; this machine has no other.
        "failCgroupV1": False,
        "featureGates": dict(FEATURE_GATES),
        "oomScoreAdj": 0,
        "failSwapOn": False,
        "podLogsDir": os.path.join(node["dir"], "pod-logs"),
        # Its KUBE-* chains are shared by every kubelet on the host and nothing here needs them.
        "makeIPTablesUtilChains": False,
        "resolvConf": "",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": pki["ca.crt"]}},
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": node["serving_cert"],
        "tlsPrivateKeyFile": node["serving_key"],
        "registerWithTaints": node["taints"],
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%", "imagefs.available": "2%"},
        "imageGCHighThresholdPercent": 99,
        "imageGCLowThresholdPercent": 98,
        "serializeImagePulls": False,
        # Mounted Secrets (a rotated webhook certificate) refresh at each pod sync: 10 s instead of the default
        # minute keeps the rotation tests short; nothing else here depends on it.
        "syncFrequency": "10s",
    }, sort_keys=False)


def kubeconfig(server, ca_file, cert_file, key_file, user):
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "gkm-sim", "cluster": {"server": server, "certificate-authority": ca_file}}],
        "users": [{"name": user, "user": {"client-certificate": cert_file, "client-key": key_file}}],
        "contexts": [{"name": "gkm-sim", "context": {"cluster": "gkm-sim", "user": user}}],
        "current-context": "gkm-sim",
    }, sort_keys=False)


# ---------------------------------------------------------------- firewall

def firewall_rules(run, bridges, host, api_port):
    """(table, parent chain, own chain, rules of the own chain) for the run's two chains.

    service: the one Service pods need (the API server at 10.96.0.1:443) sent to the run's host address,
    only for packets from the run's bridges, in place of a kube-proxy. forward: nothing from a pod bridge
    is forwarded to any other interface.
    """
    names = chains(run)
    service = [["-i", bridge_wildcard(run), "-d", "%s/32" % SERVICE_IP, "-p", "tcp", "--dport", str(SERVICE_PORT),
                "-j", "DNAT", "--to-destination", "%s:%d" % (host, api_port)]]
    forward = [["-i", name, "!", "-o", name, "-j", "DROP"] for name in bridges]
    return [("nat", "PREROUTING", names["service"], service), ("filter", "FORWARD", names["forward"], forward)]
