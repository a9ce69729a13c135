"""webhook/install/rollout.py: when the server's rollout is done, hopeless, or what it still waits for."""

from ansible_collections.gkm.cluster.plugins.module_utils.webhook.install import rollout

IMAGE = "registry.example.com/gkm-cluster/tools:0.1.0"


def deployment(generation=2, observed=2, updated=2, available=2, conditions=()):
    return {"metadata": {"generation": generation},
            "status": {"observedGeneration": observed, "updatedReplicas": updated, "availableReplicas": available,
                       "conditions": list(conditions)}}


def pod(name="gkm-webhook-abc", node="gpu-1", image=IMAGE, waiting=None, ready=False, scheduled=True,
        unscheduled_message=None):
    status = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "True" if scheduled else "False", "reason": "Unschedulable",
         "message": unscheduled_message},
        {"type": "Ready", "status": "True" if ready else "False"}]}
    if waiting:
        reason, message = waiting
        state = {"waiting": {"reason": reason, "message": message}}
        status["containerStatuses"] = [{"name": "webhook", "state": state}]
    return {"metadata": {"name": name}, "spec": {"nodeName": node if scheduled else None,
                                                 "containers": [{"name": "webhook", "image": image}]},
            "status": status}


def test_available_only_for_the_observed_generation_with_every_replica():
    assert rollout.is_available(deployment(), 2)
    assert not rollout.is_available(deployment(observed=1), 2)
    assert not rollout.is_available(deployment(available=1), 2)
    assert not rollout.is_available(deployment(updated=1), 2)
    assert not rollout.is_available(None, 2)


def test_an_image_that_cannot_be_pulled_names_image_node_and_fix():
    failing = pod(node="gkm-real-amd-1", waiting=("ImagePullBackOff", 'Back-off pulling image "x"'))
    message = rollout.blocking_problem(deployment(available=0), [pod(name="ok", ready=True), failing], IMAGE)
    assert IMAGE in message and "node gkm-real-amd-1" in message and "ImagePullBackOff" in message
    assert "make images REGISTRY=" in message and "gkm_tools_image" in message and "gkm_registry_mirror" in message


def test_pods_of_an_earlier_image_do_not_count():
    old = pod(image="registry.example.com/old:1", waiting=("ErrImagePull", "not found"))
    assert rollout.blocking_problem(deployment(available=0), [old], IMAGE) is None


def test_a_container_still_starting_is_not_a_problem():
    starting = pod(waiting=("ContainerCreating", ""))
    assert rollout.blocking_problem(deployment(available=0), [starting], IMAGE) is None


def test_pods_the_namespace_refuses_fail_at_once():
    refused = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
               "message": 'pods "gkm-webhook-x" is forbidden: exceeded quota: none, requested: pods=1'}
    message = rollout.blocking_problem(deployment(available=0, conditions=[refused]), [], IMAGE)
    assert message.startswith("the Deployment cannot create its pods (FailedCreate): ")
    assert "exceeded quota" in message


def test_waiting_reasons_say_what_each_unready_pod_waits_for():
    pods = [
        pod(name="ready", ready=True),
        pod(name="unscheduled", scheduled=False,
            unscheduled_message="0/3 nodes are available: 3 node(s) had untolerated taint {gpu: true}"),
        pod(name="crashing", waiting=("CrashLoopBackOff", "back-off 10s restarting failed container")),
        pod(name="starting"),
    ]
    assert rollout.waiting_reasons(pods) == [
        "pod unscheduled is not scheduled: 0/3 nodes are available: 3 node(s) had untolerated taint {gpu: true} "
        "(see tolerations and node_selector)",
        "pod crashing on node gpu-1: webhook CrashLoopBackOff: back-off 10s restarting failed container",
        "pod starting on node gpu-1: Pending, not ready yet",
    ]
