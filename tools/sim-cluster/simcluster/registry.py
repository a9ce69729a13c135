"""The run's OCI registry (docker-registry, plain HTTP) and the checkout's images pushed to it."""

import os

import yaml

from simcluster import api, builds
from simcluster.state_dir import (
    SIM_DIR,
    bind_address,
    is_recorded_running,
    load_state,
    port,
    save_state,
    start_process,
    wait_for,
    write_file,
)


def ready(state):
    return api.http_ok("http://%s:%d/v2/" % (bind_address(state), port(state, "registry")))


def write_config(state):
    path = os.path.join(SIM_DIR, "registry.yml")
    write_file(path, yaml.safe_dump({
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": os.path.join(SIM_DIR, "registry")}, "delete": {"enabled": True}},
        "http": {"addr": "%s:%d" % (bind_address(state), port(state, "registry"))},
    }), 0o644)
    return path


def start(state):
    """Start the registry unless it runs, and record its address as "registry"."""
    if is_recorded_running(state, "registry"):
        return
    start_process(state, "registry", ["docker-registry", "serve", write_config(state)])
    wait_for("the registry", lambda: ready(state), 15, ["registry"], state)
    state["registry"] = "%s:%d" % (bind_address(state), port(state, "registry"))
    save_state(state)


def push_image(name):
    """Build (or reuse) the image NAME from this checkout, push it to the run's registry, record it as NAME_image and
    print it.

    Cheap when nothing changed (the image cache under ~/.cache); after a code change only the code layer is
    rebuilt, so tests and the demo always run the checkout's code on the real nodes.
    """
    reference = builds.push_image(name, load_state()["registry"])
    # Read again: the build takes minutes, in which another command may have written the state.
    state = load_state()
    state["%s_image" % name] = reference
    save_state(state)
    print(reference)
