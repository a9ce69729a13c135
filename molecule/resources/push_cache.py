"""Push one kernel-cache image to the simulated cluster's registry unless the tag is already there.

    push_cache.py REPOSITORY TAG [--kind triton|vllm] [--kernels N] [--seed N] [--registry HOST:PORT]

Prints {"changed": ..., "image": ..., "digest": ...}: the digest is the registry's, pushed now or before.

The molecule scenarios use it for images beyond the demo's samples (tools/sample_caches.py), such as a
second version of a cache for the day-2 image change. The registry is the simulated cluster's
($GKM_SIM_DIR/state.json) unless --registry names another plain-HTTP one (kind's local registry).
"""

import argparse
import json
import os
import sys
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(ROOT, ".cache", "collections"), ROOT]

from tests.helpers.kcache_images import CacheSpec, build_image  # noqa: E402


def manifest_digest(registry, repository, tag):
    """The digest the registry serves for the tag, or None when the tag does not exist."""
    request = urllib.request.Request("http://%s/v2/%s/manifests/%s" % (registry, repository, tag), method="HEAD",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.headers["Docker-Content-Digest"]
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repository")
    parser.add_argument("tag")
    parser.add_argument("--kind", choices=["triton", "vllm"], default="triton")
    parser.add_argument("--kernels", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--registry", help="host:port of a plain-HTTP registry (default: the simulated cluster's)")
    args = parser.parse_args()
    registry = args.registry
    if not registry:
        with open(os.path.join(os.environ.get("GKM_SIM_DIR", os.path.join(ROOT, ".sim")), "state.json")) as handle:
            registry = json.load(handle)["registry"]
    image = "%s/%s:%s" % (registry, args.repository, args.tag)
    digest = manifest_digest(registry, args.repository, args.tag)
    if digest:
        print(json.dumps({"changed": False, "image": image, "digest": digest}))
        return
    spec = CacheSpec(kind=args.kind, backend="hip", kernels=args.kernels, seed=args.seed)
    pushed = build_image(registry, args.repository, args.tag, spec)
    print(json.dumps({"changed": True, "image": image, "digest": pushed.digest}))


if __name__ == "__main__":
    main()
