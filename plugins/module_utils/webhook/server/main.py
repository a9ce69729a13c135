# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Entry point of the admission webhook server, PVC mutation and steering (a long-running program).

    python -m ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.main \\
        --cert-file tls.crt --key-file tls.key [--listen 0.0.0.0:8443] [--kubeconfig PATH [--context NAME]] \\
        [--tools-image IMAGE]

Endpoints: POST /mutate (AdmissionReview v1), GET /readyz (200 once the view is synced),
GET /healthz, GET /metrics (Prometheus text). webhook/server/app.py builds the application.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import logging
import sys

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KUBERNETES_IMPORT_ERROR
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import MOUNT_MODES, PVC
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.app import AIOHTTP_IMPORT_ERROR, LOG, build_app

try:
    from aiohttp import web
except ImportError:
    web = None  # main() reports AIOHTTP_IMPORT_ERROR


def _parse_listen(value):
    host, _colon, port = value.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="gkm-webhook",
                                     description="Admission webhook for gkm.cluster (PVC mutation and steering)")
    parser.add_argument("--cert-file", required=True, help="PEM serving certificate (reloaded when it changes)")
    parser.add_argument("--key-file", required=True, help="PEM private key of the serving certificate")
    parser.add_argument("--listen", default="0.0.0.0:8443", help="address:port to listen on (default 0.0.0.0:8443)")
    parser.add_argument("--kubeconfig", help="kubeconfig to use; without it the in-cluster service account is used")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--cert-check-seconds", type=float, default=1.0, help="how often to look for new cert files")
    parser.add_argument("--default-mount-mode", choices=MOUNT_MODES, default=PVC,
                        help="the mount mode of a cache without spec.mountMode: the reconcile's own default "
                             "(caches_mount_mode), so both read a cache alike")
    parser.add_argument("--tools-image",
                        help="the image this server runs (the Deployment passes its own): pods given a Triton cache "
                             "by annotation get the kernel overlay, an init container running it; without it, none")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # urllib3 logs every connection retry; the watch loop already reports each failure once.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    for error in (AIOHTTP_IMPORT_ERROR, KUBERNETES_IMPORT_ERROR):
        if error:
            sys.stderr.write(error)
            return 2
    host, port = _parse_listen(args.listen)
    app, ssl_context = build_app(args.cert_file, args.key_file, args.kubeconfig, args.context, args.cert_check_seconds,
                                 args.default_mount_mode, args.tools_image)
    LOG.info("listening on https://%s:%d", host, port)
    web.run_app(app, host=host, port=port, ssl_context=ssl_context, access_log=None, print=None,
                shutdown_timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
