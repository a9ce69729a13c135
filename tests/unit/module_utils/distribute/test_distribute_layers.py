"""distribute/ is a pipeline: each stage imports only the stages before it (and the shared errors module), so data
flows one way, inputs -> facts -> plan -> apply -> status, and only pipeline.py knows the order."""

import ast
import os

from tests.helpers.paths import ROOT

DISTRIBUTE = os.path.join(ROOT, "plugins", "module_utils", "distribute")
PACKAGE = "ansible_collections.gkm.cluster.plugins.module_utils.distribute."
STAGES = ["inputs", "facts", "plan", "apply", "status"]
SHARED = {"errors"}


def imported_modules(path):
    with open(path) as handle:
        tree = ast.parse(handle.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
            yield node.module[len(PACKAGE):]
        elif isinstance(node, ast.ImportFrom) and node.module == PACKAGE[:-1]:
            yield from (alias.name for alias in node.names)


def test_each_stage_imports_only_the_stages_before_it():
    found = []
    for rank, stage in enumerate(STAGES):
        allowed = set(STAGES[:rank + 1]) | SHARED
        for name in sorted(os.listdir(os.path.join(DISTRIBUTE, stage))):
            if not name.endswith(".py"):
                continue
            for module in imported_modules(os.path.join(DISTRIBUTE, stage, name)):
                if module.split(".")[0] not in allowed:
                    found.append("%s/%s imports distribute.%s" % (stage, name, module))
    assert found == []


def test_the_top_level_holds_only_the_orchestration():
    modules = sorted(name[:-3] for name in os.listdir(DISTRIBUTE) if name.endswith(".py") and name != "__init__.py")
    packages = sorted(name for name in os.listdir(DISTRIBUTE) if os.path.isdir(os.path.join(DISTRIBUTE, name))
                      and name != "__pycache__")
    assert packages == sorted(STAGES)
    assert modules == ["errors", "pipeline", "reconcile", "tasks"]
