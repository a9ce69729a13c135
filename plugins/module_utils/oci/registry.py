# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read-only OCI registry access through oras-py: resolve tags, fetch manifests, configs and blobs.

Every manifest and small blob is checked against its digest. Plain HTTP is used only when asked
(`plain_http`, for loopback registries); TLS verification uses the system store, a CA bundle
(`ca_file`) or is turned off (`validate_certs=False`). Credentials come from a username/password
or a Docker config file (`docker_config`), as oras-py reads them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import hashlib
import json
import re
import time
import traceback
from http.cookiejar import DefaultCookiePolicy

# Only oras-py's reference parser and auth backends: oras.provider would also load jsonschema and its
# schema registry (about a quarter of the extraction Job's start-up imports), which nothing here uses.
try:
    import oras.auth
    import oras.container
    import requests
    import urllib3

    HAS_ORAS = True
    ORAS_IMPORT_ERROR = None
except ImportError:
    HAS_ORAS = False
    ORAS_IMPORT_ERROR = traceback.format_exc()

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_MANIFEST_LIST)
INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
# Manifests and configs are small; anything larger is refused rather than read into memory.
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_TRANSIENT_STATUS = (429, 502, 503, 504)

Manifest = collections.namedtuple("Manifest", "digest media_type document raw")


class OCIError(Exception):
    """A registry request failed or returned something unusable."""


class RegistryUnreachable(OCIError):
    """The registry could not be contacted at all."""


class NotFound(OCIError):
    """The tag, manifest or blob does not exist."""


def parse_reference(ref):
    """Split `host[:port]/repo[:tag][@sha256:...]` into an oras Container; the host is required."""
    if not isinstance(ref, str) or not ref.strip():
        raise OCIError("image reference is empty")
    first = ref.split("/", 1)[0]
    if "/" not in ref or not ("." in first or ":" in first or first == "localhost"):
        raise OCIError("image %r must name its registry host, e.g. registry.example.com/caches/vector-add:v1" % ref)
    try:
        container = oras.container.Container(ref)
    except ValueError as exc:
        raise OCIError("image %r is not a valid reference: %s" % (ref, exc)) from exc
    if container.digest and not _DIGEST.match(container.digest):
        raise OCIError("image %r: only sha256 digests are supported" % ref)
    return container


def sha256_digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _OrasSession:
    """A requests session with oras-py's auth backend, request timeouts, short bounded retries, Basic challenges.

    oras-py's own request loop retries every error with sleeps of up to 80 s and has no timeout;
    an unreachable registry must fail within `timeout` instead.
    """

    def __init__(self, hostname, plain_http, tls_verify, timeout):
        self.hostname = hostname
        self.timeout = timeout
        self.tls_verify = tls_verify
        self.session = requests.Session()
        # Registries that set cookies (Harbor) take them as a browser's and start asking for CSRF tokens.
        self.session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        if not tls_verify:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self.auth = oras.auth.get_auth_backend("token", self.session, plain_http, tls_verify=tls_verify)

    def do_request(self, url, method="GET", data=None, headers=None, json=None, stream=False):
        headers = dict(headers or {})
        headers.update(self.auth.get_auth_header())
        response = self._send(method, url, headers, data, json, stream)
        if response.status_code in (401, 403):
            challenge = response.headers.get("Www-Authenticate", "")
            basic = getattr(self.auth, "_basic_auth", None)
            if challenge.lower().startswith("basic") and basic:
                headers["Authorization"] = "Basic %s" % basic
            else:
                headers, changed = self.auth.authenticate_request(response, headers)
                if not changed:
                    return response
            response.close()
            response = self._send(method, url, headers, data, json, stream)
        return response

    def _send(self, method, url, headers, data, json_body, stream, attempts=3):
        for attempt in range(attempts):
            try:
                response = self.session.request(method, url, headers=headers, data=data, json=json_body,
                                                stream=stream, verify=self.tls_verify, timeout=self.timeout)
            except requests.exceptions.SSLError as exc:
                raise OCIError("TLS verification failed for %s (%s): give the registry's CA in ca_file, "
                               "or set validate_certs=false" % (url, exc)) from exc
            except requests.exceptions.ConnectionError as exc:
                if "refused" in str(exc).lower() or attempt == attempts - 1:
                    raise RegistryUnreachable("registry %s is unreachable: %s" % (self.hostname, exc)) from exc
            except requests.exceptions.Timeout:
                raise RegistryUnreachable(
                    "registry %s did not answer within %ss" % (self.hostname, self.timeout)) from None
            else:
                if response.status_code not in _TRANSIENT_STATUS or attempt == attempts - 1:
                    return response
                response.close()
            time.sleep(0.2 * (attempt + 1))
        raise RegistryUnreachable("registry %s is unreachable" % self.hostname)


