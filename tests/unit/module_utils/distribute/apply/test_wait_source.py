"""apply/wait.py reads every poll through the run's facts source and waits between polls with its pause: LISTs
and a full interval's sleep for the modules (ListSource), a wake-up at the watch event for a controller
(IndexSource), so a Job's completion ends the wait at once instead of at the end of the poll interval."""

import threading
import time

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    EXTRACTED,
    MANAGED_BY_LABEL,
    MANAGER,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.apply import wait
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (
    assemble_facts,
    job_condition,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import ClusterIndex, IndexSource
from tests.helpers.distribute import make_spec

JOB = {"kind": "Job", "metadata": {"name": "vector-add-abc-w1", "namespace": "team-a", "labels": {
    MANAGED_BY_LABEL: MANAGER, CACHE_LABEL: "vector-add", CACHE_NAMESPACE_LABEL: "team-a"}}, "status": {}}


class Plan:
    rollout = None

    def to_result(self):
        return {}


class Kube:
    writes = 0


def status_of(_spec, _plan, facts):
    """One entry per Job of the facts: Extracted once it completed, Extracting until then."""
    return {"entries": [{"phase": EXTRACTED if job_condition(job, "Complete") else "Extracting"}
                        for job in facts.objects["Job"]]}


class Recorded(IndexSource):
    """An IndexSource that records each pause: how long it was allowed and whether a change ended it."""

    def __init__(self, index):
        super().__init__(index)
        self.pauses = []

    def pause(self, seconds):
        changed = super().pause(seconds)
        self.pauses.append((seconds, changed))
        return changed


def completed(job):
    return dict(job, metadata=dict(job["metadata"], resourceVersion="2"),
                status={"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})


def test_the_wait_polls_the_index_and_wakes_at_the_jobs_completion():
    index = ClusterIndex()
    index.apply(None, JOB)
    source = Recorded(index)
    spec = make_spec()
    facts = assemble_facts(source, spec)
    timer = threading.Timer(0.05, index.apply, ("MODIFIED", completed(JOB)))
    timer.start()
    try:
        facts, polled = wait._poll(Kube(), source, spec, facts, Plan(), time.monotonic() + 60, status_of)
    finally:
        timer.cancel()
    assert polled is True
    assert source.pauses == [(wait.WAIT_POLL_SECONDS, True)]  # one pause, ended by the event, not by its interval
    assert job_condition(facts.objects["Job"][0], "Complete")


def test_a_wait_with_nothing_to_wait_for_neither_pauses_nor_reads():
    index = ClusterIndex()
    index.apply(None, completed(JOB))
    source = Recorded(index)
    spec = make_spec()
    facts = assemble_facts(source, spec)
    version = index.version
    assert wait._poll(Kube(), source, spec, facts, Plan(), time.monotonic() + 60, status_of) == (facts, False)
    assert source.pauses == [] and index.version == version
