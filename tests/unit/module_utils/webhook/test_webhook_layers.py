"""webhook/ in three parts: admission decisions import neither the server nor the installer, the server imports no
installer, and the installer knows the server only by its module path."""

import ast
import os

from tests.helpers.paths import ROOT

WEBHOOK = os.path.join(ROOT, "plugins", "module_utils", "webhook")
PACKAGE = "ansible_collections.gkm.cluster.plugins.module_utils.webhook."
MAY_IMPORT = {"admission": {"admission"}, "server": {"admission", "server"}, "install": {"install"}}


def test_each_part_imports_only_what_it_may():
    found = []
    for part, allowed in MAY_IMPORT.items():
        for name in sorted(os.listdir(os.path.join(WEBHOOK, part))):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(WEBHOOK, part, name)) as handle:
                tree = ast.parse(handle.read())
            for node in ast.walk(tree):
                module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
                if module.startswith(PACKAGE) and module[len(PACKAGE):].split(".")[0] not in allowed:
                    found.append("%s/%s imports webhook.%s" % (part, name, module[len(PACKAGE):]))
    assert found == []
