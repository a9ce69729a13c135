#!/usr/bin/env bash
# Run the molecule scenarios on the local simulated GPU cluster: tools/ci/molecule.sh [scenario ...]
# (a name, or its molecule.yml: molecule/day2/molecule.yml; default: every molecule/*/molecule.yml). The cluster is the one of $GKM_SIM_DIR (default .sim/ in the
# checkout), as for tools/sim-cluster/sim.py: a running one is used as it is; one that is not running is
# started here and stopped again at the end, unless another session (a pytest run registered under
# $GKM_SIM_DIR/users) still uses it. The kind scenario runs only where kind and a container engine exist.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV_BIN="$ROOT/.venv/bin"
export PATH="$VENV_BIN:$PATH"
# The molecule.yml files pass it on to ansible-playbook. .venv's site-packages as its interpreter names it (the
# path carries the Python version).
export ANSIBLE_COLLECTIONS_PATH="$ROOT/.cache/collections:$("$VENV_BIN/python" -c \
  'import sysconfig; print(sysconfig.get_path("purelib"))')"
export GKM_SIM_DIR="${GKM_SIM_DIR:-$ROOT/.sim}"
# The real_nodes scenario runs pods on real nodes; a cluster this script starts has two (as the test suite's).
export GKM_SIM_REAL_NODES="${GKM_SIM_REAL_NODES:-2}"
SIM=("$VENV_BIN/python" "$ROOT/tools/sim-cluster/sim.py")
CLUSTER_PROCESSES='^(etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kwok|registry) +running'

cluster_running() {
  [ "$("${SIM[@]}" status 2>/dev/null | grep -cE "$CLUSTER_PROCESSES")" -eq 6 ]
}

kind_available() {
  command -v kind >/dev/null && { docker info >/dev/null 2>&1 || podman info >/dev/null 2>&1; }
}

