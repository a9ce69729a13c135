"""meta/runtime.yml: the gkm.cluster.k8s action group lists every module that takes kubernetes.core's auth options."""

import glob
import os

import yaml

from tests.helpers.paths import ROOT


def test_k8s_group_lists_exactly_the_modules_with_auth_options():
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as handle:
        group = yaml.safe_load(handle)["action_groups"]["k8s"]
    with_auth = set()
    for path in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")):
        with open(path) as handle:
            # The auth options' doc fragment: what module_defaults of the group can set.
            if "kubernetes.core.k8s_auth_options" in handle.read():
                with_auth.add(os.path.basename(path)[:-3])
    assert with_auth, "no module documents kubernetes.core's auth options"
    assert sorted(group) == sorted(with_auth)
