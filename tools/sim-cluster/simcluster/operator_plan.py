"""How the simulated cluster runs the collection's operator on this machine: the kopf controller (controller/
gkm_controller) as a local process against the kubeconfig, out of cluster like the local webhook; its command line,
environment and options, pure. It binds no port unless given a probe port (sim.py reads its log for readiness).

The tests' controllers (tests/helpers/controller_process.py) start it with this command line; the in-cluster operator
(roles/gkm/templates/operator.yaml.j2) runs the same entry point with the same settings as environment variables.
"""

import json
import os

# The namespace of the collection's bookkeeping objects, where the local operator's Lease is.
NAMESPACE = "gkm-system"
ENTRY_POINT = "controller.gkm_controller.main"
# The simulated cluster's registry speaks plain HTTP; the options the gkm role passes come over it.
SIM_OPTIONS = {"registry_plain_http": True}


def options(given=None):
    """The controller's distribution options (--options) for the simulated cluster: the given ones over SIM_OPTIONS."""
    return dict(SIM_OPTIONS, **(given or {}))


def argv(python, kubeconfig, namespace, tools_image, distribution_options, identity=None, probe_port=None,
         verbose=False, resync_seconds=None, capture=None):
    """The controller's command line: its Lease in namespace, the extraction Jobs' image, the options as JSON;
    identity, probe port, resync period and capture setting (a dict) as its flags (default: host name and pid, no
    probe, the controller's period, no capture)."""
    command = [python, "-m", ENTRY_POINT, "--kubeconfig", kubeconfig, "--namespace", namespace,
               "--tools-image", tools_image, "--options", json.dumps(distribution_options, sort_keys=True)]
    command += ["--verbose"] if verbose else []
    command += ["--identity", identity] if identity else []
    command += ["--probe-port", str(probe_port)] if probe_port else []
    command += ["--resync-seconds", str(resync_seconds)] if resync_seconds else []
    command += ["--capture", json.dumps(capture, sort_keys=True)] if capture else []
    return command


def environment(base, root):
    """The checkout's controller package and its collection (as ansible_collections.gkm.cluster) importable."""
    path = [root, os.path.join(root, ".cache", "collections")]
    path += [base["PYTHONPATH"]] if base.get("PYTHONPATH") else []
    return dict(base, PYTHONPATH=os.pathsep.join(path))
