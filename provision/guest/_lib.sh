#!/usr/bin/env bash
# Shared by every guest script: Guest.script() sends this file ahead of the script itself (one bash -s stdin), so
# each script may call `fetch`. Never run on its own.
set -euo pipefail

# The one message a guest script prints when the network is missing (the host turns it into one offline line):
#   slurmflox-offline: cannot download URL (curl exit N: reason)
# and exit status 75 (EX_TEMPFAIL). A download that reaches its server and fails (404, bad checksum) is a
# broken step instead: its own message, exit 1.
OFFLINE_EXIT=75

offline() {
    echo "slurmflox-offline: $*" >&2
    exit "$OFFLINE_EXIT"
}

# fetch URL OUT: download URL to OUT with curl (https only, redirects followed, fails on HTTP errors).
fetch() {
    local url=$1 out=$2 err rc
    err=$(mktemp)
    if curl --proto '=https' --tlsv1.2 -fsSL --connect-timeout 20 --retry 2 "$url" -o "$out" 2>"$err"; then
        rm -f "$err"
        return 0
    else
        rc=$?
    fi
    local why
    why=$(tail -n 1 "$err")
    rm -f "$err"
    case $rc in
        # 5: proxy not resolved, 6: host not resolved, 7: no connection, 28: timeout, 35: TLS handshake failed
        5 | 6 | 7 | 28 | 35) offline "cannot download ${url} (curl exit ${rc}: ${why})" ;;
        *)
            echo "download of ${url} failed (curl exit ${rc}: ${why})" >&2
            exit 1
            ;;
    esac
}

# apt_or_offline ARGS...: apt-get that reports a missing network as the offline message, not as a broken step.
apt_or_offline() {
    local log
    log=$(mktemp)
    if DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 "$@" 2>&1 | tee "$log"; then
        if grep -qE '^(W|E): (Failed to fetch|Some index files failed)' "$log"; then
            local why
            why=$(grep -m1 -E 'Failed to fetch|Could not resolve|Temporary failure' "$log" || true)
            rm -f "$log"
            offline "apt-get $1: ${why}"
        fi
        rm -f "$log"
        return 0
    fi
    local why
    why=$(grep -m1 -E 'Could not resolve|Temporary failure|Failed to fetch|Unable to connect' "$log" || true)
    rm -f "$log"
    [[ -n $why ]] && offline "apt-get $1: ${why}"
    echo "apt-get $* failed" >&2
    exit 1
}

# dnf_or_offline ARGS...: the same for dnf (AlmaLinux/RHEL).
dnf_or_offline() {
    local log
    log=$(mktemp)
    if dnf -y -q "$@" 2>&1 | tee "$log"; then
        rm -f "$log"
        return 0
    fi
    local why
    why=$(grep -m1 -E 'Cannot download repomd.xml|Failed to download metadata|Could not resolve host|Curl error' "$log" || true)
    rm -f "$log"
    [[ -n $why ]] && offline "dnf $1: ${why}"
    echo "dnf $* failed" >&2
    exit 1
}
