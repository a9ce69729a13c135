"""The period of the operator's early requeue (operator/requeue.py): what ansible-operator's Go parser reads, and
nothing that would stop the reconciles."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.operator.requeue import RequeueError, requeue_period


@pytest.mark.parametrize("period", ["15s", "1m30s", "1.5h", "500ms", "2h45m", "10us", "10\u00b5s"])
def test_go_durations_pass_unchanged(period):
    assert requeue_period(period) == period


@pytest.mark.parametrize("period", ["15", "15 s", "fifteen", "", None, "1d", "s", "-15s"])
def test_what_the_engine_cannot_parse_is_refused_naming_the_variable(period):
    with pytest.raises(RequeueError, match=r"operator_events_rollout_requeue .* such as 15s"):
        requeue_period(period)


@pytest.mark.parametrize("period", ["0s", "0m0s", "0.0h"])
def test_zero_would_end_the_periodic_reconciles(period):
    with pytest.raises(RequeueError, match="would end the cache's periodic reconciles"):
        requeue_period(period)
