"""Where the pinned Triton runs: $GKM_TRITON_PY, else the checkout's .venv-triton (make venv-triton links it)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HINT = "make venv-triton builds it (requirements/triton.txt); GKM_TRITON_PY names another Triton venv's python"


def triton_python():
    """The Triton venv's python, or None when there is none (callers skip or fail with HINT)."""
    named = os.environ.get("GKM_TRITON_PY")
    if named:
        return named
    linked = os.path.join(ROOT, ".venv-triton", "bin", "python")
    return linked if os.access(linked, os.X_OK) else None
