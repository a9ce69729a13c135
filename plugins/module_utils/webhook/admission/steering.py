# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Steering, pure: a pod that uses a cache is admitted only with a required node affinity that keeps it to nodes
where the cache is usable, and is denied with the reason and the fix when no node is.

Usable means: GPU labels fitting the image's targets (every mode), and for a per-node PVC cache the readiness label
at the digest the pod will mount (the serving PVC's digest, which stays the old one while pods keep it; for a
gkm.io/pvc-mutation pod the cache's current digest, which its claim is rewritten to). While a kept serving PVC's old
digest is held by nodes whose label has moved to the new one, the nodes holding it (their slot PVCs marked extracted)
are named by hostname instead; once every node has the new digest, the run adds an alias serving PVC at it
(distribute/serving.py) and a new pod's claim of the cache is rewritten to the alias, so it reads the new files on
nodes labelled at the new digest. A pod that fits no node now is denied when it is a bare pod; a pod a controller owns
is admitted with the affinity and waits Pending until a node is ready (a denial would only put the controller into its
retry backoff).

A pod given a cache whose image is in Triton's format (its reconcile recorded status.kernelOverlay), by annotation or
by naming it as a volume's claimName (the serving PVC, or the per-node PVC a gkm.io/pvc-mutation pod's claim is
rewritten to), also gets the kernel overlay beside the mount: an emptyDir, an init container running the server's
tools image and the variable naming it (webhook/admission/kernel_overlay.py, docs/kernels.md), unless annotated
gkm.io/cache-overlay: disabled.

A Deployment, StatefulSet or DaemonSet is checked (a cache it names must exist, an annotated mount must be valid)
and by default not changed: its pods are steered when they are created, so the workload stays as its owner wrote it
(GitOps tools see no drift). Annotated `gkm.io/cache-steering: template`, its pod template gets the caches'
requirement at any digest (readiness label Exists, and the GPU), so a DaemonSet's desired count is the nodes where
its caches are usable; its pods are then steered to the digest as any other.

