#!/usr/bin/env python3
"""Push the demo's sample kernel caches to the local simulated cluster's registry (idempotent).

vector-add-rocm:v1 (Triton, HIP gfx90a) and vllm-llama-rocm:v1 (vLLM layout, HIP gfx90a) hold real kernels
compiled for gfx90a by the pinned Triton (make venv-triton; tools/triton_kernels/store.py compiles once per machine
and keeps them), with labels and manifest.json from the kernels' metadata. They are built with the project's test
image builder, so `make demo` needs no registry outside this machine.
"""

import json
import os
import sys
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, ".cache", "collections"), ROOT]

from tests.helpers.kcache_images import CacheSpec, build_image  # noqa: E402

SAMPLES = {
    "gkm-samples/vector-add-rocm": CacheSpec(kind="triton", backend="hip", kernels=4, seed=1, compiled=True),
    "gkm-samples/vllm-llama-rocm": CacheSpec(kind="vllm", backend="hip", kernels=6, seed=2, compiled=True),
}


def tag_exists(registry, repository, tag):
    request = urllib.request.Request("http://%s/v2/%s/manifests/%s" % (registry, repository, tag), method="HEAD",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=5):
            return True
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return False
        raise


def push(registry, repository, spec):
    """The sample's v1 built and pushed unless the registry has it already."""
    if tag_exists(registry, repository, "v1"):
        print("%s/%s:v1 already there" % (registry, repository))
        return
    image = build_image(registry, repository, "v1", spec)
    print("pushed %s (%s)" % (image.ref, image.digest))


def main():
    with open(os.path.join(os.environ.get("GKM_SIM_DIR", os.path.join(ROOT, ".sim")), "state.json")) as handle:
        registry = json.load(handle)["registry"]
    for repository, spec in SAMPLES.items():
        push(registry, repository, spec)


if __name__ == "__main__":
    main()
