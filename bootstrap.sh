#!/bin/sh
# Prepare this checkout on a Debian/Ubuntu host, as root: a virtualenv in .venv with the project installed.
#   sh bootstrap.sh        what the acceptance run needs (the local substrate installs its own packages)
#   sh bootstrap.sh test   also what the project's own tests need (mmdebstrap, QEMU, shellcheck, Chromium, ...)
# Idempotent: a rerun installs only what is missing. Waits for a busy dpkg lock instead of failing.
set -eu
cd "$(dirname "$0")"

if [ "$(id -u)" != 0 ]; then
    echo "bootstrap.sh: run as root (the local substrate creates namespaces and mounts)" >&2
    exit 2
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap.sh: needs a Debian/Ubuntu host (apt-get not found)" >&2
    exit 2
fi

apt_install() {
    missing=""
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
    done
    [ -z "$missing" ] && return 0
    echo "bootstrap.sh: installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=900 update -q
    # shellcheck disable=SC2086
    apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends $missing
}

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    apt_install python3 python3-venv python3-pip
    PY=python3
fi

if [ "${1:-}" = "test" ]; then
    apt_install mmdebstrap iproute2 util-linux e2fsprogs qemu-system-x86 qemu-utils cloud-image-utils vde2 \
        shellcheck openssh-client chromium ca-certificates dpkg-dev
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
echo "bootstrap.sh: ready (.venv)"