`steer(request, view)` answers one AdmissionReview request (Pod CREATE, or CREATE/UPDATE of a workload) with JSONPatch
operations and a denial message or None; the server combines the operations with the PVC-mutation rewrite.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_ANNOTATION,
    CAPTURE_ANNOTATION,
    GPU_ARCH_LABEL,
    GPU_BACKEND_LABEL,
    GPU_WARP_SIZE_LABEL,
    IMAGE_VOLUME,
    PVC_MUTATION_LABEL,
    STEERING_ANNOTATION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission import kernel_overlay, node_affinity
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.cache_mount import (
    MountError,
    mount_operations,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.cache_use import (
    BY_ANNOTATION,
    BY_CLAIM,
    STEERING_DISABLED,
    STEERING_TEMPLATE,
    cache_uses,
    overlay_disabled,
    steering_disabled,
    template_steering,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.claims import pod_node

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
OPT_OUT = "to place it without steering, annotate it %s: %s" % (STEERING_ANNOTATION, STEERING_DISABLED)


class Steering:
    """operations: JSONPatch operations (possibly []); denial: why the object is refused and the fix, or None;
    note: what was done, for logs."""

    __slots__ = ("denial", "note", "operations")

    def __init__(self, operations=(), denial=None, note=""):
        self.operations = list(operations)
        self.denial = denial
        self.note = note


def _mapping(value):
    return value if isinstance(value, dict) else {}


def _subject(request):
    """(kind, metadata, pod metadata, pod spec, path of the pod spec) of a request steering handles, else None."""
    kind = _mapping(request.get("kind"))
    obj = _mapping(request.get("object"))
    if request.get("subResource"):
        return None
    if kind.get("group") == "" and kind.get("kind") == "Pod" and request.get("operation") == "CREATE":
        metadata = _mapping(obj.get("metadata"))
        return "Pod", metadata, metadata, _mapping(obj.get("spec")), "/spec"
    if (kind.get("group") == "apps" and kind.get("kind") in WORKLOAD_KINDS
            and request.get("operation") in ("CREATE", "UPDATE")):
        template = _mapping(_mapping(obj.get("spec")).get("template"))
        return (kind["kind"], _mapping(obj.get("metadata")), _mapping(template.get("metadata")),
                _mapping(template.get("spec")), "/spec/template/spec")
    return None


def _label(kind, metadata, namespace):
    name = metadata.get("name") or "%s<generated>" % (metadata.get("generateName") or "")
    return '%s "%s/%s"' % (kind.lower(), namespace, name)


def _pod_digest(target, mutation_labelled):
    """The short digest a pod's volume of this per-node cache will hold: the serving PVC's, unless the pod's claim is
    rewritten (gkm.io/pvc-mutation, or the serving PVC's alias at the current digest)."""
    if mutation_labelled or target.serving_digest is None or target.serving_alias:
        return target.short_digest
    return target.serving_digest


def _alias_operations(spec, spec_path, uses):
    """Point the pod's claims of a cache whose serving PVC is kept at an older digest (pods mount it) at the alias
    serving the current one, so the new pod reads the new files (distribute/serving.py)."""
    aliases = {use.name: use.target.serving_alias for use in uses
               if use.via == BY_CLAIM and use.target is not None and use.target.serving_alias}
    operations = []
    volumes = spec.get("volumes") if aliases and isinstance(spec.get("volumes"), list) else ()
    for index, volume in enumerate(volumes):
        claim = _mapping(_mapping(volume).get("persistentVolumeClaim")).get("claimName")
        if claim in aliases:
            operations.append({"op": "replace", "path": "%s/volumes/%d/persistentVolumeClaim/claimName" % (
                spec_path, index), "value": aliases[claim]})
    return operations


def _read_only_operations(spec, spec_path, uses):
    """Mount every volume naming a cache's claim read-only, whoever wrote the pod: a writable mount of a hostPath PV
    lets a pod running as root replace the node's copy (issue 31, class 1; docs/security.md says what still reaches
    it when the webhook is not called)."""
    claims = {use.name for use in uses if use.via == BY_CLAIM and use.target is not None}
    operations = []
    volumes = spec.get("volumes") if claims and isinstance(spec.get("volumes"), list) else ()
    for index, volume in enumerate(volumes):
        claim = _mapping(_mapping(volume).get("persistentVolumeClaim"))
        if claim.get("claimName") in claims and claim.get("readOnly") is not True:
            operations.append({"op": "add", "path": "%s/volumes/%d/persistentVolumeClaim/readOnly" % (
                spec_path, index), "value": True})
    return operations


def _holders(view, target, digest, mutation_labelled):
    """The nodes that hold the serving PVC's digest when some of them are not labelled at it (the label moved on to a
    new digest while the serving PVC is kept at the old one), else None: the label says it all. Only nodes with a
    hostname label can be named. Looked up only while the serving PVC is at another digest than the cache, so
    steady-state admissions cost nothing more."""
    if mutation_labelled or digest == target.short_digest:
        return None
    labelled = view.ready_nodes(target.readiness_key, digest)
    unlabelled = view.holding_nodes(target, digest) - labelled
    named = {name for name in labelled | unlabelled if view.hostname(name)}
    return named if unlabelled & named else None


def _requirement(use, mutation_labelled, view):
    """(CacheRequirement, the digest the pod needs on its node or None, the nodes named as holding it or None, why
    the pod cannot use the cache or None)."""
    target = use.target
    digest = holders = None
    if target.readiness_key:
        digest = _pod_digest(target, mutation_labelled)
        if digest is None:
            return None, None, None, ("has not been resolved or extracted yet", "wait for its first reconcile "
                                      "(gkm.cluster.cache_info shows its state)")
        holders = _holders(view, target, digest, mutation_labelled)
    if target.mode == IMAGE_VOLUME and target.image_reference() is None:
        return None, None, None, ("has no resolved image digest yet",
                                  "wait for its reconcile to record status.resolvedDigest; an Error status says why "
                                  "it did not, such as a signature that does not verify")
    hostnames = None if holders is None else {view.hostname(name) for name in holders}
    return node_affinity.cache_requirement(target.readiness_key, digest, target.targets, hostnames), digest, \
        holders, None


def steer(request, view, serving_claims=False):
    """The Steering of one AdmissionReview request (already checked to be well formed) against a SteeringView.
    serving_claims: steer a gkm.io/pvc-mutation pod as a pod of the serving PVC (its claims are not rewritten)."""
    subject = _subject(request)
    if subject is None:
        return Steering(note="not a pod create or a workload create/update")
    kind, metadata, pod_metadata, spec, spec_path = subject
    namespace = request.get("namespace") or metadata.get("namespace") or ""
    label = _label(kind, metadata, namespace)
    is_pod = kind == "Pod"
    uses = cache_uses(pod_metadata, spec, namespace, view)
    if not uses:
        return Steering(note="%s uses no cache" % label)
    problems, operations = [], []
    overlaid = set()  # containers given a kernel overlay: one per container, the first cache's in use order
    for use in uses:
        if use.target is None:
            problems.append('annotation %s names "%s", which is neither a GKMCache in namespace %s nor a '
                            "ClusterGKMCache listing it in workloadNamespaces: fix the name or create the cache" % (
                                CACHE_ANNOTATION, use.name, namespace))
            continue
        if use.via == BY_ANNOTATION:
            if is_pod and use.target.readiness_key and use.target.serving_digest is None:
                problems.append("%s has no serving PVC in namespace %s to mount (serving_pvc is off, its storage "
                                "class has a provisioner, or no reconcile made it yet): mount its per-node PVCs "
                                "through the %s webhook instead" % (
                                    use.target.describe(), namespace, PVC_MUTATION_LABEL))
                continue
            try:
                pod_operations = mount_operations(spec, use) + _overlay_operations(spec, pod_metadata, use, view,
                                                                                   overlaid)
            except MountError as error:
                problems.append(str(error))
                continue
            if is_pod:  # a template is only checked: pods get their mounts when they are created
                operations.extend(pod_operations)
        elif is_pod:  # by claim: the pod mounts the cache itself; the overlay never refuses it
            operations.extend(_overlay_operations(spec, pod_metadata, use, view, overlaid))
    if problems:
        return Steering(denial="%s: %s" % (label, "; ".join(problems)))
    if not is_pod:
        if template_steering(metadata) and not steering_disabled(pod_metadata):
            return _steered_template(label, spec, spec_path, uses)
        return Steering(note="%s: checked; its pods are steered when they are created" % label)
    mutation_labelled = not serving_claims and _mapping(pod_metadata.get("labels")).get(PVC_MUTATION_LABEL) == "true"
    operations.extend(_read_only_operations(spec, spec_path, uses))
    if not mutation_labelled:
        operations.extend(_alias_operations(spec, spec_path, uses))
    if steering_disabled(pod_metadata):
        return Steering(operations, note="%s: steering disabled by %s" % (label, STEERING_ANNOTATION))
    return _steered(label, _controlled(metadata), mutation_labelled, spec, spec_path, uses, view, operations)


def _overlay_operations(spec, pod_metadata, use, view, overlaid):
    """The kernel overlay of a cache whose reconcile recorded a plan (a Triton image), when the server knows its tools
    image and the pod does not decline it (gkm.io/cache-overlay: disabled); by annotation, raises MountError when
    the overlay's directory is taken. overlaid: the containers earlier caches overlaid, updated."""
    if not use.target.overlay_variable or not view.tools_image or overlay_disabled(pod_metadata):
        return []
    capture = _mapping(pod_metadata.get("annotations")).get(CAPTURE_ANNOTATION) == use.name
    return kernel_overlay.overlay_operations(spec, use, use.target.overlay_variable, view.tools_image, overlaid,
                                             capture)


def waiting_on_its_node(request, view):
    """The Steering that admits a gkm.io/pvc-mutation pod whose node has no PVC of its cache (the rewrite's denial) to
    wait Pending on that node, or None when it stays denied.

    Only a pod a controller owns and pins to one node by its required node affinity (a DaemonSet's pod): a denied
    create stops the DaemonSet controller's whole slow-start batch and backs the DaemonSet off, so its pods on usable
    nodes would wait behind those on unusable ones. Only while every cache it names is a per-node cache resource with
    a serving PVC in the namespace, and steering is not disabled: its claims stay the cache's name, so it is steered
    as a pod of the serving PVC, which keeps it off its node until that node holds the serving PVC's digest (its
    readiness label), and then it mounts that node's copy.
    """
    pod = _mapping(request.get("object"))
    metadata, spec = _mapping(pod.get("metadata")), _mapping(pod.get("spec"))
    if not _controlled(metadata) or spec.get("nodeName") or pod_node(spec) is None or steering_disabled(metadata):
        return None
    namespace = request.get("namespace") or metadata.get("namespace") or ""
    uses = cache_uses(metadata, spec, namespace, view)
    # Each cache must be one steering knows (a cache known only by its PVCs has no resource), with a readiness
    # label to require and a serving PVC to mount: else nothing would keep the pod off its node.
    if not uses or any(use.target is None or not use.target.readiness_key or use.target.serving_digest is None
                       for use in uses):
        return None
    steering = steer(request, view, serving_claims=True)
    return steering if steering.denial is None else None


def _controlled(metadata):
    return any(isinstance(owner, dict) and owner.get("controller") is True
               for owner in metadata.get("ownerReferences") or [])


def _steered(label, controlled, mutation_labelled, spec, spec_path, uses, view, operations):
    requirements, needs, unusable = [], [], []
    for use in uses:
        requirement, digest, holders, problem = _requirement(use, mutation_labelled, view)
        if problem is not None:
            unusable.append((use.target, problem))
            continue
        requirements.append(requirement)
        needs.append((use.target, digest, holders))
    if unusable:
        return Steering(denial=_denial(label, unusable))
    terms = node_affinity.merged_terms(node_affinity.required_terms(spec), requirements)
    operations = operations + node_affinity.affinity_operations(spec, spec_path, terms)
    caches = ", ".join(target.describe() for target, _digest, _holders in needs)
    if not any(node_affinity.node_fits(view.node(name), spec, terms) for name in _candidates(view, needs)):
        if not controlled:
            return Steering(denial=_denial(label, _why_nowhere(view, needs)))
        return Steering(operations, note="%s steered to the nodes of %s; none is usable yet, it waits Pending" % (
            label, caches))
    return Steering(operations, note="%s steered to the nodes of %s" % (label, caches))


def _steered_template(label, spec, spec_path, uses):
    """A workload's template kept to nodes where its caches are usable at any digest; never denied for placement
    (a workload may be applied before its cache is extracted: its controller waits for nodes)."""
    requirements = [node_affinity.cache_requirement(use.target.readiness_key, None, use.target.targets)
                    for use in uses]
    terms = node_affinity.merged_terms(node_affinity.required_terms(spec), requirements)
    return Steering(node_affinity.affinity_operations(spec, spec_path, terms),
                    note="%s: template steered (%s: %s) to the nodes of %s" % (
                        label, STEERING_ANNOTATION, STEERING_TEMPLATE, ", ".join(u.target.describe() for u in uses)))


def _target_nodes(view, target, digest, holders):
    """Names of the nodes usable for one cache, None when the cache restricts no node."""
    nodes = None
    if target.readiness_key:
        nodes = view.ready_nodes(target.readiness_key, digest) if holders is None else holders
    if target.targets:
        gpu_nodes = view.gpu_nodes(target.targets)
        nodes = gpu_nodes if nodes is None else nodes & gpu_nodes
    return nodes


def _candidates(view, needs):
    candidates = None
    for target, digest, holders in needs:
        nodes = _target_nodes(view, target, digest, holders)
        if nodes is not None:
            candidates = nodes if candidates is None else candidates & nodes
    return view.all_nodes() if candidates is None else candidates


def _why_nowhere(view, needs):
    """[(target, (why, fix))] for a pod no node fits, computed only on the way to a denial."""
    reasons = []
    for target, digest, holders in needs:
        if target.targets and not view.gpu_nodes(target.targets):
            reasons.append((target, ("no node has a GPU it was built for (%s)" % ", ".join(
                "%s/%s/%s" % (t["backend"], t["arch"], t["warp_size"]) for t in target.targets),
                "add nodes with such a GPU (labels %s, %s, %s) or build the cache for the cluster's GPUs" % (
                    GPU_BACKEND_LABEL, GPU_ARCH_LABEL, GPU_WARP_SIZE_LABEL))))
        elif target.readiness_key and not _target_nodes(view, target, digest, holders):
            elsewhere = len(view.ready_nodes(target.readiness_key))
            reasons.append((target, ("no node holds it extracted at digest %s yet%s" % (digest, (
                " (%d node(s) hold another digest)" % elsewhere) if elsewhere else ""),
                "wait for its extraction; gkm.cluster.cache_info shows each node's state and why a node does not "
                "get it")))
    if not reasons:
        caches = ", ".join(target.describe() for target, _digest, _holders in needs)
        usable = len(_candidates(view, needs))
        return [(None, ("no node is usable for %s and also fits the pod's own nodeName, nodeSelector and required "
                        "node affinity (%d node(s) are usable for the caches)" % (caches, usable),
                        "widen the pod's placement"))]
    return reasons


def _denial(label, reasons):
    parts = []
    for target, (why, fix) in reasons:
        parts.append("%s%s (fix: %s)" % (target.describe() + " " if target is not None else "", why, fix))
    return "%s cannot be placed on a node where its cache is usable: %s; %s" % (label, "; ".join(parts), OPT_OUT)
