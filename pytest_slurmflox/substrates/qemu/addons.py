"""What goes onto the cluster after kubeadm, as data: addons, the Flox runtime, Slinky, identity. Pure.

Order matters and is encoded here: storage and cert-manager before the Slinky operator (its webhook needs
cert-manager), the Flox runtime on the workers and the ``flox`` RuntimeClass before any worker pod exists,
pre-warming only when WORKER_FLOX_ENV was given explicitly (an optimisation: failure warns, never aborts).
The slurm chart itself is applied by :class:`.pool.NodeSetPool`, the owner of the worker cohort.
"""

from __future__ import annotations

import yaml

from ...base.run import command_line, quoted
from ...model.labels import LABEL_FLOX_NODE
from ...model.settings import Settings
from . import fabric
from .containerd import FLOX_RUNTIME_HANDLER, FLOX_SHIM_PATH
from .kubeadm import Step, kubectl, worker_nodes

NAMESPACE_SLURM = "slurm"
NAMESPACE_OPERATOR = "slinky"
SLURM_RELEASE = "slurm"
CHART_REPO = "oci://ghcr.io/slinkyproject/charts"
HELM_VERSION = "v3.19.0"
#: install-helm.sh puts helm here; every call names it in full, because sudo's ``secure_path`` on EL
#: (/sbin:/bin:/usr/sbin:/usr/bin) does not include /usr/local/bin.
HELM_BIN = "/usr/local/bin/helm"
SHIM_PATH = FLOX_SHIM_PATH
RUNTIME_HANDLER = FLOX_RUNTIME_HANDLER
RUNTIME_CLASS = "flox"
VALUES_PATH = "/etc/slurmflox/slurm-values.yaml"


def local_path_url(version: str) -> str:
    return f"https://raw.githubusercontent.com/rancher/local-path-provisioner/{version}/deploy/local-path-storage.yaml"


def flannel_url(version: str) -> str:
    """The manifest the pin check asks for with HTTP HEAD (the guest applies the same file)."""
    return f"https://github.com/flannel-io/flannel/releases/download/{version}/kube-flannel.yml"


def cert_manager_url(version: str) -> str:
    return f"https://github.com/cert-manager/cert-manager/releases/download/{version}/cert-manager.yaml"


def flox_package_url(version: str, family: str) -> str:
    """The Flox package for ``family`` ``rpm`` or ``deb`` (floxdocs docs/install-flox/install.md, the download
    links of the "Debian" and "RPM" tabs: each format has its own directory)."""
    if family not in ("rpm", "deb"):
        raise ValueError(f"no Flox package format {family!r}")
    return f"https://downloads.flox.dev/by-env/stable/{family}/flox-{version}.x86_64-linux.{family}"


def runtime_class_manifest() -> str:
    """The ``flox`` RuntimeClass. Its nodeSelector keeps Flox pods on nodes whose containerd has the shim."""
    doc = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": RUNTIME_CLASS},
        "handler": RUNTIME_HANDLER,
        "scheduling": {"nodeSelector": {LABEL_FLOX_NODE: "true"}},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def helm(*args: str) -> str:
    return command_line(f"{HELM_BIN} --kubeconfig /etc/kubernetes/admin.conf", args)


def storage_and_certs_steps(settings: Settings) -> list[Step]:
    lp = settings.local_path_version
    return [
        Step(
            1,
            f"local-path-provisioner {lp}",
            command=" && ".join(
                [
                    kubectl("apply", "-f", local_path_url(lp)),
                    kubectl(
                        "patch",
                        "storageclass",
                        "local-path",
                        "-p",
                        '{"metadata":{"annotations":{"storageclass.kubernetes.io/is-default-class":"true"}}}',
                    ),
                ]
            ),
        ),
        Step(
            1,
            f"cert-manager {settings.cert_manager_version}",
            command=" && ".join(
                [
                    kubectl("apply", "--server-side", "-f", cert_manager_url(settings.cert_manager_version)),
                    kubectl(
                        "-n",
                        "cert-manager",
                        "wait",
                        "--for=condition=Available",
                        "deployment",
                        "--all",
                        "--timeout=600s",
                    ),
                ]
            ),
        ),
        Step(1, "cert-manager webhook probe Issuer", put_path=WEBHOOK_PROBE_PATH, content=webhook_probe_manifest()),
        Step(1, "cert-manager webhook answers", command=webhook_ready_command(), timeout=660),
    ]


#: A self-signed Issuer that is only ever created with --dry-run=server (nothing is stored).
WEBHOOK_PROBE_PATH = "/etc/slurmflox/cert-manager-webhook-probe.yaml"


