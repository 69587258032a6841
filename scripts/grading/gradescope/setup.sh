#!/usr/bin/env bash
# Gradescope runs this once, as root, when building the autograder image (Ubuntu base image).
# The autograder zip holds this file, run_autograder and the kit at its root (Gradescope unzips it into
# /autograder/source);
# build it with: python -m scripts.grading.make_autograder_zip  (see handouts/grading.md).
# AUTOGRADER_ROOT (default /autograder) and CS336_SKIP_INSTALL=1 (keep the packages already there) let
# the staff round-trip test run it in a scratch tree.
set -euo pipefail
root=${AUTOGRADER_ROOT:-/autograder}
# The torch the kit pins, read from the kit's own scripts/setup.sh (its one source): students, CI and the GPU node
# run that version, so Gradescope does too.
torch_pin=$(awk 'match($0, /pip install -q torch==[0-9][0-9a-z.+]*/) { print substr($0, RSTART + 15, RLENGTH - 15); exit }' \
    "$root/source/scripts/setup.sh")
if [ -z "$torch_pin" ]; then
    echo "setup.sh: no 'pip install -q torch==<version>' line in scripts/setup.sh to pin torch from" >&2
    exit 1
fi
echo "torch pin: $torch_pin"
if [ "${CS336_SKIP_INSTALL:-0}" != 1 ]; then
    apt-get update -q && apt-get install -y -q python3 python3-pip python3-venv
    python3 -m venv /opt/cs336
    # CPU wheels of torch (2.13.0+cpu satisfies ==2.13.0); on a GPU image drop --index-url to get the CUDA build.
    /opt/cs336/bin/pip install -q --index-url https://download.pytorch.org/whl/cpu "$torch_pin"
    /opt/cs336/bin/pip install -q numpy pytest pytest-timeout hypothesis tqdm tomli isal
    # Student code runs as this unprivileged user, who cannot read the staff source or the results.
    id -u cs336student >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin cs336student
fi
# Dependencies only: the kit itself is NOT installed, so reference_solutions is importable from nowhere.
chmod -R go-rwx "$root/source"
