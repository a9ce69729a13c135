"""The in-cluster operator's RBAC as the gkm role renders it (roles/gkm/templates/operator.yaml.j2), and the table of
docs/operator.md it must equal (docs/security.md, class 12).

The template is rendered with Jinja2 and the few Ansible filters it uses, so the unit tests need no Ansible run and
the integration tests can apply exactly the RBAC the role applies.
"""

import hashlib
import json
import os
import re

import jinja2
import yaml

from ansible_collections.gkm.cluster.plugins.filter.mirror_image import mirror_image
from ansible_collections.gkm.cluster.plugins.filter.registry_secrets_namespace import registry_secrets_namespace
from tests.helpers.paths import ROOT

TEMPLATE = os.path.join(ROOT, "roles", "gkm", "templates", "operator.yaml.j2")
ROLE_VARS = os.path.join(ROOT, "roles", "gkm", "vars", "main.yml")
OPERATOR_DOC = os.path.join(ROOT, "docs", "operator.md")
SERVICE_ACCOUNT = "gkm-operator"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# The heading of the ClusterRole's table in docs/operator.md; the table is the first one after it.
DOC_TABLE_AFTER = "the ClusterRole `gkm.cluster:<gkm_namespace>:gkm-operator`"


def _bool(value):
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes", "on")


def option_names():
    """gkm_operator_option_names of the gkm role's vars (plain YAML, no template)."""
    with open(ROLE_VARS) as handle:
        return yaml.safe_load(handle)["gkm_operator_option_names"]


def render_operator(namespace="gkm-system", caches_options=None, capture=None, capture_key_secret=""):
    """Every object of the template, for the operator in `namespace` with the caches_* variables `caches_options`
    (and gkm_operator_capture, gkm_operator_capture_key_secret)."""
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
    environment.filters.update({
        "to_json": json.dumps,
        "to_nice_json": lambda value: json.dumps(value, indent=4, sort_keys=True),
        "hash": lambda text, algorithm: hashlib.new(algorithm, text.encode()).hexdigest(),
        "bool": _bool,
        "gkm.cluster.mirror_image": mirror_image,
        "gkm.cluster.registry_secrets_namespace": registry_secrets_namespace,
    })
    with open(TEMPLATE) as handle:
        template = environment.from_string(handle.read())
    text = template.render(
        gkm_namespace=namespace, gkm_operator_caches_options=caches_options or {},
        gkm_operator_option_names=option_names(), gkm_operator_replicas=1, gkm_operator_node_selector={},
        gkm_operator_tolerations=[], gkm_operator_image="registry.example/controller:0",
        gkm_tools_image="registry.example/tools:0", gkm_registry_mirror="", gkm_operator_resources={},
        gkm_operator_capture=capture or {}, gkm_operator_capture_key_secret=capture_key_secret)
    return [obj for obj in yaml.safe_load_all(text) if obj]


def rbac_objects(objects):
    return [obj for obj in objects if obj["kind"] in RBAC_KINDS]


def grants(rules):
    """{(API group, resource, verb)} of a list of RBAC rules (no wildcards: the operator's have none)."""
    return {(group, resource, verb) for rule in rules for group in rule.get("apiGroups") or []
            for resource in rule.get("resources") or [] for verb in rule.get("verbs") or []}


def cluster_role_grants(caches_options=None):
    (role,) = [obj for obj in render_operator(caches_options=caches_options) if obj["kind"] == "ClusterRole"]
    return grants(role["rules"])


def namespace_role_grants(caches_options=None):
    """What the Role in the operator's own namespace grants."""
    (role,) = [obj for obj in render_operator(caches_options=caches_options) if obj["kind"] == "Role"]
    return grants(role["rules"])


def documented_grants(path=OPERATOR_DOC):
    """{(API group, resource, verb)} of the ClusterRole's table in docs/operator.md: its first three columns name
    the API group (`""` for the core group), the resources and the verbs, each in backquotes."""
    with open(path) as handle:
        text = handle.read()
    start = text.index(DOC_TABLE_AFTER)
    rows, in_table = [], False
    for line in text[start:].splitlines()[1:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.strip().startswith("|") else None
        if cells is None:
            if in_table:
                break
            continue
        in_table = True
        if cells[0].startswith("`"):
            rows.append(cells)
    found = set()
    for cells in rows:
        groups, resources, verbs = (re.findall(r"`([^`]*)`", cell) for cell in cells[:3])
        found |= {("" if group == '""' else group, resource, verb)
                  for group in groups for resource in resources for verb in verbs}
    return found
