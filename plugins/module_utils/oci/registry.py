# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""OCI registry access through oras-py: resolve tags, fetch manifests, configs and blobs; and the two writes a
capture makes (a blob, a manifest), only in the admin's own repository (capture/publish.py).

Every manifest and small blob is checked against its digest. Plain HTTP is used only when asked
(`plain_http`, for loopback registries); TLS verification uses the system store, a CA bundle
(`ca_file`) or is turned off (`validate_certs=False`). Credentials come from a username/password
or a Docker config file (`docker_config`), as oras-py reads them.

The registry is whatever host an image names, which a tenant chooses (docs/security.md, class 5), so every read is
bounded: a client may be given a total `deadline` (a watchdog shuts its sockets down when it passes, whatever a
server trickles), every request has a timeout (oras-py's token requests too), redirects are never followed
automatically (a blob's, the one the registry protocol sends, is followed by hand without the Authorization header),
every body is read through one capped reader, and an error names the status and the registry's error code, never
the body.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import contextlib
import hashlib
import json
import re
import socket
import threading
import time
import traceback
from http.cookiejar import DefaultCookiePolicy
from urllib.parse import urljoin, urlsplit

# Only oras-py's reference parser and auth backends: oras.provider would also load jsonschema and its
# schema registry (about a quarter of the extraction Job's start-up imports), which nothing here uses.
try:
    import oras.auth
    import oras.auth.utils
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
_REDIRECT_STATUS = (301, 302, 303, 307, 308)
# A blob's redirect (to a CDN or object store) is followed by hand at most this many times.
MAX_REDIRECTS = 3
# Of an error reply, only this much is read, for the registry's error code; none of it reaches a message verbatim.
MAX_ERROR_BYTES = 4096
_ERROR_CODE = re.compile(r"^[A-Z][A-Z_]{0,63}$")
_CHUNK = 65536

Manifest = collections.namedtuple("Manifest", "digest media_type document raw")


class OCIError(Exception):
    """A registry request failed or returned something unusable."""


class RegistryUnreachable(OCIError):
    """The registry could not be contacted at all."""


class NotFound(OCIError):
    """The tag, manifest or blob does not exist."""


class DeadlineExceeded(RegistryUnreachable):
    """The client's total deadline passed."""


class Deadline:
    """A total deadline for one client: the time left, and a watchdog that shuts down every socket the client opened
    once it passes, so a read blocked on a server that sends one byte at a time returns."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.expires = None if seconds is None else time.monotonic() + seconds
        self._sockets = []
        self._lock = threading.Lock()
        self._timer = None
        if seconds is not None:
            self._timer = threading.Timer(max(seconds, 0), self._expire)
            self._timer.daemon = True
            self._timer.start()

    def remaining(self):
        """Seconds left (None without a deadline; 0 once passed)."""
        if self.expires is None:
            return None
        return max(self.expires - time.monotonic(), 0.0)

    @property
    def passed(self):
        return self.expires is not None and time.monotonic() >= self.expires

    def track(self, sock):
        with self._lock:
            if self.passed:
                _shut(sock)
            self._sockets = [s for s in self._sockets if s.fileno() != -1] + [sock]

    def cancel(self):
        if self._timer is not None:
            self._timer.cancel()

    def _expire(self):
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut(sock)


def _shut(sock):
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def bounded_timeout(timeout, remaining):
    """The requests timeout of one request: `timeout`, never past the deadline's `remaining` seconds."""
    if remaining is None:
        return timeout
    if isinstance(timeout, tuple):
        return tuple(bounded_timeout(part, remaining) for part in timeout)
    return max(min(timeout, remaining), 0.001)


def realm_host(realm):
    """host[:port] of a token realm (oras-py prefixes a bare host with the registry's scheme)."""
    return urlsplit(realm if "://" in realm else "//" + realm).netloc.lower()


def credentials_for(host, credentials_host):
    """Whether credentials given for `credentials_host` go to `host` (None: to whatever host, as they did for a
    library caller that names none, such as the extraction Job reading the config made for its one host)."""
    return credentials_host is None or host.lower() == credentials_host.lower()


def error_code(body):
    """The first OCI error code of an error reply's (capped) body, when it is one; never any other text of it."""
    try:
        errors = json.loads(body.decode("utf-8")).get("errors")
        code = errors[0].get("code")
    except (ValueError, AttributeError, IndexError, KeyError, TypeError, UnicodeDecodeError):
        return None
    return code if isinstance(code, str) and _ERROR_CODE.match(code) else None


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


def _tracked_pools(deadline):
    """urllib3 pool classes whose connections hand their sockets to `deadline`'s watchdog."""
    pools = {}
    for scheme, pool in (("http", urllib3.HTTPConnectionPool), ("https", urllib3.HTTPSConnectionPool)):
        class Tracked(pool.ConnectionCls):
            def _new_conn(self):
                sock = super()._new_conn()
                deadline.track(sock)
                return sock

        pools[scheme] = type("Deadline" + pool.__name__, (pool,), {"ConnectionCls": Tracked})
    return pools


def _deadline_session(deadline, timeout):
    """A requests session under `deadline`: a default timeout on every request (oras-py sends its token requests
    without one), no redirect followed, the body of a request that did not stream read through the capped reader."""

    class Adapter(requests.adapters.HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = _tracked_pools(deadline)

    class Session(requests.Session):
        def send(self, request, **kwargs):
            if deadline.passed:
                raise DeadlineExceeded("the deadline passed")
            kwargs["timeout"] = bounded_timeout(kwargs.get("timeout") or timeout, deadline.remaining())
            kwargs["allow_redirects"] = False
            stream = kwargs.get("stream")
            kwargs["stream"] = True
            response = super().send(request, **kwargs)
            if not stream:
                # requests would read the whole body; a token reply is small.
                response._content = read_capped(response, MAX_DOCUMENT_BYTES, "reply of %s" % urlsplit(
                    request.url).netloc)
                response._content_consumed = True
            return response

    session = Session()
    for scheme in ("http://", "https://"):
        session.mount(scheme, Adapter())
    return session


def read_capped(response, cap, what):
    """A response's body, at most `cap` bytes (refused beyond, before it is all read); the response closed."""
    try:
        declared = int(response.headers.get("Content-Length") or 0)
    except ValueError:
        declared = 0
    try:
        if declared > cap:
            raise OCIError("%s is larger than %d bytes" % (what, cap))
        data = bytearray()
        for chunk in response.iter_content(_CHUNK):
            data += chunk
            if len(data) > cap:
                raise OCIError("%s is larger than %d bytes" % (what, cap))
        return bytes(data)
    finally:
        response.close()


class _OrasSession:
    """A requests session with oras-py's auth backend, request timeouts, short bounded retries, Basic challenges,
    a total deadline when given, and no redirect followed automatically.

    oras-py's own request loop retries every error with sleeps of up to 80 s and has no timeout;
    an unreachable registry must fail within `timeout` instead, and a slow one within `deadline`.
    """

    def __init__(self, hostname, plain_http, tls_verify, timeout, deadline=None, auth_hosts=()):
        self.hostname = hostname
        # Besides the registry's own host, where a Bearer challenge's realm may receive the credentials.
        self.auth_hosts = frozenset(host.lower() for host in auth_hosts or ())
        self.timeout = timeout
        self.tls_verify = tls_verify
        # A Deadline given is shared: every client of one image counts against the same total.
        self.deadline = deadline if isinstance(deadline, Deadline) else Deadline(deadline)
        self.session = _deadline_session(self.deadline, timeout)
        # Registries that set cookies (Harbor) take them as a browser's and start asking for CSRF tokens.
        self.session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        if not tls_verify:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self.auth = oras.auth.get_auth_backend("token", self.session, plain_http, tls_verify=tls_verify)

    def failure(self, exc, url=None):
        """The OCIError of a request that raised: the deadline's when it passed."""
        if self.deadline.passed or isinstance(exc, DeadlineExceeded):
            return DeadlineExceeded("registry %s did not finish within the %ss deadline"
                                    % (self.hostname, self.deadline.seconds))
        if isinstance(exc, OCIError):
            return exc
        if isinstance(exc, requests.exceptions.Timeout):
            return RegistryUnreachable("registry %s did not answer within %ss" % (self.hostname, self.timeout))
        return RegistryUnreachable("registry %s: the connection failed (%s)" % (self.hostname, type(exc).__name__))

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
                try:
                    if basic and challenge.lower().startswith("bearer") and not self.realm_allowed(challenge):
                        headers, changed = self._anonymous_token(challenge, headers)
                    else:
                        headers, changed = self.auth.authenticate_request(response, headers)
                except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError,
                        OCIError) as exc:
                    response.close()
                    raise self.failure(exc) from None
                except ValueError:
                    # The realm's reply was not JSON: no token.
                    changed = False
                if not changed:
                    return response
            response.close()
            response = self._send(method, url, headers, data, json, stream)
        return response

    def realm_allowed(self, challenge):
        """Whether a Bearer challenge's token realm may receive the credentials: on the registry's own host, or
        on one the admin listed (auth_hosts)."""
        realm = oras.auth.utils.parse_auth_header(challenge).realm or ""
        return realm_host(realm) in ({self.hostname.lower()} | self.auth_hosts)

    def _anonymous_token(self, challenge, headers):
        """A token asked of a realm on another host, without the credentials."""
        token = self.auth.request_anonymous_token(oras.auth.utils.parse_auth_header(challenge))
        if not token:
            return headers, False
        headers["Authorization"] = "Bearer %s" % token
        return headers, True

    def get_plain(self, url, stream=True):
        """A GET of a redirect's target: no Authorization, no oras-py auth."""
        return self._send("GET", url, {}, None, None, stream)

    def _send(self, method, url, headers, data, json_body, stream, attempts=3):
        for attempt in range(attempts):
            try:
                response = self.session.request(method, url, headers=headers, data=data, json=json_body,
                                                stream=stream, verify=self.tls_verify, timeout=self.timeout,
                                                allow_redirects=False)
            except requests.exceptions.SSLError as exc:
                if self.deadline.passed:
                    raise self.failure(exc) from None
                raise OCIError("TLS verification failed for %s (%s): give the registry's CA in ca_file, "
                               "or set validate_certs=false" % (url, exc)) from exc
            except DeadlineExceeded as exc:
                raise self.failure(exc) from None
            except requests.exceptions.ConnectionError as exc:
                if self.deadline.passed:
                    raise self.failure(exc) from None
                if "refused" in str(exc).lower() or attempt == attempts - 1:
                    raise RegistryUnreachable("registry %s is unreachable: %s" % (self.hostname, exc)) from exc
            except requests.exceptions.Timeout as exc:
                raise self.failure(exc) from None
            except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
                raise self.failure(exc) from None
            else:
                if response.status_code not in _TRANSIENT_STATUS or attempt == attempts - 1:
                    return response
                response.close()
            time.sleep(0.2 * (attempt + 1))
        raise RegistryUnreachable("registry %s is unreachable" % self.hostname)


class RegistryClient:
    """One registry host; all reads of one image go through one client (one HTTP session)."""

    def __init__(self, host, username=None, password=None, docker_config=None, ca_file=None,
                 validate_certs=True, plain_http=False, timeout=30, deadline=None, credentials_host=None,
                 auth_hosts=()):
        """`timeout`: seconds of one connect or read; `deadline`: seconds of all this client's work (None: none,
        as the extraction Job streams GiBs), or a Deadline the clients of one image share; `credentials_host`: the
        host `username` is for (another host gets none); `auth_hosts`: hosts besides `host` whose token realm may
        receive the credentials."""
        if not HAS_ORAS:
            raise OCIError("oras-py is required: pip install oras")
        tls_verify = (ca_file or True) if validate_certs else False
        self.host = host
        self._oras = _OrasSession(host, plain_http, tls_verify, timeout, deadline, auth_hosts)
        self.scheme = "http" if plain_http else "https"
        if username:
            # Another host reads anonymously: its Basic challenge finds no credentials.
            if credentials_for(host, credentials_host):
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

    def _request(self, url, method="GET", headers=None, what="request", follow_blob_redirects=False):
        """The streaming response of a successful request; the body of a failed one read capped, never echoed."""
        response = self._oras.do_request(url, method, headers=headers, stream=True)
        hops = 0
        while response.status_code in _REDIRECT_STATUS:
            location = response.headers.get("Location")
            response.close()
            if not follow_blob_redirects:
                raise OCIError("%s: the registry %s answered HTTP %s, a redirect, which only a blob may send"
                               % (what, self.host, response.status_code))
            target = urljoin(url, location or "")
            if not location or hops == MAX_REDIRECTS or urlsplit(target).scheme not in ("http", "https") or (
                    urlsplit(url).scheme == "https" and urlsplit(target).scheme != "https"):
                raise OCIError("%s: the registry %s redirected it more than %d times or to an unusable place"
                               % (what, self.host, MAX_REDIRECTS))
            url, hops = target, hops + 1
            # Another host (a CDN, an object store): the registry's credentials stay here.
            response = self._oras.get_plain(url)
        if response.status_code == 404:
            response.close()
            raise NotFound("%s not found in registry %s" % (what, self.host))
        if response.status_code in (401, 403):
            response.close()
            raise OCIError("%s: access denied by the registry (HTTP %s); check username/password or docker_config"
                           % (what, response.status_code))
        if response.status_code >= 300:
            code = self._error_code(response, what)
            raise OCIError("%s failed: HTTP %s from registry %s%s"
                           % (what, response.status_code, self.host, " (%s)" % code if code else ""))
        return response

    def _error_code(self, response, what):
        """The registry's error code in a failed reply's first MAX_ERROR_BYTES, if any."""
        try:
            data = bytearray()
            for chunk in response.iter_content(1024):
                data += chunk
                if len(data) >= MAX_ERROR_BYTES:
                    break
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError):
            return None
        finally:
            response.close()
        return error_code(bytes(data[:MAX_ERROR_BYTES]))

    def _read(self, response, cap, what):
        """A successful response's body through the capped reader, the deadline's failure when it passed."""
        try:
            return read_capped(response, cap, what)
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._oras.failure(exc) from None

    def head_digest(self, container, reference=None):
        """The manifest digest a tag points to now (HEAD; falls back to GET without the header)."""
        reference = reference or container.digest or container.tag
        url = self._url(container, "manifests", reference)
        response = self._request(url, "HEAD", {"Accept": ", ".join(MANIFEST_TYPES)}, what="image %s" % container)
        digest = response.headers.get("Docker-Content-Digest")
        response.close()
        if digest and _DIGEST.match(digest):
            return digest
        return self.get_manifest(container, reference).digest

    def get_manifest(self, container, reference=None):
        """A Manifest(digest, media_type, document, raw); a digest reference is verified."""
        reference = reference or container.digest or container.tag
        url = self._url(container, "manifests", reference)
        response = self._request(url, headers={"Accept": ", ".join(MANIFEST_TYPES)}, what="manifest %s" % reference)
        raw = self._read(response, MAX_DOCUMENT_BYTES, "manifest %s" % reference)
        digest = sha256_digest(raw)
        if reference.startswith("sha256:") and digest != reference:
            raise OCIError("manifest digest mismatch: asked for %s, registry sent content hashing to %s"
                           % (reference, digest))
        try:
            manifest = json.loads(raw)
        except ValueError:
            raise OCIError("manifest %s is not JSON" % reference) from None
        if not isinstance(manifest, dict):
            raise OCIError("manifest %s is not a JSON object" % reference)
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
        return self._request(self._url(container, "blobs", digest), what="blob %s" % digest,
                             follow_blob_redirects=True)

    def fetch_blob(self, container, descriptor, max_bytes=MAX_DOCUMENT_BYTES):
        """A small blob's bytes, verified against the descriptor's digest and size."""
        digest, size = descriptor.get("digest"), descriptor.get("size")
        if not digest or not _DIGEST.match(digest):
            raise OCIError("descriptor has no usable sha256 digest: %r" % (descriptor,))
        if size is not None and size > max_bytes:
            raise OCIError("blob %s is %d bytes, more than the %d allowed" % (digest, size, max_bytes))
        with self.open_blob(container, digest) as response:
            try:
                data = response.raw.read(max_bytes + 1, decode_content=False)
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise self._oras.failure(exc) from None
        if len(data) > max_bytes:
            raise OCIError("blob %s is larger than %d bytes" % (digest, max_bytes))
        if sha256_digest(data) != digest:
            raise OCIError("blob digest mismatch: expected %s, got %s" % (digest, sha256_digest(data)))
        return data

    def fetch_config(self, container, manifest):
        try:
            return json.loads(self.fetch_blob(container, manifest["config"]))
        except ValueError:
            raise OCIError("image config of %s is not JSON" % container) from None

    def _write(self, url, method, data, headers, what):
        """A write's response, its status checked (2xx), closed."""
        response = self._oras.do_request(url, method, data=data, headers=headers)
        response.close()
        if response.status_code in (401, 403):
            raise OCIError("%s: access denied by the registry %s (HTTP %s); the credentials must allow a push"
                           % (what, self.host, response.status_code))
        if not 200 <= response.status_code < 300:
            raise OCIError("%s failed: HTTP %s from registry %s" % (what, response.status_code, self.host))
        return response

    def push_blob(self, container, data):
        """Upload `data` unless the repository has it (HEAD first); its digest."""
        digest = sha256_digest(data)
        url = self._url(container, "blobs", digest)
        head = self._oras.do_request(url, "HEAD")
        head.close()
        if head.status_code == 200:
            return digest
        started = self._write(self._url(container, "blobs", "uploads/"), "POST", b"", {"Content-Length": "0"},
                              "starting the upload of blob %s" % digest)
        location = urljoin(url, started.headers.get("Location") or "")
        if urlsplit(location).netloc != urlsplit(url).netloc:
            raise OCIError("the registry %s sent the upload of blob %s to another host" % (self.host, digest))
        location += ("&" if "?" in location else "?") + "digest=" + digest
        self._write(location, "PUT", data, {"Content-Type": "application/octet-stream",
                                            "Content-Length": str(len(data))}, "uploading blob %s" % digest)
        return digest

    def push_manifest(self, container, reference, body, media_type):
        """PUT a manifest under a tag or its digest; its digest."""
        self._write(self._url(container, "manifests", reference), "PUT", body, {"Content-Type": media_type},
                    "pushing manifest %s" % reference)
        return sha256_digest(body)

    def referrers(self, container, digest):
        """Descriptors of manifests whose subject is `digest`: referrers API, else the tag fallback."""
        url = self._url(container, "referrers", digest)
        try:
            response = self._request(url, headers={"Accept": OCI_INDEX}, what="referrers of %s" % digest)
            if response.headers.get("Content-Type", "").startswith(OCI_INDEX):
                body = self._read(response, MAX_DOCUMENT_BYTES, "referrers of %s" % digest)
                try:
                    index = json.loads(body)
                except ValueError:
                    raise OCIError("referrers of %s are not JSON" % digest) from None
                manifests = index.get("manifests") if isinstance(index, dict) else None
                return manifests if isinstance(manifests, list) else []
            response.close()
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
