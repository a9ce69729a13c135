"""The webhook server in the cluster, as users run it: endpoint=service, a Deployment behind a Service.

On kwok nodes (always): Pod Security admission of the server pods, the ServiceAccount's permissions as
the API server reports them, and the install failing early on a server image that cannot be pulled or
pods the namespace refuses. On the real nodes (when the simulated cluster has them and the tools image
can be built): the API server calling the server through its Service, certificate rotation under load
with zero failed admissions, the server pods deleted while a labelled DaemonSet rolls out, and the servers
restarted under 150 tenant caches of the largest size the API server stores.
"""

import json
import os
import subprocess
import threading
import time
import uuid

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.install.installer import InstallError
from tests.helpers.tenant import apply_tenant, tenant_kube
from tests.helpers.webhook import (
    COLLECTIONS,
    GPU_TOLERATION,
    KWOK_NODES,
    ROOT,
    create_node_pvcs,
    install,
    metric_value,
    service_endpoints,
    wait_until,
)

pytestmark = pytest.mark.cluster

CACHE = "vector-add"
PAUSE = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
MUTATION_LABEL = {"gkm.io/pvc-mutation": "true"}
REAL_NODE_LABEL = "gkm.io/real-node"
# What the module's and the role's documentation say the server's ServiceAccount may do, and nothing more.
DOCUMENTED_PERMISSIONS = {
    ("", "persistentvolumeclaims", "list"), ("", "persistentvolumeclaims", "watch"),
    ("gkm.io", "gkmcaches", "list"), ("gkm.io", "gkmcaches", "watch"),
    ("gkm.io", "clustergkmcaches", "list"), ("gkm.io", "clustergkmcaches", "watch"),
    # The per-node objects say why a node does not get a cache (its denials name it).
    ("gkm.io", "gkmcachenodes", "list"), ("gkm.io", "gkmcachenodes", "watch"),
    ("gkm.io", "clustergkmcachenodes", "list"), ("gkm.io", "clustergkmcachenodes", "watch"),
    # Steering keeps pods to nodes whose labels say the cache is usable there.
    ("", "nodes", "list"), ("", "nodes", "watch"),
}


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:6])


def server_pods(core, name, namespace):
    selector = "app.kubernetes.io/name=gkm-webhook,app.kubernetes.io/instance=%s" % name
    return core.list_namespaced_pod(namespace, label_selector=selector).items


def install_server(kubeconfig, **options):
    """webhook_install as the gkm role runs it by default: the server in the cluster, self-signed TLS."""
    return install(kubeconfig, **dict(dict(endpoint="service", tls_mode="self_signed"), **options))


def remove(kubeconfig, name, namespace):
    install(kubeconfig, name=name, namespace=namespace, endpoint="service", state="absent")


# --------------------------------------------------------------------------- kwok nodes


def held_in_pull_failure(core, name, namespace, replicas):
    """The server pods, once all are on a node and waiting in ErrImagePull without an address; else None."""
    pods = server_pods(core, name, namespace)
    waiting = [pod for pod in pods if pod.spec.node_name and not pod.status.pod_ip and any(
        status.state.waiting and status.state.waiting.reason == "ErrImagePull"
        for status in pod.status.container_statuses or [])]
    return pods if len(pods) == replicas == len(waiting) else None


