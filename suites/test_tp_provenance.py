"""TP: task-environment provenance across Slurm's export modes.

Requirement: whatever export mode the user picks, every task starts with the worker's Flox PATH contribution placed
per WORKER_PATH_PRECEDENCE, receives the allow-listed activation variables with the worker's values and no other
activation state, and Slurm's own export semantics for the user's variables stay intact. A command present both in
the worker environment and in the base image resolves as the policy says.
"""

from __future__ import annotations

import shlex

import pytest

from ._support import read_profiles, requirement, slurm_version_tuple

pytestmark = [pytest.mark.acceptance, pytest.mark.TP]

SUBMIT_VAR = "SFX_SUBMIT_SIDE"
#: mode -> does the submit-side variable reach the task under Slurm's semantics
MODES = {"default": True, "ALL": True, "NONE": False, "NIL": False, f"{SUBMIT_VAR}": True}


@pytest.fixture(scope="module")
def profile(target, workers, slurmflox_state):
    from pytest_slurmflox.submit import Jobs

    jobs = Jobs(
        login=target.login,
        slurm=target.slurm,
        run_id=slurmflox_state.run_id,
        label="TP-profile",
        partition=target.spec.partition,
    )
    profiles, res = read_profiles(jobs, workers[:1])
    files = profiles.get(workers[0])
    requirement(files is not None and files.get("revision"), "the worker's task profile is readable", res)
    return files


def _probe(profile: dict, extra_names: list[str]) -> str:
    names = " ".join(sorted({*extra_names, "FLOX_ENV", SUBMIT_VAR}))
    return (
        "printf 'PATH=%s\\n' \"${PATH-<unset>}\"; "
        f'for v in {names}; do if [ -n "${{!v+x}}" ]; then printf \'VAR %s=%s\\n\' "$v" "${{!v}}"; '
        "else printf 'UNSET %s\\n' \"$v\"; fi; done"
    )


def _parse(stdout: str) -> tuple[str | None, dict[str, str], set[str]]:
    path, values, unset = None, {}, set()
    for line in stdout.splitlines():
        if line.startswith("PATH="):
            path = line[5:]
        elif line.startswith("VAR "):
            name, _, value = line[4:].partition("=")
            values[name] = value
        elif line.startswith("UNSET "):
            unset.add(line[6:])
    return path, values, unset


def _check(result, profile, expect, mode: str) -> None:
    path, values, unset = _parse(result.stdout)
    flox = ":".join(profile.get("path", []))
    policy = expect.settings.worker_path_precedence
    requirement(result.ok and path not in (None, "<unset>"), f"[{mode}] the task has a PATH", result)
    if policy == "prepend":
        requirement(path == flox or path.startswith(flox + ":"), f"[{mode}] PATH starts with the Flox entries", result)
    else:
        requirement(path == flox or path.endswith(":" + flox), f"[{mode}] PATH ends with the Flox entries", result)
    exported = dict(line.partition("=")[::2] for line in profile.get("exports", []))
    for name, value in exported.items():
        requirement(values.get(name) == value, f"[{mode}] allow-listed {name} arrives with the worker's value", result)
    if "FLOX_ENV" not in expect.settings.worker_env_exports:
        requirement("FLOX_ENV" in unset, f"[{mode}] non-allow-listed activation state (FLOX_ENV) stays out", result)
    reaches = MODES[mode]
    requirement(
        (values.get(SUBMIT_VAR) == "from-login") == reaches,
        f"[{mode}] Slurm's export semantics for the user's own variable hold",
        result,
    )


def _export_arg(mode: str) -> str:
    return "" if mode == "default" else f"--export={mode}"


def _skip_unsupported(mode: str, target) -> None:
    if mode == "NIL":
        version = target.slurm.version()
        if slurm_version_tuple(version) < (23, 2):
            pytest.skip(f"missing capability export-NIL: Slurm {version} has no --export=NIL (23.02 and later)")


@pytest.mark.parametrize("mode", list(MODES))
def test_srun_task_environment(mode, submit, target, profile, expect):
    _skip_unsupported(mode, target)
    probe = _probe(profile, list(expect.settings.worker_env_exports))
    res = submit.srun(
        f"-N1 -n1 {_export_arg(mode)}", "/bin/bash -c " + shlex.quote(probe), env={SUBMIT_VAR: "from-login"}
    )
    _check(res, profile, expect, mode)


@pytest.mark.parametrize("mode", list(MODES))
def test_sbatch_task_environment(mode, submit, target, profile, expect):
    _skip_unsupported(mode, target)
    probe = _probe(profile, list(expect.settings.worker_env_exports))
    script = "#!/bin/bash\n" + probe + "\n"
    opts = [_export_arg(mode)] if mode != "default" else []
    submit.login.run(f"mkdir -p {submit.outdir}").check()
    res_submit = submit.login.run(
        f"export {SUBMIT_VAR}=from-login; sbatch --parsable -J {submit.name} -p {submit.partition} "
        f"-o {submit.outdir}/%j.out {' '.join(opts)}",
        input=script,
    ).check()
    job = res_submit.stdout.strip().split(";")[0]
    submit.submitted.append(job)
    state = submit.wait(job)[job]
    out = submit.login.run(f"cat {submit.outdir}/{job}.out")
    requirement(state.state == "COMPLETED", f"[{mode}] the batch job completed", str(state), out)
    _check(out, profile, expect, mode)


def test_command_in_environment_and_image_resolves_per_policy(submit, profile, expect):
    entries = " ".join(shlex.quote(e) for e in profile.get("path", []))
    script = (
        f'for d in {entries}; do for f in "$d"/*; do n=${{f##*/}}; '
        'for b in /usr/local/bin /usr/bin /bin; do if [ -x "$b/$n" ]; then '
        'printf \'DUP %s %s %s\\n\' "$n" "$f" "$(command -v "$n")"; break; fi; done; done; done'
    )
    res = submit.srun("-N1 -n1", "/bin/bash -c " + shlex.quote(script))
    dups = [line.split() for line in res.stdout.splitlines() if line.startswith("DUP ")]
    if not dups:
        pytest.skip("missing capability shadowed-command: no command exists both in the environment and the image")
    name, flox_path, resolved = dups[0][1:4]
    if expect.settings.worker_path_precedence == "prepend":
        requirement(resolved == flox_path, f"{name} resolves to the worker environment's copy (prepend)", res)
    else:
        requirement(resolved != flox_path, f"{name} resolves to the base image's copy (append)", res)
