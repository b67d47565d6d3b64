#!/usr/bin/env bash
# nodes 2..N: mount node1's /home over NFS at /home, now and at every boot. Idempotent.
# Usage: nfs-client.sh SERVER_ADDRESS
# The fstab entry uses x-systemd.automount so a node that boots before node1 mounts /home on first access
# instead of failing its boot.
set -euo pipefail

server=${1:?usage: nfs-client.sh SERVER_ADDRESS}
entry="${server}:/home /home nfs defaults,_netdev,nofail,x-systemd.automount,x-systemd.mount-timeout=30 0 0"

if ! grep -qxF "$entry" /etc/fstab; then
    grep -v '[[:space:]]/home[[:space:]]nfs[[:space:]]' /etc/fstab >/etc/fstab.slurmflox-tmp || true
    printf '%s\n' "$entry" >>/etc/fstab.slurmflox-tmp
    mv -f /etc/fstab.slurmflox-tmp /etc/fstab
    systemctl daemon-reload
fi

nfs_source() { findmnt -n -t nfs,nfs4 -o SOURCE /home 2>/dev/null | tail -n 1 || true; }
if [[ "$(nfs_source)" != "${server}:/home" ]]; then
    systemctl restart home.automount 2>/dev/null || true
    mount /home 2>/dev/null || true
fi
# touching the automount point triggers the mount; then prove it is NFS from the server
ls /home >/dev/null
current=$(nfs_source)
if [[ $current != "${server}:/home" ]]; then
    echo "nfs-client: /home is not mounted from ${server} (found: ${current:-nothing})" >&2
    exit 1
fi
echo "mounted: $current"
