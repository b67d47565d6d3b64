#!/usr/bin/env bash
# node1: export /home read-write to the private VM fabric over NFS. Idempotent.
# Usage: nfs-server.sh FABRIC_CIDR
set -euo pipefail

network=${1:?usage: nfs-server.sh FABRIC_CIDR}
export_line="/home ${network}(rw,sync,no_subtree_check,no_root_squash)"

install -d -m 0755 /etc/exports.d
if [[ "$(cat /etc/exports.d/slurmflox.exports 2>/dev/null || true)" != "$export_line" ]]; then
    printf '%s\n' "$export_line" >/etc/exports.d/slurmflox.exports
fi

# The unit is nfs-server on both AlmaLinux and Debian (Debian also aliases nfs-kernel-server).
systemctl enable --now nfs-server
exportfs -ra
exportfs -v | grep -q '^/home' || { echo "nfs-server: /home is not exported" >&2; exit 1; }
echo "exported: $export_line"
