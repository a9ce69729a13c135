"""Mount points and cgroup hierarchies as /proc/self/mountinfo lists them, and unmounting what lies under a
directory before it is removed."""

import subprocess


def _mountinfo():
    with open("/proc/self/mountinfo") as handle:
        return handle.readlines()


def mounts_under(directory):
    prefix = directory.rstrip("/") + "/"
    points = [line.split()[4].encode().decode("unicode_escape") for line in _mountinfo()]
    return [point for point in points if point == directory or point.startswith(prefix)]


def cgroup_mounts():
    fields = [line.split(" - ")[0].split() + line.split(" - ")[1].split() for line in _mountinfo()]
    return [entry[4] for entry in fields if entry[-3] in ("cgroup", "cgroup2")]


def unmount_self_bind(directory):
    """Undo the runs' bind mount of a directory onto itself (/run/netns, host_runs.share_netns_dir). With a namespace
    still mounted inside, umount fails, and so does the removal of a directory the runs created."""
    if directory in mounts_under(directory):
        subprocess.run(["umount", directory], capture_output=True, check=False)


def refuse_mounts_under(directory):
    """rm -rf through a bind mount would delete the host files behind it."""
    left = mounts_under(directory)
    if left:
        raise SystemExit("sim: refusing to remove %s: still mounted: %s" % (directory, left))


def unmount_all(directory):
    """Every mount under directory, deepest first (kubelet's bind mount of its root, volumes, rootfs, shm)."""
    for _ in range(5):
        points = sorted(set(mounts_under(directory)), key=len, reverse=True)
        if not points:
            return
        for point in points:
            if subprocess.run(["umount", point], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True)
    refuse_mounts_under(directory)
