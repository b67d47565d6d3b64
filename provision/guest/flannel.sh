#!/usr/bin/env bash
# node1: apply the pinned flannel release with the pod network and the fabric interface substituted, so
# pod traffic between nodes uses the private fabric rather than the user-mode NIC.
# Upstream: flannel-io/flannel README "Deploying flannel manually" (kubectl apply of the release's kube-flannel.yml);
# Documentation/configuration.md for --iface and net-conf.json "Network".
# Usage: flannel.sh VERSION POD_CIDR IFACE
set -euo pipefail

version=${1:?usage: flannel.sh VERSION POD_CIDR IFACE}
pod_cidr=${2:?POD_CIDR missing}
iface=${3:?IFACE missing}
export KUBECONFIG=/etc/kubernetes/admin.conf

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fetch "https://github.com/flannel-io/flannel/releases/download/${version}/kube-flannel.yml" "$work/kube-flannel.yml"
sed -i -e "s#\"Network\": \"10.244.0.0/16\"#\"Network\": \"${pod_cidr}\"#" \
    -e "s#- --kube-subnet-mgr#- --kube-subnet-mgr\n        - --iface=${iface}#" "$work/kube-flannel.yml"
grep -q -- "--iface=${iface}" "$work/kube-flannel.yml" || { echo "flannel.sh: could not set --iface" >&2; exit 1; }
kubectl apply -f "$work/kube-flannel.yml"
kubectl -n kube-flannel rollout status daemonset/kube-flannel-ds --timeout=600s
