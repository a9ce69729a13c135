#!/usr/bin/env python3
"""Run the local simulated GPU cluster: a real control plane with kwok nodes, and a real OCI registry.

    sim.py up            start whatever is not running (etcd, kube-apiserver, kube-controller-manager,
                         kube-scheduler, kwok, docker-registry, real nodes' containerd and kubelet), create the
                         simulated nodes, wait until ready
    sim.py registry-up   start only the registry (enough for extraction tests)
    sim.py down          stop exactly the processes recorded in the state file and remove the state
    sim.py status        processes, ports, nodes and the guard routes
    sim.py nodes         the GPU nodes (kwok and real) with capacity, labels and taints
    sim.py apply-nodes   create/remove simulated nodes so the cluster matches the node list
    sim.py webhook-up    run the collection's webhook server as a local process (url endpoint mode)
    sim.py webhook-down  stop it
    sim.py tools-image   build (or reuse) the tools image, push it to the registry, record it as "tools_image"
    sim.py controller-image the same for the controller image (the in-cluster operator of gkm_reconcile=operator),
                         recorded as "controller_image"
    sim.py workload-image the same for the workload image (Triton and the kernel set's warm-up, docs/kernels.md),
                         recorded as "workload_image"
    sim.py operator-up   run the collection's operator, the kopf controller, here (out of cluster,
                         simcluster/operator_plan.py), after applying the GKM CRDs; returns once it is ready
    sim.py operator-down stop it
    sim.py kyverno-up    build (or reuse) Kyverno, apply its CRDs and run its admission controller here (out of
                         cluster, simcluster/kyverno_plan.py); prints its version and webhook address as JSON
    sim.py kyverno-down  stop it (its webhook configurations stay: with failurePolicy Fail, writes they match fail);
                         --purge also removes its webhook configurations, CRDs and namespace

State lives in $GKM_SIM_DIR (default .sim/ in the checkout): state.json (pids, ports), pki/, logs/,
kubeconfig. Ports are picked free at start, below the kernel's ephemeral range, so two checkouts never collide
and no client's connection takes one first; a component that still finds one taken starts again on new ones.
Nodes: $GKM_SIM_NODES names a YAML file with a list of node groups (see gpu_nodes.py); without it,
one control-plane node and $GKM_SIM_GPU_NODES (default 3) GPU workers of $GKM_SIM_GPU_VENDOR
(amd|nvidia, default amd) and $GKM_SIM_GPU_ARCH.

Real nodes (root only): a group with `real: true`, or $GKM_SIM_REAL_NODES=N (default 0) for N more, AMD and
NVIDIA in turn (gkm-real-amd-1, gkm-real-nvidia-1, ...): a kubelet with its own containerd 2.x (built by
tools/containerd/build.sh) and CNI bridge each, labelled gkm.io/real-node=true (simcluster/real_nodes.py). The API
server and the kubelets run with the ImageVolume feature gate. With real nodes the registry and the API server bind
the run's own host address (state.json "host_address") instead of 127.0.0.1, so pods reach them too.

Guard routes (root only; simcluster/guard.py, guard_plan.py): while any run is up, the cluster's fake ranges (service
range, kwok's pod range, kwok's node address) are routed `unreachable` on this machine, so a packet to them (the API
server dialing a webhook Service's endpoints or a kwok node) fails at once instead of leaving by the default route.
`up` refuses to start when the machine itself uses part of a range; the last run's `down` removes the routes runs
added, never one the machine had.

The work is in the simcluster package, one module per part (docs/development.md lists them); this file parses the
command line and calls one function per command.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), ".cache", "collections"))
sys.path.insert(0, HERE)

from simcluster import cluster, guard_plan, kyverno, local_operator, operator_plan, registry, report, webhook  # noqa: E402
from simcluster.control_plane import CONTROL_PLANE  # noqa: E402
from simcluster.state_dir import (  # noqa: E402
    KUBECONFIG,
    ROOT,
    SIM_DIR,
    free_port,
    is_running,
    load_state,
    stop_process,
)

# Tests and benchmarks load this file as a module (tests/helpers/sim.py) and read a run through these names.
__all__ = ["CONTROL_PLANE", "KUBECONFIG", "ROOT", "SIM_DIR", "free_port", "guard_plan", "is_running", "load_state",
           "operator_plan", "stop_process"]

COMMANDS = {
    "up": lambda _args: cluster.up(),
    "registry-up": lambda _args: cluster.registry_up(),
    "down": lambda _args: cluster.down(),
    "status": lambda _args: report.status(),
    "nodes": lambda _args: report.nodes(),
    "apply-nodes": lambda _args: cluster.apply_nodes(),
    "webhook-up": lambda args: webhook.up(args.dry_run, args.default_mount_mode),
    "webhook-down": lambda _args: webhook.down(),
    "tools-image": lambda _args: registry.push_image("tools"),
    "controller-image": lambda _args: registry.push_image("controller"),
    "workload-image": lambda _args: registry.push_image("workload"),
    "kyverno-up": lambda _args: kyverno.up(),
    "kyverno-down": lambda args: kyverno.down(args.purge),
    "operator-up": lambda args: local_operator.up(args.tools_image, args.options),
    "operator-down": lambda _args: local_operator.down(),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("--dry-run", action="store_true", help="webhook-up: say what would be started, start nothing")
    parser.add_argument("--default-mount-mode", choices=["PVC", "imageVolume"], default="PVC",
                        help="webhook-up: the mount mode of a cache without spec.mountMode (caches_mount_mode)")
    parser.add_argument("--purge", action="store_true", help="kyverno-down: also remove Kyverno's webhook "
                        "configurations, CRDs (and with them all policies) and namespace")
    parser.add_argument("--options", help="operator-up: the controller's distribution options (its --options), JSON")
    parser.add_argument("--tools-image", help="operator-up: the extraction Jobs' image (default: sim.py tools-image's)")
    args = parser.parse_args()
    COMMANDS[args.command](args)


if __name__ == "__main__":
    main()