@pytest.fixture(scope="module")
def kwok_install(sim, kube):
    """The server Deployment on kwok nodes (its pods are admitted and scheduled, but run nothing).

    A webhook nobody answers: a Stage holds the pods in ErrImagePull without an address, as a kubelet holds an image
    it cannot pull, so the Service has no endpoints. kwok's pod IPs are fake, and the API server dials a Service's
    endpoints itself (aggregator routing): none of its packets may leave this machine. The install does not wait
    (it would rightly fail on the pull); Ignore: labelled pods elsewhere must not fail.
    """
    name, namespace = unique("wh"), unique("gkm-wh")
    image = "registry.invalid/gkm-cluster/tools:%s" % uuid.uuid4().hex[:8]
    custom = client.CustomObjectsApi(kube)
    stage = custom.create_cluster_custom_object("kwok.x-k8s.io", "v1alpha1", "stages", pull_failure_stage(image))
    try:
        install_server(sim.kubeconfig, name=name, namespace=namespace, image=image, tolerations=[GPU_TOLERATION],
                       node_selector=KWOK_NODES, failure_policy="Ignore", wait=False)
        wait_until("both server pods held in ErrImagePull",
                   lambda: held_in_pull_failure(client.CoreV1Api(kube), name, namespace, 2))
        assert service_endpoints(kube, name, namespace) == []
        yield name, namespace
    finally:
        remove(sim.kubeconfig, name, namespace)
        custom.delete_cluster_custom_object("kwok.x-k8s.io", "v1alpha1", "stages", stage["metadata"]["name"])


def test_namespace_enforces_restricted_and_admits_the_server_pods(kube, kwok_install):
    name, namespace = kwok_install
    core = client.CoreV1Api(kube)
    labels = core.read_namespace(namespace).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"

    # The PodSecurity admission plugin let the ReplicaSet create every pod, and they sit on kwok nodes only.
    [replica_set] = client.AppsV1Api(kube).list_namespaced_replica_set(namespace).items
    assert replica_set.status.replicas == 2
    pods = server_pods(core, name, namespace)
    assert len(pods) == 2
    assert all(pod.metadata.owner_references[0].name == replica_set.metadata.name for pod in pods)
    nodes = {node.metadata.name: node.metadata.labels for node in core.list_node().items}
    assert all(nodes[pod.spec.node_name].get("type") == "kwok" for pod in pods)
    assert core.list_namespaced_event(namespace, field_selector="reason=FailedCreate").items == []

    # Enforcement is live: a pod that is not restricted is refused in the same namespace.
    privileged = {"metadata": {"name": "privileged"}, "spec": {"containers": [
        dict(PAUSE, securityContext={"privileged": True})]}}
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, privileged, dry_run="All")
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted:latest"' in json.loads(refused.value.body)["message"]


def permissions_of(kubeconfig, user, namespace):
    """What `kubectl auth can-i --list --as=<user> -n <namespace>` lists: a SelfSubjectRulesReview as that user."""
    impersonated = config.new_client_from_config(config_file=kubeconfig)
    impersonated.set_default_header("Impersonate-User", user)
    _status, review = Kube(impersonated).request(
        "POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        body={"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
              "spec": {"namespace": namespace}})
    status = review["status"]
    assert not status.get("incomplete"), status.get("evaluationError")
    resources = {(group, resource, verb, tuple(rule.get("resourceNames") or ()))
                 for rule in status["resourceRules"]
                 for group in rule["apiGroups"] for resource in rule["resources"] for verb in rule["verbs"]}
    non_resources = {(url, verb) for rule in status["nonResourceRules"]
                     for url in rule["nonResourceURLs"] for verb in rule["verbs"]}
    return resources, non_resources


def test_service_account_can_do_exactly_the_documented_set(sim, kwok_install, namespace):
    name, webhook_namespace = kwok_install
    account = "system:serviceaccount:%s:%s" % (webhook_namespace, name)
    # An account of the same namespace bound to nothing has what every service account has (discovery,
    # self reviews); the webhook's account must have exactly the documented set on top of that.
    baseline = "system:serviceaccount:%s:%s" % (webhook_namespace, unique("nobody"))
    for where in (namespace, webhook_namespace):
        resources, non_resources = permissions_of(sim.kubeconfig, account, where)
        base_resources, base_non_resources = permissions_of(sim.kubeconfig, baseline, where)
        assert {(group, resource, verb) for group, resource, verb, names in resources - base_resources
                if not names} == DOCUMENTED_PERMISSIONS
        assert {rule for rule in resources - base_resources if rule[3]} == set()
        assert non_resources == base_non_resources


