"""Every program the local substrate runs on the host is installed by the substrate's own package step (issue 25).

The programs are derived from the code, not listed by hand a second time: every argv list in the local substrate's
modules (its first word, and the first word of each ``*("prog", ...)`` part), every single-word command of the Nix
runner (``self.run("nix-store", ...)``), and the host side of the shell the substrate runs on the host (node-boot.sh
up to its ``exec chroot``, the cgroup join, the Nix runner's mount prefix, mmdebstrap's hooks and the customize
script). A program missing from :data:`~pytest_slurmflox.substrates.local.apt.HOST_PROGRAMS` fails here, before a
newcomer's machine finds out (``nix-instantiate: not found`` after 131 s of ``up``).
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

from pytest_slurmflox.substrates.local import apt, image, node, scripts

LOCAL = Path(apt.__file__).parent
PROGRAM = re.compile(r"/?[a-z][a-z0-9._+/-]*\Z")
#: Shell words that are not programs on the host: builtins and keywords of sh/bash.
SHELL_WORDS = frozenset(
    [
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "for",
        "while",
        "until",
        "do",
        "done",
        "case",
        "esac",
        "in",
        "function",
        "!",
        "[[",
        "]]",
        "{",
        "}",
        "echo",
        "printf",
        "test",
        "[",
        "cd",
        "set",
        "trap",
        "exec",
        "export",
        "local",
        "return",
        "exit",
        "shift",
        ":",
        "true",
        "false",
        "read",
        "eval",
        ".",
        "source",
        "unset",
        "wait",
        "command",
        "break",
        "continue",
    ]
)
#: Single-word ``.run("...")`` calls that are not host programs (none today; a comment per entry when one is added).
NOT_HOST_RUNS: frozenset[str] = frozenset()
#: (module, program) pairs whose argv runs inside a node, from the node image, not on the host.
IN_NODE = {
    ("nsrunner.py", "setpriv"),  # after ``nsenter -r -w``: the node's root, so the image's setpriv
    ("nsrunner.py", "env"),  # same argv (the host's env is listed for runtime.py)
}


def _program(word: str) -> str | None:
    return Path(word).name if PROGRAM.match(word) else None


def _starts(elts: list[ast.expr]) -> list[str]:
    """The program words of one argv list: its first element, and the first of each starred tuple in it."""
    words = []
    if elts and isinstance(elts[0], ast.Constant) and isinstance(elts[0].value, str):
        words.append(elts[0].value)
    for elt in elts:
        if isinstance(elt, ast.Starred) and isinstance(elt.value, ast.Tuple):
            first = elt.value.elts[0] if elt.value.elts else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                words.append(first.value)
    return words


def _own_run(func: ast.expr) -> bool:
    """``self.run(...)``: a module's own host runner (the Nix store's); ``node_runner(x).run`` runs in a node."""
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "run"
        and isinstance(func.value, ast.Name)
        and (func.value.id == "self")
    )


def python_programs(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node_ in ast.walk(tree):
        # an argv list has arguments after its program (``["absent"]`` is a value, not a command)
        if isinstance(node_, ast.List) and (len(node_.elts) > 1 or any(isinstance(e, ast.Starred) for e in node_.elts)):
            found |= {p for w in _starts(node_.elts) if (p := _program(w))}
        elif isinstance(node_, ast.Call) and _own_run(node_.func):
            first = node_.args[0] if node_.args else None
            word = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else " "
            if " " not in word and word not in NOT_HOST_RUNS and (p := _program(word)):
                found.add(p)
    return found


def hook_scripts(tree: ast.AST) -> list[str]:
    """The shell of mmdebstrap's hooks (``--customize-hook=...``): they run on the host."""
    texts = []
    for node_ in ast.walk(tree):
        parts = node_.values if isinstance(node_, ast.JoinedStr) else [node_] if isinstance(node_, ast.Constant) else []
        text = "".join(p.value if isinstance(p, ast.Constant) and isinstance(p.value, str) else "X" for p in parts)
        match = re.match(r"--(customize|essential|setup|extract)-hook=(.*)", text, re.S)
        if match:
            texts.append(match.group(2))
    return texts


