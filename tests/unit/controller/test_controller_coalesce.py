"""Node events coalesced (controller/gkm_controller/coalesce.py): the caches submitted within the window run once
each, with the newest copy, on the executor; a failed run is logged and leaves the executor's thread alive."""

from controller.gkm_controller.coalesce import Coalescer


def cache(name, version="1", namespace="team-a"):
    return {"kind": "GKMCache", "metadata": {"name": name, "namespace": namespace, "resourceVersion": version}}


class Clock:
    """schedule(delay, function) kept until fire()."""

    def __init__(self):
        self.scheduled = []

    def __call__(self, delay, function):
        self.scheduled.append((delay, function))

    def fire(self):
        scheduled, self.scheduled = self.scheduled, []
        return [function() for _delay, function in scheduled]


class Inline:
    def submit(self, function, *args):
        return function(*args)


def test_a_burst_of_submits_runs_each_cache_once_with_its_newest_copy_after_the_window():
    runs, clock = [], Clock()
    coalescer = Coalescer(lambda kind, resource, finalizing: runs.append((kind, resource, finalizing)), Inline(),
                          schedule=clock)
    for version in range(50):
        coalescer.submit("GKMCache", cache("a", str(version)))
        coalescer.submit("ClusterGKMCache", cache("a", str(version), namespace=None))
    assert runs == [] and [entry[0] for entry in clock.scheduled] == [0.5]  # one window for the whole burst
    assert clock.fire() == [2]
    assert [(kind, resource["metadata"]["resourceVersion"], finalizing) for kind, resource, finalizing in runs] == [
        ("GKMCache", "49", False), ("ClusterGKMCache", "49", False)]
    coalescer.submit("GKMCache", cache("a", "50"))  # a later submit opens a new window
    assert len(clock.scheduled) == 1 and clock.fire() == [1] and len(runs) == 3


def test_a_failed_run_is_logged_and_the_next_window_runs_again(caplog):
    calls, clock = [], Clock()

    def run(kind, resource, finalizing):
        calls.append(resource["metadata"]["name"])
        raise RuntimeError("API server unreachable")

    coalescer = Coalescer(run, Inline(), schedule=clock)
    coalescer.submit("GKMCache", cache("a"))
    clock.fire()
    coalescer.submit("GKMCache", cache("a"))
    clock.fire()
    assert calls == ["a", "a"]
    assert "node-triggered reconcile failed: API server unreachable" in caplog.text