def pull_failure_stage(image, namespace=None):
    """A kwok Stage doing what a kubelet does with an image it cannot pull: the container waits in ErrImagePull (and
    the pod gets no address). namespace limits it to pods there."""
    in_namespace = [{"key": ".metadata.namespace", "operator": "In", "values": [namespace]}] if namespace else []
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage",
        "metadata": {"name": unique("gkm-test-pull-failure")},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.podIP", "operator": "DoesNotExist"},
                {"key": ".spec.containers.[].image", "operator": "In", "values": [image]},
                *in_namespace,
            ]},
            "weight": 1000,
            "next": {"statusSubresource": "status", "statusTemplate": (
                "phase: Pending\nconditions:\n- type: PodScheduled\n  status: \"True\"\n"
                "- type: Ready\n  status: \"False\"\n  reason: ContainersNotReady\ncontainerStatuses:\n"
                "{{ range $index, $item := .spec.containers }}\n- name: {{ $item.name | Quote }}\n"
                "  image: {{ $item.image | Quote }}\n  imageID: \"\"\n  ready: false\n  restartCount: 0\n"
                "  state:\n    waiting:\n      reason: ErrImagePull\n"
                "      message: {{ printf \"failed to pull and unpack image %q: not found\" $item.image | Quote }}\n"
                "{{ end }}\n")},
        },
    }


def test_an_image_no_node_can_pull_fails_the_install_early(sim, kube):
    name, namespace = unique("wh"), unique("gkm-wh")
    image = "registry.invalid/gkm-cluster/tools:%s" % uuid.uuid4().hex[:8]
    custom = client.CustomObjectsApi(kube)
    stage = custom.create_cluster_custom_object("kwok.x-k8s.io", "v1alpha1", "stages", pull_failure_stage(image))
    started = time.monotonic()
    try:
        with pytest.raises(InstallError) as failed:
            install_server(sim.kubeconfig, name=name, namespace=namespace, image=image,
                           tolerations=[GPU_TOLERATION], node_selector=KWOK_NODES, wait_timeout=300)
        elapsed = time.monotonic() - started
        message = str(failed.value)
        assert "the webhook server's image %s cannot be pulled on node gkm-" % image in message
        assert "ErrImagePull" in message and "make images REGISTRY=" in message and "gkm_tools_image" in message
        assert elapsed < 60, "failed after %.0fs, not early" % elapsed
        # Nothing was registered: pods elsewhere are never sent to a server that is not there.
        with pytest.raises(ApiException) as missing:
            client.AdmissionregistrationV1Api(kube).read_mutating_webhook_configuration("%s-%s" % (name, namespace))
        assert missing.value.status == 404
    finally:
        custom.delete_cluster_custom_object("kwok.x-k8s.io", "v1alpha1", "stages", stage["metadata"]["name"])
        remove(sim.kubeconfig, name, namespace)


def test_pods_the_namespace_refuses_fail_the_install_early(sim, kube):
    name, namespace = unique("wh"), unique("gkm-wh")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    core.create_namespaced_resource_quota(namespace, {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}})
    started = time.monotonic()
    try:
        with pytest.raises(InstallError) as failed:
            install_server(sim.kubeconfig, name=name, namespace=namespace, image="gkm/tools:test",
                           tolerations=[GPU_TOLERATION], node_selector=KWOK_NODES, wait_timeout=300)
        assert "the Deployment cannot create its pods (FailedCreate)" in str(failed.value)
        assert "exceeded quota: no-pods" in str(failed.value)
        assert time.monotonic() - started < 60
    finally:
        remove(sim.kubeconfig, name, namespace)
        core.delete_namespace(namespace)


ROLE_PLAY = """
- hosts: localhost
  gather_facts: false
  roles:
    - role: gkm.cluster.gkm
"""


def run_gkm_role(tmp_path, succeed=True, **variables):
    play = tmp_path / "gkm.yml"
    play.write_text(ROLE_PLAY)
    # The implicit localhost runs modules with ansible-playbook's own Python.
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    command = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), str(play), "-e", json.dumps(variables)]
    ran = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert (ran.returncode == 0) == succeed, ran.stdout[-4000:]
    return ran.stdout


