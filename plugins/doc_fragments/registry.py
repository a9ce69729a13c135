# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # Options of plugins/module_utils/oci/args.py REGISTRY_ARG_SPEC.
    DOCUMENTATION = r"""
options:
  registry_username:
    description:
      - Registry user name, for the registry host O(registry_host), which is then required. An image on any other
        host is read without credentials, whatever its registry answers, and its Jobs get none.
      - For cache_distribute and cache_reconcile it also reaches the extraction Jobs, in a
        Docker config inside a Secret the Jobs mount read-only (never in a Job spec or log).
    type: str
  registry_host:
    description:
      - The registry host (C(host) or C(host:port), as the image reference spells it) that O(registry_username) and
        O(registry_password) are for. A cache's image names a host its owner chooses; only this one gets them.
      - A Docker config (O(registry_docker_config)) keys its credentials by host already.
    type: str
  registry_auth_hosts:
    description:
      - Hosts besides the image's registry whose token service may receive the credentials, when the registry's
        Bearer challenge names a realm there (C(auth.docker.io) for Docker Hub). A realm on any other host is asked
        for an anonymous token, without them.
    type: list
    elements: str
    default: []
  registry_password:
    description: Password or token of O(registry_username).
    type: str
  registry_docker_config:
    description:
      - Docker C(config.json) with registry credentials, instead of O(registry_username).
      - For cache_distribute and cache_reconcile, the image registry's inline C(auths) entry (only that one)
        reaches the extraction Jobs through the same Secret; credential helpers cannot.
    type: path
  registry_ca_file:
    description: CA bundle for the registry's TLS certificate (for the cache modules, the extraction Jobs get it too).
    type: path
  registry_validate_certs:
    description: Verify the registry's TLS certificate (extraction Jobs get the same setting).
    type: bool
    default: true
  registry_plain_http:
    description: Talk plain HTTP to the registry (extraction Jobs too). Only for loopback or test registries.
    type: bool
    default: false
  registry_deadline:
    description:
      - Seconds all the registry reads of one registry client may take together, on the controller (resolving the
        image to its digest and reading its config, checking its signatures). When they pass, the reads stop,
        whatever the registry still sends, and the cache is refused with a short message naming the image.
      - An image names its registry host, which a cache's owner chooses; this keeps a slow or hostile registry from
        holding a reconcile. Every request also has a 30 seconds timeout of its own.
      - C(cache_extract) and the extraction Jobs, which stream the layer, are bounded per read only.
    type: int
    default: 120
"""
