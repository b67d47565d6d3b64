"""KubeClient: the few Kubernetes reads the suites and the qemu substrate need, as plain dicts.

Why plain dicts in Kubernetes JSON shape (``metadata.name``, ``spec.runtimeClassName``, ...): a suite's
assertion then reads exactly like the ``kubectl get -o json`` output an operator would check, evidence can be
dumped as JSON unchanged, and nothing outside this module depends on the ``kubernetes`` package's model
classes. Everything is read-only except :meth:`KubeClient.exec`, which runs a command in a pod's container and
returns a :class:`~pytest_slurmflox.base.run.Result` like every other runner, and the node debug pod T1 may create and
delete when the target declares it (:meth:`KubeClient.create_pod`, :meth:`KubeClient.delete_pod`; nodedebug.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.kubeexec import ExecRefused, answered, failed_status, refusal
from ..base.run import Invocation, Observer, Result

SLINKY_GROUP = "slinky.slurm.net"
SLINKY_VERSION = "v1beta1"


class KubeError(RuntimeError):
    """The Kubernetes API could not be used (no kubeconfig, unreachable, forbidden). The message says which."""


def _plain(obj: Any) -> Any:
    """A kubernetes model object (or list) in Kubernetes JSON shape: camelCase keys, no None members."""
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(obj)


class KubeClient:
    """Reads of one cluster, scoped to ``namespace`` unless a method says otherwise.

    ``kubeconfig`` None means the usual discovery (``$KUBECONFIG``, ``~/.kube/config``, then in-cluster).
    """

    def __init__(self, kubeconfig: Path | None, context: str | None, namespace: str) -> None:
        from kubernetes import client, config

        self.kubeconfig, self.context, self.namespace = kubeconfig, context, namespace
        api_client = client.ApiClient(configuration=client.Configuration())
        try:
            if kubeconfig is not None:
                if not Path(kubeconfig).is_file():
                    raise KubeError(f"kubeconfig {kubeconfig} does not exist")
                api_client = config.new_client_from_config(config_file=str(kubeconfig), context=context)
            else:
                try:
                    api_client = config.new_client_from_config(context=context)
                except config.ConfigException:
                    config.load_incluster_config()
                    api_client = client.ApiClient()
        except config.ConfigException as exc:
            raise KubeError(f"no usable kubeconfig ({exc})") from None
        self._api = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.node_api = client.NodeV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)

    # ------------------------------------------------------------------------------------ reachability
    def reachable(self, timeout: float = 5.0) -> bool:
        """True if the API server answers ``/version`` (any HTTP answer from the server counts as no)."""
        from kubernetes import client

        try:
            client.VersionApi(self._api).get_code(_request_timeout=timeout)
            return True
        except Exception:
            return False

    def may(self, verb: str, resource: str, group: str = "", subresource: str = "") -> bool | None:
        """Whether the run's user may ``verb`` ``resource`` in this namespace (a ``SelfSubjectAccessReview``:
        authorization.k8s.io/v1, answered by the API server's authorizers, nothing stored); None when not
        answered."""
        from kubernetes import client

        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace=None if resource == "nodes" else self.namespace,
                    verb=verb,
                    group=group,
                    resource=resource,
                    subresource=subresource or None,
                )
            )
        )
        try:
            answer = client.AuthorizationV1Api(self._api).create_self_subject_access_review(review)
        except Exception:  # not answered: the caller says so, the client's text goes nowhere
            return None
        return bool(answer.status and answer.status.allowed)

    # ------------------------------------------------------------------------------------ core reads
    def server_version(self) -> str:
        """The API server's version (``git_version``, e.g. ``v1.36.3``)."""
        from kubernetes import client

        return str(client.VersionApi(self.core.api_client).get_code().git_version)

    def nodes(self) -> list[dict]:
        return _plain(self.core.list_node().items)

    def pods(self, label_selector: str | None = None) -> list[dict]:
        """Pods in this client's namespace, optionally filtered by a label selector (``a=b,c``)."""
        kwargs: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        return _plain(self.core.list_namespaced_pod(self.namespace, **kwargs).items)

    def pods_all_namespaces(self) -> list[dict]:
        return _plain(self.core.list_pod_for_all_namespaces().items)

    def jobs_all_namespaces(self) -> list[dict]:
        """Kubernetes batch Jobs everywhere (the architecture promises Slurm jobs never become these)."""
        return _plain(self.batch.list_job_for_all_namespaces().items)

    def runtime_class(self, name: str) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return _plain(self.node_api.read_runtime_class(name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _one(self, read: Any, name: str) -> dict | None:
        """``read(name, namespace)`` as a plain dict, None if the object does not exist (404)."""
        from kubernetes.client.exceptions import ApiException

        try:
            return _plain(read(name, self.namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def secret(self, name: str) -> dict | None:
        """A Secret of this namespace (``data`` values stay base64, as the API returns them)."""
        return self._one(self.core.read_namespaced_secret, name)

    def statefulset(self, name: str) -> dict | None:
        return self._one(self.apps.read_namespaced_stateful_set, name)

    def deployment(self, name: str) -> dict | None:
        return self._one(self.apps.read_namespaced_deployment, name)

    # ------------------------------------------------------------------------------------ Slinky CRs
    def _custom_list(self, plural: str) -> list[dict]:
        doc: Any = self.custom.list_namespaced_custom_object(SLINKY_GROUP, SLINKY_VERSION, self.namespace, plural)
        return list(doc.get("items", []))

    def nodesets(self) -> list[dict]:
        """Slinky NodeSets in the namespace (already plain dicts from the API)."""
        return self._custom_list("nodesets")

    def nodeset(self, name: str) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        try:
            found: dict | None = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
                SLINKY_GROUP, SLINKY_VERSION, self.namespace, "nodesets", name
            )
            return found
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def loginsets(self) -> list[dict]:
        return self._custom_list("loginsets")

    # ------------------------------------------------------------------------------------ debug pods
    def pod(self, name: str) -> dict | None:
        """One pod of this namespace, None if it does not exist."""
        return self._one(self.core.read_namespaced_pod, name)

    def create_pod(self, doc: Mapping[str, Any]) -> dict:
        """Create a pod in this namespace from its Kubernetes JSON (a node debug pod, nodedebug.py: the one object
        the suites create, and delete again)."""
        body: Any = dict(doc)  # the API takes Kubernetes JSON as well as a V1Pod
        return _plain(self.core.create_namespaced_pod(self.namespace, body))

    def delete_pod(self, name: str) -> None:
        """Delete a pod of this namespace at once (grace period 0); one already gone is fine."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise

    # ------------------------------------------------------------------------------------ exec
    def exec(self, pod: str, container: str, command: str, *, timeout: float = 120.0) -> Result:
        """Run ``command`` (bash -c) in a container of a pod in this namespace."""
        return PodRunner(self, pod, container).run(command, timeout=timeout)


@dataclass
class PodRunner:
    """A Runner into one container of one pod, through the API server's exec endpoint."""

    kube: KubeClient
    pod: str
    container: str
    observer: Observer | None = None
    user: str = "root"
    where: str = field(default="")

    def __post_init__(self) -> None:
        if not self.where:
            self.where = f"pod/{self.pod}:{self.container}"

    def run(
        self,
        command: str,
        *args: str,
        input: str | None = None,
        timeout: float = 120.0,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        from kubernetes.stream import stream

        call = Invocation.start(command, args, env)
        try:
            resp = stream(
                self.kube.core.connect_get_namespaced_pod_exec,
                self.pod,
                self.kube.namespace,
                container=self.container,
                command=call.argv,
                stdin=input is not None,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
            )
        except Exception as exc:  # the client's text never leaves: classified from what the server answered
            code, status = answered(exc)
            raise self.refused(code, status) from None
        if input is not None:
            resp.write_stdin(input)
        out, err = [], []
        # not a waits.poll: it drains the websocket until it closes, and a timeout is a result (rc 124), not an error
        deadline = time.monotonic() + timeout
        timed_out = False
        while resp.is_open():
            resp.update(timeout=1)
            if resp.peek_stdout():
                out.append(resp.read_stdout())
            if resp.peek_stderr():
                err.append(resp.read_stderr())
            if time.monotonic() > deadline:
                timed_out = True
                break
        resp.close()
        failure = None if timed_out else failed_status(_error_channel(resp))
        if failure is not None:  # the stream opened, but the command never ran (a kubelet the server cannot reach)
            raise self.refused(0, failure)
        rc = 124 if timed_out else _exit_code(resp)
        if timed_out:
            err.append(f"\n[timed out after {timeout}s]")
        return call.result(self.observer, self.where, self.user, rc, "".join(out), "".join(err))

    def close(self) -> None:
        """Nothing to release: each command opens and closes its own exec stream."""

    def refused(self, code: int, status: dict[str, Any] | None) -> ExecRefused:
        """Why the command could not run here (kubeexec.refusal), the pod read as the API holds it now."""
        try:
            pod = self.kube.pod(self.pod)
        except Exception:  # unreadable too: the refusal is classified without it
            pod = None
        return refusal(code, status, pod, pod_name=self.pod, namespace=self.kube.namespace)


def _error_channel(resp: Any) -> str:
    """The exec stream's error channel (3): the Status document the API server ends the stream with. Read once
    and kept, so :func:`_exit_code` reads the same text (the client's ``returncode`` raises on a failure Status
    that carries no exit code)."""
    if not hasattr(resp, "_slurmflox_status"):
        resp._slurmflox_status = resp.read_channel(3) if hasattr(resp, "read_channel") else ""
    return str(resp._slurmflox_status or "")


def _exit_code(resp: Any) -> int:
    """The exit status of a finished exec stream, from its error channel's Status document."""
    return exit_code_from_status(_error_channel(resp))


def exit_code_from_status(status: str) -> int:
    """Exit status from the exec error channel's Status document (``Success`` -> 0, ``ExitCode`` cause -> N).

    An empty channel means the stream closed without a Status: reported as 0 only because the API sends a
    Status for every non-zero exit.
    """
    import yaml

    if not status.strip():
        return 0
    doc = yaml.safe_load(status) or {}
    if doc.get("status") == "Success":
        return 0
    for cause in (doc.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause.get("message", 1))
    return 1
