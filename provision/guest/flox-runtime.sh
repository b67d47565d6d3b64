#!/usr/bin/env bash
# A worker node: install Flox, then let Flox's own shim installer put the containerd shim in place, register it
# with containerd and restart containerd. This script does not write containerd configuration itself; whether
# the runtime is really registered is judged afterwards on the host, from `containerd config dump` parsed as TOML
# (pytest_slurmflox/substrates/qemu/containerd.py), and only then is the node marked done.
# Usage: flox-runtime.sh FLOX_VERSION INSTALLER [SHIM_PATH]
#   INSTALLER: the FloxHub environment owner/name, optionally pinned as owner/name:GENERATION
#
# Upstream:
# - Flox: floxdocs docs/install-flox/install.md, "Debian" (apt install of
#   downloads.flox.dev/by-env/stable/deb/flox-VERSION.x86_64-linux.deb) and "RPM" (rpm --import
#   downloads.flox.dev/by-env/stable/rpm/flox-archive-keyring.asc before installing the .rpm).
# - shim: floxdocs docs/k8s/install/self-managed.md, "Runtime shim installation", "Automatic installation":
#   `flox activate -r flox/containerd-shim-flox-installer --trust`, run as root; it detects the containerd version,
#   installs the matching shim, updates the containerd configuration and restarts containerd. A generation pin is
#   `-g N` (floxdocs docs/k8s/install/eks.md). Run here in command mode (`-- true`, stdin from /dev/null) as
#   flox/flox-kind-demo's Dockerfile does: the activation hook that does the work runs the same way
#   (docs/man/flox-activate.md, "command" mode), and nothing waits for a shell (this script arrives on bash's stdin).
set -euo pipefail

flox_version=${1:?usage: flox-runtime.sh FLOX_VERSION INSTALLER [SHIM_PATH]}
installer=${2:?INSTALLER missing}
shim=${3:-/usr/local/bin/containerd-shim-flox-v2}
base=https://downloads.flox.dev/by-env/stable

if ! command -v flox >/dev/null 2>&1; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    if command -v dnf >/dev/null 2>&1; then
        fetch "${base}/rpm/flox-archive-keyring.asc" "$work/flox-archive-keyring.asc"
        rpm --import "$work/flox-archive-keyring.asc"
        fetch "${base}/rpm/flox-${flox_version}.x86_64-linux.rpm" "$work/flox.rpm"
        dnf_or_offline install "$work/flox.rpm"
    else
        fetch "${base}/deb/flox-${flox_version}.x86_64-linux.deb" "$work/flox.deb"
        apt_or_offline install -y "$work/flox.deb"
    fi
fi
flox --version

env_ref=${installer%%:*}
pin=()
if [[ $installer == *:* ]]; then
    pin=(-g "${installer##*:}")
fi
flox activate -r "$env_ref" "${pin[@]}" --trust -- true </dev/null
[[ -x $shim ]] || { echo "flox-runtime: the installer ${installer} did not provide ${shim}" >&2; exit 1; }
for _ in $(seq 1 30); do
    systemctl is-active --quiet containerd && break
    sleep 1
done
systemctl is-active --quiet containerd || { echo "flox-runtime: containerd is not running after the installer" >&2; exit 1; }
echo "shim ${shim} installed by ${installer}; containerd active"
