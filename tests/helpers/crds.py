"""The collection's CRDs applied to a cluster as the gkm role applies them (tests and benchmarks)."""

import glob
import os
import time

import yaml
from kubernetes import client, dynamic

from tests.helpers.paths import ROOT


def apply_crds(kube, timeout=30):
    """Server-side apply every CRD of roles/gkm/files/crds; returns a CustomObjectsApi once all are Established."""
    extensions = client.ApiextensionsV1Api(kube)
    crd_api = dynamic.DynamicClient(kube).resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    names = []
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "gkm", "files", "crds", "*.yaml"))):
        with open(path) as handle:
            crd = yaml.safe_load(handle)
        names.append(crd["metadata"]["name"])
        crd_api.server_side_apply(body=crd, name=crd["metadata"]["name"], field_manager="gkm.cluster",
                                  force_conflicts=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        established = [
            any(c.type == "Established" and c.status == "True" for c in extensions.read_custom_resource_definition(
                name).status.conditions or [])
            for name in names
        ]
        if all(established):
            return client.CustomObjectsApi(kube)
        time.sleep(0.2)
    raise AssertionError("CRDs not Established: %s" % names)
