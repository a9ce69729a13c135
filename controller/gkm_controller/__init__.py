"""The controller of issue 33 (docs/controller-design.md): the continuous reconcile on kopf, fed by watches.

A package of its own, outside the collection's module_utils: kopf needs Python 3.11 or later, and module_utils is
checked for older Pythons; it imports the collection (ansible_collections.gkm.cluster) for every stage of a
reconcile, so the controller and the playbooks run the same code. Only handlers.py and main.py (the entry point)
import kopf; the other modules are pure or talk to the API server through the collection's common/kube.py, and have
unit tests without kopf.

The controller image runs it (tools/images/controller.sh), and the gkm role in the cluster (gkm_reconcile: operator);
the simulated cluster's local operator (sim.py operator-up, gkm_operator_local) runs it as a process here.
"""
