"""What `--diff` shows of a plan (plan/diff.py), against facts as the sources give them."""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import SPEC_HASH_ANNOTATION
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.trimmed import object_facts
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.diff import plan_diff
from tests.helpers.distribute import WORKERS, as_live, facts, make_spec

TOLERANT = make_spec(pod_template={"spec": {"tolerations": [{"operator": "Exists"}]}})


def test_a_replaced_job_differs_only_where_the_facts_can_tell_a_new_one_shows_its_template():
    created = plan_diff(planner.plan(TOLERANT, facts()), facts())
    job = next(diff["after"] for diff in created if diff["after"]["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["tolerations"] == [{"operator": "Exists"}]

    live = as_live(planner.plan(TOLERANT, facts()).desired)
    live["Job"] = [object_facts("Job", job) for job in live["Job"]]
    current = facts(objects=live)
    replaced = plan_diff(planner.plan(make_spec(), current), current)
    assert [diff["before_header"].rsplit(" ", 1)[1] for diff in replaced] == ["(replace)"] * len(WORKERS)
    for diff in replaced:
        before, after = diff["before"], diff["after"]
        assert after["spec"] == before["spec"] and before["spec"]["template"]["spec"]["containers"][0]["image"]
        assert after["metadata"]["annotations"][SPEC_HASH_ANNOTATION] != before["metadata"]["annotations"][
            SPEC_HASH_ANNOTATION]
