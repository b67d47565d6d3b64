"""Service capabilities a target file declares: accounting (slurmdbd) and REST (slurmrestd).

A target that declares a capability says the cluster has the service; its group (TA, TR) then runs and a service
that does not answer FAILS. A target that declares none SKIPs the group naming the missing capability. The local
substrate declares both (it runs them); a customer writes them by hand::

    accounting:
      account: hpc                      # an account the login user is associated with (required)
      limited_account: {name: hpc-one, max_jobs: 1}   # optional: an association of that user with MaxJobs
      unassociated_user: nobody2        # optional: a login-node user with no association (checked via admin)
    rest:
      url: https://slurm-rest.example:6820   # slurmrestd, as the test process reaches it (required)
      token_command: scontrol token lifespan=900   # run on the login endpoint as the user; prints SLURM_JWT=...
      version: v0.0.42                  # optional: the OpenAPI data_parser version; discovered when absent
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_TOKEN_COMMAND = "scontrol token lifespan=900"


class CapabilityError(ValueError):
    """A declared capability is malformed; the message names the field."""


@dataclass(frozen=True)
class AccountingSpec:
    account: str
    limited_account: str | None = None
    limited_max_jobs: int | None = None
    unassociated_user: str | None = None


@dataclass(frozen=True)
class RestSpec:
    url: str
    token_command: str = DEFAULT_TOKEN_COMMAND
    version: str | None = None


def parse_accounting(doc: Mapping[str, Any]) -> AccountingSpec | None:
    value = doc.get("accounting")
    if not value:
        return None
    if not isinstance(value, Mapping) or not value.get("account"):
        raise CapabilityError("accounting.account is required (an account the login user is associated with)")
    limited = value.get("limited_account") or {}
    if limited and (not isinstance(limited, Mapping) or not limited.get("name") or not limited.get("max_jobs")):
        raise CapabilityError("accounting.limited_account needs name and max_jobs")
    return AccountingSpec(
        account=str(value["account"]),
        limited_account=str(limited["name"]) if limited else None,
        limited_max_jobs=int(limited["max_jobs"]) if limited else None,
        unassociated_user=str(value["unassociated_user"]) if value.get("unassociated_user") else None,
    )


def parse_rest(doc: Mapping[str, Any]) -> RestSpec | None:
    value = doc.get("rest")
    if not value:
        return None
    if not isinstance(value, Mapping) or not value.get("url"):
        raise CapabilityError("rest.url is required (slurmrestd as the test process reaches it)")
    return RestSpec(
        url=str(value["url"]).rstrip("/"),
        token_command=str(value.get("token_command") or DEFAULT_TOKEN_COMMAND),
        version=str(value["version"]) if value.get("version") else None,
    )


def accounting_document(spec: AccountingSpec) -> dict[str, Any]:
    doc: dict[str, Any] = {"account": spec.account}
    if spec.limited_account:
        doc["limited_account"] = {"name": spec.limited_account, "max_jobs": spec.limited_max_jobs}
    if spec.unassociated_user:
        doc["unassociated_user"] = spec.unassociated_user
    return doc


def rest_document(spec: RestSpec) -> dict[str, Any]:
    doc: dict[str, Any] = {"url": spec.url, "token_command": spec.token_command}
    if spec.version:
        doc["version"] = spec.version
    return doc