def shell_programs(text: str) -> set[str]:
    """The first word of each simple command in ``text`` (approximate, enough for our own scripts): quoted words
    stay whole, ``;``/``&&``/``||``/``|``/parentheses/braces end a command, ``for``/``case`` heads are no command."""
    functions = set(re.findall(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\(\)", text, re.M))
    found: set[str] = set()
    for raw in text.splitlines():
        if raw.strip().startswith("#"):
            continue
        lexer = shlex.shlex(raw, posix=True, punctuation_chars=True)
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:  # a quote that spans lines: the line holds no command of its own
            continue
        command: list[str] = []
        redirected = False
        for token in [*tokens, ";"]:
            if redirected:  # the word a redirection names (``>/dev/null``) is a file, not a command
                redirected = False
            elif set(token) & set("<>"):
                redirected = True
            elif token and set(token) <= set(";&|(){}"):
                _first_program(command, functions, found)
                command = []
            else:
                command.append(token)
    return found


def _first_program(words: list[str], functions: set[str], found: set[str]) -> None:
    if words[:1] in (["for"], ["case"]):
        return
    while words and (words[0] in SHELL_WORDS - {"exec", "command"} or re.match(r"\w+=", words[0])):
        words = words[1:]
    if words[:1] in (["exec"], ["command"]):
        words = words[1:]
    if not words or words[0] in SHELL_WORDS or words[0] in functions or words[0].startswith(("$", "-")):
        return
    if program := _program(words[0]):
        found.add(program)


def host_programs() -> dict[str, set[str]]:
    """program -> where the code runs it."""
    where: dict[str, set[str]] = {}

    def add(programs: set[str], origin: str) -> None:
        for program in programs:
            where.setdefault(program, set()).add(origin)

    for path in sorted(LOCAL.glob("*.py")):
        tree = ast.parse(path.read_text())
        add({p for p in python_programs(tree) if (path.name, p) not in IN_NODE}, path.name)
        for hook in hook_scripts(tree):
            add(shell_programs(hook), f"{path.name} (mmdebstrap hook)")
    host_side_boot = scripts.NODE_BOOT_SH.split("exec chroot")[0] + "exec chroot"
    add(shell_programs(host_side_boot), "node-boot.sh")
    add(shell_programs(node._JOIN_CGROUPS), "node.py (cgroup join)")
    add(shell_programs("mount --make-rprivate / && mount --bind a /nix && exec nix-store"), "nix.py (runner)")
    for suite in ("bookworm", "trixie"):
        add(shell_programs(image.node_customize(suite)), f"image.py (customize, {suite})")
    return where


def test_every_host_program_is_installed_by_the_package_step():
    where = host_programs()
    missing = {p: sorted(w) for p, w in where.items() if p not in apt.HOST_PROGRAMS}
    assert missing == {}, f"programs the local substrate runs on the host with no package in HOST_PROGRAMS: {missing}"


def test_the_derivation_finds_the_programs_it_must():
    """The scan is not empty-handed: it finds what we know the substrate runs, in the places it runs them."""
    where = host_programs()
    for program, origin in {
        "mmdebstrap": "image.py",
        "nix-instantiate": "nix.py",
        "nsenter": "node.py",
        "ip": "network.py",
        "hostname": "node-boot.sh",
        "chroot": "image.py (customize, trixie)",
    }.items():
        assert origin in where.get(program, set()), (program, where.get(program))


def test_the_scanner_sees_commands_behind_pipes_exec_and_assignments():
    text = (
        'set -eu\nX=1 foo "$a" | bar -x && exec baz >/dev/null\nif qux; then : ; fi\nf() { quux; }\nf\n'
        "# comment_word\nfor c in a b; do corge 2>&1; done\nsed -E 's/(passwd|group)/x/' y\n"
    )
    assert shell_programs(text) == {"foo", "bar", "baz", "qux", "quux", "corge", "sed"}


def test_the_table_names_only_programs_in_use():
    """No row outlives the code that needed it (``apt-get`` is the package step itself)."""
    unused = set(apt.HOST_PROGRAMS) - set(host_programs())
    assert unused == set(), unused


def test_missing_programs_map_to_their_packages(tmp_path, monkeypatch):
    """A host without ``nix-instantiate`` gets ``nix-bin`` asked for (PATH narrowed to a dir holding the rest)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in apt.HOST_PROGRAMS:
        if program != "nix-instantiate":
            (bin_dir / program).symlink_to("/bin/true")
    monkeypatch.setenv("PATH", str(bin_dir))
    assert apt.missing_packages() == ["nix-bin"]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert set(apt.missing_packages()) == set(apt.HOST_PROGRAMS.values())


def test_shlex_quote_is_not_a_program():
    assert _program(shlex.quote("a b")) is None
