"""The registry_secrets_namespace filter (plugins/filter/registry_secrets_namespace.py): the system namespace only when
the options put every extraction Job, and so every registry Secret, there (docs/security.md, class 12)."""

import pytest

from ansible_collections.gkm.cluster.plugins.filter.registry_secrets_namespace import registry_secrets_namespace


@pytest.mark.parametrize("options, expected", [
    ({"system_namespace": "gkm-ops", "system_namespace_jobs": True, "create_pvs": "always"}, "gkm-ops"),
    ({"system_namespace_jobs": "yes", "create_pvs": "always"}, "gkm-system"),  # a role variable's string
    ({"system_namespace_jobs": True, "create_pvs": "auto"}, ""),  # a provisioned slot keeps its Job and Secret
    ({"system_namespace_jobs": False, "create_pvs": "always"}, ""),
    ({"create_pvs": "always"}, "gkm-system"),  # the module's default: the Jobs in the system namespace
    ({}, ""),  # create_pvs auto
])
def test_the_system_namespace_only_when_every_extraction_job_runs_there(options, expected):
    assert registry_secrets_namespace(options) == expected
