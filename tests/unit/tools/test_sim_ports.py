"""The simulated cluster's listening ports (tools/sim-cluster/simcluster/state_dir.py free_port): outside the kernel's
ephemeral range, never one in use or already the run's."""

import importlib.util
import os
import socket

import pytest

from tests.helpers.paths import ROOT

_spec = importlib.util.spec_from_file_location(
    "sim_state_dir", os.path.join(ROOT, "tools", "sim-cluster", "simcluster", "state_dir.py"))
state_dir = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(state_dir)


def _ephemeral_low():
    with open(state_dir.EPHEMERAL_RANGE) as handle:
        return int(handle.read().split()[0])


def test_a_port_is_below_the_ephemeral_range_and_free_on_every_address():
    for number in {state_dir.free_port() for attempt in range(20)}:
        assert state_dir.LISTEN_PORTS_LOW <= number < _ephemeral_low()
        with socket.socket() as probe:
            probe.bind(("0.0.0.0", number))


def test_the_only_candidate_left_is_given_when_free_and_refused_when_in_use():
    candidates = set(range(state_dir.LISTEN_PORTS_LOW, _ephemeral_low()))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", state_dir.free_port()))
        holder.listen()
        held = holder.getsockname()[1]
        with pytest.raises(SystemExit, match="no free port"):
            state_dir.free_port(taken=candidates - {held})
    assert state_dir.free_port(taken=candidates - {held}) == held
