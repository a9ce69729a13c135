# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: cache_table
short_description: Render caches as the table GKM's kubectl columns show
version_added: 0.1.0
description:
  - Turns the C(caches) list returned by M(gkm.cluster.cache_info), or a list of M(gkm.cluster.cache_reconcile)
    or M(gkm.cluster.cache_distribute) results, into aligned text lines with GKM's columns (STATUS, NODES,
    NODE-IN-USE, NODE-NOT-IN-USE, NODE-ERROR, POD-RUNNING, POD-OUTDATED).
  - With O(nodes=true), one indented line per namespace and node follows each cache (PVC, phase, message), and
    one per GPU node that does not get it (phase C(Excluded) or C(Incompatible), the reason and the message).
    Those lines come from M(gkm.cluster.cache_info), or from distribution results run with C(node_details=true)
    (without it a result has no per-node entries and adds no lines).
positional: nodes
options:
  _input:
    description: The C(caches) list of M(gkm.cluster.cache_info), or results of the distribution modules.
    type: list
    elements: dict
    required: true
  nodes:
    description: Add the per-namespace, per-node lines.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Print the cache table
  ansible.builtin.debug:
    msg: "{{ info.caches | gkm.cluster.cache_table }}"
"""

RETURN = r"""
_value:
  description: The table, one string per line, header first.
  type: list
  elements: str
"""

COLUMNS = (
    ("NAMESPACE", None), ("NAME", None), ("STATUS", None), ("NODES", "nodes"), ("NODE-IN-USE", "node_in_use"),
    ("NODE-NOT-IN-USE", "node_not_in_use"), ("NODE-ERROR", "node_error"), ("POD-RUNNING", "pod_running"),
    ("POD-OUTDATED", "pod_outdated"),
)


def _row(item):
    status = item.get("status") or {}
    counts = status.get("counts") or {}
    cache = item.get("cache") or item  # a module result names its cache under "cache"
    fixed = [cache.get("namespace") or "(cluster)", cache.get("name", ""), status.get("phase", "Pending")]
    return fixed + [str(counts.get(key, 0)) for _title, key in COLUMNS[3:]]


def _align(rows):
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def cache_table(caches, nodes=False):
    lines = _align([[title for title, _key in COLUMNS]] + [_row(cache) for cache in caches])
    if not nodes:
        return lines
    out = [lines[0]]
    for line, cache in zip(lines[1:], caches):
        out.append(line)
        for entry in (cache.get("status") or {}).get("entries") or []:
            detail = "    {0} {1} pvc={2} phase={3}".format(
                entry.get("namespace", ""), entry.get("node") or "(shared)",
                entry.get("pvc", ""), entry.get("phase", ""))
            if entry.get("reason"):
                detail += " reason=%s" % entry["reason"]
            if entry.get("message"):
                detail += " (%s)" % entry["message"]
            out.append(detail)
    return out


class FilterModule(object):
    def filters(self):
        return {"cache_table": cache_table}
