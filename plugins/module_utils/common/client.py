# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Configured kubernetes ApiClients for common/kube.py's Kube, from wherever the caller runs.

Modules take kubernetes.core's auth options (and K8S_AUTH_* variables) through its `get_api_client`,
so users configure them as they configure kubernetes.core; the two programs (the extraction Job and
the webhook server) take a kubeconfig or, inside a pod, the service account.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import DEFAULT_WORKERS, KubeError

try:
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config
except ImportError:
    kube_client = kube_config = None  # callers check common.kube.KUBERNETES_IMPORT_ERROR first

try:
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException
except ImportError:
    # The two programs run without kubernetes.core; only modules, which depend on it, call api_client_from_auth.
    get_api_client = CoreException = None


def api_client_from_auth(auth_params, workers=DEFAULT_WORKERS):
    """An ApiClient from kubernetes.core's auth options, with a connection pool as wide as our workers."""
    try:
        k8s = get_api_client(**{key: value for key, value in auth_params.items() if value is not None})
    except CoreException as error:
        raise KubeError("cannot create the Kubernetes client: %s" % error) from error
    configuration = copy.copy(k8s.configuration)
    configuration.connection_pool_maxsize = max(workers, 4)
    client = kube_client.ApiClient(configuration)
    # Impersonation headers that kubernetes.core set on its own client.
    for header, value in k8s.client.client.default_headers.items():
        if header.startswith("Impersonate-"):
            client.set_default_header(header, value)
    return client


def api_client_from_kubeconfig(kubeconfig=None, context=None, workers=DEFAULT_WORKERS):
    """An ApiClient from a kubeconfig file, or from the pod's service account when none is given in a pod; its
    connection pool as wide as the requests sent at once (workers): a narrower one discards connections, and each
    request past it opens a new TLS connection."""
    configuration = kube_client.Configuration()
    if kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    else:
        kube_config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = max(workers, 4)
    return kube_client.ApiClient(configuration)
