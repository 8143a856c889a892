#!/bin/sh
# Create a Python venv able to run tests/models/gen_fixtures.py.
# Usage: tests/models/setup-gen-env.sh [VENV_DIR]   (default: .venv-gen)
# Then:  VENV_DIR/bin/python tests/models/gen_fixtures.py
set -eu
venv="${1:-.venv-gen}"
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade pip
"$venv/bin/python" -m pip install -r "$here/requirements.txt"
echo "ready: $venv/bin/python $here/gen_fixtures.py"
