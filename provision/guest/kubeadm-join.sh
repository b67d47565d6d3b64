#!/usr/bin/env bash
# nodes 2..N: join the cluster with a kubeadm v1beta4 JoinConfiguration (discovery from node1's
# `kubeadm token create --print-join-command`, the native-worker labels and taint for registration).
# A node that already joined (kubelet.conf present, kubelet active) is left alone.
# Usage: kubeadm-join.sh NODE_NAME CONFIG_FILE
# Upstream: kubeadm "Creating a cluster", "Joining your nodes"; `kubeadm join --config` (kubeadm join reference).
set -euo pipefail

name=${1:?usage: kubeadm-join.sh NODE_NAME CONFIG_FILE}
config=${2:?CONFIG_FILE missing}
if [[ -s /etc/kubernetes/kubelet.conf ]] && systemctl is-active --quiet kubelet; then
    echo "${name} already joined"
    exit 0
fi
kubeadm join --config "$config"