def test_role_variables_place_the_server_and_set_the_pod_security_level(sim, kube, tmp_path):
    namespace = unique("gkm-role")
    toleration = dict(GPU_TOLERATION)
    image = "mirror.example.com/gkm/gkm-cluster/tools:0.1.0"  # the default, mirrored
    variables = dict(gkm_kubeconfig=sim.kubeconfig, gkm_namespace=namespace, gkm_image_registry="registry.example.com",
                     gkm_registry_mirror="mirror.example.com/gkm", gkm_webhook_failure_policy="Ignore",
                     gkm_webhook_node_selector=KWOK_NODES, gkm_webhook_tolerations=[toleration],
                     gkm_webhook_pod_security_level="baseline")
    # The server's pods on kwok nodes would get fake IPs, which the API server would dial for the webhook: they are
    # held in ErrImagePull instead, so the role stops before registering the webhook, and places the server all
    # the same.
    custom = client.CustomObjectsApi(kube)
    stage = custom.create_cluster_custom_object("kwok.x-k8s.io", "v1alpha1", "stages",
                                                pull_failure_stage(image, namespace))
    try:
        output = run_gkm_role(tmp_path, succeed=False, **variables)
        assert "the webhook server's image %s cannot be pulled" % image in output
        with pytest.raises(ApiException) as missing:
            client.AdmissionregistrationV1Api(kube).read_mutating_webhook_configuration("gkm-webhook-" + namespace)
        assert missing.value.status == 404
        pod = client.AppsV1Api(kube).read_namespaced_deployment("gkm-webhook", namespace).spec.template.spec
        assert pod.node_selector == KWOK_NODES
        assert [(t.key, t.operator, t.value, t.effect) for t in pod.tolerations] == [tuple(toleration.values())]
        assert pod.containers[0].image == image
        labels = client.CoreV1Api(kube).read_namespace(namespace).metadata.labels
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    finally:
        run_gkm_role(tmp_path, **dict(variables, gkm_state="absent"))
        custom.delete_cluster_custom_object("kwok.x-k8s.io", "v1alpha1", "stages", stage["metadata"]["name"])


# --------------------------------------------------------------------------- real nodes


@pytest.fixture(scope="module")
def real_node_names(sim, kube):
    """Names of the real nodes that are Ready; skips when the simulated cluster runs none (state.json real_nodes)."""
    if not sim.state.get("real_nodes"):
        pytest.skip("the simulated cluster has no real nodes (state.json real_nodes is empty): kwok pods run nothing; "
                    "run with GKM_SIM_REAL_NODES=2")
    nodes = client.CoreV1Api(kube).list_node(label_selector="%s=true" % REAL_NODE_LABEL).items
    ready = sorted(node.metadata.name for node in nodes
                   if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []))
    assert ready, "state.json lists real nodes but none labelled %s=true is Ready" % REAL_NODE_LABEL
    return ready


def real_options(name, namespace, image, **overrides):
    options = dict(name=name, namespace=namespace, endpoint="service", tls_mode="self_signed", image=image, replicas=2,
                   node_selector={REAL_NODE_LABEL: "true"}, tolerations=[GPU_TOLERATION],
                   failure_policy="Fail", wait_timeout=300)
    options.update(overrides)
    return options


@pytest.fixture(scope="module")
def real_webhook(sim, kube, real_node_names, tools_image):
    """The webhook as users run it, on the real nodes, with failurePolicy Fail; removed afterwards."""
    name, namespace = unique("wh"), unique("gkm-wh")
    options = real_options(name, namespace, tools_image)
    try:
        install_server(sim.kubeconfig, **options)
        yield options
    finally:
        remove(sim.kubeconfig, name, namespace)


