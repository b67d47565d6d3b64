#!/usr/bin/env bash
# A worker node: realize the pinned worker environment ahead of the first pod, so a large first realization
# does not exceed kubelet's runtime request timeout. An optimisation only: the caller warns on failure.
# Usage: flox-prewarm.sh ENVIRONMENT GENERATION
set -euo pipefail

env_ref=${1:?usage: flox-prewarm.sh ENVIRONMENT GENERATION}
generation=${2:?GENERATION missing}
dir=/var/lib/slurmflox/prewarm/${env_ref//\//_}-${generation}
install -d -m 0755 "$dir"
cd "$dir"
flox pull "$env_ref" --copy --generation "$generation"
echo "pre-warmed ${env_ref} generation ${generation}"
