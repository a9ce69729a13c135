"""Both cache CRDs type podTemplate.spec.tolerations and .affinity with the core types' schemas that
tools/crd_core_schemas.py writes (docs/security.md, class 8)."""

import importlib.util
import os
import re

import pytest
import yaml

from tests.helpers.paths import ROOT

CRDS = os.path.join(ROOT, "roles", "gkm", "files", "crds")
SCRIPT = os.path.join(ROOT, "tools", "crd_core_schemas.py")
CACHE_CRDS = ["gkm.io_gkmcaches.yaml", "gkm.io_clustergkmcaches.yaml"]


def load_script():
    spec = importlib.util.spec_from_file_location("crd_core_schemas", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(name):
    with open(os.path.join(CRDS, name)) as handle:
        return handle.read()


def pod_spec_fields(text):
    crd = yaml.safe_load(text)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema["properties"]["podTemplate"]["properties"]["spec"]["properties"]


def untyped(node, path):
    """Paths under node that keep unknown fields or have no type."""
    found = [path] if node.get("x-kubernetes-preserve-unknown-fields") or "type" not in node else []
    for name, child in (node.get("properties") or {}).items():
        found += untyped(child, "%s.%s" % (path, name))
    if isinstance(node.get("items"), dict):
        found += untyped(node["items"], path + "[]")
    return found


@pytest.mark.parametrize("name", CACHE_CRDS)
def test_tolerations_and_affinity_are_typed_to_the_leaves(name):
    fields = pod_spec_fields(read(name))
    assert untyped(fields["tolerations"], "tolerations") + untyped(fields["affinity"], "affinity") == []
    required = fields["affinity"]["properties"]["nodeAffinity"]["properties"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    terms = required["properties"]["nodeSelectorTerms"]
    assert terms["items"]["properties"]["matchExpressions"]["items"]["required"] == ["key", "operator"]


def test_both_crds_carry_the_same_schemas():
    first, second = (pod_spec_fields(read(name)) for name in CACHE_CRDS)
    assert {key: first[key] for key in ("tolerations", "affinity")} == {
        key: second[key] for key in ("tolerations", "affinity")}


@pytest.mark.parametrize("name", CACHE_CRDS)
def test_the_generated_part_is_the_scripts_output(name):
    # Rewriting a CRD with the schemas it already holds changes nothing: nobody edited the part by hand.
    text = read(name)
    fields = pod_spec_fields(text)
    version = re.search(r"core/v1 OpenAPI of Kubernetes (\S+):", text).group(1)
    script = load_script()
    assert script.rewrite(text, version, {key: fields[key] for key in ("tolerations", "affinity")}) == text
