"""Whether a worker holds a *local* account for a user: asked of the worker's resolver, source by source, so a
local account outside /etc/passwd and /etc/group is found and named with the source that keeps it.

Reading /etc/passwd and /etc/group misses a local account kept elsewhere (``compat``, ``extrausers``' own files,
systemd's userdb records) and says nothing about which service a name comes from. Asking ``getent -s <source>``
for each source the worker's /etc/nsswitch.conf lists names the one that answered. During a job step nss_slurm
(source ``slurm``) answers for the job's own user, and a directory (``ldap``, ``sss``, ``winbind``) may answer too:
those are not local accounts. Only a source that keeps accounts on the machine itself is judged.

Sources: nsswitch.conf(5) (a database line lists services, ``[STATUS=action]`` items are not services; glibc
reads ``initgroups`` from the ``group`` line when there is no ``initgroups`` line), getent(1) (``-s service``;
exit 0 found, 2 not found, 1 bad arguments or service).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..base.run import quoted

#: NSS services that keep accounts on the machine itself: /etc files (``files``, ``compat``), Berkeley DB copies
#: of them (``db``), libnss-extrausers and nss-altfiles (other local files), systemd's userdb records and dynamic
#: users (``systemd``).
LOCAL_SOURCES = frozenset({"files", "compat", "db", "extrausers", "altfiles", "systemd"})
DATABASES = ("passwd", "group", "initgroups")


def sources(nss: dict[str, str], db: str) -> list[str]:
    """The services of ``db`` from its nsswitch.conf line (``nss``: db -> the line after the colon)."""
    line = nss.get(db, "")
    if db == "initgroups" and not line.strip():
        line = nss.get("group", "")
    words = re.sub(r"\[[^]]*\]", " ", line).split()
    return words or ["files"]


def probe_script(queries: list[tuple[str, str]]) -> str:
    """Bash run by one task on each worker: ``nss|<db>|<line>`` for each database, then for each query and each
    service of its database ``asked|<db>|<service>|<key>|<exit>|<answer>`` (lines of the answer joined by
    `` ;; ``), ``checked`` last. :func:`account_problems` recomputes the services from the printed lines, so a
    service the probe did not ask is a problem, not a pass."""

    pairs = " ".join(f"{quoted('%s', db)}:{quoted('%s', key)}" for db, key in queries)
    return "\n".join(
        [
            'nssline() { sed -n "s/^$1:[[:space:]]*//p" /etc/nsswitch.conf | head -n1; }',
            f'for db in {" ".join(DATABASES)}; do printf \'nss|%s|%s\\n\' "$db" "$(nssline $db)"; done',
            f"for q in {pairs}; do db=${{q%%:*}}; key=${{q#*:}}; l=$(nssline $db); "
            '[ "$db" = initgroups ] && [ -z "$(echo $l)" ] && l=$(nssline group); '
            "l=$(printf '%s' \"$l\" | sed 's/\\[[^]]*\\]/ /g'); "
            'for s in ${l:-files}; do out=$(getent -s "$s" "$db" "$key" 2>&1); rc=$?; '
            'printf \'asked|%s|%s|%s|%s|%s\\n\' "$db" "$s" "$key" "$rc" "${out//$\'\\n\'/ ;; }"; done; done',
            "echo checked",
        ]
    )


@dataclass(frozen=True)
class Answer:
    db: str
    source: str
    key: str
    status: int
    text: str

    @property
    def found(self) -> bool:
        """An entry came back; for ``initgroups``, at least one group besides the user's name."""
        if self.status != 0 or not self.text.strip():
            return False
        return len(self.text.split()) > 1 if self.db == "initgroups" else True


def parse(lines: list[str]) -> tuple[dict[str, str], list[Answer]]:
    nss: dict[str, str] = {}
    answers = []
    for line in lines:
        if line.startswith("nss|"):
            _, db, text = line.split("|", 2)
            nss[db] = text
        elif line.startswith("asked|"):
            parts = line.split("|", 5)
            if len(parts) == 6 and parts[4].lstrip("-").isdigit():
                answers.append(Answer(parts[1], parts[2], parts[3], int(parts[4]), " ".join(parts[5].split())))
    return nss, answers


def account_problems(lines: list[str], queries: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(problems, who answered) for one worker's :func:`probe_script` lines. A problem is a local source that
    answers a query (naming the source and its entry), a service of the worker's nsswitch.conf the probe did not
    ask, a service getent refused, or a probe that did not finish."""
    if "checked" not in lines:
        return ["the resolver probe did not finish"], []
    nss, answers = parse(lines)
    got = {(a.db, a.source, a.key): a for a in answers}
    problems, answered = [], []
    for db, key in queries:
        for source in sources(nss, db):
            a = got.get((db, source, key))
            if a is None:
                problems.append(f"the {source} source of {db} was not asked for {key}")
            elif a.status == 1:
                problems.append(f"getent -s {source} {db} {key} was refused ({a.text})")
            elif a.found and source in LOCAL_SOURCES:
                problems.append(f"the local {source} source answers {db} {key}: {a.text}")
            elif a.found:
                answered.append(f"{db} {key} answered by {source}")
    return problems, answered
