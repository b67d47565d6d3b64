#!/usr/bin/env bash
# nodes 2..N: join the cluster with the arguments of node1's `kubeadm token create --print-join-command`.
# A node that already joined (kubelet.conf present, kubelet active) is left alone.
# Usage: kubeadm-join.sh NODE_NAME JOIN_ARGS...
set -euo pipefail

name=${1:?usage: kubeadm-join.sh NODE_NAME JOIN_ARGS...}
shift
if [[ -s /etc/kubernetes/kubelet.conf ]] && systemctl is-active --quiet kubelet; then
    echo "${name} already joined"
    exit 0
fi
kubeadm join "$@" --node-name "$name"
