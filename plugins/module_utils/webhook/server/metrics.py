# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The webhook server's counters and latency histogram, rendered in the Prometheus text format.

A few counters do not justify a client library: the text format (version 0.0.4) is a handful of lines.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import bisect

# Seconds. Dense below 10 ms, where the webhook's goals are.
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# status.kernelUse per cache, node and pod namespace (distribute/status/kernel_use.py), as its cache's last reconcile
# read it from the newest pods given the kernel overlay: gauges of the pods read then, not counters, since the status
# keeps no history (Prometheus does). (name, help, index in a kernel_use_rows row).
KERNEL_USE_METRICS = (
    ("gkm_cache_kernel_hits", "Kernels the pods given a cache's kernel overlay found in it (status.kernelUse).", 3),
    ("gkm_cache_kernel_misses", "Kernels those pods compiled themselves (status.kernelUse).", 4),
    ("gkm_cache_kernel_pods", "Pods given the kernel overlay whose kernel use the cache's last reconcile read.", 2),
    ("gkm_cache_compile_seconds_saved", "Compile seconds the hits saved, estimated from the image's recorded cold "
     "compile seconds (absent when the image records none).", 5),
)


def _label(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def kernel_use_lines(kernel_use):
    """Exposition lines of {(kind, (cache namespace, cache)): rows} (contract.cache_resource.kernel_use_rows)."""
    lines = []
    for name, text, index in KERNEL_USE_METRICS:
        lines += ["# HELP {0} {1}".format(name, text), "# TYPE {0} gauge".format(name)]
        for (kind, (cache_namespace, cache)), rows in sorted(kernel_use.items()):
            for row in rows:
                if row[index] is None:
                    continue
                labels = 'kind="{0}",cache="{1}",cache_namespace="{2}",namespace="{3}",node="{4}"'.format(
                    _label(kind), _label(cache), _label(cache_namespace), _label(row[1]), _label(row[0]))
                lines.append("{0}{{{1}}} {2}".format(name, labels, row[index]))
    return lines


class Metrics:
    def __init__(self):
        self.requests = {}  # outcome -> count
        self.denials = 0
        self.bucket_counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0
        self.latency_count = 0
        self.watch_events = {}  # source -> count
        self.watch_restarts = {}  # source -> count
        self.cert_reloads = 0
        self.cert_reload_failures = 0

    def observe_request(self, outcome, seconds):
        self.requests[outcome] = self.requests.get(outcome, 0) + 1
        if outcome == "denied":
            self.denials += 1
        self.bucket_counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds
        self.latency_count += 1

    def count_watch_event(self, source):
        self.watch_events[source] = self.watch_events.get(source, 0) + 1

    def count_watch_restart(self, source):
        self.watch_restarts[source] = self.watch_restarts.get(source, 0) + 1

    def render(self, synced, view_counts, kernel_use=None):
        """The exposition text; synced maps source -> bool, view_counts comes from CacheView.counts(), kernel_use
        from WatchedCluster.kernel_use."""
        lines = [
            "# HELP gkm_webhook_requests_total Admission requests by outcome "
            "(patched, allowed, denied, invalid, error).",
            "# TYPE gkm_webhook_requests_total counter",
        ]
        lines += ['gkm_webhook_requests_total{{outcome="{0}"}} {1}'.format(k, v)
                  for k, v in sorted(self.requests.items())]
        lines += [
            "# HELP gkm_webhook_denials_total Pods denied because their cache PVC or node was not known.",
            "# TYPE gkm_webhook_denials_total counter",
            "gkm_webhook_denials_total {0}".format(self.denials),
            "# HELP gkm_webhook_request_duration_seconds Time to decide one admission request.",
            "# TYPE gkm_webhook_request_duration_seconds histogram",
        ]
        cumulative = 0
        for index, bound in enumerate(LATENCY_BUCKETS):
            cumulative += self.bucket_counts[index]
            lines.append('gkm_webhook_request_duration_seconds_bucket{{le="{0}"}} {1}'.format(bound, cumulative))
        lines += [
            'gkm_webhook_request_duration_seconds_bucket{{le="+Inf"}} {0}'.format(self.latency_count),
            "gkm_webhook_request_duration_seconds_sum {0:.6f}".format(self.latency_sum),
            "gkm_webhook_request_duration_seconds_count {0}".format(self.latency_count),
            "# HELP gkm_webhook_view_synced 1 once the first LIST of a watched source has been applied.",
            "# TYPE gkm_webhook_view_synced gauge",
        ]
        lines += ['gkm_webhook_view_synced{{source="{0}"}} {1}'.format(k, int(v)) for k, v in sorted(synced.items())]
        lines += [
            "# HELP gkm_webhook_view_objects Objects in the in-memory view.",
            "# TYPE gkm_webhook_view_objects gauge",
        ]
        lines += ['gkm_webhook_view_objects{{kind="{0}"}} {1}'.format(k, v) for k, v in sorted(view_counts.items())]
        lines += [
            "# HELP gkm_webhook_watch_events_total Watch events applied to the view.",
            "# TYPE gkm_webhook_watch_events_total counter",
        ]
        lines += ['gkm_webhook_watch_events_total{{source="{0}"}} {1}'.format(k, v)
                  for k, v in sorted(self.watch_events.items())]
        lines += [
            "# HELP gkm_webhook_watch_restarts_total Re-LISTs after a watch ended with an error or expired.",
            "# TYPE gkm_webhook_watch_restarts_total counter",
        ]
        lines += ['gkm_webhook_watch_restarts_total{{source="{0}"}} {1}'.format(k, v)
                  for k, v in sorted(self.watch_restarts.items())]
        lines += [
            "# HELP gkm_webhook_certificate_reloads_total Serving certificate reloads after the files changed.",
            "# TYPE gkm_webhook_certificate_reloads_total counter",
            "gkm_webhook_certificate_reloads_total {0}".format(self.cert_reloads),
            "# HELP gkm_webhook_certificate_reload_failures_total Changed certificate files that did not load.",
            "# TYPE gkm_webhook_certificate_reload_failures_total counter",
            "gkm_webhook_certificate_reload_failures_total {0}".format(self.cert_reload_failures),
        ]
        return "\n".join(lines + kernel_use_lines(kernel_use or {})) + "\n"
