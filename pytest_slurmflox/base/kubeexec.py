"""Why a command could not be run in a pod (exec, a node debug pod): one sentence of ours, never the client's text.

A customer's cluster often forbids ``pods/exec`` to the account a run uses, a kubelet may be unreachable from the
API server, and a pod may not be running. The kubernetes client reports each differently: a refused websocket
handshake is an ``ApiException`` with status 0 whose reason is the websocket library's message (its ``__context__``
the ``WebSocketBadStatusException`` with the HTTP status and the API server's ``Status`` body), an exec whose
kubelet cannot be reached is an open stream whose error channel carries a ``Failure`` Status (the client's
``WSClient.returncode`` then raises ``ValueError`` on ``int(...)`` of its message: kubernetes-client/python
``kubernetes/base/stream/ws_client.py``). :func:`refusal` turns what was answered (HTTP status, the server's
``Status`` document, the pod as the API holds it) into an :class:`ExecRefused` naming the object, the verb and
the user or node; the suites decide NOT RUN or FAIL from the target's declared access (suites/_capability.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

#: Kinds of refusal (:attr:`ExecRefused.kind`).
FORBIDDEN, NO_KUBELET, NOT_RUNNING, REFUSED = "forbidden", "no-kubelet", "not-running", "refused"
#: The user the API server names in a 403 Status message (apiserver ``pkg/endpoints/handlers/responsewriters/
#: errors.go`` ``ForbiddenStatusError``: ``User "<name>" cannot <verb> resource "<resource>" ...``).
_USER = re.compile(r'User "([^"]+)"')
_ASKED = re.compile(r'cannot ([a-z]+) resource "([a-z/]+)"')
#: How the API server says it could not reach a kubelet (apiserver ``pkg/registry/core/pod/strategy.go`` node
#: connection info, the upgrade proxy's dial): only these make a failure without HTTP status a missing kubelet.
_KUBELET = re.compile(
    r"error sending request|error dialing backend|no preferred addresses|dial (tcp|unix)|connection refused"
)
_HANDSHAKE = re.compile(r"Handshake status (\d{3})")


class ExecRefused(RuntimeError):
    """A command could not be run in ``obj`` (``pod NAME`` in ``namespace``) by ``verb`` on ``resource``;
    ``kind`` one of :data:`FORBIDDEN`, :data:`NO_KUBELET`, :data:`NOT_RUNNING`, :data:`REFUSED`; ``str()`` is the
    one reason a verdict may show."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.reason = kind, reason


def status_document(body: Any) -> dict[str, Any] | None:
    """The API server's ``Status`` (a JSON object of ``kind: Status``) in a response body, else None."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body.strip():
        return None
    try:
        doc = json.loads(body[body.index("{") :]) if "{" in body else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("kind") == "Status" else None


def answered(exc: BaseException) -> tuple[int, dict[str, Any] | None]:
    """(HTTP status, Status document) of a failed API call: an ``ApiException`` (``status``, ``body``) or the
    websocket handshake it wraps (``status_code``, ``resp_body``); 0 when no HTTP answer is known."""
    for cause in (exc, exc.__cause__, exc.__context__):
        code = getattr(cause, "status_code", None)
        if isinstance(code, int):
            return code, status_document(getattr(cause, "resp_body", None))
    code = getattr(exc, "status", 0) or 0
    if not code and (m := _HANDSHAKE.search(str(getattr(exc, "reason", "")))):
        code = int(m.group(1))
    return int(code), status_document(getattr(exc, "body", None))


def refusal(
    code: int,
    status: Mapping[str, Any] | None,
    pod: Mapping[str, Any] | None,
    *,
    pod_name: str,
    namespace: str,
    verb: str = "create",
    resource: str = "pods/exec",
) -> ExecRefused:
    """Classify one failed attempt: a 403 names the user the server named; a pod that is absent, not Running or
    not on a node is named with its phase; a 5xx or an error-channel failure of a Running pod is a kubelet the
    API server could not reach, named by node. ``status`` is the server's own Status, ``pod`` as the API holds it
    now (None if it could not be read)."""
    obj = f"pod {pod_name} in namespace {namespace}"
    what = f"{verb} {resource} on {obj}"
    if code == 403 or (status or {}).get("reason") == "Forbidden":
        message = str((status or {}).get("message", ""))
        m = _USER.search(message)
        who = f'user "{m.group(1)}"' if m else "the run's user"
        if asked := _ASKED.search(message):  # the verb and resource the server authorized (a websocket GET: get)
            what = f"{asked.group(1)} {asked.group(2)} on {obj}"
        return ExecRefused(FORBIDDEN, f"forbidden: {who} may not {what} (RBAC)")
    phase = ((pod or {}).get("status") or {}).get("phase")
    node = ((pod or {}).get("spec") or {}).get("nodeName")
    if pod is None and code == 0:
        return ExecRefused(REFUSED, f"cannot {what}: the API server did not answer")
    if pod is None and code == 404:
        return ExecRefused(NOT_RUNNING, f"cannot {what}: the pod does not exist")
    if pod is not None and (phase != "Running" or not node):
        where = f"on node {node}" if node else "not scheduled on a node"
        return ExecRefused(NOT_RUNNING, f"cannot {what}: the pod is {phase or 'without a phase'}, {where}")
    message = str((status or {}).get("message", ""))
    if code == 0 and status and not _KUBELET.search(message):  # it reached the node: the container refused it
        why = status.get("reason") or "no reason given"
        return ExecRefused(REFUSED, f"cannot {what}: the exec ended before the command ran ({why})")
    if code >= 500 or code == 0:
        at = f"node {node}" if node else "the pod's node"
        return ExecRefused(NO_KUBELET, f"cannot {what}: the API server reached no kubelet on {at} (HTTP {code or '-'})")
    return ExecRefused(REFUSED, f"cannot {what}: the API server answered HTTP {code}")


def failed_status(text: str) -> dict[str, Any] | None:
    """The exec error channel's Status when it reports a failure that is not the command's own exit status
    (``reason: NonZeroExitCode`` with an ``ExitCode`` cause); None for success, an exit status or nothing."""
    import yaml

    if not text.strip():
        return None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return {"status": "Failure"}
    if not isinstance(doc, dict) or doc.get("status") == "Success":
        return None
    causes = (doc.get("details") or {}).get("causes") or []
    if any(c.get("reason") == "ExitCode" for c in causes):
        return None
    return doc
