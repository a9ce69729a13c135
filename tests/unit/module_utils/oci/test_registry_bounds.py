"""The bounded parts of registry reads (docs/security.md, class 5): the capped reader, the timeout never past the
deadline, the error code taken from an error body (and nothing else of it), the deadline's watchdog."""

import io
import socket
import threading
import time

import pytest
import requests

from ansible_collections.gkm.cluster.plugins.module_utils.oci import registry


class Body(io.BytesIO):
    """A body that remembers how much was read of it, after it is closed too."""

    read_bytes = 0

    def read(self, size=-1, **_kwargs):
        data = super().read(size)
        self.read_bytes += len(data)
        return data


def response(body, length=None):
    reply = requests.Response()
    reply.status_code = 200
    reply.raw = Body(body)
    if length is not None:
        reply.headers["Content-Length"] = str(length)
    return reply


def test_the_capped_reader_returns_a_body_within_the_cap():
    assert registry.read_capped(response(b"x" * 100), 100, "manifest m") == b"x" * 100


def test_the_capped_reader_refuses_a_body_past_the_cap_without_reading_it_all():
    reply = response(b"x" * (10 * 1024 * 1024))
    with pytest.raises(registry.OCIError, match="manifest m is larger than 1000 bytes"):
        registry.read_capped(reply, 1000, "manifest m")
    assert reply.raw.read_bytes <= 1000 + 65536


def test_the_capped_reader_refuses_a_declared_length_past_the_cap_before_reading():
    reply = response(b"x" * 10, length=10 ** 9)
    with pytest.raises(registry.OCIError, match="larger than 100 bytes"):
        registry.read_capped(reply, 100, "referrers")
    assert reply.raw.read_bytes == 0


@pytest.mark.parametrize("timeout, remaining, expected", [(30, None, 30), (30, 5.0, 5.0), (30, 100.0, 30),
                                                          (30, 0.0, 0.001), ((5, 30), 10.0, (5, 10.0))])
def test_a_request_timeout_never_reaches_past_the_deadline(timeout, remaining, expected):
    assert registry.bounded_timeout(timeout, remaining) == expected


@pytest.mark.parametrize("body, code", [
    (b'{"errors": [{"code": "MANIFEST_UNKNOWN", "message": "whatever the server says"}]}', "MANIFEST_UNKNOWN"),
    (b'{"errors": [{"code": "lower case or anything else"}]}', None),
    (b'{"errors": [{"code": "' + b"A" * 100 + b'"}]}', None),
    (b"<html>attacker text</html>", None),
    (b'{"errors": []}', None),
    (b'["not", "an", "object"]', None),
    (b"\xff\xfe", None),
])
def test_only_an_oci_error_code_is_taken_from_an_error_body(body, code):
    assert registry.error_code(body) == code


def test_the_deadline_counts_down_and_passes():
    deadline = registry.Deadline(0.2)
    assert 0 < deadline.remaining() <= 0.2 and not deadline.passed
    time.sleep(0.25)
    assert deadline.remaining() == 0 and deadline.passed
    assert registry.Deadline(None).remaining() is None and not registry.Deadline(None).passed


def test_the_deadline_shuts_down_a_read_blocked_on_a_trickle():
    ours, theirs = socket.socketpair()
    deadline = registry.Deadline(0.5)
    deadline.track(ours)
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            try:
                theirs.send(b"a")
            except OSError:
                return
            time.sleep(0.1)

    threading.Thread(target=trickle, daemon=True).start()
    started = time.monotonic()
    received = b""
    try:
        while True:
            chunk = ours.recv(1)
            if not chunk:
                break
            received += chunk
            assert time.monotonic() - started < 5, "the read outlived the deadline"
    except OSError:
        pass
    finally:
        stop.set()
        ours.close()
        theirs.close()
    assert received and time.monotonic() - started < 2


def test_a_client_refuses_to_start_a_request_once_its_deadline_passed():
    client = registry.RegistryClient("127.0.0.1:9", plain_http=True, deadline=0)
    time.sleep(0.01)
    container = registry.parse_reference("127.0.0.1:9/x/y:v1")
    with pytest.raises(registry.DeadlineExceeded, match=r"127\.0\.0\.1:9 did not finish within the 0s deadline"):
        client.head_digest(container)


def test_the_clients_of_one_image_share_one_deadline():
    """The tag's resolve and the signature check of one image: one total, not one each (inputs/image.py)."""
    shared = registry.Deadline(0.3)
    first = registry.RegistryClient("127.0.0.1:9", plain_http=True, deadline=shared)
    time.sleep(0.35)  # the first client's work took the whole deadline
    second = registry.RegistryClient("127.0.0.1:9", plain_http=True, deadline=shared)
    assert first._oras.deadline is second._oras.deadline and second._oras.deadline.passed
    with pytest.raises(registry.DeadlineExceeded, match=r"within the 0.3s deadline"):
        second.head_digest(registry.parse_reference("127.0.0.1:9/x/y:v1"))
