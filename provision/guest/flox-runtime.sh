#!/usr/bin/env bash
# A worker node: install Flox (RPM, or .deb on Debian), put the containerd shim in place with the Flox shim
# installer image, register it as containerd runtime HANDLER and restart containerd. Success is reported only
# after containerd restarted AND its effective configuration (`containerd config dump`) resolves the shim path
# for that runtime; a marker records that state so a rerun can tell it apart from a half-done one.
# Usage: flox-runtime.sh FLOX_PACKAGE_URL INSTALLER_IMAGE HANDLER SHIM_PATH
set -euo pipefail

pkg_url=${1:?usage: flox-runtime.sh FLOX_PACKAGE_URL INSTALLER_IMAGE HANDLER SHIM_PATH}
installer=${2:?INSTALLER_IMAGE missing}
handler=${3:?HANDLER missing}
shim=${4:?SHIM_PATH missing}
marker=/var/lib/slurmflox/flox-runtime.ok
rm -f "$marker"

if ! command -v flox >/dev/null 2>&1; then
    if command -v dnf >/dev/null 2>&1; then
        dnf -y -q install "$pkg_url"
    else
        work=$(mktemp -d)
        curl -fsSL "${pkg_url%.rpm}.deb" -o "$work/flox.deb"
        apt-get -y -q install "$work/flox.deb"
        rm -rf "$work"
    fi
fi
flox --version

if [[ ! -x $shim ]]; then
    case $installer in
        */*/*) ref=$installer ;;
        *) ref="docker.io/${installer}" ;;
    esac
    [[ $ref == *:* ]] || ref="${ref}:latest"
    ctr -n k8s.io images pull "$ref" >/dev/null
    ctr -n k8s.io run --rm --privileged \
        --mount "type=bind,src=$(dirname "$shim"),dst=/host$(dirname "$shim"),options=rbind:rw" \
        "$ref" "slurmflox-shim-install-$$"
fi
[[ -x $shim ]] || { echo "flox-runtime: the installer did not provide ${shim}" >&2; exit 1; }

runtime_type="io.containerd.$(basename "$shim" | sed -e 's/^containerd-shim-//' -e 's/-v\([0-9]*\)$/.v\1/')"
dropin=/etc/containerd/conf.d/${handler}.toml
install -d -m 0755 /etc/containerd/conf.d
if ! grep -q '^imports' /etc/containerd/config.toml; then
    sed -i '1i imports = ["/etc/containerd/conf.d/*.toml"]' /etc/containerd/config.toml
fi
if grep -q '^version = 3' /etc/containerd/config.toml; then
    section="plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.${handler}"
else
    section="plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.${handler}"
fi
cat >"$dropin" <<TOML
[${section}]
  runtime_type = "${runtime_type}"
  runtime_path = "${shim}"
TOML
systemctl restart containerd
for _ in $(seq 1 30); do
    systemctl is-active --quiet containerd && break
    sleep 1
done
dump=$(containerd config dump)
if ! grep -A3 "runtimes.${handler}\]" <<<"$dump" | grep -q "runtime_path = \"${shim}\""; then
    echo "flox-runtime: containerd's effective configuration does not resolve ${shim} for runtime ${handler}" >&2
    exit 1
fi
install -d -m 0755 /var/lib/slurmflox
printf '%s %s\n' "$handler" "$shim" >"$marker"
echo "containerd runtime ${handler} -> ${shim} (${runtime_type})"