# The first failure in a scenario's output, on one line: the task and what Ansible said of it, or the tasks that
# changed on the idempotence run. The lane summary names the scenario with it (tools/ci/lanes_plan.py).
failure_reason() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '
    /TASK \[/ { sub(/.*TASK \[/, ""); sub(/\].*/, ""); task = $0 }
    /fatal: \[/ { sub(/.*FAILED! => /, ""); print task ": " $0; exit }
    /Idempotence test failed/ { idempotence = 1; reason = "not idempotent:"; next }
    idempotence && /\* \[/ { sub(/.*\* /, ""); reason = reason " " $0; next }
    idempotence { print reason; idempotence = 0; exit }
    END { if (idempotence) print reason }' | head -c 1000
}

started_cluster=false
users_marker="$GKM_SIM_DIR/users/$$"

finish() {
  rm -f "$users_marker"
  if $started_cluster; then
    local others=()
    for marker in "$GKM_SIM_DIR"/users/*; do
      [ -e "$marker" ] && [ -e "/proc/$(basename "$marker")" ] && others+=("$(basename "$marker")")
    done
    if [ ${#others[@]} -eq 0 ]; then
      echo "molecule: stopping the simulated cluster this run started ($GKM_SIM_DIR)"
      "${SIM[@]}" down
    else
      echo "molecule: leaving the simulated cluster running for sessions ${others[*]}"
    fi
  fi
}
trap finish EXIT

scenarios=()
if [ $# -gt 0 ]; then
  for scenario in "$@"; do scenarios+=("$(basename "${scenario%/molecule.yml}")"); done
else
  for file in "$ROOT"/molecule/*/molecule.yml; do scenarios+=("$(basename "$(dirname "$file")")"); done
fi

needs_sim=false
for scenario in "${scenarios[@]}"; do [ "$scenario" != kind ] && needs_sim=true; done
if $needs_sim; then
  mkdir -p "$GKM_SIM_DIR/users" && : > "$users_marker"
  if ! cluster_running; then
    started_cluster=true
    "${SIM[@]}" up || exit 1
  fi
  # The prepare step of each scenario does this too; doing it once here keeps those steps short.
  "$VENV_BIN/python" "$ROOT/tools/sample_caches.py" || exit 1
  # The tools image of this checkout, for the real nodes (cached: only changed layers are rebuilt).
  "${SIM[@]}" tools-image >/dev/null || exit 1
fi

cd "$ROOT" || exit 1
failed=()
summary=()
for scenario in "${scenarios[@]}"; do
  if [ "$scenario" = kind ] && ! kind_available; then
    line="molecule kind: SKIPPED - it needs the kind binary and a running docker or podman, and this machine has"
    line+=" neither; the same checks run on the simulated cluster in the default scenario."
    echo "$line"
    summary+=("$line")
    continue
  fi
  echo "molecule $scenario: GKM_SIM_DIR=$GKM_SIM_DIR"
  start=$SECONDS
  # reset: a run that was interrupted may have left molecule's state saying the scenario is prepared.
  molecule reset -s "$scenario" >/dev/null 2>&1
  output=$(mktemp)
  molecule test -s "$scenario" 2>&1 | tee "$output"
  if [ "${PIPESTATUS[0]}" -eq 0 ]; then
    line="molecule $scenario: passed in $((SECONDS - start))s"
  else
    line="molecule $scenario: FAILED after $((SECONDS - start))s: $(failure_reason "$output")"
    failed+=("$scenario")
  fi
  rm -f "$output"
  echo "$line"
  summary+=("$line")
done

# Whatever ran, the cluster must be as the scenarios found it: another test session (pytest) may use it next.
if $needs_sim; then
  if leftovers=$(KUBECONFIG="$GKM_SIM_DIR/kubeconfig" "$VENV_BIN/python" - <<'PYTHON'
import time

from kubernetes import client, config

api = config.new_client_from_config()
core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
custom = client.CustomObjectsApi(api)
OURS = "app.kubernetes.io/managed-by=gkm.cluster"


def leftovers():
    found = ["Namespace %s" % ns.metadata.name for selector in (OURS, "gkm.io/molecule=true")
             for ns in core.list_namespace(label_selector=selector).items]
    found += ["PersistentVolume %s" % pv.metadata.name for pv in core.list_persistent_volume(label_selector=OURS).items]
    for kind, items in (("PersistentVolumeClaim", core.list_persistent_volume_claim_for_all_namespaces),
                        ("Pod", core.list_pod_for_all_namespaces), ("Job", batch.list_job_for_all_namespaces)):
        found += ["%s %s/%s" % (kind, o.metadata.namespace, o.metadata.name) for o in items(label_selector=OURS).items]
    for plural in ("gkmcaches", "clustergkmcaches"):
        try:
            items = custom.list_cluster_custom_object("gkm.io", "v1alpha1", plural)["items"]
        except client.ApiException as error:
            if error.status != 404:
                raise
            items = []
        found += ["%s %s" % (plural, "/".join(filter(None, [o["metadata"].get("namespace"), o["metadata"]["name"]])))
                  for o in items]
    return found


# Undeploy deletes in the background: give what is Terminating a minute to go.
deadline = time.monotonic() + 60
found = leftovers()
while found and time.monotonic() < deadline:
    time.sleep(2)
    found = leftovers()
print(", ".join(found))
PYTHON
  ) && [ -z "$leftovers" ]; then
    summary+=("molecule: the cluster holds no caches, no objects labelled as ours and no scenario namespaces")
  else
    summary+=("molecule: LEFTOVERS on the cluster after the scenarios: ${leftovers:-could not read the cluster}")
    failed+=(leftovers)
  fi
fi

echo "molecule summary (GKM_SIM_DIR=$GKM_SIM_DIR):"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "molecule: failed: ${failed[*]}"
  exit 1
fi
echo "molecule: all scenarios passed"
