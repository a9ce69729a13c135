"""A rolling upgrade in the cache resource's status (distribute/upgrade_status.py): bounded counts, the phase and
the Upgraded condition, without a cluster."""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import upgrade_waves as waves
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import upgrade_status as upgrade
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.resource_status import (
    summary_status,
)
from tests.helpers.distribute import DIGEST_B, EXTRACTED_STATUS, distribution, fleet
from tests.helpers.distribute import upgrade as plan_upgrade


def test_a_progressing_rollout_of_twenty_nodes_is_counts_not_names():
    rollout = plan_upgrade(fleet(20), {"maxUnavailable": "25%"}).to_dict()
    status = upgrade.upgrade_status(rollout)
    assert status == {"digest": short_digest(DIGEST_B), "phase": upgrade.PROGRESSING, "paused": False,
                      "maxUnavailable": 5, "message": rollout["message"],
                      "counts": {"pending": 15, "upgrading": 5, "upgraded": 0, "failed": 0, "rolledBack": 0}}
    condition = upgrade.upgrade_condition(status, "t")
    assert (condition["type"], condition["status"], condition["reason"]) == ("Upgraded", "False", "RolloutProgressing")


def test_a_stopped_rollout_says_why_and_counts_the_rolled_back_nodes():
    nodes = fleet(4)
    rollout = plan_upgrade(nodes, {"maxUnavailable": 2}, **{"gpu-00": waves.NodeProgress(
        previous="a" * 12, target="Error")}).to_dict()
    status = upgrade.upgrade_status(rollout)
    assert status["phase"] == upgrade.STOPPED and status["counts"]["rolledBack"] == 1
    assert status["counts"]["pending"] == 3 and "failureThreshold" in status["message"]
    assert upgrade.upgrade_condition(status, "t")["reason"] == "RolloutStopped"


def test_paused_and_complete():
    paused = upgrade.upgrade_status(plan_upgrade(fleet(3), {"paused": True}).to_dict())
    assert (paused["phase"], paused["paused"], paused["counts"]["pending"]) == (upgrade.PAUSED, True, 3)
    extracted = {name: waves.NodeProgress(target="Extracted") for name in ("gpu-00", "gpu-01")}
    done = plan_upgrade(fleet(2), None, **extracted)
    complete = upgrade.upgrade_status(done.to_dict())
    assert complete["phase"] == upgrade.COMPLETE and complete["counts"]["upgraded"] == 2
    assert upgrade.upgrade_condition(complete, "t")["status"] == "True"


def test_the_resource_status_has_the_upgrade_only_with_a_policy():
    assert "upgrade" not in summary_status(distribution(EXTRACTED_STATUS), "t")
    rollout = plan_upgrade(fleet(3), {"maxUnavailable": 1}).to_dict()
    status = summary_status(distribution(EXTRACTED_STATUS, rollout=rollout), "t")
    assert status["upgrade"]["counts"] == {"pending": 2, "upgrading": 1, "upgraded": 0, "failed": 0, "rolledBack": 0}
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Upgraded"]
