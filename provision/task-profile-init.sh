#!/bin/bash
# slurmflox task-profile initializer (profile schema slurmflox-task-profile/1).
#
# Why this exists: the Flox shim prepares containers, not Slurm tasks. slurmd builds each task's environment
# from the launch message, so the activated runtime has to be written down once per worker lifetime and
# re-applied per task by the TaskProlog (task-prolog.sh). This script runs INSIDE the activated runtime (pod
# init container `flox-task-profile-init`, or the local substrate's realized runtime) and writes that record.
#
# It records only: the PATH entries rooted in $FLOX_ENV (order kept), allow-listed variables that are set,
# and identity facts (schema, environment, mode, image, realized path, precedence, revision). It never dumps
# the environment: Kubernetes service variables and credentials cannot reach a task through this file.
#
# Inputs (environment): FLOX_ENV, SLURMFLOX_ENVIRONMENT, SLURMFLOX_ACTIVATE_MODE, SLURMFLOX_IMAGE,
# SLURMFLOX_REVISION, SLURMFLOX_PATH_PRECEDENCE, SLURMFLOX_ENV_EXPORTS (set, may be empty), PATH,
# SLURMFLOX_PROFILE_DIR (optional, default /run/flox-task-profile).
#
# Output: <dir>/current -> .profile-<unique>/ with one file per fact; `revision` is written last inside the
# staging dir and `current` is swapped atomically (ln -s + mv -T), so a reader sees either the old complete
# profile or the new complete one. On any refusal it exits non-zero and `current` is left untouched.
#
# Every internal variable starts with _sfx_ so an allow-listed name can never read script state.

set -euo pipefail
umask 022

_sfx_schema='slurmflox-task-profile/1'
_sfx_staging=''

_sfx_fail() {
	printf 'slurmflox-task-profile-init: refused: %s\n' "$1" >&2
	exit 1
}

_sfx_cleanup() {
	if [[ -n $_sfx_staging && -d $_sfx_staging ]]; then
		rm -rf -- "$_sfx_staging"
	fi
}
trap _sfx_cleanup EXIT

# Character classes are spelled out (not ranges, not regexes) so the checks do not depend on the locale,
# which we must not change: LC_ALL itself may be an allow-listed export.
_sfx_name_chars='ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_'
_sfx_hex='0123456789abcdef'

_sfx_is_shell_name() {
	[[ -n $1 && $1 != [0123456789]* && $1 != *[!$_sfx_name_chars]* ]]
}

_sfx_single_line() {
	[[ $1 != *$'\n'* && $1 != *$'\r'* ]]
}

# ------------------------------------------------------------------------------------------------ inputs
_sfx_required=(FLOX_ENV SLURMFLOX_ENVIRONMENT SLURMFLOX_ACTIVATE_MODE SLURMFLOX_IMAGE SLURMFLOX_REVISION
	SLURMFLOX_PATH_PRECEDENCE PATH)
for _sfx_var in "${_sfx_required[@]}"; do
	if [[ -z ${!_sfx_var-} ]]; then
		_sfx_fail "missing input $_sfx_var"
	fi
	if ! _sfx_single_line "${!_sfx_var}"; then
		_sfx_fail "input $_sfx_var spans several lines"
	fi
done
# bash invents a default PATH when none was passed in; only an exported PATH is the activation's.
if [[ ${PATH@a} != *x* ]]; then
	_sfx_fail 'missing input PATH'
fi
if [[ -z ${SLURMFLOX_ENV_EXPORTS+set} ]]; then
	_sfx_fail 'missing input SLURMFLOX_ENV_EXPORTS (set it to an empty string for no exports)'
fi
_sfx_single_line "$SLURMFLOX_ENV_EXPORTS" || _sfx_fail 'input SLURMFLOX_ENV_EXPORTS spans several lines'
_sfx_dir=${SLURMFLOX_PROFILE_DIR:-/run/flox-task-profile}
_sfx_single_line "$_sfx_dir" || _sfx_fail 'SLURMFLOX_PROFILE_DIR spans several lines'
[[ $_sfx_dir == /* ]] || _sfx_fail 'SLURMFLOX_PROFILE_DIR must be an absolute path'

_sfx_revision=$SLURMFLOX_REVISION
_sfx_digest=${_sfx_revision#sha256:}
if [[ $_sfx_revision != sha256:* || ${#_sfx_digest} -ne 64 || $_sfx_digest == *[!$_sfx_hex]* ]]; then
	_sfx_fail 'SLURMFLOX_REVISION must be sha256:<64 lower-case hex digits>'
fi
case $SLURMFLOX_PATH_PRECEDENCE in
prepend | append) ;;
*) _sfx_fail 'SLURMFLOX_PATH_PRECEDENCE must be prepend or append' ;;
esac
case $SLURMFLOX_ACTIVATE_MODE in
run | dev) ;;
*) _sfx_fail 'SLURMFLOX_ACTIVATE_MODE must be run or dev' ;;
esac
if [[ $SLURMFLOX_ENVIRONMENT != ?*/?*:?* || $SLURMFLOX_ENVIRONMENT == *[[:space:]]* ]]; then
	_sfx_fail 'SLURMFLOX_ENVIRONMENT must be owner/name:generation'
fi
if [[ $SLURMFLOX_IMAGE == *[[:space:]]* ]]; then
	_sfx_fail 'SLURMFLOX_IMAGE must not contain whitespace'
fi

_sfx_flox_env=$FLOX_ENV
while [[ $_sfx_flox_env == */ && $_sfx_flox_env != / ]]; do
	_sfx_flox_env=${_sfx_flox_env%/}
