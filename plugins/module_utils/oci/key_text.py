# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A public key as the options give it (PEM text, or a path to it) and its id, for the reconcile and the extractor
alike: the id the extractor records in its marker is the one the reconcile compares. Light: no cryptography."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib


def read_pem(value, option, error):
    """The PEM text of `value` (PEM text or a file path); raises `error` naming `option` when it is neither."""
    if "-----BEGIN" in value:
        return value
    try:
        with open(value) as handle:
            return handle.read()
    except OSError as failure:
        raise error("%s %r is neither PEM text nor a readable file: %s" % (option, value, failure.strerror)) \
            from failure


def key_id(public_key_pem):
    """The key's identity: the SHA-256 of its PEM text."""
    return "sha256:" + hashlib.sha256(public_key_pem.strip().encode()).hexdigest()
