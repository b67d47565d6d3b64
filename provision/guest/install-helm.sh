#!/usr/bin/env bash
# node1: the pinned helm release into /usr/local/bin, verified against its published sha256.
# Usage: install-helm.sh VERSION
set -euo pipefail

version=${1:?usage: install-helm.sh VERSION}
if command -v helm >/dev/null 2>&1 && [[ "$(helm version --template '{{.Version}}')" == "$version" ]]; then
    echo "helm ${version} present"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tarball="helm-${version}-linux-amd64.tar.gz"
curl -fsSL "https://get.helm.sh/${tarball}" -o "$work/$tarball"
curl -fsSL "https://get.helm.sh/${tarball}.sha256sum" -o "$work/$tarball.sha256sum"
(cd "$work" && sha256sum -c "$tarball.sha256sum")
tar -C "$work" -xzf "$work/$tarball" linux-amd64/helm
install -m 0755 "$work/linux-amd64/helm" /usr/local/bin/helm
helm version --template '{{.Version}}'
