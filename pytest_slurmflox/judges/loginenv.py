"""The user's login environment a batch job may carry: ``sbatch --export=NONE`` (or a variable list) implies
``--get-user-env`` ("TP under --export=NONE").

Why: sbatch(1), ``--export``: "NONE: Only SLURM_* variables from the user environment will be defined ... However,
Slurm will then implicitly attempt to load the user's environment on the node where the script is being executed,
as if --get-user-env was specified" (https://slurm.schedmd.com/sbatch.html#OPT_export). Upstream
``src/sbatch/sbatch.c`` (``_fill_job_desc_from_opts``) sets ``get_user_env_time = 0`` (so ``SLURM_GET_USER_ENV=1``)
for NONE and for a variable list without ALL; NIL (23.02+) sets -1 ("Unlike NONE, NIL will not automatically
retrieve any environment variables"); srun never does ("--get-user-env is no longer supported in srun"). slurmd
then runs ``su - <user>`` on the worker (``env_array_user_default``, src/common/env.c) and merges the batch job's
own environment over what it printed. Where root on the worker cannot resolve the user (the local substrate's
workers: nss_slurm answers inside jobs only) slurmd logs "Unable to get user's local environment, running only
with passed environment" and the job carries none of it: both are healthy.

So on a site that resolves users through a directory (sssd, nslcd), a batch job's script legitimately carries the
user's login variables (HOME, LOGNAME, MAIL, SHELL, USER, the login PATH, what /etc/profile and ~/.profile export).
They are judged against a reference computed on the same worker, in the same job, as the same user, by what su(1)
and its PAM session document and the login shell then adds (:data:`LOGIN_PROBE`): a variable with the reference's
name and value is the user's login environment; any other added or changed variable (a TaskProlog leak) still
FAILs, and Slurm's own names (``SLURM_*``...) are judged as before, whatever the login profile says.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The export modes (expectations.passes_through's names) under which a batch job implies --get-user-env.
USER_ENV_MODES = frozenset({"NONE", "VARLIST"})

#: Bash printing, as ``<node>+login|<n>|<base64 chunk>`` lines and ``<node>+login|END|``, the environment
#: ``su - <user> -c env`` would print on this worker, computed as the user: su(1) --login sets HOME, SHELL, USER,
#: LOGNAME and PATH (login.defs ENV_PATH, util-linux's default otherwise) and changes to HOME; its PAM session
#: (Debian's /etc/pam.d/su) adds /etc/environment and /etc/default/locale (pam_env) and MAIL (pam_mail, MAIL_DIR);
#: then the user's login shell reads /etc/profile and the user's profile. Absolute paths only: under --export=NONE
#: the script may have no PATH.
LOGIN_PROBE = r"""
IFS=: read -r _u _ _ _ _ _h _sh <<EOF_SFX_PW
$(/usr/bin/getent passwd "$(/usr/bin/id -u)")
EOF_SFX_PW
_p=$(/usr/bin/sed -n 's/^ENV_PATH[[:space:]]*PATH=//p' /etc/login.defs 2>/dev/null)
_m=$(/usr/bin/sed -n 's/^MAIL_DIR[[:space:]]*//p' /etc/login.defs 2>/dev/null)
( cd "$_h" 2>/dev/null; /usr/bin/env -i HOME="$_h" SHELL="$_sh" USER="$_u" LOGNAME="$_u" \
    PATH="${_p:-/usr/local/bin:/bin:/usr/bin}" MAIL="${_m:-/var/mail}/$_u" "${_sh:-/bin/sh}" -c \
    'set -a; for f in /etc/environment /etc/default/locale; do [ -r "$f" ] && . "$f"; done; set +a;
     exec "$0" -l -c "/usr/bin/env -0"' "${_sh:-/bin/sh}" </dev/null 2>/dev/null ) |
/usr/bin/base64 -w 600 | { n=0; while IFS= read -r l; do
    printf "%s+login|%s|%s\n" "$SLURMD_NODENAME" "$n" "$l"; n=$((n+1)); done; }
printf "%s+login|END|\n" "$SLURMD_NODENAME"
"""


def implies_user_env(kind: str, mode: str) -> bool:
    """Whether a ``kind`` (srun, sbatch) submission under export semantics ``mode`` loads the user's environment."""
    return kind == "sbatch" and mode in USER_ENV_MODES


def login_origin(task: Mapping[str, str], login: Mapping[str, str] | None) -> set[str]:
    """The task's variables that are the user's login environment: same name and value as the reference, and not
    in Slurm's own namespace (a login profile cannot vouch for a ``SLURM_*`` value: those stay Slurm's to judge)."""
    if not login:
        return set()
    from .expectations import SLURM_SET_PREFIXES

    return {
        name
        for name, value in task.items()
        if login.get(name) == value and name != "PATH" and not name.startswith(SLURM_SET_PREFIXES)
    }
