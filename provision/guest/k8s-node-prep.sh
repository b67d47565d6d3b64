#!/usr/bin/env bash
# Prepare a node for kubeadm: kernel modules, sysctls, no swap, containerd with the systemd cgroup driver,
# kubelet/kubeadm/kubectl pinned to one Kubernetes version from pkgs.k8s.io. Idempotent; installs only what
# is missing. Needs the internet unless the image already carries the packages.
# Usage: k8s-node-prep.sh K8S_MINOR(v1.36) K8S_VERSION(1.36.3) NODE_IP
set -euo pipefail

minor=${1:?usage: k8s-node-prep.sh K8S_MINOR K8S_VERSION NODE_IP}
version=${2:?K8S_VERSION missing}
node_ip=${3:?NODE_IP missing}

swapoff -a
sed -i.slurmflox-bak '/[[:space:]]swap[[:space:]]/ s/^[^#]/#&/' /etc/fstab

printf 'overlay\nbr_netfilter\n' >/etc/modules-load.d/slurmflox-k8s.conf
modprobe overlay
modprobe br_netfilter
cat >/etc/sysctl.d/90-slurmflox-k8s.conf <<'SYSCTL'
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
net.ipv4.ip_forward = 1
SYSCTL
sysctl --system >/dev/null

if command -v dnf >/dev/null 2>&1; then
    setenforce 0 2>/dev/null || true
    sed -i 's/^SELINUX=enforcing$/SELINUX=permissive/' /etc/selinux/config 2>/dev/null || true
    cat >/etc/yum.repos.d/kubernetes.repo <<REPO
[kubernetes]
name=Kubernetes ${minor}
baseurl=https://pkgs.k8s.io/core:/stable:/${minor}/rpm/
enabled=1
gpgcheck=1
gpgkey=https://pkgs.k8s.io/core:/stable:/${minor}/rpm/repodata/repomd.xml.key
exclude=kubelet kubeadm kubectl cri-tools kubernetes-cni
REPO
    want=(containerd iptables "kubelet-${version}" "kubeadm-${version}" "kubectl-${version}")
    missing=()
    for pkg in "${want[@]}"; do rpm -q --quiet "$pkg" || missing+=("$pkg"); done
    if ((${#missing[@]})); then
        dnf -y -q install --disableexcludes=kubernetes "${missing[@]}"
    fi
    kubelet_env=/etc/sysconfig/kubelet
else
    export DEBIAN_FRONTEND=noninteractive
    install -d -m 0755 /etc/apt/keyrings
    if [[ ! -s /etc/apt/keyrings/kubernetes.asc ]]; then
        curl -fsSL "https://pkgs.k8s.io/core:/stable:/${minor}/deb/Release.key" -o /etc/apt/keyrings/kubernetes.asc
    fi
    echo "deb [signed-by=/etc/apt/keyrings/kubernetes.asc] https://pkgs.k8s.io/core:/stable:/${minor}/deb/ /" \
        >/etc/apt/sources.list.d/kubernetes.list
    apt-get -q update
    apt-get -y -q install containerd iptables "kubelet=${version}-*" "kubeadm=${version}-*" "kubectl=${version}-*"
    apt-mark hold kubelet kubeadm kubectl >/dev/null
    kubelet_env=/etc/default/kubelet
fi

install -d -m 0755 /etc/containerd
if [[ ! -s /etc/containerd/config.toml ]] || ! grep -q 'SystemdCgroup = true' /etc/containerd/config.toml; then
    containerd config default >/etc/containerd/config.toml
    sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' /etc/containerd/config.toml
fi
systemctl enable containerd >/dev/null 2>&1
systemctl restart containerd

echo "KUBELET_EXTRA_ARGS=--node-ip=${node_ip}" >"$kubelet_env"
systemctl enable kubelet >/dev/null 2>&1
kubeadm version -o short