def webhook_probe_manifest() -> str:
    """What the readiness probe submits. cert-manager.io/docs/installation/verify: "Check cert-manager API" (``cmctl
    check api`` performs a dry-run create) and "Manual verification" (create an Issuer to test the webhook)."""
    doc = {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Issuer",
        "metadata": {"name": "slurmflox-webhook-probe", "namespace": "cert-manager"},
        "spec": {"selfSigned": {}},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def webhook_ready_command(tries: int = 60, pause: int = 10) -> str:
    """Deployment ``Available`` is not "webhook ready": the API server must also reach the webhook with the CA
    the cainjector has injected, or the Slinky operator's Issuer/Certificate fail on first try. A server-side
    dry-run create runs the admission webhooks without storing anything, so its success is the readiness signal."""
    probe = kubectl("create", "--dry-run=server", "-f", WEBHOOK_PROBE_PATH)
    return (
        f"for i in $(seq 1 {tries}); do {probe} >/dev/null 2>/tmp/slurmflox-webhook.err && exit 0; sleep {pause}; "
        f"done; echo 'cert-manager webhook not answering after {tries * pause}s:' >&2; "
        "cat /tmp/slurmflox-webhook.err >&2; exit 1"
    )


def flox_runtime_steps(settings: Settings) -> list[Step]:
    """Flox and its containerd shim on every worker node, by Flox's installer; the executor then judges the
    registration on ``containerd config dump`` (:func:`.containerd.check_flox_runtime`) before it marks the node.

    The RuntimeClass is upstream's own manifest (floxdocs docs/k8s/install/self-managed.md, "Kubernetes
    configuration"), with the node label it selects set on nodes 2..N at join time."""
    steps = [
        Step(
            n,
            f"Flox {settings.flox_version} and containerd runtime '{RUNTIME_HANDLER}' on {fabric.hostname(n)}",
            script="flox-runtime.sh",
            args=(settings.flox_version, settings.flox_shim_installer, SHIM_PATH),
        )
        for n in worker_nodes(settings)
    ]
    steps.append(
        Step(1, "RuntimeClass flox", put_path="/etc/slurmflox/runtimeclass-flox.yaml", content=runtime_class_manifest())
    )
    steps.append(
        Step(1, "apply RuntimeClass flox", command=kubectl("apply", "-f", "/etc/slurmflox/runtimeclass-flox.yaml"))
    )
    return steps


def pin_check_steps(settings: Settings) -> list[Step]:
    """Before any node is changed: helm on node1 (it only places a verified binary), then ``check-pins.sh``, which
    asks upstream for every pinned chart version (``helm show chart --version``) and download (HTTP HEAD) and stops
    with one ``slurmflox-missing:`` line naming a pin that does not exist (see :func:`.provision.run_step`)."""
    triples = [
        ("flannel", settings.flannel_version, flannel_url(settings.flannel_version)),
        ("cert-manager", settings.cert_manager_version, cert_manager_url(settings.cert_manager_version)),
        ("local-path-provisioner", settings.local_path_version, local_path_url(settings.local_path_version)),
    ]
    args = (
        HELM_BIN,
        CHART_REPO,
        settings.slinky_version,
        settings.flox_version,
        flox_package_url(settings.flox_version, "deb"),
        flox_package_url(settings.flox_version, "rpm"),
        *(field for triple in triples for field in triple),
    )
    return [
        Step(1, f"helm {HELM_VERSION}", script="install-helm.sh", args=(HELM_VERSION,)),
        Step(1, "pinned versions exist upstream", script="check-pins.sh", args=args, timeout=300),
    ]


def slinky_operator_steps(settings: Settings) -> list[Step]:
    v = settings.slinky_version
    return [
        Step(
            1,
            f"Slinky CRDs {v}",
            command=helm(
                "upgrade",
                "--install",
                "slurm-operator-crds",
                f"{CHART_REPO}/slurm-operator-crds",
                "--version",
                v,
                "--wait",
            ),
        ),
        Step(
            1,
            f"Slinky operator {v}",
            command=helm(
                "upgrade",
                "--install",
                "slurm-operator",
                f"{CHART_REPO}/slurm-operator",
                "--version",
                v,
                "--namespace",
                NAMESPACE_OPERATOR,
                "--create-namespace",
                "--set",
                "crds.enabled=false",
                "--wait",
                "--timeout",
                "10m",
            ),
        ),
    ]


def prewarm_steps(settings: Settings, explicit: set[str] | frozenset[str]) -> list[Step]:
    """``flox pull <env> --copy --generation <g>`` on each worker, only when WORKER_FLOX_ENV was explicit."""
    if "WORKER_FLOX_ENV" not in explicit:
        return []
    return [
        Step(
            n,
            f"pre-warm {settings.worker_flox_ref} on {fabric.hostname(n)}",
            script="flox-prewarm.sh",
            args=(settings.worker_flox_env, str(settings.worker_flox_generation)),
            soft=True,
            timeout=1800,
        )
        for n in worker_nodes(settings)
    ]


def identity_home_step(settings: Settings) -> list[Step]:
    """The test user's home on the shared /home (node1 is the NFS server), owned by its uid/gid."""
    if not (settings.login and settings.test_identity):
        return []
    root = settings.worker_home_path.rstrip("/") or "/home"
    home = f"{root}/{settings.test_user}"
    return [
        Step(
            1,
            f"home of {settings.test_user}",
            command=quoted("install -d -m 0750 -o %s -g %s %s", settings.test_uid, settings.test_gid, home),
        )
    ]


def slurm_chart_command(settings: Settings) -> str:
    """The helm command that applies the slurm chart with the rendered values (run on node1)."""
    return helm(
        "upgrade",
        "--install",
        SLURM_RELEASE,
        f"{CHART_REPO}/slurm",
        "--version",
        settings.slinky_version,
        "--namespace",
        NAMESPACE_SLURM,
        "--create-namespace",
        "-f",
        VALUES_PATH,
    )


def login_image_files_command(image: str) -> str:
    """Print the login image's /etc/passwd, group and shadow, separated by marker lines (run as root)."""
    return quoted(
        "ctr -n k8s.io images pull %s >/dev/null && "
        'for f in passwd group shadow; do echo "=== $f"; '
        "ctr -n k8s.io run --rm %s slurmflox-identity-$f-$$ cat /etc/$f; done",
        image,
        image,
    )


def split_login_files(text: str) -> dict[str, str]:
    """Parse :func:`login_image_files_command` output into {passwd, group, shadow}."""
    files: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("=== "):
            current = line[4:].strip()
            files[current] = []
        elif current is not None:
            files[current].append(line)
    missing = {"passwd", "group", "shadow"} - set(files)
    if missing:
        raise ValueError(f"login image output lacks {', '.join(sorted(missing))}")
    return {k: "\n".join(v) + "\n" for k, v in files.items()}