def test_an_image_the_registry_lacks_fails_the_install_early_on_real_nodes(sim, kube, real_node_names):
    name, namespace = unique("wh"), unique("gkm-wh")
    image = "%s/gkm-cluster/absent:%s" % (sim.state["registry"], uuid.uuid4().hex[:8])
    started = time.monotonic()
    try:
        with pytest.raises(InstallError) as failed:
            install_server(sim.kubeconfig, **real_options(name, namespace, image))
        elapsed = time.monotonic() - started
        message = str(failed.value)
        assert "the webhook server's image %s cannot be pulled on node " % image in message
        assert any("on node %s " % node in message for node in real_node_names)
        assert "ErrImagePull" in message or "ImagePullBackOff" in message
        assert "make images REGISTRY=" in message
        assert elapsed < 90, "failed after %.0fs, not early" % elapsed
    finally:
        remove(sim.kubeconfig, name, namespace)


def pod_metrics(core, pod):
    """The server's /metrics page read through the API server's pod proxy (HTTPS to the pod IP)."""
    return core.connect_get_namespaced_pod_proxy_with_path("https:%s:8443" % pod.metadata.name,
                                                           pod.metadata.namespace, "metrics")


def ready_server_pods(core, options):
    return [pod for pod in server_pods(core, options["name"], options["namespace"])
            if pod.metadata.deletion_timestamp is None
            and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])]


def wait_views_hold(core, options, pvcs):
    def every_view_holds():
        pods = ready_server_pods(core, options)
        return len(pods) == options["replicas"] and all(
            metric_value(pod_metrics(core, pod), 'gkm_webhook_view_objects{kind="pvcs"}') >= pvcs for pod in pods)
    wait_until("every server's view to hold %d PVCs" % pvcs, every_view_holds, timeout=60, interval=1)


def workload_spec(image):
    """A pod spec naming the cache. Its image is the local registry's, so nothing on a real node ever pulls
    from elsewhere; its claim stays unbound (the test PVCs name no PV), so its container never starts."""
    return {"containers": [{"name": "main", "image": image, "command": ["python3", "-c", "pass"]}],
            "tolerations": [GPU_TOLERATION],
            "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": CACHE}}]}


def labelled_pod(name, node, image, labelled=True):
    labels = dict(MUTATION_LABEL) if labelled else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": dict(workload_spec(image), nodeName=node)}


def test_real_server_mutates_through_its_service(kube, real_node_names, real_webhook, namespace):
    core = client.CoreV1Api(kube)
    pods = ready_server_pods(core, real_webhook)
    assert {pod.spec.node_name for pod in pods} <= set(real_node_names)
    for pod in pods:
        [status] = pod.status.container_statuses
        assert status.ready and status.restart_count == 0
    expected = create_node_pvcs(kube, namespace, CACHE, real_node_names)
    wait_views_hold(core, real_webhook, len(real_node_names))
    for node in real_node_names:
        created = core.create_namespaced_pod(namespace, labelled_pod(unique("probe"), node, real_webhook["image"]),
                                             dry_run="All")
        assert created.spec.volumes[0].persistent_volume_claim.claim_name == expected[node]


