"""Offline stand-in for the get-pip.py bootstrap script that ansible-test downloads.

ansible-test fetches get-pip.py from ci-files.testing.ansible.com, which this network cannot reach.
It runs the script as `python get_pip.py [pip install options] pip==X`, in a venv made without pip.
We bootstrap pip from the interpreter's bundled wheel (ensurepip) and let it install the asked-for
pip from PyPI, dropping the two get-pip-only flags.
"""

import ensurepip
import os
import subprocess
import sys

GET_PIP_ONLY_FLAGS = {"--no-setuptools", "--no-wheel"}

ensurepip.bootstrap(upgrade=True)
# ensurepip points PIP_CONFIG_FILE at /dev/null in this process; the install must see the machine's
# pip configuration again (index, certificate bundle).
environment = {key: value for key, value in os.environ.items() if key != "PIP_CONFIG_FILE"}
subprocess.check_call(
    [sys.executable, "-m", "pip", "install", *[arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY_FLAGS]],
    env=environment,
)
