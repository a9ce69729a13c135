"""Guard routes of the simulated cluster, pure part: the fake ranges whose packets must never leave this machine.

kwok and the API server hand out addresses no interface here has: ClusterIPs, kwok pods' IPs and kwok nodes'
address. The API server dials them itself (a webhook Service's endpoints with --enable-aggregator-routing, a
kwok node's kubelet for logs), and without a route of their own those packets would go out by the default
route. While a run is up, each range is routed `unreachable` on this machine, so such a connect fails at once
with EHOSTUNREACH. The I/O is in guard.py; this file only decides, so the rules have unit tests.
"""

import ipaddress

SERVICE_CIDR = "10.96.0.0/16"
KWOK_POD_CIDR = "10.244.0.0/16"
# kwok writes it into every kwok node's status.addresses and its pods' status.hostIP.
KWOK_NODE_IP = "10.89.0.1"
GUARD_RANGES = (SERVICE_CIDR, KWOK_POD_CIDR, "10.89.0.0/16")
# Outside HOST_RUN_DIR of the real nodes, which the last real-node run out removes whole.
HOST_DIR = "/run/gkm-sim-routes"
# Route types that send nothing anywhere: a packet to them fails on this machine.
REJECT_TYPES = {"unreachable", "prohibit", "blackhole"}
ROUTE_TYPES = REJECT_TYPES | {"unicast", "local", "broadcast", "multicast", "throw", "nat", "anycast"}


def parse_routes(ip_output):
    """[{type, dst, devices, table}] of `ip -4 -o route show table all` (one route per line)."""
    routes = []
    for line in ip_output.splitlines():
        words = line.replace("\\", " ").split()
        if not words:
            continue
        kind = words.pop(0) if words[0] in ROUTE_TYPES else "unicast"
        destination = "0.0.0.0/0" if words[0] == "default" else words[0]
        routes.append({
            "type": kind,
            "dst": ipaddress.ip_network(destination, strict=False),
            "devices": sorted({words[index + 1] for index, word in enumerate(words[:-1]) if word == "dev"}),
            "table": words[words.index("table") + 1] if "table" in words[:-1] else "main",
        })
    return routes


def conflicts(routes, nameservers, ranges=GUARD_RANGES):
    """Why the guard cannot go up: addresses of a guard range the machine really uses, in words ([] if none).

    A route inside a range (or an address on an interface, a `local` route) means the machine talks to part of
    it; routing the range unreachable would cut that off, and the cluster's fake addresses would collide with real
    ones. A wider route (the default, 10.0.0.0/8) is what the guard is for: its narrower route wins.
    """
    problems = []
    for guarded in map(ipaddress.ip_network, ranges):
        for route in routes:
            if route["type"] not in REJECT_TYPES and route["dst"].subnet_of(guarded):
                problems.append("%s: this machine routes %s %s(table %s)" % (
                    guarded, route["dst"], "".join("dev %s " % device for device in route["devices"]),
                    route["table"]))
        for server in nameservers:
            if ipaddress.ip_address(server) in guarded:
                problems.append("%s: this machine's resolver %s is in it" % (guarded, server))
    return problems


def nameservers(resolv_conf):
    """The IPv4 nameservers of an /etc/resolv.conf."""
    servers = []
    for line in resolv_conf.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver" and ipaddress.ip_address(words[1]).version == 4:
            servers.append(words[1])
    return servers


def _guard_of(routes, guarded):
    """The route that guards exactly this range in the main table, or None."""
    for route in routes:
        if route["dst"] == ipaddress.ip_network(guarded) and route["table"] == "main" and route["type"] in REJECT_TYPES:
            return route
    return None


def missing(routes, ranges=GUARD_RANGES):
    """The ranges no reject route of the main table guards yet: the ones a run adds."""
    return [guarded for guarded in ranges if _guard_of(routes, guarded) is None]


def to_remove(added, other_live_runs):
    """What a run leaving removes: the routes the runs added, once no other run is live; a route the machine had
    before any run is never in `added`."""
    return [] if other_live_runs else sorted(added)


def status_lines(routes, added, ranges=GUARD_RANGES):
    """One line per range: its route now and who made it."""
    lines = []
    for guarded in ranges:
        route = _guard_of(routes, guarded)
        if route is None:
            lines.append("guard route %s: missing (a packet to it would leave this machine)" % guarded)
        else:
            owner = "added by the simulated clusters" if guarded in added else "the machine's own"
            lines.append("guard route %s: %s (%s)" % (guarded, route["type"], owner))
    return lines
