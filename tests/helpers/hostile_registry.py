"""A hostile "registry" for issue 31's tests (docs/security.md, classes 3 and 5): a small HTTP server on 127.0.0.1
that stands for an attacker a tenant's image names, not for a registry. It answers every request the way its
`behaviour` says, records what it received, and never holds a connection longer than `hold` seconds, so a run
against code without a deadline still ends.

- `trickle`: the status line and headers one byte a second.
- `redirect`: 307 to `target` (another server of this module, which only records).
- `error_body`: 500 with a 1 MiB text body.
- `basic`: 401 with a Basic challenge.
- `bearer`: 401 with a Bearer challenge whose realm is `target`.
- `silent`: accepts, reads the request and never replies.
- `basic_then_redirect`: 401 Basic until a request carries an Authorization header, then 307 to `target`.
- `blob`: 200 with BLOB.
- `record`: 404, empty.
"""

import contextlib
import socket
import threading
import time

ERROR_MARK = "HOSTILE-ERROR-BODY "
BLOB = b"a blob behind redirects\n"
ERROR_BODY = (ERROR_MARK * (1024 * 1024 // len(ERROR_MARK) + 1))[:1024 * 1024].encode()


class HostileServer:
    def __init__(self, behaviour, target=None, hold=60.0):
        self.behaviour = behaviour
        self.target = target
        self.hold = hold
        self.requests = []  # (request line, {header lower: value})
        self.connections = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self.host = "127.0.0.1:%d" % self.port
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._sock.close()

    def authorizations(self):
        return [headers["authorization"] for _line, headers in self.requests if "authorization" in headers]

    def _accept(self):
        while not self._stopped.is_set():
            try:
                conn, _addr = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read_head(self, conn):
        data = b""
        conn.settimeout(self.hold)
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                return None
            data += chunk
        lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _sep, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.requests.append((lines[0], headers))
        return lines[0]

    def _serve(self, conn):
        started = time.monotonic()
        try:
            while not self._stopped.is_set():
                line = self._read_head(conn)
                if line is None:
                    return
                if not self._answer(conn, line, started):
                    return
        except OSError:
            pass
        finally:
            conn.close()

    def _answer(self, conn, line, started):
        behaviour = self.behaviour
        if behaviour == "trickle":
            for byte in b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 100000:
                if time.monotonic() - started > self.hold or self._stopped.is_set():
                    return False
                conn.sendall(bytes([byte]))
                time.sleep(1)
            return False
        if behaviour == "silent":
            self._stopped.wait(self.hold)
            return False
        if behaviour == "redirect":
            path = line.split(" ")[1]
            return self._reply(conn, "307 Temporary Redirect", {"Location": "http://%s%s" % (self.target, path)})
        if behaviour == "basic_then_redirect":
            if "authorization" not in self.requests[-1][1]:
                return self._reply(conn, "401 Unauthorized", {"WWW-Authenticate": 'Basic realm="registry"'})
            path = line.split(" ")[1]
            return self._reply(conn, "307 Temporary Redirect", {"Location": "http://%s%s" % (self.target, path)})
        if behaviour == "blob":
            return self._reply(conn, "200 OK", {"Content-Type": "application/octet-stream"}, BLOB)
        if behaviour == "error_body":
            return self._reply(conn, "500 Internal Server Error", {"Content-Type": "text/plain"}, ERROR_BODY)
        if behaviour == "basic":
            return self._reply(conn, "401 Unauthorized", {"WWW-Authenticate": 'Basic realm="registry"'})
        if behaviour == "bearer":
            return self._reply(conn, "401 Unauthorized", {
                "WWW-Authenticate": 'Bearer realm="http://%s/token",service="registry",scope="repository:x:pull"'
                % self.target})
        return self._reply(conn, "404 Not Found", {})

    @staticmethod
    def _reply(conn, status, headers, body=b""):
        head = "HTTP/1.1 %s\r\nContent-Length: %d\r\n" % (status, len(body))
        head += "".join("%s: %s\r\n" % item for item in headers.items())
        conn.sendall(head.encode() + b"\r\n" + body)
        return True
