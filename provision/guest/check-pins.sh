#!/usr/bin/env bash
# node1, before anything is installed on any node: does every pinned version exist upstream? A pin that does not
# exist must stop the bring-up in one line naming it, not as a broken step halfway through the cluster.
# Usage: check-pins.sh HELM CHART_REPO SLINKY_VERSION FLOX_VERSION FLOX_DEB_URL FLOX_RPM_URL [LABEL VERSION URL]...
#
# - Slinky charts: `helm show chart REPO/NAME --version V` for slurm-operator-crds, slurm-operator and slurm
#   (helm.sh/docs/helm/helm_show_chart; an OCI tag that does not exist answers "...: not found").
# - Every download URL (the Flox package of this node's family, the release manifests): an HTTP HEAD, redirects
#   followed (curl -I -L). 404/410 means the version is missing; no network is the one offline message of _lib.sh.
# Output on a missing pin, and exit 1:
#   slurmflox-missing: <what> <version> does not exist upstream (<where>: <reason>)
set -euo pipefail

helm=${1:?usage: check-pins.sh HELM CHART_REPO SLINKY_VERSION FLOX_VERSION FLOX_DEB_URL FLOX_RPM_URL [LABEL VERSION URL]...}
repo=${2:?CHART_REPO missing}
slinky=${3:?SLINKY_VERSION missing}
flox=${4:?FLOX_VERSION missing}
flox_deb=${5:?FLOX_DEB_URL missing}
flox_rpm=${6:?FLOX_RPM_URL missing}
shift 6

missing() {
    echo "slurmflox-missing: $*" >&2
    exit 1
}

# head_url LABEL VERSION URL
head_url() {
    local label=$1 version=$2 url=$3 err rc code why
    err=$(mktemp)
    if code=$(curl --proto '=https' --tlsv1.2 -sSIL --connect-timeout 20 --retry 2 -o /dev/null \
        -w '%{http_code}' "$url" 2>"$err"); then
        rc=0
    else
        rc=$?
    fi
    why=$(tail -n 1 "$err")
    rm -f "$err"
    case $rc in
        0) ;;
        5 | 6 | 7 | 28 | 35) offline "cannot check ${url} (curl exit ${rc}: ${why})" ;;
        *)
            echo "check of ${url} failed (curl exit ${rc}: ${why})" >&2
            exit 1
            ;;
    esac
    case $code in
        2??) echo "${label} ${version}: ${url} exists" ;;
        404 | 410) missing "${label} ${version} does not exist upstream (${url}: HTTP ${code})" ;;
        *)
            echo "check of ${label} ${version} at ${url} answered HTTP ${code}" >&2
            exit 1
            ;;
    esac
}

for chart in slurm-operator-crds slurm-operator slurm; do
    if out=$("$helm" show chart "${repo}/${chart}" --version "$slinky" 2>&1); then
        echo "Slinky chart ${chart} ${slinky} exists"
        continue
    fi
    last=${out##*$'\n'}
    case $out in
        *"no such host"* | *"i/o timeout"* | *"network is unreachable"* | *"connection refused"* | *"Temporary failure"*)
            offline "cannot check chart ${repo}/${chart} (${last})"
            ;;
        *"not found"* | *"manifest unknown"* | *"404"*)
            missing "Slinky chart ${chart} ${slinky} does not exist upstream (${repo}/${chart}: ${last})"
            ;;
        *)
            echo "helm show chart ${repo}/${chart} --version ${slinky} failed: ${out}" >&2
            exit 1
            ;;
    esac
done

if command -v dnf >/dev/null 2>&1; then
    head_url "Flox package" "$flox" "$flox_rpm"
else
    head_url "Flox package" "$flox" "$flox_deb"
fi
while (($# >= 3)); do
    head_url "$1" "$2" "$3"
    shift 3
done
