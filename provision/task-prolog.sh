#!/bin/bash
# slurmflox Slurm TaskProlog (TaskProlog=/etc/slurm/flox-task-prolog/task-prolog.sh), profile schema
# slurmflox-task-profile/1.
#
# Why this exists: slurmd builds each task's environment from the launch message, so the Flox runtime that
# prepared the slurmd container does not reach tasks by inheritance. task-profile-init.sh recorded that
# runtime once per worker; this prolog turns the record into Slurm `export NAME=value` directives per task.
#
# Constraints, each for a reason:
# - shell builtins only: under `srun --export=NONE` or `env -i` the task has no usable PATH, and an external
#   command would fail silently (slurmd discards the prolog's stderr);
# - a task always gets a PATH that finds both the environment's commands and the image's (see the PATH policy
#   at the end): Slurm's own testsuite runs `srun --export=VAR=1 env` and expects env to be found;
# - no eval, no `source` of profile content: values are data; Slurm takes the rest of an `export` line
#   literally, so printing NAME=value verbatim cannot execute anything, and single-line values cannot add a
#   directive line;
# - fail closed: a missing, partial or malformed profile prints `print slurmflox: task profile invalid: ...`
#   (shown to the submitting user on the task's stdout) and exits non-zero, so the task never starts with a
#   plain-image environment;
# - nothing is printed until the whole profile has been validated.
#
# Usage: task-prolog.sh [PROFILE_DIR]   (Slurm passes no argument; default /run/flox-task-profile)

_sfp_dir=${1:-/run/flox-task-profile}
_sfp_schema='slurmflox-task-profile/1'
_sfp_name_chars='ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_'
_sfp_hex='0123456789abcdef'

_sfp_fail() {
	local reason=${1//$'\n'/?}
	reason=${reason//$'\r'/?}
	printf 'print slurmflox: task profile invalid: %s\n' "$reason"
	printf 'slurmflox: task profile invalid: %s\n' "$reason" >&2
	exit 1
}

# Read a file of the profile that must hold exactly one non-empty line; the line lands in _sfp_line.
_sfp_read_one() {
	local file="$_sfp_profile/$1" lines=()
	[[ -f $file ]] || _sfp_fail "missing file $1 in $_sfp_profile"
	mapfile -t lines <"$file" 2>/dev/null || _sfp_fail "cannot read $1"
	((${#lines[@]} == 1)) || _sfp_fail "$1 must hold exactly one line (multiline value)"
	_sfp_line=${lines[0]}
	[[ -n $_sfp_line ]] || _sfp_fail "$1 is empty"
	[[ $_sfp_line != *$'\r'* ]] || _sfp_fail "$1 contains a carriage return"
}

[[ -d $_sfp_dir ]] || _sfp_fail "profile directory $_sfp_dir is missing"
_sfp_profile="$_sfp_dir/current"
[[ -d $_sfp_profile ]] || _sfp_fail "no complete profile at $_sfp_profile"

# The revision file is written last by the initializer: without it the profile is incomplete.
[[ -f $_sfp_profile/revision ]] || _sfp_fail 'missing revision marker (profile incomplete)'
_sfp_read_one revision
_sfp_digest=${_sfp_line#sha256:}
if [[ $_sfp_line != sha256:* || ${#_sfp_digest} -ne 64 || $_sfp_digest == *[!$_sfp_hex]* ]]; then
	_sfp_fail 'revision is not sha256:<64 hex digits>'
fi

_sfp_read_one schema
[[ $_sfp_line == "$_sfp_schema" ]] || _sfp_fail "unsupported schema (expected $_sfp_schema)"

_sfp_read_one environment
_sfp_read_one image
_sfp_read_one activate-mode
[[ $_sfp_line == run || $_sfp_line == dev ]] || _sfp_fail 'activate-mode is not run or dev'
_sfp_read_one realized-path
_sfp_realized=$_sfp_line
[[ $_sfp_realized == /?* ]] || _sfp_fail 'realized-path is not an absolute path'
_sfp_read_one path-precedence
_sfp_precedence=$_sfp_line
[[ $_sfp_precedence == prepend || $_sfp_precedence == append ]] ||
	_sfp_fail 'path-precedence is not prepend or append'

# path: one absolute entry per line, each rooted in the realized environment, no ':' (it would split).
[[ -f $_sfp_profile/path ]] || _sfp_fail "missing file path in $_sfp_profile"
_sfp_entries=()
mapfile -t _sfp_entries <"$_sfp_profile/path" 2>/dev/null || _sfp_fail 'cannot read path'
((${#_sfp_entries[@]} > 0)) || _sfp_fail 'path file is empty'
_sfp_flox_path=''
for _sfp_entry in "${_sfp_entries[@]}"; do
	[[ $_sfp_entry == /* ]] || _sfp_fail 'path holds an empty or relative entry'
	[[ $_sfp_entry != *:* && $_sfp_entry != *$'\r'* ]] || _sfp_fail 'path entry contains : or a carriage return'
	[[ $_sfp_entry == "$_sfp_realized" || $_sfp_entry == "$_sfp_realized"/* ]] ||
		_sfp_fail 'path entry is not rooted in realized-path'
	_sfp_flox_path+="${_sfp_flox_path:+:}$_sfp_entry"
done

# exports: zero or more NAME=value lines.
[[ -f $_sfp_profile/exports ]] || _sfp_fail "missing file exports in $_sfp_profile"
_sfp_exports=()
mapfile -t _sfp_exports <"$_sfp_profile/exports" 2>/dev/null || _sfp_fail 'cannot read exports'
_sfp_out=()
for _sfp_export in "${_sfp_exports[@]}"; do
	[[ $_sfp_export == *=* ]] || _sfp_fail 'exports holds a line that is not NAME=value (multiline value?)'
	_sfp_name=${_sfp_export%%=*}
	if [[ -z $_sfp_name || $_sfp_name == [0123456789]* || $_sfp_name == *[!$_sfp_name_chars]* ]]; then
		_sfp_fail 'exports holds a bad variable name'
	fi
	case $_sfp_name in
	PATH | IFS | LD_PRELOAD | SLURM_* | BASH_FUNC_*) _sfp_fail "exports may not set $_sfp_name" ;;
	esac
	[[ $_sfp_export != *$'\r'* ]] || _sfp_fail "value of $_sfp_name contains a carriage return"
	_sfp_out+=("export $_sfp_export")
done

# The task's own PATH counts only if it was exported to us: with none (env -i, --export=NONE, --export=VAR)
# bash invents a default PATH that is not the task's. A task given no PATH gets the environment's entries first,
# then the system's default PATH (the OCI runtime default a container image's processes get: containerd's
# oci.DefaultPathEnv, runc's), in both precedence modes: there is no task PATH for the environment to go after,
# and a task still finds env, grep and the rest of the image after the environment's commands.
_sfp_system_path='/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
_sfp_task_path=''
if [[ ${PATH@a} == *x* ]]; then
	_sfp_task_path=$PATH
fi
if [[ -z $_sfp_task_path ]]; then
	_sfp_path="$_sfp_flox_path:$_sfp_system_path"
elif [[ $_sfp_precedence == prepend ]]; then
	_sfp_path="$_sfp_flox_path:$_sfp_task_path"
else
	_sfp_path="$_sfp_task_path:$_sfp_flox_path"
fi
[[ $_sfp_path != *$'\n'* && $_sfp_path != *$'\r'* ]] || _sfp_fail 'the task PATH spans several lines'

printf '%s\n' "export PATH=$_sfp_path" "${_sfp_out[@]}"
exit 0
