#!/usr/bin/env bash
# node1: the pinned helm release into /usr/local/bin, verified against its published sha256.
# Callers run it by absolute path (/usr/local/bin/helm): sudo's secure_path on EL does not include /usr/local/bin.
# Usage: install-helm.sh VERSION
# Upstream: helm.sh/docs/intro/install, "From the Binary Releases" (get.helm.sh/helm-VERSION-linux-amd64.tar.gz and
# its .sha256sum).
set -euo pipefail

version=${1:?usage: install-helm.sh VERSION}
helm=/usr/local/bin/helm
if [[ -x $helm ]] && [[ "$("$helm" version --template '{{.Version}}')" == "$version" ]]; then
    echo "helm ${version} present"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tarball="helm-${version}-linux-amd64.tar.gz"
fetch "https://get.helm.sh/${tarball}" "$work/$tarball"
fetch "https://get.helm.sh/${tarball}.sha256sum" "$work/$tarball.sha256sum"
(cd "$work" && sha256sum -c "$tarball.sha256sum")
tar -C "$work" -xzf "$work/$tarball" linux-amd64/helm
install -m 0755 "$work/linux-amd64/helm" "$helm"
"$helm" version --template '{{.Version}}'
