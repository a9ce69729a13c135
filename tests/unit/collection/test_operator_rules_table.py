"""The in-cluster operator's ClusterRole (roles/gkm/templates/operator.yaml.j2) is exactly the table of
docs/operator.md, and grants what the reconcile calls (docs/security.md, class 12)."""

from tests.helpers.operator_rbac import cluster_role_grants, documented_grants, namespace_role_grants


def test_the_operator_may_evict_the_pods_upgrade_policy_restart_evicts():
    # distribute/apply/evictions.py POSTs policy/v1 Evictions to pods/<name>/eviction.
    assert ("", "pods/eviction", "create") in cluster_role_grants()


def test_the_cluster_role_is_exactly_the_documented_table():
    rendered, documented = cluster_role_grants(), documented_grants()
    assert {"rendered, not documented": sorted(rendered - documented),
            "documented, not rendered": sorted(documented - rendered)} == {
        "rendered, not documented": [], "documented, not rendered": []}


def test_namespaces_are_written_only_when_the_runs_create_them():
    widened = cluster_role_grants({"caches_create_namespaces": True}) - cluster_role_grants()
    assert widened == {("", "namespaces", "create"), ("", "namespaces", "patch")}


def test_the_operator_has_no_wildcard_and_no_rbac_write():
    granted = cluster_role_grants({"caches_create_namespaces": True})
    assert not [grant for grant in granted if "*" in grant]
    assert not [grant for grant in granted if grant[0] == "rbac.authorization.k8s.io"]


def test_with_every_extraction_job_in_its_namespace_the_operator_reads_secrets_there_only():
    secrets = {("", "secrets", verb) for verb in ("get", "list", "watch", "create", "patch", "delete")}
    assert secrets <= cluster_role_grants() and not secrets & namespace_role_grants()
    narrowed = {"caches_system_namespace_jobs": True, "caches_create_pvs": "always"}
    assert not [grant for grant in cluster_role_grants(narrowed) if grant[1] == "secrets"]
    assert cluster_role_grants() - cluster_role_grants(narrowed) == secrets
    assert namespace_role_grants(narrowed) - namespace_role_grants() == secrets
    # A provisioned slot keeps its Job, and the Job's Secret, in the slot's namespace: Secrets stay cluster-wide.
    for kept in ({"caches_system_namespace_jobs": True}, {"caches_system_namespace_jobs": True,
                                                          "caches_create_pvs": "auto"}):
        assert secrets <= cluster_role_grants(kept), kept
