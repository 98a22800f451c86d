#!/bin/sh
# Install conch from the source tree SOURCE into a new virtual environment PREFIX:
#   install-conch.sh PREFIX [SOURCE]
# The Dockerfile's build stage runs it, and CI runs it into a fresh venv on the machine
# (tests/integration/test_deploy_image.py), so the image's install steps are tested without a Docker
# daemon. pyproject.toml declares ranges; every dependency comes at the exact version of SOURCE's
# constraints.txt, the versions CI tests.
set -eu
prefix="$1"
source="${2:-.}"
python3 -m venv "$prefix"
# The streams extra (redis-py) too, so that the image serves `conch serve --streams` (docs/streams.md).
"$prefix/bin/pip" install --quiet -c "$source/constraints.txt" "$source[streams]"
# The versions agree with each other, and the image would start: the entry point resolves and the serving
# path imports.
"$prefix/bin/pip" check
"$prefix/bin/conch" --version
"$prefix/bin/python" -c "import conch.runtime.model_process, conch.cli.main, onnxruntime, grpc"