def test_certificate_rotation_under_load_fails_no_admission_on_real_pods(sim, kube, real_node_names, real_webhook,
                                                                         namespace):
    core = client.CoreV1Api(kube)
    node = real_node_names[0]
    expected = create_node_pvcs(kube, namespace, CACHE, [node])[node]
    wait_views_hold(core, real_webhook, 1)
    failures, admitted = [], []
    stop = threading.Event()

    def load(worker):
        index = 0
        while not stop.is_set():
            index += 1
            try:
                body = labelled_pod("load-%d-%d" % (worker, index), node, real_webhook["image"])
                pod = core.create_namespaced_pod(namespace, body, dry_run="All")
                admitted.append(pod.spec.volumes[0].persistent_volume_claim.claim_name == expected)
            except ApiException as error:
                failures.append(error.body)
            stop.wait(0.1)

    def reloads_everywhere(count):
        pods = ready_server_pods(core, real_webhook)
        return len(pods) == real_webhook["replicas"] and all(
            metric_value(pod_metrics(core, pod), "gkm_webhook_certificate_reloads_total") >= count for pod in pods)

    workers = [threading.Thread(target=load, args=(worker,)) for worker in range(2)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(2)
        # 1. A new serving certificate from the same CA (the current one is within renew_before).
        renewed = install_server(sim.kubeconfig, **dict(real_webhook, cert_valid_days=400, renew_before_days=370))
        assert renewed["tls"]["certificate_renewed"] and not renewed["tls"]["ca_renewed"]
        # The kubelet refreshes the Secret volume on its own schedule; the servers reload the files.
        wait_until("every server to load the renewed certificate", lambda: reloads_everywhere(1), timeout=240,
                   interval=2)
        # 2. A new CA: published next to the old one first, then a certificate it signed.
        rotation = dict(real_webhook, cert_valid_days=3700, ca_valid_days=4000, renew_before_days=10)
        rotated = install_server(sim.kubeconfig, **rotation)
        assert rotated["tls"]["ca_renewed"] and rotated["tls"]["ca_certificates"] == 2
        wait_until("every server to load the new CA's certificate", lambda: reloads_everywhere(2), timeout=240,
                   interval=2)
        while len(admitted) + len(failures) < 300:
            time.sleep(0.5)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert failures == []
    assert len(admitted) >= 300 and all(admitted)


def daemonset(name, image):
    labels = {"app": name}
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": labels}, "template": {
        "metadata": {"labels": dict(labels, **MUTATION_LABEL)},
        "spec": dict(workload_spec(image), nodeSelector={REAL_NODE_LABEL: "true"})}}}


def daemon_pod_node(pod):
    """The node the DaemonSet controller pinned a pod to (its matchFields affinity), scheduled or not."""
    terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    return terms[0].match_fields[0].values[0]


def scale_servers(apps, options, replicas):
    apps.patch_namespaced_deployment_scale(options["name"], options["namespace"], {"spec": {"replicas": replicas}})


def webhook_refusals(core, namespace):
    events = core.list_namespaced_event(namespace, field_selector="reason=FailedCreate").items
    return [event.message for event in events if "failed calling webhook" in event.message]


class AdmissionProbe(threading.Thread):
    """Dry-run creates of a labelled and an unlabelled pod, in turn, recording (seconds, labelled, error or None)."""

    def __init__(self, core, namespace, node, image):
        super().__init__(daemon=True)
        self.core, self.namespace, self.node, self.image = core, namespace, node, image
        self.stop = threading.Event()
        self.results = []

    def run(self):
        started, index = time.monotonic(), 0
        while not self.stop.is_set():
            labelled = index % 2 == 0
            body = labelled_pod("probe-%d" % index, self.node, self.image, labelled)
            try:
                self.core.create_namespaced_pod(self.namespace, body, dry_run="All")
                error = None
            except ApiException as failure:
                error = json.loads(failure.body)["message"]
            self.results.append((time.monotonic() - started, labelled, error))
            index += 1
            self.stop.wait(0.1)

    def failures(self, labelled):
        return [(at, error) for at, was_labelled, error in self.results if was_labelled == labelled and error]


