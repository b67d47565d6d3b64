#!/usr/bin/env bash
# Prepare a node for kubeadm: kernel modules, sysctls, no swap, containerd >= 2.2 with the systemd cgroup driver,
# kubelet/kubeadm/kubectl pinned to one Kubernetes version from pkgs.k8s.io. Idempotent; installs only what
# is missing. Needs the internet unless the image already carries the packages.
# Usage: k8s-node-prep.sh K8S_MINOR(v1.36) K8S_VERSION(1.36.3) NODE_IP
#
# Upstream, step by step:
# - modules, sysctls, swap: kubernetes.io "Container Runtimes", "Install and configure prerequisites";
#   kubeadm "Installing kubeadm", "Swap configuration".
# - containerd: the distributions' own packages are too old or absent (AlmaLinux has no `containerd`; Debian
#   trixie ships 1.7, sid 2.1), and containerd RELEASES.md "Kubernetes Support" recommends 2.2.0+ for Kubernetes
#   1.36, so both families use `containerd.io` from Docker's repositories, which containerd's docs/getting-started.md
#   "Option 2: From apt-get or dnf" names as the DEB/RPM source (repository setup: docs.docker.com/engine/install/
#   debian and /engine/install/rhel, "Set up the repository"). An older containerd.io already installed is
#   upgraded (dnf installs only what is missing; apt-get install upgrades by itself). Below 2.2 the script stops.
# - containerd config: `containerd config default`, then SystemdCgroup = true for runc (kubernetes.io "Container
#   Runtimes", containerd, "Configuring the systemd cgroup driver"); Docker's package ships a config with the CRI
#   plugin disabled, so it is always replaced unless it already has the systemd driver. `config default` prints
#   `SystemdCgroup = false` in 1.7 and in 2.1.5 and 2.2.0 (containerd internal/cri/config/config_unix.go at those
#   tags) but not in 2.0.0 or 2.1.0, so where the sed finds nothing the key is added under runc's options table. The host then judges the
#   result on the parsed `containerd config dump` (pytest_slurmflox/substrates/qemu/containerd.py runc_problems).
# - kubelet/kubeadm/kubectl: kubeadm "Installing kubeadm, kubelet and kubectl" (pkgs.k8s.io per minor version).
set -euo pipefail

# systemd_cgroup FILE: runc on the systemd cgroup driver in a `containerd config default` output.
systemd_cgroup() {
    sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' "$1"
    grep -q 'SystemdCgroup = true' "$1" && return 0
    if grep -qE '^ *\[plugins\..*containerd\.runtimes\.runc\.options\]' "$1"; then
        sed -i -E '/^ *\[plugins\..*containerd\.runtimes\.runc\.options\]/a SystemdCgroup = true' "$1"
    elif grep -q '^version = 3' "$1"; then
        printf "\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\nSystemdCgroup = true\n" >>"$1"
    else
        printf '\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = true\n' >>"$1"
    fi
}

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
echo "kernel prerequisites in place (overlay, br_netfilter, forwarding, no swap)"

if command -v dnf >/dev/null 2>&1; then
    setenforce 0 2>/dev/null || true
    sed -i 's/^SELINUX=enforcing$/SELINUX=permissive/' /etc/selinux/config 2>/dev/null || true
    if [[ ! -s /etc/yum.repos.d/docker-ce.repo ]]; then
        fetch https://download.docker.com/linux/rhel/docker-ce.repo /etc/yum.repos.d/docker-ce.repo
    fi
    cat >/etc/yum.repos.d/kubernetes.repo <<REPO
[kubernetes]
name=Kubernetes ${minor}
baseurl=https://pkgs.k8s.io/core:/stable:/${minor}/rpm/
enabled=1
gpgcheck=1
gpgkey=https://pkgs.k8s.io/core:/stable:/${minor}/rpm/repodata/repomd.xml.key
exclude=kubelet kubeadm kubectl cri-tools kubernetes-cni
REPO
    want=(containerd.io iptables "kubelet-${version}" "kubeadm-${version}" "kubectl-${version}")
    missing=()
    for pkg in "${want[@]}"; do rpm -q --quiet "$pkg" || missing+=("$pkg"); done
    if ((${#missing[@]})); then
        dnf_or_offline install --disableexcludes=kubernetes "${missing[@]}"
    fi
    installed=$(rpm -q --qf '%{VERSION}' containerd.io)
    if [[ "$(printf '%s\n' 2.2 "$installed" | sort -V | head -n 1)" != 2.2 ]]; then
        dnf_or_offline upgrade containerd.io
    fi
    kubelet_env=/etc/sysconfig/kubelet
else
    install -d -m 0755 /etc/apt/keyrings
    . /etc/os-release
    if [[ ! -s /etc/apt/keyrings/docker.asc ]]; then
        fetch "https://download.docker.com/linux/${ID}/gpg" /etc/apt/keyrings/docker.asc
        chmod a+r /etc/apt/keyrings/docker.asc
    fi
    echo "deb [arch=$(dpkg --print-architecture) signed-by=/etc/apt/keyrings/docker.asc]" \
        "https://download.docker.com/linux/${ID} ${VERSION_CODENAME} stable" >/etc/apt/sources.list.d/docker.list
    if [[ ! -s /etc/apt/keyrings/kubernetes.asc ]]; then
        fetch "https://pkgs.k8s.io/core:/stable:/${minor}/deb/Release.key" /etc/apt/keyrings/kubernetes.asc
    fi
    echo "deb [signed-by=/etc/apt/keyrings/kubernetes.asc] https://pkgs.k8s.io/core:/stable:/${minor}/deb/ /" \
        >/etc/apt/sources.list.d/kubernetes.list
    apt_or_offline update
    apt_or_offline install -y --no-install-recommends containerd.io iptables \
        "kubelet=${version}-*" "kubeadm=${version}-*" "kubectl=${version}-*"
    apt-mark hold kubelet kubeadm kubectl >/dev/null
    kubelet_env=/etc/default/kubelet
fi

ctr_version=$(containerd --version | awk '{print $3}')
if [[ "$(printf '%s\n' 2.2 "${ctr_version#v}" | sort -V | head -n 1)" != 2.2 ]]; then
    echo "k8s-node-prep: containerd ${ctr_version} is older than 2.2, which Kubernetes ${version} needs" >&2
    exit 1
fi

install -d -m 0755 /etc/containerd
if [[ ! -s /etc/containerd/config.toml ]] || ! grep -q 'SystemdCgroup = true' /etc/containerd/config.toml; then
    containerd config default >/etc/containerd/config.toml
    systemd_cgroup /etc/containerd/config.toml
fi
systemctl enable containerd >/dev/null 2>&1
systemctl restart containerd

echo "KUBELET_EXTRA_ARGS=--node-ip=${node_ip}" >"$kubelet_env"
systemctl enable kubelet >/dev/null 2>&1
kubeadm version -o short
