# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Command-line entry point of cache extraction, for the extraction Job's container.

    python -m ansible_collections.gkm.cluster.plugins.module_utils.extract.job_main \\
        --image registry.example.com/caches/vector-add:v1 --dest /cache/vector-add \\
        --gpus-from-node-labels "$NODE_NAME" --verify cosign --public-key /keys/cosign.pub

Runs the same code as the gkm.cluster.cache_extract module and prints its result as JSON.
Exit status: 0 done (changed, unchanged or skipped), 1 failed, 2 bad arguments.
The registry password is read from $GKM_REGISTRY_PASSWORD so it never shows in the process list.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import sys

from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_kubeconfig
from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.extract import pull as cache_pull


def _gpu(text):
    parts = text.split("/")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError("a GPU is backend/arch/warp_size, e.g. hip/gfx90a/64, got %r" % text)
    return {"backend": parts[0], "arch": parts[1], "warp_size": parts[2]}


def build_parser():
    parser = argparse.ArgumentParser(prog="gkm-cache-extract", description="Pull, verify and extract a GPU "
                                     "kernel-cache image into a directory, atomically.")
    parser.add_argument("--image", help="tag or digest reference (required unless --state absent)")
    parser.add_argument("--dest", required=True, help="absolute directory the cache is extracted to")
    parser.add_argument("--state", choices=("present", "absent"), default="present")
    parser.add_argument("--username")
    parser.add_argument("--docker-config", help="Docker config.json with registry credentials")
    parser.add_argument("--ca-file", help="CA bundle for the registry's TLS certificate")
    parser.add_argument("--insecure-skip-tls-verify", dest="validate_certs", action="store_false")
    parser.add_argument("--plain-http", action="store_true", help="talk HTTP, not HTTPS (loopback registries)")
    parser.add_argument("--gpu", dest="gpus", action="append", type=_gpu, help="backend/arch/warp_size; repeatable")
    parser.add_argument("--gpus-from-node-labels", metavar="NODE", default=os.environ.get("GKM_NODE_NAME"),
                        help="read gkm.io/gpu-* labels of this node (default: $GKM_NODE_NAME)")
    parser.add_argument("--kubeconfig", help="kubeconfig for --gpus-from-node-labels outside a cluster")
    parser.add_argument("--compatibility", choices=cache_pull.COMPATIBILITY_MODES, default="fail")
    parser.add_argument("--verify", choices=cache_pull.VERIFY_MODES, default="none")
    parser.add_argument("--public-key", help="cosign public key (PEM file)")
    parser.add_argument("--signature-format", choices=("auto", "v2", "v3"), default="auto")
    parser.add_argument("--max-bytes", type=int, default=cache_pull.DEFAULTS["max_bytes"])
    parser.add_argument("--max-files", type=int, default=cache_pull.DEFAULTS["max_files"])
    parser.add_argument("--max-expansion-ratio", type=int, default=cache_pull.DEFAULTS["max_expansion_ratio"])
    parser.add_argument("--timeout", type=int, default=cache_pull.DEFAULTS["timeout"])
    parser.add_argument("--whole-layer", action="store_true", help="extract every path, not only io.*.cache/ "
                        "and io.*.manifest/")
    parser.add_argument("--no-rewrite-group-paths", dest="rewrite_group_paths", action="store_false")
    parser.add_argument("--check", action="store_true", help="report what would change, write nothing")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    options = {key: value for key, value in vars(args).items() if key not in ("check", "kubeconfig")}
    options["password"] = os.environ.get("GKM_REGISTRY_PASSWORD")
    try:
        result = cache_pull.ensure_cache(options, check_mode=args.check,
                                         node_labels_reader=cache_pull.node_labels_reader(
                                             lambda: Kube(api_client_from_kubeconfig(args.kubeconfig))))
    except GkmError as exc:
        json.dump({"failed": True, "msg": str(exc)}, sys.stdout)
        sys.stdout.write("\n")
        return 1
    result.pop("diff", None)
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
