#!/usr/bin/env bash
# Install only the packages a guest image lacks: dnf on AlmaLinux/RHEL, apt-get on Debian.
# Usage: ensure-packages.sh PACKAGE...
# An image that already carries everything (the offline test image) needs no network at all.
set -euo pipefail

missing=()
if command -v rpm >/dev/null 2>&1 && command -v dnf >/dev/null 2>&1; then
    for pkg in "$@"; do
        rpm -q --quiet "$pkg" || missing+=("$pkg")
    done
    if ((${#missing[@]})); then
        echo "installing with dnf: ${missing[*]}"
        dnf -y -q install "${missing[@]}"
    fi
elif command -v dpkg-query >/dev/null 2>&1; then
    for pkg in "$@"; do
        status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
        [[ $status == "install ok installed" ]] || missing+=("$pkg")
    done
    if ((${#missing[@]})); then
        echo "installing with apt-get: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get -q update
        apt-get -y -q install --no-install-recommends "${missing[@]}"
    fi
else
    echo "ensure-packages: neither dnf nor dpkg found" >&2
    exit 2
fi
echo "packages present: $*"