def test_server_pods_deleted_during_a_daemonset_rollout_only_delay_labelled_pods(kube, real_node_names, real_webhook,
                                                                                 namespace):
    core = client.CoreV1Api(kube)
    image = real_webhook["image"]
    expected = create_node_pvcs(kube, namespace, CACHE, real_node_names)
    wait_views_hold(core, real_webhook, len(real_node_names))
    apps = client.AppsV1Api(kube)
    deleted = set()
    probe = AdmissionProbe(core, namespace, real_node_names[0], image)
    probe.start()
    try:
        # Held at zero replicas until the DaemonSet controller has been refused: replacements that start within
        # a probe's interval would otherwise leave no outage to observe.
        scale_servers(apps, real_webhook, 0)
        for pod in server_pods(core, real_webhook["name"], real_webhook["namespace"]):
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
            deleted.add(pod.metadata.name)
        # The killed containers may answer a moment longer; the DaemonSet rolls out once no server does.
        wait_until("labelled pods refused", lambda: probe.failures(labelled=True), timeout=60, interval=0.1)
        name = unique("ds")
        apps.create_namespaced_daemon_set(namespace, daemonset(name, image))
        wait_until("the DaemonSet controller refused", lambda: webhook_refusals(core, namespace), timeout=60,
                   interval=0.5)
        scale_servers(apps, real_webhook, real_webhook["replicas"])

        def every_node_has_its_pod():
            pods = core.list_namespaced_pod(namespace, label_selector="app=%s" % name).items
            claims = {daemon_pod_node(pod): pod.spec.volumes[0].persistent_volume_claim.claim_name for pod in pods}
            return claims if set(claims) == set(real_node_names) else None

        claims = wait_until("the DaemonSet's pods once the servers are back", every_node_has_its_pod, timeout=180,
                            interval=1)
        wait_until("the replacement servers ready", lambda: len(
            [pod for pod in ready_server_pods(core, real_webhook) if pod.metadata.name not in deleted]
        ) == real_webhook["replicas"], timeout=120, interval=1)
    finally:
        scale_servers(apps, real_webhook, real_webhook["replicas"])
        probe.stop.set()
        probe.join()
    assert claims == expected
    # The DaemonSet controller was refused while no server answered (failurePolicy Fail) and retried.
    assert webhook_refusals(core, namespace)
    # Labelled pods were refused only during the outage; unlabelled pods never were.
    refused = probe.failures(labelled=True)
    assert all("failed calling webhook" in error for _at, error in refused)
    assert probe.failures(labelled=False) == []
    assert not probe.results[-2][2] and not probe.results[-1][2]


# Issue 31, class 11: a tenant's GKMCaches as large as the API server stores (its schema bounds no podTemplate
# annotation: etcd's 1.5 MiB request limit does), 150 of them, and the servers restarted so each lists them all at
# start, their largest moment. The server's memory limit is 256Mi.
LARGE_CACHES = 150
LARGE_ANNOTATION_BYTES = 1_400_000
SERVER_MEMORY_LIMIT = 256 * 1024 * 1024


def large_cache(namespace, name):
    return {"apiVersion": "gkm.io/v1alpha1", "kind": "GKMCache", "metadata": {"name": name, "namespace": namespace},
            "spec": {"image": "registry.invalid/caches/large:v1",
                     "podTemplate": {"metadata": {"annotations": {"large": "x" * LARGE_ANNOTATION_BYTES}}}}}


def pod_memory_peak(pod):
    """The largest memory use (bytes) the kernel recorded for the pod's cgroup on its real node (cgroup v1
    memory.max_usage_in_bytes; cgroup v2 memory.peak), or None when this machine keeps neither."""
    uid = pod.metadata.uid
    for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
        for directory, subdirectories, files in os.walk(root):
            if uid in directory or uid.replace("-", "_") in directory:
                subdirectories[:] = []
                for name in ("memory.max_usage_in_bytes", "memory.peak"):
                    if name in files:
                        with open(os.path.join(directory, name)) as handle:
                            return int(handle.read())
    return None


def server_states(core, options):
    """What a failure says of each server pod: phase, readiness, restarts, last termination and its caches' count."""
    states = []
    for pod in server_pods(core, options["name"], options["namespace"]):
        statuses = pod.status.container_statuses or []
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        try:
            caches = metric_value(pod_metrics(core, pod), 'gkm_webhook_view_objects{kind="namespaced_caches"}')
        except ApiException as error:
            caches = "metrics unreadable (%s)" % error.status
        states.append({"pod": pod.metadata.name, "phase": pod.status.phase, "ready": ready,
                       "restarts": [c.restart_count for c in statuses],
                       "last": [str(c.last_state.terminated.reason) for c in statuses if c.last_state.terminated],
                       "caches": caches,
                       "log": core.read_namespaced_pod_log(pod.metadata.name, pod.metadata.namespace,
                                                           tail_lines=5)[-1500:]})
    return states


