# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: cache_refusals
short_description: Every declared cache the API server refused, by name and field
version_added: 0.1.0
description:
  - Pairs the declared cache manifests with the result of one M(kubernetes.core.k8s) call that dry-ran them all
    (check mode, O(kubernetes.core.k8s#module:continue_on_error=true)) and returns one line per refused cache, the
    API server's own message (which names the field) instead of its raw Status JSON.
positional: results
options:
  _input:
    description: The declared GKMCache and ClusterGKMCache manifests, in the order they were sent.
    type: list
    elements: dict
    required: true
  results:
    description: The registered result of the M(kubernetes.core.k8s) call.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Fail with every invalid cache
  ansible.builtin.fail:
    msg: "{{ caches_declared | gkm.cluster.cache_refusals(caches_dry_run) }}"
  when: caches_declared | gkm.cluster.cache_refusals(caches_dry_run) | length > 0
"""

RETURN = r"""
_value:
  description: One line per refused cache - its kind, namespace/name, then the API server message.
  type: list
  elements: str
"""

import ast  # noqa: E402
import json  # noqa: E402


def _server_message(message):
    """The Status message inside kubernetes.core's error, else the error as it is. Older clients put the body in as
    a bytes repr ("Failed to create object: b'{...}'"), newer ones as text; only a literal that opens the JSON counts
    as one (a name ending in b, quoted inside the JSON, reads b" too)."""
    text = message
    for opening in ("b'{", 'b"{'):
        start = message.find(opening)
        if start >= 0:
            try:
                text = ast.literal_eval(message[start:].strip()).decode("utf-8", "replace")
            except (ValueError, SyntaxError, AttributeError):
                return message
            break
    try:
        status, _end = json.JSONDecoder().raw_decode(text[text.index("{"):])
        return status.get("message") or message
    except (ValueError, AttributeError):
        return message


def _label(manifest):
    metadata = manifest.get("metadata") or {}
    where = "%s/" % metadata["namespace"] if metadata.get("namespace") else ""
    return "%s %s%s" % (manifest.get("kind", "?"), where, metadata.get("name", "?"))


def cache_refusals(manifests, results):
    # One definition returns its result at the top level, several under result.results.
    per_cache = (results.get("result") or {}).get("results") if len(manifests) > 1 else [results]
    refusals = []
    for manifest, result in zip(manifests, per_cache or []):
        error = result.get("error") or ({"msg": result.get("msg")} if result.get("failed") else None)
        if error:
            refusals.append("%s: %s" % (_label(manifest), _server_message(str(error.get("msg") or error))))
    return refusals


class FilterModule(object):
    def filters(self):
        return {"cache_refusals": cache_refusals}
