"""tools/sim-cluster/sim.py loaded as a module, for the fixtures and for tests that read or act on its state."""

import importlib.util
import os

from tests.helpers.paths import ROOT

SIM_SCRIPT = os.path.join(ROOT, "tools", "sim-cluster", "sim.py")

_spec = importlib.util.spec_from_file_location("gkm_sim", SIM_SCRIPT)
sim_control = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim_control)