def test_the_real_servers_survive_150_caches_of_the_largest_size_a_tenant_can_store(
        sim, kube, crds, real_node_names, real_webhook, namespace, record_property):
    """A tenant with `edit` creates 150 GKMCaches of 1.4 MB each; the servers, restarted, list them (pages of a few
    caches, each cut to what the views read) and come up within their 256Mi limit: no restart, no OOM kill, every
    cache in their views, a labelled pod then steered to its node's PVC through them."""
    core = client.CoreV1Api(kube)
    tenant_namespace = unique("t-large")
    apply_tenant(Kube(kube), tenant_namespace, pod_security="restricted")
    try:
        tenant = tenant_kube(kube, tenant_namespace)
        started = time.monotonic()
        names = ["large-%03d" % index for index in range(LARGE_CACHES)]

        def create(name):
            return tenant.kube.request("POST", tenant.gkmcaches_path(), body=large_cache(tenant_namespace, name),
                                       what="GKMCache " + name)[0]

        assert tenant.kube.map(create, names) == [201] * LARGE_CACHES
        created_s = time.monotonic() - started
        before = {pod.metadata.name for pod in server_pods(core, real_webhook["name"], real_webhook["namespace"])}
        for name in before:
            core.delete_namespaced_pod(name, real_webhook["namespace"], grace_period_seconds=0)

        def restarted_and_holding_them_all():
            pods = [pod for pod in ready_server_pods(core, real_webhook) if pod.metadata.name not in before]
            return pods if len(pods) == real_webhook["replicas"] and all(
                metric_value(pod_metrics(core, pod), 'gkm_webhook_view_objects{kind="namespaced_caches"}')
                >= LARGE_CACHES for pod in pods) else None

        try:
            servers = wait_until("the restarted servers holding every cache", restarted_and_holding_them_all,
                                 timeout=180, interval=2)
        except AssertionError as timed_out:
            raise AssertionError("%s: %s" % (timed_out, server_states(core, real_webhook))) from None
        ready_s = time.monotonic() - started - created_s
        peaks = []
        for pod in servers:
            [status] = core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace).status.container_statuses
            assert status.restart_count == 0 and status.last_state.terminated is None, status
            peaks.append(pod_memory_peak(pod))
        assert all(peak is not None and peak < SERVER_MEMORY_LIMIT for peak in peaks), peaks
        expected = create_node_pvcs(kube, namespace, CACHE, real_node_names)
        wait_views_hold(core, real_webhook, len(real_node_names))
        node = real_node_names[0]
        probe = core.create_namespaced_pod(namespace, labelled_pod(unique("probe"), node, real_webhook["image"]),
                                           dry_run="All")
        assert probe.spec.volumes[0].persistent_volume_claim.claim_name == expected[node]
        record_property("large_caches_created_s", round(created_s, 1))
        record_property("servers_ready_s", round(ready_s, 1))
        record_property("server_memory_peak_bytes", max(peaks))
        print("webhook: %d caches of %d bytes created in %.1fs; restarted servers ready in %.1fs, memory peak %s MiB"
              % (LARGE_CACHES, LARGE_ANNOTATION_BYTES, created_s, ready_s,
                 ", ".join("%.0f" % (peak / 1048576) for peak in peaks)))
    finally:
        core.delete_namespace(tenant_namespace)


def test_the_role_without_a_tools_image_stops_before_changing_anything(sim, kube, tmp_path):
    namespace = unique("gkm-role")
    said = run_gkm_role(tmp_path, succeed=False, gkm_kubeconfig=sim.kubeconfig, gkm_namespace=namespace)
    assert "gkm_tools_image is empty" in said and "make images REGISTRY=" in said
    assert namespace not in {ns.metadata.name for ns in client.CoreV1Api(kube).list_namespace().items}
