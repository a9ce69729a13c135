"""What the checkout's build scripts give: each builds (or reuses from ~/.cache/gkm-cluster) and prints its result on
its last line of output, a directory of binaries or an image pushed to a registry."""

import os
import subprocess

from simcluster.state_dir import ROOT


def _build(script, *args):
    result = subprocess.run([os.path.join(ROOT, "tools", script), *args], check=True, stdout=subprocess.PIPE,
                            text=True, cwd=ROOT)
    return result.stdout.strip().splitlines()[-1]


def binary_dir():
    """etcd, the Kubernetes binaries (kubelet and kubectl too) and kwok, with kwok's stages."""
    return _build("sim-cluster/build.sh")


def containerd_dir():
    """containerd 2.x, its shim, ctr and runc (the real nodes')."""
    return _build("containerd/build.sh")


def kyverno_dir():
    """Kyverno's admission controller (bin/kyverno) and its CRDs (crds/)."""
    return _build("kyverno/build.sh")


def push_image(name, registry):
    """The image NAME (tools, controller, workload or pause) of this checkout, pushed to registry: its
    reference."""
    return _build("images/build.sh", name, "--push", registry)
