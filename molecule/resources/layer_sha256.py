"""Print {path: sha256} of every regular file in a cache image's layer, read from the registry (not by our code).

    layer_sha256.py REGISTRY REPOSITORY TAG

The real_nodes scenario compares it with what a workload pod reads from its node's copy.
"""

import json
import os
import sys
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.helpers.real_nodes import layer_files  # noqa: E402


def main():
    registry, repository, tag = sys.argv[1:4]
    request = urllib.request.Request("http://%s/v2/%s/manifests/%s" % (registry, repository, tag), method="HEAD",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        digest = response.headers["Docker-Content-Digest"]
    print(json.dumps(layer_files(registry, repository, digest), sort_keys=True))


if __name__ == "__main__":
    main()
