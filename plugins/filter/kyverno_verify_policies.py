# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kyverno_verify_policies filter: Kyverno ClusterPolicies verifying GKMCache image signatures."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gkm.cluster.plugins.module_utils.platform import kyverno_policy


def kyverno_verify_policies(formats, public_key=None, keyless_issuer=None, keyless_subject=None,
                            keyless_subject_regexp=None, rekor_url=None, ignore_tlog=False, ignore_sct=False,
                            image_references=None, failure_action="Enforce", webhook_timeout_seconds=30,
                            required=False):
    try:
        attestor = kyverno_policy.attestor_entry(public_key, keyless_issuer, keyless_subject, keyless_subject_regexp,
                                                 rekor_url, ignore_tlog, ignore_sct)
        return kyverno_policy.render_verify_policies(formats, attestor, image_references or ["*"], failure_action,
                                                     webhook_timeout_seconds, required=required)
    except kyverno_policy.PolicyError as error:
        raise AnsibleFilterError("kyverno: %s" % error) from error


class FilterModule(object):
    def filters(self):
        return {"kyverno_verify_policies": kyverno_verify_policies}
