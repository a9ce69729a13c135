"""The Lease loop (controller/gkm_controller/lease_loop.py) on an explicit clock, against a Lease store that keeps
resourceVersions as the API server does: one leader at a time, a take-over after the recorded duration, a conflict
lost, and a leader whose renewals fail stops at its deadline."""

import copy

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError
from controller.gkm_controller.lease import LEASE_NAME, LeaseElector
from controller.gkm_controller.lease_loop import LEASES_PATH, LeaseLoop

NAMESPACE = "gkm-system"
PATH = LEASES_PATH % NAMESPACE


class Leases:
    """The one Lease, with the API server's answers: 404 when absent, 409 on a stale resourceVersion or a second
    create; down=True: every request fails (HTTP 503)."""

    def __init__(self):
        self.lease, self.version, self.down, self.sent = None, 0, False, []

    def request(self, method, path, body=None, what=None, retry_conflicts=True):
        assert retry_conflicts is False or method == "GET"
        self.sent.append((method, path))
        if self.down:
            raise KubeError("%s %s failed: HTTP 503" % (method, what), 503)
        if method == "GET":
            assert path == "%s/%s" % (PATH, LEASE_NAME)
            return (200, copy.deepcopy(self.lease)) if self.lease else (404, None)
        if method == "POST":
            assert path == PATH
            if self.lease:
                raise KubeError("AlreadyExists", 409)
        else:
            assert method == "PUT" and path == "%s/%s" % (PATH, LEASE_NAME)
            if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                raise KubeError("Conflict", 409)
        self.version += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return 201 if method == "POST" else 200, copy.deepcopy(self.lease)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Replica:
    def __init__(self, name, leases, clock):
        self.events = []
        self.loop = LeaseLoop(leases, LeaseElector(name, NAMESPACE, clock=clock),
                              on_leading=lambda: self.events.append("leading"),
                              on_lost=lambda reason: self.events.append(("lost", reason)))

    def look(self):
        step = self.loop.once()
        self.loop.check_deadline()
        return step.action


def test_the_first_replica_creates_and_renews_the_second_waits_then_takes_over_and_the_first_learns_it_lost():
    leases, clock = Leases(), Clock()
    a, b = Replica("a", leases, clock), Replica("b", leases, clock)
    assert a.look() == "create" and a.events == ["leading"]
    for _renewal in range(10):  # 20 s: a renews every 2 s, b keeps waiting
        assert b.look() == "wait"
        clock.now += 2
        assert a.look() == "renew"
    assert a.events == ["leading"] and b.events == [] and leases.lease["spec"]["holderIdentity"] == "a"
    assert a.loop.elector.deadline.leading() and not b.loop.elector.deadline.leading()

    # a stops renewing (killed): b takes after the recorded 8 s, counted from the last change it saw.
    assert b.look() == "wait"
    clock.now += 8
    assert not a.loop.elector.deadline.leading()  # a's writes ended before b may lead
    assert b.look() == "take" and b.events == ["leading"]
    assert leases.lease["spec"]["holderIdentity"] == "b" and leases.lease["spec"]["leaseTransitions"] == 1
    assert a.look() == "wait" and a.events == ["leading", ("lost", "lost: b holds the Lease")]


def test_two_replicas_taking_at_once_conflict_and_one_leads():
    leases, clock = Leases(), Clock()
    leases.lease = {"metadata": {"name": LEASE_NAME, "resourceVersion": "7"},
                    "spec": {"holderIdentity": "", "leaseDurationSeconds": 8}}
    a, b = Replica("a", leases, clock), Replica("b", leases, clock)
    read = leases.request("GET", "%s/%s" % (PATH, LEASE_NAME))[1]
    step_a, step_b = a.loop.elector.decide(read), b.loop.elector.decide(read)
    assert (step_a.action, step_b.action) == ("take", "take")
    a.loop.elector.written(step_a, leases.request("PUT", "%s/%s" % (PATH, LEASE_NAME), body=step_a.body,
                                                  retry_conflicts=False)[1])
    try:
        leases.request("PUT", "%s/%s" % (PATH, LEASE_NAME), body=step_b.body, retry_conflicts=False)
        raise AssertionError("the stale take was accepted")
    except KubeError as error:
        assert error.status == 409
    # Through the loop: b's next look sees a's record and waits; a write refused leaves it a follower.
    assert b.look() == "wait" and b.events == [] and not b.loop.elector.leading


def test_a_create_refused_leaves_the_replica_a_follower():
    leases, clock = Leases(), Clock()
    b = Replica("b", leases, clock)
    original = leases.request

    def create_first(method, path, **kwargs):
        if method == "POST":  # another replica created it between b's read and its create
            leases.lease = {"metadata": {"name": LEASE_NAME, "resourceVersion": "1"},
                            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 8, "renewTime": "t"}}
        return original(method, path, **kwargs)

    leases.request = create_first
    assert b.look() == "create" and b.events == [] and not b.loop.elector.leading


def test_a_leader_whose_renewals_fail_loses_at_its_deadline_and_its_writes_are_refused():
    leases, clock = Leases(), Clock()
    a = Replica("a", leases, clock)
    a.look()
    leases.down = True
    stopped = []
    for _look in range(3):  # 6 s of failed reads (run() logs them; here each look is driven by hand): before the
        # deadline, 8 s less the 1 s margin
        clock.now += 2
        try:
            a.loop.once()
        except KubeError:
            stopped.append("read failed")
        a.loop.check_deadline()
    assert a.events == ["leading"] and len(stopped) == 3
    clock.now += 1.5
    a.loop.check_deadline()
    assert a.events == ["leading", ("lost", "the Lease was not renewed before its deadline")]
    assert a.loop.elector.lost and not a.loop.elector.deadline.leading()


def test_run_stops_when_the_lease_is_lost():
    leases, clock = Leases(), Clock()
    a = Replica("a", leases, clock)
    a.look()
    leases.lease["spec"]["holderIdentity"] = "b"  # another replica took it (a's process was paused)
    leases.lease["metadata"]["resourceVersion"] = "99"

    class Stop:
        def is_set(self):
            return False

        def wait(self, seconds):
            clock.now += seconds

    a.loop.run(Stop())  # returns: the look saw another holder
    assert a.events[-1] == ("lost", "lost: b holds the Lease")


def test_a_clean_stop_releases_the_lease_and_a_follower_takes_it_at_its_next_look():
    leases, clock = Leases(), Clock()
    a, b = Replica("a", leases, clock), Replica("b", leases, clock)
    a.look()
    assert b.look() == "wait"
    assert a.loop.release() is True and not a.loop.elector.deadline.leading()
    assert leases.lease["spec"]["holderIdentity"] == ""
    assert b.look() == "take" and b.events == ["leading"]
    assert a.loop.release() is False  # held by another now: left alone
    assert leases.lease["spec"]["holderIdentity"] == "b"
