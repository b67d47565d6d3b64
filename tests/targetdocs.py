"""Target documents the tests share: one declaring every key the target file's schema names."""

from __future__ import annotations

from typing import Any

from pytest_slurmflox.model.settings import KEYS
from pytest_slurmflox.substrates.local.cgroups import CONTROLLERS

LOGIN = {
    "host": "login.site-a.example",
    "port": 22,
    "user": "alice",
    "key": "/k/id",
    "known_hosts": "/k/kh",
    "ssh_config": "none",
    "proxy_jump": "jump@bastion.site-a.example:2022",
}
#: The metrics a heterogeneous cluster may declare per kind of worker (``features``): those taken per worker or pair.
KINDED = ("mpi_latency", "mpi_bandwidth", "memory_triad", "storage_write", "storage_read")
ENV = "/nix/store/0000000000000000000000000000000a-hpc-17"
#: A customer's target declaring every key the schema names (the test below holds the two equal).
EVERY_KEY: dict[str, Any] = {
    "version": 1,
    "name": "site-a",
    "substrate": "existing",
    "workdir": "/srv/operator",
    "login": LOGIN,
    "admin": {**LOGIN, "user": "root"},
    "kubernetes": {
        "kubeconfig": "/k/kubeconfig",
        "context": "prod",
        "namespace": "slurm",
        "nodeset": "slurm-worker-compute",
        "loginset": "slurm-login",
        "worker_label": "slurm.example/pool=hpc",
        "worker_taint": "slurm.example/pool=hpc:NoSchedule",
        "node_debug_image": "busybox:1.36",
        "pod_exec": True,
    },
    "slurm": {
        "partition": "gpu",
        "version": "24.11.5",
        "account": "hpc",
        "qos": "normal",
        "reservation": "acceptance",
        "extra_args": ["--constraint=fast"],
        "busy_timeout": 900,
        "mpi": "pmi2",
    },
    "identity": {"user": "alice", "uid": 1234, "gid": 1234, "supp_group": "hpc", "supp_gid": 2000},
    "directory": {
        "uri": "ldap://ldap.site-a.example/",
        "base": "dc=site-a,dc=example",
        "user": "alice",
        "groups": ["hpc"],
        "bind_dn": "cn=reader,dc=site-a,dc=example",
        "bind_password_file": "/etc/ldap/reader.secret",
        "modify": "ldapmodify -x -H ldap://ldap.site-a.example/",
    },
    "expect": {
        "revision": "sha256:" + "ab" * 32,
        "image": "repo/worker:1@sha256:" + "cd" * 32,
        "replicas": 2,
        "settings": {
            "WORKER_FLOX_ENV": "myorg/hpc",
            "WORKER_FLOX_GENERATION": 17,
            "WORKER_FLOX_ACTIVATE_MODE": "run",
            "WORKER_FLOX_SKIP_CONTAINERS": "logfile",
            "WORKER_ENV_EXPORTS": "GATK_CONDAENV_PREFIX",
            "WORKER_PATH_PRECEDENCE": "prepend",
            "WORKER_CPUS": 2,
            "WORKER_MEM_MB": 1024,
            "WORKER_HOME_PATH": "/home",
            "WORKER_IMAGE": "repo/worker:1@sha256:" + "cd" * 32,
            "COMPUTE_REPLICAS": 2,
        },
        "limits": {
            "over_time_limit": 8,
            "allowed_ram_space": 1000,
            "allowed_swap_space": 50,
            "constrain_swap_space": False,
        },
        "performance": {
            **{
                name: {"reference": 10, "unit": unit, "lower": "30%", "upper": 20}
                | ({"features": {"gpu": {"reference": 30, "lower": "20%"}}} if name in KINDED else {})
                for name, unit in (
                    ("mpi_latency", "us"),
                    ("mpi_bandwidth", "MB/s"),
                    ("memory_triad", "MB/s"),
                    ("storage_write", "MB/s"),
                    ("storage_read", "MB/s"),
                    ("storage_read_login", "MB/s"),
                    ("scheduler_submit_to_start", "s"),
                    ("scheduler_srun_launch", "s"),
                )
            },
            "scheduler_burst": {"reference": 5, "unit": "jobs/s", "lower": 1.5, "upper": "100%", "jobs": 20},
        },
    },
    "deployment": {"settings": {spec.key: spec.default for spec in KEYS}},
    "limitations": {name: "this site cannot" for name in CONTROLLERS.values()},
    "accounting": {"account": "hpc", "limited_account": {"name": "hpc-one", "max_jobs": 1}, "unassociated_user": "x"},
    "rest": {"url": "https://rest.site-a.example:6820", "token_command": "scontrol token", "version": "v0.0.42"},
    "flox": {"lock_file": "hpc-17.lock"},
    "runtime": {
        "realized_path": ENV,
        "path": [f"{ENV}/bin"],
        "exports": {"GATK_CONDAENV_PREFIX": f"{ENV}/conda"},
        "profile_dir": "/run/flox-task-profile",
        "task_prolog": "/etc/slurm/flox-task-prolog/task-prolog.sh",
        "executables": {f"{ENV}/bin": ["python3"]},
        "content_digest": "sha256:" + "ef" * 32,
        "nar_hash": "sha256:" + "0" * 52,
    },
}
