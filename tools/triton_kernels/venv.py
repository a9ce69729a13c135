"""Where the pinned Triton runs: $GKM_TRITON_PY, else the checkout's .venv-triton (make venv-triton links it); and
the release before it (requirements/triton-previous.txt): .venv-triton-previous (make venv-triton-previous)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HINT = "make venv-triton builds it (requirements/triton.txt); GKM_TRITON_PY names another Triton venv's python"
PREVIOUS_HINT = "make venv-triton-previous builds it (requirements/triton-previous.txt)"


def _linked(name):
    python = os.path.join(ROOT, name, "bin", "python")
    return python if os.access(python, os.X_OK) else None


def triton_python():
    """The Triton venv's python, or None when there is none (callers skip or fail with HINT)."""
    return os.environ.get("GKM_TRITON_PY") or _linked(".venv-triton")


def previous_triton_python():
    """The previous Triton release's venv's python, or None when there is none (PREVIOUS_HINT)."""
    return _linked(".venv-triton-previous")
