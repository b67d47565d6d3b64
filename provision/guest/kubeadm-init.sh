#!/usr/bin/env bash
# node1: kubeadm init from a configuration file, once. A node that already has a healthy control plane is
# left alone (rerunnable up).
# Usage: kubeadm-init.sh CONFIG_FILE
set -euo pipefail

config=${1:?usage: kubeadm-init.sh CONFIG_FILE}
export KUBECONFIG=/etc/kubernetes/admin.conf

if [[ -s $KUBECONFIG ]] && kubectl get --raw=/readyz >/dev/null 2>&1; then
    echo "control plane already initialised"
    exit 0
fi
kubeadm init --config "$config" --upload-certs
kubectl get --raw=/readyz
