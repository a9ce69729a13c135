"""kwok Stages that give chosen extraction Job pods the states a real kubelet reports when things go wrong.

kwok nodes run no containers, so the pod states the cache modules read (an image that cannot be pulled, an
extractor that refused with a termination message) are written by kwok itself, selected by a pod label.
Created through the API server; a Stage's weight makes kwok pick it over its own pod stages. The labels
have no '-': kwok reads `.metadata.labels.<key>` as a jq path, where a '-' is a minus (and kwok crashes).
"""

import contextlib

GROUP, VERSION, PLURAL = "kwok.x-k8s.io", "v1alpha1", "stages"
PULL_FAILURE_LABEL = "gkmtestpull"
REFUSAL_LABEL = "gkmtestrefuse"
PULL_MESSAGE = "failed to pull and unpack image: 404 Not Found (test)"
REFUSAL_MESSAGE = "the layer is not a valid gzip stream: test refusal"


def _stage(name, label, phase_selector, template):
    return {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                phase_selector,
                {"key": ".metadata.labels.%s" % label, "operator": "In", "values": ["true"]},
            ]},
            "weight": 1000,
            "next": {"statusSubresource": "status", "statusTemplate": template},
        },
    }


# As a kubelet reports it: the sandbox is up (pod IP set, which also keeps kwok's pod-ready stage away), and the
# containers (the extraction Job's one; it has no init container since issue 31's class 1) wait in ErrImagePull.
_PULL_FAILURE_STATUS = (
    "phase: Pending\n"
    "hostIP: {{ NodeIPWith .spec.nodeName | Quote }}\n"
    "podIP: {{ PodIPWith .spec.nodeName false ( or .metadata.uid \"\" ) ( or .metadata.name \"\" ) "
    "( or .metadata.namespace \"\" ) | Quote }}\n"
    "containerStatuses:\n"
    "{{ range .spec.containers }}\n"
    "- name: {{ .name | Quote }}\n  image: {{ .image | Quote }}\n  ready: false\n  restartCount: 0\n"
    "  state:\n    waiting:\n      reason: ErrImagePull\n      message: \"%s\"\n"
    "{{ end }}\n" % PULL_MESSAGE
)
PULL_FAILURE = _stage("gkm-test-pull-failure", PULL_FAILURE_LABEL,
                      {"key": ".status.podIP", "operator": "DoesNotExist"}, _PULL_FAILURE_STATUS)

# The extractor ran and refused: exit code 1 and its message in the termination log.
_REFUSAL_STATUS = (
    "containerStatuses:\n"
    "{{ range .spec.containers }}\n"
    "- name: {{ .name | Quote }}\n  image: {{ .image | Quote }}\n  ready: false\n  restartCount: 0\n"
    "  state:\n    terminated:\n      exitCode: 1\n      reason: Error\n      message: \"%s\"\n"
    "{{ end }}\n"
    "phase: Failed\n" % REFUSAL_MESSAGE
)
REFUSAL = _stage("gkm-test-refusal", REFUSAL_LABEL, {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                 _REFUSAL_STATUS)


@contextlib.contextmanager
def stage(kube, definition):
    """The Stage exists inside the block."""
    from kubernetes import client

    custom = client.CustomObjectsApi(kube)
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, definition)
    try:
        yield
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, definition["metadata"]["name"])
