"""Where the checkout is, for tests at any depth of tests/."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