class RegistryClient:
    """One registry host; all reads of one image go through one client (one HTTP session)."""

    def __init__(self, host, username=None, password=None, docker_config=None, ca_file=None,
                 validate_certs=True, plain_http=False, timeout=30):
        if not HAS_ORAS:
            raise OCIError("oras-py is required: pip install oras")
        tls_verify = (ca_file or True) if validate_certs else False
        self.host = host
        self._oras = _OrasSession(host, plain_http, tls_verify, timeout)
        self.scheme = "http" if plain_http else "https"
        if username:
            self._oras.auth.set_basic_auth(username, password or "")
        else:
            self._oras.auth.load_configs(oras.container.Container("%s/any" % host),
                                         configs=[docker_config] if docker_config else None)

    @classmethod
    def for_reference(cls, ref, **options):
        container = parse_reference(ref)
        return cls(container.registry, **options), container

    def _url(self, container, kind, reference):
        return "%s://%s/v2/%s/%s/%s" % (self.scheme, container.registry, container.api_prefix, kind, reference)

    def _request(self, url, method="GET", headers=None, stream=False, what="request"):
        response = self._oras.do_request(url, method, headers=headers, stream=stream)
        if response.status_code == 404:
            response.close()
            raise NotFound("%s not found: %s" % (what, url))
        if response.status_code in (401, 403):
            response.close()
            raise OCIError("%s: access denied by the registry (HTTP %s); check username/password or docker_config"
                           % (what, response.status_code))
        if response.status_code >= 300:
            body = response.text[:300]
            response.close()
            raise OCIError("%s failed: HTTP %s from %s: %s" % (what, response.status_code, url, body))
        return response

    def head_digest(self, container, reference=None):
        """The manifest digest a tag points to now (HEAD; falls back to GET without the header)."""
        reference = reference or container.digest or container.tag
        url = self._url(container, "manifests", reference)
        response = self._request(url, "HEAD", {"Accept": ", ".join(MANIFEST_TYPES)}, what="image %s" % container)
        digest = response.headers.get("Docker-Content-Digest")
        if digest and _DIGEST.match(digest):
            return digest
        return self.get_manifest(container, reference).digest

    def get_manifest(self, container, reference=None):
        """A Manifest(digest, media_type, document, raw); a digest reference is verified."""
        reference = reference or container.digest or container.tag
        url = self._url(container, "manifests", reference)
        response = self._request(url, headers={"Accept": ", ".join(MANIFEST_TYPES)}, what="manifest %s" % reference)
        raw = response.content
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise OCIError("manifest %s is larger than %d bytes" % (reference, MAX_DOCUMENT_BYTES))
        digest = sha256_digest(raw)
        if reference.startswith("sha256:") and digest != reference:
            raise OCIError("manifest digest mismatch: asked for %s, registry sent content hashing to %s"
                           % (reference, digest))
        try:
            manifest = json.loads(raw)
        except ValueError as exc:
            raise OCIError("manifest %s is not JSON: %s" % (reference, exc)) from exc
        media_type = manifest.get("mediaType") or response.headers.get("Content-Type", "").split(";")[0]
        return Manifest(digest, media_type, manifest, raw)

    def resolve_image_manifest(self, container):
        """(digest, manifest) of the image; a one-entry index is followed to its image manifest."""
        found = self.get_manifest(container)
        digest, manifest = found.digest, found.document
        if found.media_type in INDEX_TYPES or "manifests" in manifest:
            entries = manifest.get("manifests") or []
            if len(entries) != 1:
                raise OCIError("image %s is an index of %d manifests; a kernel-cache image has exactly one: "
                               "reference the image manifest by digest" % (container, len(entries)))
            found = self.get_manifest(container, entries[0]["digest"])
            digest, manifest = found.digest, found.document
        if "config" not in manifest or "layers" not in manifest:
            raise OCIError("manifest %s of %s is not an image manifest" % (digest, container))
        return digest, manifest

    def open_blob(self, container, digest):
        """A streaming HTTP response for a blob; the caller verifies the digest while reading."""
        return self._request(self._url(container, "blobs", digest), stream=True, what="blob %s" % digest)

    def fetch_blob(self, container, descriptor, max_bytes=MAX_DOCUMENT_BYTES):
        """A small blob's bytes, verified against the descriptor's digest and size."""
        digest, size = descriptor.get("digest"), descriptor.get("size")
        if not digest or not _DIGEST.match(digest):
            raise OCIError("descriptor has no usable sha256 digest: %r" % (descriptor,))
        if size is not None and size > max_bytes:
            raise OCIError("blob %s is %d bytes, more than the %d allowed" % (digest, size, max_bytes))
        with self.open_blob(container, digest) as response:
            data = response.raw.read(max_bytes + 1, decode_content=False)
        if len(data) > max_bytes:
            raise OCIError("blob %s is larger than %d bytes" % (digest, max_bytes))
        if sha256_digest(data) != digest:
            raise OCIError("blob digest mismatch: expected %s, got %s" % (digest, sha256_digest(data)))
        return data

    def fetch_config(self, container, manifest):
        try:
            return json.loads(self.fetch_blob(container, manifest["config"]))
        except ValueError as exc:
            raise OCIError("image config of %s is not JSON: %s" % (container, exc)) from exc

    def referrers(self, container, digest):
        """Descriptors of manifests whose subject is `digest`: referrers API, else the tag fallback."""
        url = self._url(container, "referrers", digest)
        try:
            response = self._request(url, headers={"Accept": OCI_INDEX}, what="referrers of %s" % digest)
            if response.headers.get("Content-Type", "").startswith(OCI_INDEX):
                return response.json().get("manifests") or []
        except NotFound:
            pass
        try:
            index = self.get_manifest(container, digest.replace(":", "-")).document
        except NotFound:
            return []
        return index.get("manifests") or []


def resolve_digest(ref, **options):
    """The manifest digest `ref` points to (a digest reference is returned as it is, unverified)."""
    client, container = RegistryClient.for_reference(ref, **options)
    return container.digest or client.head_digest(container)


def fetch_image_config(ref, **options):
    """(image manifest digest, config dict) for `ref`; both verified against their digests."""
    client, container = RegistryClient.for_reference(ref, **options)
    digest, manifest = client.resolve_image_manifest(container)
    return digest, client.fetch_config(container, manifest)
