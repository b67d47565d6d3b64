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
    # openssh-server: the host-key tests start their own sshd on 127.0.0.1:<free port>. The package must not start
    # or enable a host sshd on port 22: a policy-rc.d that refuses every service start is in place while it installs
    # (Debian's invoke-rc.d policy interface; a policy-rc.d the machine already has is left as it is).
    policy=/usr/sbin/policy-rc.d
    own_policy=""
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
    fi
    # nix-bin: tests/integration/test_nix_local.py builds environment generations in a real Nix store (issue #20).
    # debian-archive-keyring: tests/unit/test_qemu_containerd.py reads Debian trixie's index (signed with the trixie
    # keys).
    apt_install mmdebstrap iproute2 util-linux e2fsprogs qemu-system-x86 qemu-utils cloud-image-utils vde2 \
        shellcheck strace openssh-client openssh-server chromium ca-certificates dpkg-dev \
        debian-archive-keyring nix-bin
    if [ -n "$own_policy" ]; then rm -f "$policy"; fi
    # A systemd host would still have the unit enabled for the next boot: disable it (no-op without systemd).
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
    fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The acceptance run needs the package alone; the project's tests also need its test extra (pytest-randomly among
# them, which shuffles whatever pytest runs in this venv).
if [ "${1:-}" = "test" ]; then extra='[test]'; else extra=''; fi
# setuptools warns at length about the package's data directories (schemas/, envs/) that look importable; the
# whole pip output goes to a log, shown only when the install fails.
if ! .venv/bin/python -m pip install -q -e ".$extra" >.venv/pip-install.log 2>&1; then
    cat .venv/pip-install.log >&2
    echo "bootstrap.sh: pip install failed (log: .venv/pip-install.log)" >&2
    exit 1
fi
echo "bootstrap.sh: ready (.venv)"
