#!/usr/bin/python
# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: webhook_install
short_description: Install or remove the admission webhook for kernel caches (PVC mutation and steering)
description:
  - With ReadWriteOnce storage every node has its own PVC of a cache. Workloads (DaemonSets) name the
    cache in C(claimName) and carry the label C(gkm.io/pvc-mutation=true); the webhook rewrites the claim
    to the PVC of the pod's node at admission, and denies the pod with a message naming the cache, the node
    and what to run when that node has no PVC yet.
  - The same server steers pods to nodes where their cache is usable (docs/steering.md). A pod that names a
    cache's PVC in C(claimName) or carries the annotation C(gkm.io/cache) gets a required node affinity (the
    node's readiness label at the digest it mounts, and the image's GPU targets), merged with its own; a pod no
    node fits is denied with the reason and the fix; C(gkm.io/cache-steering=disabled) opts out. Deployments,
    StatefulSets and DaemonSets are checked, and their pod template is steered (at any digest) only when the
    workload is annotated C(gkm.io/cache-steering=template).
  - "Every volume of a pod that names a cache's claim is made read-only (C(persistentVolumeClaim.readOnly: true)),
    whoever wrote the pod."
  - Installs, in this order, the namespace, a ServiceAccount and its RBAC, the TLS material, the server
    Deployment with a PodDisruptionBudget and a Service, waits until the server is ready, and only then registers
    the MutatingWebhookConfiguration. A half-finished install therefore never sends a pod to a server that is
    not there.
  - "The server's ServiceAccount may do exactly what its view needs, cluster-wide, through the ClusterRole
    C(gkm.cluster:<namespace>:<name>): C(list) and C(watch) on C(persistentvolumeclaims) and C(nodes) (core
    group), and C(list) and C(watch) on C(gkmcaches), C(clustergkmcaches), C(gkmcachenodes) and
    C(clustergkmcachenodes) (group C(gkm.io)). Nothing else: no C(get), no writes, no Secrets."
  - The server pods meet the C(restricted) Pod Security profile (non-root uid 1000, no privilege escalation,
    every capability dropped, the C(RuntimeDefault) seccomp profile, a read-only root filesystem); the
    namespace enforces O(pod_security_level).
  - While it waits for the server, the module fails at once, naming the image, the node and the fix, when a
    server pod cannot pull its image (C(ErrImagePull), C(ImagePullBackOff)) or the Deployment cannot create
    pods (for example refused by Pod Security); at O(wait_timeout) it says what each pod still waits for.
  - O(state=absent) removes the MutatingWebhookConfiguration first, then the rest; the namespace is removed
    only when this module created it and it holds no other ConfigMap or Secret (such as the ownership
    records of components installed beside the webhook, which their own removal still needs).
  - Every object is read first and written (server-side apply, field manager C(gkm.cluster)) only when it
    differs, so a re-run with nothing to do reports C(changed=false) and writes nothing, certificates included.
  - Check mode runs every write as a server-side dry run; diff mode shows each changed object (Secret values hidden).
version_added: "0.1.0"
author:
  - gkm.cluster contributors (@gkm-cluster)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gkm.cluster.cluster_access
requirements:
  - cryptography
