"""The runs on this machine that share its fixed places, and the machine's baseline they put back.

What the kubelet and containerd create in fixed host places (/run/containerd, /run/netns, /var/lib/cni,
/var/log/containers, ip_forward) is put back as it was when the last run on this machine stops: runs register in
/run/gkm-sim/runs, and the first one records the machine's baseline there. The guard routes keep their own register
the same way (guard.py).
"""

import contextlib
import fcntl
import glob
import json
import os
import shutil
import subprocess

from simcluster import real_nodes_plan as plan
from simcluster.mounts import mounts_under, refuse_mounts_under, unmount_self_bind
from simcluster.state_dir import SIM_DIR, write_file

NETNS_DIR = "/run/netns"
BASELINE_DIRS = ["/run/containerd", "/opt/containerd", NETNS_DIR, "/var/lib/cni", "/var/log/containers",
                 "/var/log/pods"]
IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"


def _nft_tables():
    """["ip nat", ...]: the nftables tables now, or [] where iptables is the legacy kind (nft absent)."""
    if not shutil.which("nft"):
        return []
    listing = subprocess.run(["nft", "list", "tables"], check=True, capture_output=True, text=True).stdout
    return [line.split(None, 1)[1] for line in listing.splitlines() if line.startswith("table ")]


def _iptables_save(table):
    result = subprocess.run(["iptables-save", "-t", table], check=True, capture_output=True, text=True)
    return result.stdout.splitlines()


@contextlib.contextmanager
def host_lock(host_dir=plan.HOST_RUN_DIR):
    """Runs on this machine that share what is under host_dir take turns: host_dir/lock, host_dir/runs/<run id>."""
    os.makedirs(os.path.join(host_dir, "runs"), exist_ok=True)
    with open(os.path.join(host_dir, "lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def live_runs(host_dir=plan.HOST_RUN_DIR):
    """Run ids registered in host_dir whose state directory still exists (a run that crashed and was wiped no
    longer counts)."""
    live = {}
    for path in glob.glob(os.path.join(host_dir, "runs", "*")):
        with open(path) as handle:
            sim_dir = handle.read().strip()
        if os.path.exists(os.path.join(sim_dir, "state.json")):
            live[os.path.basename(path)] = sim_dir
    return live


def join_host(run):
    """Register run (under host_lock); the first live run records the machine's baseline."""
    baseline = os.path.join(plan.HOST_RUN_DIR, "baseline.json")
    if not live_runs() or not os.path.exists(baseline):
        with open(IP_FORWARD) as handle:
            forward = handle.read().strip()
        write_file(baseline, json.dumps({
            "ip_forward": forward, "dirs": {d: os.path.lexists(d) for d in BASELINE_DIRS},
            "mount_points": [d for d in BASELINE_DIRS if d in mounts_under(d)], "nft_tables": _nft_tables()}), 0o644)
    share_netns_dir()
    write_file(os.path.join(plan.HOST_RUN_DIR, "runs", run), SIM_DIR, 0o644)


def share_netns_dir():
    """Make /run/netns a shared mount of itself before any pod starts, as `ip netns add` (the operator replica tests)
    would on its first call. Made later, with pods' network namespaces mounted inside, that bind mount hides theirs:
    containerd then unmounts only the copy, the file stays busy, and the pod never finishes tearing down."""
    os.makedirs(NETNS_DIR, exist_ok=True)
    if NETNS_DIR not in mounts_under(NETNS_DIR):
        subprocess.run(["mount", "--bind", NETNS_DIR, NETNS_DIR], check=True)
    subprocess.run(["mount", "--make-shared", NETNS_DIR], check=True)


def leave_host(run):
    """Forget run; the last one out puts back ip_forward and removes the host dirs the runs created."""
    with host_lock():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(plan.HOST_RUN_DIR, "runs", run))
        if {name for name in live_runs() if name != run}:
            return
        with open(os.path.join(plan.HOST_RUN_DIR, "baseline.json")) as handle:
            baseline = json.load(handle)
        with open(IP_FORWARD, "w") as handle:
            handle.write(baseline["ip_forward"])
        # iptables-nft makes the nftables tables of the chains it touched; the machine may have had none.
        for table in set(_nft_tables()) - set(baseline["nft_tables"]):
            if not [line for line in _iptables_save(table.split()[-1]) if line.startswith("-A")]:
                subprocess.run(["nft", "delete", "table", *table.split()], check=True)
        for directory, existed in baseline["dirs"].items():
            if directory not in baseline["mount_points"]:
                unmount_self_bind(directory)
            if not existed and os.path.lexists(directory):
                refuse_mounts_under(directory)
                shutil.rmtree(directory)
        shutil.rmtree(plan.HOST_RUN_DIR)
