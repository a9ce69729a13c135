# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The registry Secret of a cache, pure: what of the controller's registry options the extraction Jobs get.

Per cache and namespace, one Secret holds `config.json` (a Docker config with the credentials of the cache
image's registry only), `ca.crt` (the registry's CA) and `cosign.pub` (the key the Jobs verify signatures with,
verification.py), those that apply. The Job mounts it read-only and passes the files
to the extractor, so the password is in no Job spec, environment or log. Without any of them there is no
Secret. Its content is compared with the live Secret's, so a run that changes nothing writes nothing, and
diffs show its keys, never its values.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import MAX_NAME, stable_hash
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
)

DOCKER_CONFIG_KEY = "config.json"
CA_KEY = "ca.crt"
MOUNT_PATH = "/gkm-registry"
VOLUME_NAME = "registry"
REDACTED = "<redacted>"
CHANGED = "<redacted, changed>"
_NAME_INFIX = "-registry-"


class RegistrySecretError(ValueError):
    """A registry option cannot be turned into the Jobs' Secret; the message names it."""


def _b64(text):
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _registry_key_host(key):
    """A Docker config `auths` key (`host`, `https://host/v1/`) reduced to its host[:port]."""
    for scheme in ("https://", "http://"):
        if key.startswith(scheme):
            key = key[len(scheme):]
    return key.split("/", 1)[0]


def _auth_from_docker_config(text, host):
    """The inline `auth` of `host` in a Docker config's text, or None (credential helpers cannot travel)."""
    try:
        auths = (json.loads(text) or {}).get("auths") or {}
    except (ValueError, AttributeError) as exc:
        raise RegistrySecretError("registry_docker_config is not a Docker config.json: %s" % exc) from exc
    for key, entry in auths.items():
        if _registry_key_host(key) != host or not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            return entry["auth"]
        if entry.get("username"):
            return _b64("%s:%s" % (entry["username"], entry.get("password") or ""))
    return None


def secret_data(host, username=None, password=None, docker_config_text=None, ca_text=None):
    """{key: text} the Jobs need for `host`: a Docker config naming that registry only, and the CA."""
    auth = None
    if username:
        auth = _b64("%s:%s" % (username, password or ""))
    elif docker_config_text:
        auth = _auth_from_docker_config(docker_config_text, host)
    data = {}
    if auth:
        data[DOCKER_CONFIG_KEY] = json.dumps({"auths": {host: {"auth": auth}}}, sort_keys=True)
    if ca_text:
        data[CA_KEY] = ca_text
    return data


def secret_name(cache, cache_namespace, namespace):
    """`<cache>-registry-<hash>`: the hash keeps a namespaced and a cluster cache of one name apart."""
    suffix = _NAME_INFIX + stable_hash("registry", cache, cache_namespace, namespace)
    return cache[:MAX_NAME - len(suffix)].rstrip("-") + suffix


def render_secret(spec, namespace):
    """The cache's registry Secret in `namespace`, or None when the Jobs need none."""
    if not spec.registry_files:
        return None
    labels = {MANAGED_BY_LABEL: MANAGER, CACHE_LABEL: spec.name, CACHE_NAMESPACE_LABEL: spec.cache_namespace}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name(spec.name, spec.cache_namespace, namespace), "namespace": namespace,
                     "labels": labels},
        "type": "Opaque",
        "data": {key: _b64(text) for key, text in sorted(spec.registry_files.items())},
    }


def extractor_args(keys):
    """The extractor's options that point at the mounted files."""
    args = []
    if DOCKER_CONFIG_KEY in keys:
        args += ["--docker-config", "%s/%s" % (MOUNT_PATH, DOCKER_CONFIG_KEY)]
    if CA_KEY in keys:
        args += ["--ca-file", "%s/%s" % (MOUNT_PATH, CA_KEY)]
    return args


def redacted(secret, other=None):
    """A Secret as diffs and results may show it: keys kept, values replaced; with `other` (the Secret it is
    compared with), the values that differ say so."""
    theirs = (other or {}).get("data") or {}
    shown = dict(secret)
    shown["data"] = {key: REDACTED if other is None or theirs.get(key) == value else CHANGED
                     for key, value in sorted((secret.get("data") or {}).items())}
    return shown
