"""The plan written in order (apply/writes.py), against a recording stand-in for Kube: a slot's access PV is written
after its PVC, with that PVC's uid in its claimRef, so it binds that claim alone."""

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.apply import writes
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner
from tests.helpers.distribute import facts, is_access, make_spec


class RecordingKube:
    dry_run = False

    def __init__(self):
        self.applied = []

    def apply(self, body):
        self.applied.append(body)

    def get(self, kind, name, namespace=None):
        if kind == "PersistentVolume":
            return {"status": {"phase": "Available"}}
        return {"metadata": {"name": name, "namespace": namespace, "uid": "uid-" + name}}

    def map(self, function, items):
        return [function(item) for item in items]


class NoScrub:
    def clear_removals(self, actions, errors, kept_directories):
        return actions


def test_an_access_pv_is_written_after_its_pvc_bound_to_that_pvc_s_uid():
    kube = RecordingKube()
    assert writes.execute(kube, planner.plan(make_spec(), facts()), 1, NoScrub()) == []
    order = [(obj["kind"], is_access(obj), obj["metadata"]["name"]) for obj in kube.applied]
    access_pvs = [obj for obj in kube.applied if obj["kind"] == "PersistentVolume" and is_access(obj)]
    assert len(access_pvs) == 3
    for pv in access_pvs:
        name = pv["metadata"]["name"]
        assert order.index(("PersistentVolumeClaim", True, name)) < order.index(("PersistentVolume", True, name))
        assert pv["spec"]["claimRef"] == {"namespace": "gkm-system", "name": name, "uid": "uid-" + name}
    assert [kind for kind, _access, _name in order][-3:] == ["Job"] * 3


class BatchRecordingKube(RecordingKube):
    """Records each map call's names: what one batch writes concurrently."""

    def __init__(self):
        super().__init__()
        self.batches = []

    def map(self, function, items):
        self.batches.append([item.name for item in items])
        return super().map(function, items)


def _pvc(name):
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "team"}}


def test_a_finished_wave_s_mark_lands_before_the_next_wave_s_new_pvc():
    """The mark (an update) and the next node's slot (a create) are in one plan: written concurrently, a reader could
    see both nodes upgrading under maxUnavailable 1 (the watcher of test_upgrades did, once in CI)."""
    plan = planner.Plan(eligibility=None)
    plan.add("create", _pvc("a-next-wave"), "missing")
    plan.add("update", _pvc("b-finished-wave"), "labels or annotations differ")
    kube = BatchRecordingKube()
    assert writes.execute(kube, plan, 1, NoScrub()) == []
    assert [batch for batch in kube.batches if batch] == [["b-finished-wave"], ["a-next-wave"]]