options:
  name:
    description:
      - Name of the Deployment, Service, ServiceAccount and the base of the other object names.
      - The MutatingWebhookConfiguration is C(<name>-<namespace>).
    type: str
    default: gkm-webhook
  namespace:
    description: Namespace of the server and its Secrets; labelled to enforce O(pod_security_level).
    type: str
    default: gkm-system
  pod_security_level:
    description:
      - The Pod Security Standards level the namespace enforces (label C(pod-security.kubernetes.io/enforce)).
      - The server meets V(restricted); choose a weaker level only when other pods must run in the same namespace.
    type: str
    choices: [restricted, baseline, privileged]
    default: restricted
  state:
    description: V(present) installs or updates the webhook, V(absent) removes it.
    type: str
    choices: [present, absent]
    default: present
  endpoint:
    description:
      - V(service) runs the server in the cluster (Deployment and Service) from O(image).
      - V(url) registers an external HTTPS server at O(url) instead, for example a local process beside
        a simulated cluster; no Deployment, Service or RBAC is created and the module waits for
        C(/readyz) at that URL's host instead of a Deployment.
    type: str
    choices: [service, url]
    default: service
  url:
    description:
      - The webhook URL when O(endpoint=url), C(https://host:port/mutate); required with O(state=present).
        The serving certificate must name the host (an IP SAN for an address).
    type: str
  image:
    description:
      - The tools image (C(containers/tools)) that runs the server. Required when O(endpoint=service).
      - Build and push it with C(make images REGISTRY=<host:port>), which prints the reference to use.
    type: str
  image_pull_policy:
    description: Pull policy of the server container.
    type: str
    choices: [Always, IfNotPresent, Never]
    default: IfNotPresent
  replicas:
    description: Server replicas; a PodDisruptionBudget keeps one available during voluntary disruptions.
    type: int
    default: 2
  tolerations:
    description:
      - Tolerations of the server pods, in the Kubernetes format, for clusters whose nodes are all tainted
        (GPU nodes usually carry a taint such as C(gpu=true:NoSchedule)).
    type: list
    elements: dict
    default: []
  node_selector:
    description: Node labels the server pods must match, to keep them on (or off) a set of nodes.
    type: dict
    default: {}
  tls_mode:
    description:
      - V(self_signed) makes a CA and a serving certificate with C(cryptography), keeps them in the Secrets
        C(<name>-ca) and C(<name>-tls), and registers the CA as the caBundle. A run renews the serving
        certificate when it is within O(renew_before_days) of expiry, and the CA when it would expire within
        O(renew_before_days) plus one certificate lifetime; a new CA is added to the caBundle before
        anything it signed is served, and the old CA stays trusted until it expires, so renewal never makes
        admission fail.
      - V(cert_manager) creates a self-signed Issuer, a CA Certificate, a CA Issuer and the serving Certificate
        with cert-manager, and annotates the configuration with C(cert-manager.io/inject-ca-from). cert-manager
        must be installed.
      - V(provided) uses a certificate you manage - with O(endpoint=service) the Secret C(<name>-tls) must
        exist - and registers O(ca_bundle).
      - With O(endpoint=url) and V(self_signed), the server must serve C(tls.crt) and C(tls.key) of the Secret
        C(<name>-tls) (it reloads them when the files change).
    type: str
    choices: [self_signed, cert_manager, provided]
    default: self_signed
  ca_bundle:
    description: PEM CA certificate(s) that signed the server's certificate, when O(tls_mode=provided).
    type: str
  cert_valid_days:
    description: Lifetime of the serving certificate (V(self_signed) and V(cert_manager)).
    type: int
    default: 365
  ca_valid_days:
    description: Lifetime of the CA (V(self_signed) and V(cert_manager)).
    type: int
    default: 3650
  renew_before_days:
    description: Renew a certificate this many days before it expires. Must be below O(cert_valid_days).
    type: int
    default: 30
  failure_policy:
    description:
      - What the API server does with a labelled pod when the webhook cannot be reached. V(Fail) rejects it
        (a DaemonSet controller retries), V(Ignore) admits it unchanged, with the cache name as claimName.
      - Steering of unlabelled pods and of workloads always uses C(Ignore) - an unsteered pod never reads an
        empty directory (the serving PV is a hostPath of type C(Directory)), so an outage must not block them.
    type: str
    choices: [Fail, Ignore]
    default: Fail
  default_mount_mode:
    description:
      - The mount mode of a cache resource without C(spec.mountMode). Give it the value the reconcile uses
        (the caches role's C(caches_mount_mode), the gkm role passes it), so the webhook and the reconcile read a
        cache alike - under V(imageVolume), such a cache has no PVC and its pods get its image mounted.
    type: str
    choices: [PVC, imageVolume]
    default: PVC
  timeout_seconds:
    description: How long the API server waits for the webhook, 1 to 30 seconds.
    type: int
    default: 5
  excluded_namespaces:
    description: Namespaces whose pods are never sent to the webhook, besides C(kube-system) and O(namespace).
    type: list
    elements: str
    default: []
  api_server_cidrs:
    description:
      - The addresses the API server calls the webhook from, as CIDRs. Given, a NetworkPolicy admits only them, and
        only on the server's port, to the server pods; otherwise any pod in the cluster can send the server
        admission reviews of its own. Which addresses these are depends on the distribution (the control-plane
        nodes' addresses where the API server uses the host network, a managed control plane's range elsewhere;
        see the collection's docs/webhook.md). An address outside them makes the webhook unreachable.
      - Empty, no NetworkPolicy, and one an earlier run made is removed. Only with O(endpoint=service); the
        policy needs a network plugin that enforces NetworkPolicies.
    type: list
    elements: str
    default: []
  wait:
    description: Wait for the server to be ready before registering the webhook configuration.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for the server to be ready, or for cert-manager to issue the certificate.
    type: int
    default: 120
notes:
  - "Three webhook entries: pods labelled C(gkm.io/pvc-mutation=true) (CREATE); other pods whose volumes include
    a PVC or that carry the C(gkm.io/cache) annotation (CREATE, matchConditions); Deployments, StatefulSets and
    DaemonSets whose template does (CREATE and UPDATE)."
  - Pods whose node is not known at admission (neither C(spec.nodeName) nor the DaemonSet controller's
    C(matchFields metadata.name) affinity) are denied when they name a per-node cache.
"""

EXAMPLES = r"""
- name: Run the webhook in the cluster with a self-signed CA
  gkm.cluster.webhook_install:
    image: registry.example.com/gkm/tools:0.1.0

- name: Run the webhook on the tainted GPU nodes only
  gkm.cluster.webhook_install:
    image: registry.example.com/gkm/tools:0.1.0
    node_selector:
      hardware-type: gpu
    tolerations:
      - {key: gpu, operator: Equal, value: "true", effect: NoSchedule}

- name: Register a webhook server that runs outside the cluster
  gkm.cluster.webhook_install:
    endpoint: url
    url: https://127.0.0.1:9443/mutate
    tls_mode: provided
    ca_bundle: "{{ lookup('file', 'webhook-ca.pem') }}"
    failure_policy: Fail

- name: Use cert-manager for the certificates
  gkm.cluster.webhook_install:
    image: registry.example.com/gkm/tools:0.1.0
    tls_mode: cert_manager
    kubeconfig: ~/.kube/config

- name: Remove the webhook (the configuration goes first)
  gkm.cluster.webhook_install:
    state: absent
"""

RETURN = r"""
objects:
  description: Every object the run looked at, in order, with what happened to it.
  returned: always
  type: list
  elements: dict
  sample:
    - {kind: Namespace, namespace: null, name: gkm-system, action: unchanged}
    - {kind: MutatingWebhookConfiguration, namespace: null, name: gkm-webhook-gkm-system, action: created}
  contains:
    kind:
      description: Object kind.
      type: str
    namespace:
      description: Namespace, null for cluster-scoped objects.
      type: str
    name:
      description: Object name.
      type: str
    action:
      description: created, updated, unchanged, deleted or absent.
      type: str
kept:
  description: With O(state=absent), why the namespace stays (each ConfigMap or Secret that still lives there).
  returned: when the namespace was kept
  type: list
  elements: str
  sample: ["Namespace gkm-system: holds ConfigMap gkm-cluster-ownership"]
webhook_configuration:
  description: Name of the MutatingWebhookConfiguration.
  returned: always
  type: str
  sample: gkm-webhook-gkm-system
api_writes:
  description: Write requests sent to the API server (0 on a run with nothing to do; dry runs do not count).
  returned: always
  type: int
  sample: 0
tls:
  description: The TLS mode and, for V(self_signed), what was renewed and why.
  returned: when O(state=present)
  type: dict
  sample:
    mode: self_signed
    ca_renewed: false
    certificate_renewed: true
    reasons: ["new serving certificate: the serving certificate expires on 2027-01-01, within renew_before"]
    certificate_not_after: "2027-11-23T08:00:00+00:00"
    ca_certificates: 1
"""

from ansible_collections.gkm.cluster.plugins.module_utils.common.module import run_module  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.common.tls import CRYPTOGRAPHY_IMPORT_ERROR  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.tasks import webhook_install  # noqa: E402

ARGUMENT_SPEC = dict(
    name=dict(type="str", default="gkm-webhook"),
    namespace=dict(type="str", default="gkm-system"),
    pod_security_level=dict(type="str", choices=["restricted", "baseline", "privileged"], default="restricted"),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    endpoint=dict(type="str", choices=["service", "url"], default="service"),
    url=dict(type="str"),
    image=dict(type="str"),
    image_pull_policy=dict(type="str", choices=["Always", "IfNotPresent", "Never"], default="IfNotPresent"),
    replicas=dict(type="int", default=2),
    tolerations=dict(type="list", elements="dict", default=[]),
    node_selector=dict(type="dict", default={}),
    tls_mode=dict(type="str", choices=["self_signed", "cert_manager", "provided"], default="self_signed"),
    ca_bundle=dict(type="str"),
    cert_valid_days=dict(type="int", default=365),
    ca_valid_days=dict(type="int", default=3650),
    renew_before_days=dict(type="int", default=30),
    failure_policy=dict(type="str", choices=["Fail", "Ignore"], default="Fail"),
    timeout_seconds=dict(type="int", default=5),
    excluded_namespaces=dict(type="list", elements="str", default=[]),
    default_mount_mode=dict(type="str", choices=["PVC", "imageVolume"], default="PVC"),
    api_server_cidrs=dict(type="list", elements="str", default=[]),
    wait=dict(type="bool", default=True),
    wait_timeout=dict(type="int", default=120),
)


def main():
    run_module(ARGUMENT_SPEC, webhook_install, libraries=[("cryptography", CRYPTOGRAPHY_IMPORT_ERROR)])


if __name__ == "__main__":
    main()
