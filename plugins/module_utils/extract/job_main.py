# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Command-line entry point of cache extraction, for the extraction Job's container.

    python -m ansible_collections.gkm.cluster.plugins.module_utils.extract.job_main \\
        --image registry.example.com/caches/vector-add:v1 --dest /cache/vector-add \\
        --gpu hip/gfx90a/64 --verify cosign --public-key /keys/cosign.pub

Runs the same code as the gkm.cluster.cache_extract module and prints its result as JSON.
The Job passes its node's GPUs with --gpu (the planner read the node's labels), so it needs no API access;
--gpus-from-node-labels reads them through the API for runs by hand.
Exit status: 0 done (changed, unchanged or skipped), 1 refused (the image or the options are wrong: running
again cannot help), 2 bad arguments, 3 the registry could not be reached (worth a retry), 4 the destination's
volume is not writable, 5 the image's signature does not verify with --public-key (unsigned, another key, another
digest, another format).
With --termination-log the failure message is also written there: the Job passes /dev/termination-log, so
the message reaches the pod's status, where the cache modules read it.
The registry password is read from $GKM_REGISTRY_PASSWORD so it never shows in the process list.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import errno
import json
import os
import sys

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    GPU_LABELS,
)
from ansible_collections.gkm.cluster.plugins.module_utils.extract import pull as cache_pull
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import RegistryUnreachable
from ansible_collections.gkm.cluster.plugins.module_utils.oci.signature import SignatureError

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_RETRY = 3
EXIT_NOT_WRITABLE = 4
EXIT_SIGNATURE = 5
# The kubelet reads at most 4096 bytes of a termination message.
TERMINATION_MESSAGE_MAX = 4000
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


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
                        help="read %s labels of this node (default: $GKM_NODE_NAME)" % GPU_LABELS)
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
    parser.add_argument("--termination-log", metavar="PATH",
                        help="also write a failure's message here (the Job passes /dev/termination-log)")
    return parser


def _kube(kubeconfig):
    # Imported here: only --gpus-from-node-labels talks to the API, the Job never does.
    from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_kubeconfig
    from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube

    return Kube(api_client_from_kubeconfig(kubeconfig))


def not_writable_message(exc, dest, uid):
    """What to do when the destination's volume refuses the extractor's writes."""
    return ("cannot write %s as uid %d (%s) while extracting into %s: the volume is not writable by the extraction "
            "user. set_volume_owner (the extractor as uid 0 without capabilities, for hostPath volumes, whose "
            "directories are root's) is off, the directory is another uid's (an earlier version's extraction made it "
            "uid 1000's: remove the cache's slot so its directory is made again), or the storage does not allow it "
            "(read-only, root-squashing NFS); turn it on or use a storage class whose volumes honour fsGroup" % (
                exc.filename or dest, uid, exc.strerror, dest))


def check_volume_writable(dest):
    """Fail before any download when the directory holding dest exists but is not ours to write."""
    volume = os.path.dirname(os.path.normpath(dest))
    if os.path.isdir(volume) and not os.access(volume, os.W_OK | os.X_OK):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), volume)


def report_failure(message, termination_log):
    """Print the failure as the JSON result and, for the pod's status, into the termination log."""
    json.dump({"failed": True, "msg": message}, sys.stdout)
    sys.stdout.write("\n")
    if termination_log:
        try:
            with open(termination_log, "w") as log:
                log.write(message[:TERMINATION_MESSAGE_MAX])
        except OSError as exc:
            sys.stderr.write("cannot write the termination log %s: %s\n" % (termination_log, exc.strerror))


def main(argv=None):
    args = build_parser().parse_args(argv)
    options = {key: value for key, value in vars(args).items() if key not in ("check", "kubeconfig",
                                                                              "termination_log")}
    options["password"] = os.environ.get("GKM_REGISTRY_PASSWORD")
    try:
        if not args.check and args.state == "present":
            check_volume_writable(args.dest)
        result = cache_pull.ensure_cache(options, check_mode=args.check,
                                         node_labels_reader=cache_pull.node_labels_reader(
                                             lambda: _kube(args.kubeconfig)))
    except GkmError as exc:
        report_failure(str(exc), args.termination_log)
        if isinstance(exc.__cause__, SignatureError):
            return EXIT_SIGNATURE
        return EXIT_RETRY if isinstance(exc.__cause__, RegistryUnreachable) else EXIT_REFUSED
    except OSError as exc:
        volume = os.path.dirname(os.path.normpath(args.dest))
        path = os.path.normpath(str(exc.filename or volume))
        if exc.errno in NOT_WRITABLE and (path == volume or path.startswith(volume.rstrip("/") + "/")):
            report_failure(not_writable_message(exc, args.dest, os.getuid()), args.termination_log)
            return EXIT_NOT_WRITABLE
        report_failure("%s: %s" % (exc.filename or args.dest, exc.strerror or exc), args.termination_log)
        return EXIT_REFUSED
    result.pop("diff", None)
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
