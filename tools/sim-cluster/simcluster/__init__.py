"""The simulated cluster that sim.py runs: one module per part, pure plans (*_plan.py) apart from the I/O."""
