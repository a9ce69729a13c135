"""The built collection tarball as users get it: its contents, an execution environment built from it, and an
install into an empty collections path that runs a playbook by FQCN against the simulated cluster."""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import uuid

import pytest
import yaml

from tests.helpers import kcache_images
from tests.helpers.modules import ROOT, run_module, venv_site_packages
from tests.helpers.modules import VENV_BIN as BIN

SITE_PACKAGES = venv_site_packages()


def requirement_names(lines):
    """Distribution names of requirement lines (comments and blank lines skipped)."""
    return {re.split(r"[<>=!~;\[ ]", line.split("#")[0].strip())[0] for line in lines
            if line.split("#")[0].strip()}


with open(os.path.join(ROOT, "requirements.txt")) as _handle:
    DECLARED = requirement_names(_handle)


def run(command, **kwargs):
    completed = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)
    assert completed.returncode == 0, "%s failed:\n%s\n%s" % (
        command, completed.stdout[-3000:], completed.stderr[-3000:])
    return completed


def clean_env(**extra):
    """The caller's environment without its ANSIBLE_* settings (make puts the checkout on the collections path)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(extra)
    return env


def test_requirements_declare_every_library_the_plugins_import():
    imported = set()
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "plugins")):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as handle:
                    tree = ast.parse(handle.read())
                imported |= {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                             for alias in node.names}
                imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                             if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    third_party = imported - set(sys.stdlib_module_names) - {"ansible", "ansible_collections", "__future__"}
    # For every library used so far the import name is the distribution name.
    assert third_party == DECLARED


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(dist), ROOT],
        env=clean_env())
    (path,) = dist.glob("gkm-cluster-*.tar.gz")
    return path


def test_tarball_holds_only_what_an_installed_collection_uses(tarball):
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
    tops = {name.split("/")[0] for name in names}
    assert {"plugins", "roles", "playbooks", "meta", "changelogs", "containers", "docs",
            "requirements.txt", "bindep.txt", "MANIFEST.json", "README.md", "LICENSE"} <= tops
    assert not tops & {"tests", "molecule", "tools", "bench", "requirements", ".ci", "Makefile", "pyproject.toml"}
    # Nothing of the checkout's own state: venvs (make test-lowest and test-highest build two while the lanes
    # run), caches, the simulators' directories.
    assert not [top for top in tops if top.startswith(".")], sorted(tops)
    assert "inventories/sim" not in names and {"inventories/hardware", "inventories/kind"} <= names
    assert "meta/execution-environment.yml" in names and "changelogs/changelog.yaml" in names
    assert not any(name.startswith("changelogs/fragments") for name in names)
    # Everything the tools image copies ships, so it builds from an installed collection too.
    with open(os.path.join(ROOT, "containers", "tools", "Containerfile")) as handle:
        copied = [line.split()[1:-1] for line in handle if line.startswith("COPY ")]
    for sources in copied:
        for source in sources:
            assert any(name == source.rstrip("/") for name in names), source


def test_execution_environment_context_installs_our_dependencies(tarball, tmp_path):
    """ansible-builder create, then its galaxy and introspection stages replayed here (no container engine)."""
    definition = tmp_path / "execution-environment.yml"
    definition.write_text(yaml.safe_dump({
        "version": 3,
        "images": {"base_image": {"name": "quay.io/ansible/awx-ee:latest"}},
        # A file requirement is resolved inside the image, in the context's _build directory.
        "dependencies": {"galaxy": {"collections": [{"name": "files/%s" % tarball.name, "type": "file"}]}},
        "additional_build_files": [{"src": str(tarball), "dest": "files"}],
    }))
    context = tmp_path / "context"
    run([os.path.join(BIN, "ansible-builder"), "create", "-f", str(definition), "-c", str(context),
         "--output-filename", "Containerfile"], env=clean_env())
    build = context / "_build"
    assert (build / "files" / tarball.name).is_file()
    containerfile = (context / "Containerfile").read_text()
    assert "ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml" in containerfile
    assert "/output/scripts/introspect.py introspect" in containerfile

    # The galaxy stage: kubernetes.core, our dependency, as a base image provides it, and --offline passed as
    # the ANSIBLE_GALAXY_CLI_COLLECTION_OPTS build argument (Galaxy is out of reach here).
    collections = tmp_path / "usr-share-ansible" / "collections"
    shutil.copytree(os.path.join(SITE_PACKAGES, "ansible_collections", "kubernetes", "core"),
                    collections / "ansible_collections" / "kubernetes" / "core")
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "-r", "requirements.yml",
         "--collections-path", str(collections)], cwd=build, env=clean_env(ANSIBLE_GALAXY_DISABLE_GPG_VERIFY="1"))
    assert (collections / "ansible_collections" / "gkm" / "cluster" / "MANIFEST.json").is_file()

    # The builder stage: the context's own introspection script writes what pip and bindep then install.
    pip_file, bindep_file = tmp_path / "out" / "requirements.txt", tmp_path / "out" / "bindep.txt"
    run([os.path.join(BIN, "python"), str(build / "scripts" / "introspect.py"), "introspect", str(collections),
         "--write-pip=%s" % pip_file, "--write-bindep=%s" % bindep_file], cwd=build)
    ours = [line.split("#")[0].strip() for line in pip_file.read_text().splitlines()
            if line.endswith("# from collection gkm.cluster")]
    assert requirement_names(ours) == DECLARED >= {"kubernetes", "oras", "cryptography", "aiohttp", "isal"}
    assert "kubernetes>=24.2.0" in ours
    system = [line for line in bindep_file.read_text().splitlines() if line.endswith("# from collection gkm.cluster")]
    assert system and all("[compile" in line for line in system), system

    # The ranges admit the versions the tests run with: pip finds every one already satisfied, offline.
    ours_file = tmp_path / "ours.txt"
    ours_file.write_text("\n".join(ours) + "\n")
    check = run([os.path.join(BIN, "pip"), "install", "--dry-run", "--no-index", "-r", str(ours_file)])
    assert "Would install" not in check.stdout
    # An image's final stage installs bindep's default profile: nothing for this collection.
    runtime = subprocess.run([os.path.join(BIN, "bindep"), "-b", "-f", os.path.join(ROOT, "bindep.txt")],
                             capture_output=True, text=True, check=False)
    assert (runtime.returncode, runtime.stdout.strip()) == (0, "")


@pytest.mark.cluster
@pytest.mark.registry
def test_installed_tarball_runs_status_playbook_by_fqcn(tarball, tmp_path, sim, registry, namespace):
    collections = tmp_path / "collections"
    collections.mkdir()
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "--no-deps",
         "--collections-path", str(collections), str(tarball)], env=clean_env())
    # kubernetes.core comes from the venv's ansible package; the checkout is on no path.
    env = clean_env(ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([str(collections), SITE_PACKAGES]),
                    ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_DEPRECATION_WARNINGS="0", ANSIBLE_NOCOLOR="1")
    user = tmp_path / "user"
    user.mkdir()
    listed = json.loads(run([os.path.join(BIN, "ansible-galaxy"), "collection", "list", "gkm.cluster",
                             "--format", "json"], env=env, cwd=user).stdout)
    assert list(listed) == [str(collections / "ansible_collections")]

    inventory = user / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"gkm_controller": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "gkm_kubeconfig": sim.kubeconfig}}}}))
    # A cache for status to show, distributed by the installed collection's own module.
    image = kcache_images.build_image(registry.host, "packaging/vector-add", "v1",
                                      kcache_images.CacheSpec(backend="hip"))
    name = "pack-%s" % uuid.uuid4().hex[:6]
    distribute = user / "distribute.yml"
    task = {"name": "Distribute", "gkm.cluster.cache_distribute": {
        "name": name, "namespace": namespace, "image": image.ref, "registry_plain_http": True,
        "extract_image": "gkm-cluster-tools:test", "kubeconfig": "{{ gkm_kubeconfig }}",
        # One worker: other sessions may add many nodes to the shared cluster.
        "pod_template": {"spec": {
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "nodeSelector": {"kubernetes.io/hostname": "gkm-gpu-worker-1"}}}}}
    distribute.write_text(yaml.safe_dump([{"name": "Distribute one cache", "hosts": "gkm_controller",
                                           "gather_facts": False, "tasks": [task]}], sort_keys=False))
    try:
        run([os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), str(distribute)], env=env, cwd=user)
        status = run([os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), "gkm.cluster.status"],
                     env=env, cwd=user)
    finally:
        # Its PVs are cluster-scoped: the namespace's deletion would leave them behind.
        removed = run_module("cache_distribute", sim.kubeconfig, name=name, namespace=namespace, state="absent",
                             force=True)
        assert not removed.get("failed"), removed
    # The default callback prints the table lines as a JSON list: one quoted line each.
    lines = [line.strip().rstrip(",").strip('"') for line in status.stdout.splitlines()]
    assert "PLAY [Show gkm.cluster cache status] " in status.stdout and "failed=0" in status.stdout
    assert ["NAMESPACE", "NAME", "STATUS", "NODES", "NODE-IN-USE", "NODE-NOT-IN-USE", "NODE-ERROR", "POD-RUNNING",
            "POD-OUTDATED"] in [line.split() for line in lines], status.stdout
    rows = [line.split() for line in lines if name in line]
    assert len(rows) == 1 and rows[0][:2] == [namespace, name] and len(rows[0]) == 9, status.stdout
