"""The run's API server, reached as its admin over HTTPS with the standard library (no client to install)."""

import json
import os
import ssl
import urllib.error
import urllib.request

import yaml

from simcluster.state_dir import bind_address, port, wait_for

CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def tls_context(pki):
    context = ssl.create_default_context(cafile=pki["ca.crt"])
    context.load_cert_chain(pki["admin.crt"], pki["admin.key"])
    return context


def request(state, pki, method, path, body=None, content_type="application/json", timeout=10):
    url = "https://%s:%d%s" % (bind_address(state), port(state, "apiserver"), path)
    data = json.dumps(body).encode() if body is not None else None
    sent = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": content_type})
    with urllib.request.urlopen(sent, context=tls_context(pki), timeout=timeout) as response:
        return json.loads(response.read() or b"null") if response.status != 204 else None


def http_ok(url, context=None):
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def exists(state, pki, path):
    try:
        request(state, pki, "GET", path)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return False
        raise
    return True


def create_if_missing(state, pki, path, body):
    try:
        request(state, pki, "POST", path, body)
    except urllib.error.HTTPError as error:
        if error.code != 409:
            raise


def delete_if_present(state, pki, path):
    try:
        request(state, pki, "DELETE", path)
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise


def yaml_documents(directory):
    """Every document of the directory's *.yaml files, in file name order."""
    documents = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".yaml"):
            with open(os.path.join(directory, name)) as handle:
                documents.extend(doc for doc in yaml.safe_load_all(handle) if doc)
    return documents


def crd_established(state, pki, name):
    crd = request(state, pki, "GET", "%s/%s" % (CRDS_PATH, name))
    return any(c["type"] == "Established" and c["status"] == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


def apply_crds(state, pki, directory):
    """Server-side apply of every CRD in directory (a newer Kyverno's CRDs replace older ones); wait until served."""
    names = []
    for crd in yaml_documents(directory):
        request(state, pki, "PATCH", "%s/%s?fieldManager=gkm-sim&force=true" % (CRDS_PATH, crd["metadata"]["name"]),
                crd, "application/apply-patch+yaml", timeout=30)
        names.append(crd["metadata"]["name"])
    wait_for("the CRDs in %s" % directory, lambda: all(crd_established(state, pki, name) for name in names), 60)
