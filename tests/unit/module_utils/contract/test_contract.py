"""The contract: every gkm.io name lives in contract/vocabulary.py, and the contract imports nothing of ours."""

import ast
import os

from tests.helpers.paths import ROOT

PLUGINS = os.path.join(ROOT, "plugins")
# The controller (issue 33) writes and reads the same names, so it spells none of them either.
CONTROLLER = os.path.join(ROOT, "controller")
CONTRACT = os.path.join(PLUGINS, "module_utils", "contract")
# Module documentation is prose for ansible-doc, not a name the code writes or reads.
CONTRACT_PACKAGE = "ansible_collections.gkm.cluster.plugins.module_utils.contract"
DOC_ASSIGNMENTS = {"DOCUMENTATION", "EXAMPLES", "RETURN"}


def python_files(top):
    for directory, _dirs, files in os.walk(top):
        if "__pycache__" not in directory:
            yield from (os.path.join(directory, name) for name in sorted(files) if name.endswith(".py"))


def docstrings_and_docs(tree):
    """The string nodes that document: docstrings and DOCUMENTATION / EXAMPLES / RETURN."""
    skipped = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            skipped.add(id(first.value))
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) in DOC_ASSIGNMENTS for t in node.targets):
            skipped.update(id(n) for n in ast.walk(node.value))
    return skipped


def gkm_literals(path):
    with open(path) as handle:
        tree = ast.parse(handle.read())
    skipped = docstrings_and_docs(tree)
    return ["%s:%d: %r" % (os.path.relpath(path, ROOT), node.lineno, node.value[:80]) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "gkm.io/" in node.value
            and id(node) not in skipped]


def test_no_gkm_io_name_is_spelled_outside_the_contract():
    found = [hit for top in (PLUGINS, CONTROLLER) for path in python_files(top)
             if not path.startswith(CONTRACT + os.sep) for hit in gkm_literals(path)]
    assert found == [], "use the names in plugins/module_utils/contract/vocabulary.py:\n" + "\n".join(found)


def test_the_contract_imports_nothing_of_ours():
    ours = []
    for path in python_files(CONTRACT):
        with open(path) as handle:
            tree = ast.parse(handle.read())
        for node in ast.walk(tree):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            if module.startswith("ansible_collections.gkm") and not module.startswith(CONTRACT_PACKAGE):
                ours.append("%s imports %s" % (os.path.relpath(path, ROOT), module))
    assert ours == []