done
if [[ $_sfx_flox_env != /* || $_sfx_flox_env == / || $_sfx_flox_env == *:* ]]; then
	_sfx_fail 'FLOX_ENV must be an absolute directory other than / (and contain no colon)'
fi

# ------------------------------------------------------------------------------------------------ PATH
# Keep entries that are $FLOX_ENV itself or lie below it; drop the base image's entries, empty entries and
# anything that climbs out with "..". Order is kept, repeats are dropped (they cannot change lookup).
_sfx_path_entries=()
IFS=: read -r -a _sfx_all_entries <<<"$PATH"
for _sfx_entry in "${_sfx_all_entries[@]}"; do
	[[ $_sfx_entry == "$_sfx_flox_env" || $_sfx_entry == "$_sfx_flox_env"/* ]] || continue
	[[ /$_sfx_entry/ == */../* ]] && continue
	for _sfx_seen in "${_sfx_path_entries[@]}"; do
		[[ $_sfx_seen == "$_sfx_entry" ]] && continue 2
	done
	_sfx_path_entries+=("$_sfx_entry")
done
if ((${#_sfx_path_entries[@]} == 0)); then
	_sfx_fail "no PATH entry is rooted in FLOX_ENV ($_sfx_flox_env)"
fi

# ------------------------------------------------------------------------------------------------ exports
# Only names on the allow-list, only if exported into this process (a shell-internal variable such as RANDOM
# is not "actually set" by the activation), only single-line values.
_sfx_export_lines=()
IFS=, read -r -a _sfx_names <<<"$SLURMFLOX_ENV_EXPORTS"
_sfx_done=','
for _sfx_name in "${_sfx_names[@]}"; do
	# tolerate spaces around commas, as the settings parser does
	_sfx_name=${_sfx_name#"${_sfx_name%%[![:space:]]*}"}
	_sfx_name=${_sfx_name%"${_sfx_name##*[![:space:]]}"}
	[[ -z $_sfx_name ]] && continue
	_sfx_is_shell_name "$_sfx_name" || _sfx_fail "allow-list entry '$_sfx_name' is not a shell variable name"
	case $_sfx_name in
	PATH | IFS | LD_PRELOAD | SLURM_* | BASH_FUNC_* | _sfx_*)
		_sfx_fail "allow-list entry '$_sfx_name' is reserved and cannot be exported"
		;;
	esac
	[[ $_sfx_done == *,"$_sfx_name",* ]] && continue
	_sfx_done+="$_sfx_name,"
	[[ ${!_sfx_name+set} == set && ${!_sfx_name@a} == *x* ]] || continue
	_sfx_value=${!_sfx_name}
	_sfx_single_line "$_sfx_value" || _sfx_fail "value of allow-listed variable $_sfx_name spans several lines"
	_sfx_export_lines+=("$_sfx_name=$_sfx_value")
done

# ------------------------------------------------------------------------------------------------ write
# The few tools used below come from the base system first: the activated PATH was only data up to here, and a
# Flox environment without coreutils must still get its profile written.
PATH="/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
mkdir -p -- "$_sfx_dir"
_sfx_staging=$(mktemp -d -- "$_sfx_dir/.profile-XXXXXXXXXX")
chmod 0755 -- "$_sfx_staging"

_sfx_write_line() {
	printf '%s\n' "$2" >"$_sfx_staging/$1"
}
_sfx_write_line schema "$_sfx_schema"
_sfx_write_line environment "$SLURMFLOX_ENVIRONMENT"
_sfx_write_line activate-mode "$SLURMFLOX_ACTIVATE_MODE"
_sfx_write_line image "$SLURMFLOX_IMAGE"
_sfx_write_line realized-path "$_sfx_flox_env"
_sfx_write_line path-precedence "$SLURMFLOX_PATH_PRECEDENCE"
printf '%s\n' "${_sfx_path_entries[@]}" >"$_sfx_staging/path"
if ((${#_sfx_export_lines[@]} > 0)); then
	printf '%s\n' "${_sfx_export_lines[@]}" >"$_sfx_staging/exports"
else
	: >"$_sfx_staging/exports"
fi
chmod 0644 -- "$_sfx_staging"/*
# Completion marker: last file of the staging dir.
_sfx_write_line revision "$_sfx_revision"
chmod 0644 -- "$_sfx_staging/revision"

# Atomic swap: a new relative symlink renamed over `current` (rename(2) replaces it in one step).
_sfx_new=${_sfx_staging##*/}
_sfx_link="$_sfx_dir/.current-$_sfx_new"
ln -s -- "$_sfx_new" "$_sfx_link"
if ! mv -T -- "$_sfx_link" "$_sfx_dir/current"; then
	rm -f -- "$_sfx_link"
	_sfx_fail "could not replace $_sfx_dir/current"
fi
_sfx_staging=''

# Older profiles are no longer reachable through `current`.
for _sfx_old in "$_sfx_dir"/.profile-* "$_sfx_dir"/.current-.profile-*; do
	[[ -e $_sfx_old || -L $_sfx_old ]] || continue
	[[ ${_sfx_old##*/} == "$_sfx_new" ]] && continue
	rm -rf -- "$_sfx_old"
done

printf 'slurmflox-task-profile-init: profile %s ready in %s (%d PATH entries, %d exports)\n' \
	"$_sfx_revision" "$_sfx_dir" "${#_sfx_path_entries[@]}" "${#_sfx_export_lines[@]}"
