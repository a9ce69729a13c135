# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Registry access options shared by every module that reads an image; their docs are the doc fragment
gkm.cluster.registry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

REGISTRY_ARG_SPEC = dict(
    registry_username=dict(type="str"),
    registry_password=dict(type="str", no_log=True),
    registry_docker_config=dict(type="path"),
    registry_ca_file=dict(type="path"),
    registry_validate_certs=dict(type="bool", default=True),
    registry_plain_http=dict(type="bool", default=False),
    registry_deadline=dict(type="int", default=120),
    registry_host=dict(type="str"),
    registry_auth_hosts=dict(type="list", elements="str", default=[]),
)

# Module option -> the option name of oci/registry.py and extract/pull.py.
REGISTRY_OPTIONS = {
    "registry_username": "username",
    "registry_password": "password",
    "registry_docker_config": "docker_config",
    "registry_ca_file": "ca_file",
    "registry_validate_certs": "validate_certs",
    "registry_plain_http": "plain_http",
    "registry_deadline": "deadline",
    "registry_host": "credentials_host",
    "registry_auth_hosts": "auth_hosts",
}

REGISTRY_MUTUALLY_EXCLUSIVE = [("registry_username", "registry_docker_config")]
# A user name and password are for one registry host, which the admin names: an image names any host.
REGISTRY_REQUIRED_BY = {"registry_username": "registry_host"}


def registry_options(params):
    """The options of oci/registry.py's RegistryClient from a module's registry parameters (unset ones left out)."""
    return {new: params[old] for old, new in REGISTRY_OPTIONS.items() if params.get(old) is not None}
