"""Operator replicas on one machine, each in a network namespace of its own (root only).

ansible-operator binds localhost:5050 and its proxy's port whatever its flags say, so two replicas cannot share a
network namespace; in a cluster each pod has its own, and here each replica gets one too (`ip netns`), with nothing
in it but loopback: no route leaves it. The replica's kubeconfig and the registry name addresses of this machine's
network namespace (loopback, or the run's host address), so a relay listens on the same address and port inside the
replica's namespace and forwards each connection to the same address outside: every packet stays on loopback.
Each replica also gets its own mount namespace (a tmpfs for the engine's fixed runner directory) and its own host
name, which the engine puts in its leader election identity (`<host name>_<uuid>`).
"""

import contextlib
import ctypes
import ipaddress
import os
import signal
import socket
import subprocess
import threading

CLONE_NEWNET = 0x40000000
# The engine's fixed directory for ansible-runner's artifacts (operator_plan.RUNNER_DIR): private to each replica.
RUNNER_ROOT = "/tmp/ansible-operator"
# Set up inside the replica's namespaces, then exec the engine: $1 is the host name, the rest the command.
REPLICA_SHELL = ('mkdir -p %s && mount -t tmpfs -o size=256m gkm-operator-runs %s && hostname "$1" && shift && '
                 'exec "$@"' % (RUNNER_ROOT, RUNNER_ROOT))
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def in_namespace(path, function):
    """function() with the calling thread in the network namespace at path, then back in its own."""
    with open("/proc/thread-self/ns/net", "rb") as own, open(path, "rb") as target:
        _setns(target.fileno())
        try:
            return function()
        finally:
            _setns(own.fileno())


def _pump(source, destination):
    with contextlib.suppress(OSError):
        while True:
            data = source.recv(65536)
            if not data:
                break
            destination.sendall(data)
    with contextlib.suppress(OSError):
        destination.shutdown(socket.SHUT_WR)


class Relay:
    """Listens on address inside a network namespace; each connection goes on to the same address outside it."""

    def __init__(self, namespace_path, address):
        self.address = address
        self.listener = in_namespace(namespace_path, lambda: socket.create_server(address))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                inside, _peer = self.listener.accept()
            except OSError:  # closed
                return
            try:
                outside = socket.create_connection(self.address)  # this thread is in the machine's namespace
            except OSError:
                inside.close()
                continue
            for source, destination in ((inside, outside), (outside, inside)):
                threading.Thread(target=_pump, args=(source, destination), daemon=True).start()

    def close(self):
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


class Replica:
    """One operator process in network, mount and UTS namespaces of its own, reaching `addresses` through relays."""

    def __init__(self, name, addresses):
        self.name = name
        self.namespace_path = "/run/netns/%s" % name
        self.process = None
        self.log_path = None
        self.relays = []
        subprocess.run(["ip", "netns", "add", name], check=True)
        try:
            subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
            # With real nodes the API server and the registry share the run's host address: add it once.
            for host in sorted({host for host, _port in addresses if not ipaddress.ip_address(host).is_loopback}):
                subprocess.run(["ip", "-n", name, "address", "add", "%s/32" % host, "dev", "lo"], check=True)
            for address in addresses:
                self.relays.append(Relay(self.namespace_path, address))
        except BaseException:
            self.remove()  # no namespace left behind by a replica that never started
            raise

    def start(self, argv, environment, log_path):
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", self.name, "unshare", "--mount", "--uts", "--propagation", "private", "--",
                 "sh", "-c", REPLICA_SHELL, "sh", self.name, *argv],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment,
                start_new_session=True)
        self.log_path = log_path
        return self

    def running(self):
        return self.process is not None and self.process.poll() is None

    def get(self, port, path):
        """HTTP status of a GET to one of the replica's own loopback servers (None when it does not answer)."""
        def request():
            with socket.create_connection(("127.0.0.1", port), timeout=2) as connection:
                connection.sendall(b"GET %s HTTP/1.0\r\n\r\n" % path.encode())
                return int(connection.recv(64).split()[1])

        with contextlib.suppress(OSError, ValueError, IndexError):
            return in_namespace(self.namespace_path, request)
        return None

    def log(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    def kill(self, signal_number=signal.SIGKILL):
        """The replica and its runs at once (SIGKILL: as a crash or a lost node would).

        Every process in its network namespace, as when a pod dies: ansible-runner starts each run in a session of
        its own, so the engine's process group alone would leave runs behind."""
        if self.running():
            os.killpg(self.process.pid, signal_number)
        if self.process is not None:
            self.process.wait(timeout=60)
        pids = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True, check=False).stdout
        for pid in pids.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)

    def remove(self):
        self.kill(signal.SIGTERM)
        for relay in self.relays:
            relay.close()
        subprocess.run(["ip", "netns", "delete", self.name], check=False)
