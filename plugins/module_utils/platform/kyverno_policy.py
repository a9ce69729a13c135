# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kyverno ClusterPolicies that verify the signature of namespaced GKMCache images.

One policy per signature format, selected by the GKMCache label ``gkm.io/signature-format``: cosign v2
signatures (``.sig`` tags) are ``type: Cosign``, cosign v3 sigstore bundles (OCI 1.1 referrers) are
``type: SigstoreBundle``. The label is the cache owner's, so where the admin requires signatures (every
namespace, or the ones listed: the caches role's ``caches_require_signature``) the first format's policy also
takes every GKMCache that names no listed format, the label missing included: there the label only picks the
format, as in the reconcile (distribute/inputs/verification.py). The image is found with an imageExtractor at
``/spec/image`` and pinned to its digest (``mutateDigest``). The signer is what the user states - a public key,
or a keyless OIDC issuer and subject - and nothing else: there is no default identity, and an identity that any
signer would match is refused. Kyverno never sees cluster-scoped custom resources, so ClusterGKMCache images are
verified by cache_extract instead.

Pure functions.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import re

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    API_VERSION,
    CACHE_KIND,
    MANAGED_BY_LABEL,
    MANAGER,
    SIGNATURE_FORMAT_LABEL,
)

FORMAT_TYPES = {"cosign-v2": "Cosign", "cosign-v3": "SigstoreBundle"}
GKMCACHE_KIND = API_VERSION + "/" + CACHE_KIND
MANAGED_BY = {MANAGED_BY_LABEL: MANAGER}
DEFAULT_NAME_PREFIX = "gkm-verify-gkmcache"
# Kyverno refuses a keyless attestor without a Rekor URL (or roots): the public instance unless one is given.
PUBLIC_REKOR_URL = "https://rekor.sigstore.dev"
# Made-up signers in pairs that differ only in who they are: a subject pattern that matches both of a pair
# trusts everyone on that host (the "any GitHub workflow" mistake), not one signer.
_SIGNER_PAIRS = [
    ("https://%s/org-a/repo-a/.github/workflows/build.yml@refs/heads/main" % host,
     "https://%s/org-b/repo-b/.github/workflows/build.yml@refs/heads/main" % host)
    for host in ("github.com", "gitlab.com", "gkm.invalid")
] + [("alice@org-a.invalid", "bob@org-b.invalid")]

MISSING_IDENTITY = (
    "no signer identity is set, and gkm.cluster has no default that trusts any signer. Set either "
    "kyverno_attestor_public_key (the PEM cosign public key the images are signed with), or "
    "kyverno_attestor_keyless_issuer together with kyverno_attestor_keyless_subject (or "
    "kyverno_attestor_keyless_subject_regexp), e.g. issuer https://token.actions.githubusercontent.com and subject "
    "https://github.com/ORG/REPO/.github/workflows/WORKFLOW.yml@refs/heads/main")


class PolicyError(ValueError):
    """The verification settings are unusable; the message names the variable and the fix."""


def policy_name(signature_format, prefix=DEFAULT_NAME_PREFIX):
    return "%s-%s" % (prefix, signature_format)


def _check_subject(subject, regexp):
    """Refuse a keyless subject (pattern) that matches signers of different organisations."""
    if subject is not None:
        variable, shown = "kyverno_attestor_keyless_subject", subject

        def matches(identity):
            return fnmatch.fnmatchcase(identity, subject)
    else:
        try:
            compiled = re.compile(regexp)
        except re.error as error:
            raise PolicyError("kyverno_attestor_keyless_subject_regexp %r is not a regular expression: %s"
                              % (regexp, error)) from error
        variable, shown, matches = "kyverno_attestor_keyless_subject_regexp", regexp, compiled.search
    for first, second in _SIGNER_PAIRS:
        if matches(first) and matches(second):
            raise PolicyError("%s %r matches any signer (for example both %s and %s); name the repository and "
                              "workflow, or the identity, that signs the images" % (variable, shown, first, second))


def attestor_entry(public_key=None, keyless_issuer=None, keyless_subject=None, keyless_subject_regexp=None,
                   rekor_url=None, ignore_tlog=False, ignore_sct=False):
    """The one attestor entry the user stated, or PolicyError saying what to set."""
    public_key = (public_key or "").strip() or None
    keyless_subject = keyless_subject or None
    keyless_subject_regexp = keyless_subject_regexp or None
    keyless = bool(keyless_issuer or keyless_subject or keyless_subject_regexp)
    if public_key and keyless:
        raise PolicyError("set either kyverno_attestor_public_key or the kyverno_attestor_keyless_* variables, "
                          "not both")
    transparency = {}
    if rekor_url or ignore_tlog:
        transparency["rekor"] = dict([("url", rekor_url)] if rekor_url else [], **(
            {"ignoreTlog": True} if ignore_tlog else {}))
    if ignore_sct:
        transparency["ctlog"] = {"ignoreSCT": True}
    if public_key:
        if not public_key.startswith("-----BEGIN PUBLIC KEY-----"):
            raise PolicyError("kyverno_attestor_public_key must be a PEM public key (-----BEGIN PUBLIC KEY-----...), "
                              "as written by cosign generate-key-pair")
        return {"keys": dict({"publicKeys": public_key}, **transparency)}
    if not keyless:
        raise PolicyError(MISSING_IDENTITY)
    if not keyless_issuer:
        raise PolicyError("kyverno_attestor_keyless_issuer is required with a keyless subject: the OIDC issuer URL, "
                          "e.g. https://token.actions.githubusercontent.com")
    if not keyless_issuer.startswith("https://"):
        raise PolicyError("kyverno_attestor_keyless_issuer must be an https:// OIDC issuer URL, got %r"
                          % keyless_issuer)
    if bool(keyless_subject) == bool(keyless_subject_regexp):
        raise PolicyError("set exactly one of kyverno_attestor_keyless_subject and "
                          "kyverno_attestor_keyless_subject_regexp with kyverno_attestor_keyless_issuer")
    _check_subject(keyless_subject, keyless_subject_regexp)
    keyless_entry = {"issuer": keyless_issuer}
    if keyless_subject:
        keyless_entry["subject"] = keyless_subject
    else:
        keyless_entry["subjectRegExp"] = keyless_subject_regexp
    keyless_entry.update(transparency)
    keyless_entry.setdefault("rekor", {}).setdefault("url", PUBLIC_REKOR_URL)
    return {"keyless": keyless_entry}


