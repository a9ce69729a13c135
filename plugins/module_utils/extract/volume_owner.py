# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ENTRY POINT of the extraction Job's permission step (its init container, uid 0 with only CAP_CHOWN).

    python -m ansible_collections.gkm.cluster.plugins.module_utils.extract.volume_owner /gkm 1000

The kubelet creates a hostPath PV's directory as root:root 0755 and fsGroup does not apply to hostPath
volumes, so the extractor (an unprivileged uid) could not write it. This makes the volume's root owned
by that uid and group and changes nothing else: no mode, nothing below it. Exit status 0 when the owner
is right (changed or not), 1 when it cannot be made so; the message also goes to --termination-log.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import stat
import sys

from ansible_collections.gkm.cluster.plugins.module_utils.extract.job_main import EXIT_REFUSED, report_failure


def build_parser():
    parser = argparse.ArgumentParser(prog="gkm-volume-owner", description="Make a volume's root directory owned "
                                     "by the extraction uid, and nothing else.")
    parser.add_argument("path", help="the volume's mount point")
    parser.add_argument("uid", type=int, help="owner and group to give it")
    parser.add_argument("--termination-log", metavar="PATH", help="also write a failure's message here")
    return parser


def ensure_owner(path, uid):
    """True when the owner was changed. Symlinks are never followed: the mount point is a directory."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise OSError("%s is not a directory" % path)
    if (info.st_uid, info.st_gid) == (uid, uid):
        return False
    os.chown(path, uid, uid, follow_symlinks=False)
    return True


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        changed = ensure_owner(args.path, args.uid)
    except OSError as exc:
        report_failure("the permission step cannot make %s owned by uid %d: %s. It needs CAP_CHOWN (the Job's "
                       "namespace must allow Pod Security baseline) and storage that lets root change owners "
                       "(root-squashing NFS does not); otherwise turn set_volume_owner off and use a storage class "
                       "whose volumes honour fsGroup" % (args.path, args.uid, exc.strerror or exc),
                       args.termination_log)
        return EXIT_REFUSED
    json.dump({"changed": changed, "path": args.path, "uid": args.uid}, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