def required_match(formats, required):
    """The match of the GKMCaches that must be verified whatever their label says, or None when none must be.

    required: false (none), true (every namespace) or a list of namespaces.
    """
    if required is True:
        namespaces = None
    elif required is False or required is None:
        return None
    elif isinstance(required, (list, tuple)) and all(isinstance(name, str) and name for name in required):
        if not required:
            return None
        namespaces = sorted(set(required))
    else:
        raise PolicyError("kyverno_require_signature must be false, true or a list of namespaces, got %r" % (required,))
    resources = {"kinds": [GKMCACHE_KIND], "selector": {"matchExpressions": [
        {"key": SIGNATURE_FORMAT_LABEL, "operator": "NotIn", "values": list(formats)}]}}
    if namespaces is not None:
        resources["namespaces"] = namespaces
    return {"resources": resources}


def render_verify_policies(formats, attestor, image_references=("*",), failure_action="Enforce",
                           webhook_timeout_seconds=30, name_prefix=DEFAULT_NAME_PREFIX, required=False):
    """One ClusterPolicy per signature format, verifying GKMCache images with the given attestor entry; the first
    format's also verifies the unlabelled GKMCaches `required` names (required_match)."""
    formats = list(formats or [])
    unknown = [value for value in formats if value not in FORMAT_TYPES]
    if not formats or unknown:
        raise PolicyError("kyverno_signature_formats must list cosign-v2 and/or cosign-v3, got %r" % (formats,))
    if failure_action not in ("Enforce", "Audit"):
        raise PolicyError("kyverno_failure_action must be Enforce or Audit, got %r" % failure_action)
    references = list(image_references or [])
    if not references or not all(isinstance(ref, str) and ref for ref in references):
        raise PolicyError("kyverno_image_references must be a non-empty list of image patterns, e.g. ['quay.io/org/*']")
    if not 1 <= int(webhook_timeout_seconds) <= 30:
        raise PolicyError("kyverno_webhook_timeout_seconds must be between 1 and 30, got %r" % webhook_timeout_seconds)
    unlabelled = required_match(formats, required)
    policies = []
    for signature_format in formats:
        name = policy_name(signature_format, name_prefix)
        matches = [{"resources": {"kinds": [GKMCACHE_KIND],
                                  "selector": {"matchLabels": {SIGNATURE_FORMAT_LABEL: signature_format}}}}]
        description = (
            "GKMCache objects labelled %s=%s must name an image signed by the stated signer; the image is pinned to "
            "its digest. ClusterGKMCache images are verified by gkm.cluster's extraction, since Kyverno does not see "
            "cluster-scoped custom resources." % (SIGNATURE_FORMAT_LABEL, signature_format))
        if unlabelled and signature_format == formats[0]:
            matches.append(unlabelled)
            description += " So must every GKMCache %s whose label names no other format (the admin requires it)." % (
                "in %s" % ", ".join(unlabelled["resources"]["namespaces"]) if "namespaces" in unlabelled["resources"]
                else "in any namespace")
        policies.append({
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {
                "name": name,
                "labels": dict(MANAGED_BY, **{SIGNATURE_FORMAT_LABEL: signature_format}),
                "annotations": {
                    "policies.kyverno.io/title": "Verify %s signatures of GKMCache images" % signature_format,
                    "policies.kyverno.io/subject": "GKMCache",
                    "policies.kyverno.io/description": description,
                },
            },
            "spec": {
                "background": False,
                "webhookConfiguration": {"failurePolicy": "Fail", "timeoutSeconds": int(webhook_timeout_seconds)},
                "rules": [{
                    "name": "verify-%s" % signature_format,
                    "match": {"any": matches},
                    "imageExtractors": {"GKMCache": [{"path": "/spec/image"}]},
                    "verifyImages": [{
                        "type": FORMAT_TYPES[signature_format],
                        "imageReferences": references,
                        "failureAction": failure_action,
                        "mutateDigest": True,
                        "verifyDigest": True,
                        "required": True,
                        "attestors": [{"entries": [attestor]}],
                    }],
                }],
            },
        })
    return policies
