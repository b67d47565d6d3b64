"""No value reaches a remote shell unquoted, and run.py's ``quoted`` is the one way to quote.

A runner's ``run(command, *args)`` hands ``command`` to ``bash -c`` on a node, a pod or this host. A value put
into that text by an f-string, ``%`` or ``.format`` (a partition from the target file, a job id from a REST reply,
a run id) becomes shell syntax if it holds a space, ``;`` or ``$(...)``. The one way in is
:func:`pytest_slurmflox.base.run.quoted` (a value inside the line) or the runner's ``*args`` / ``command_line``
(values appended); no other quoting exists (:func:`other_quoting`). This test reads the AST of the package and the
suites and fails on a ``.run(...)`` whose command interpolates anything else than a constant or a quoted value, also
where the command is ``"sep".join(...)`` of parts (a comprehension, or a list built with ``append`` in the same
function).

What it cannot see: a command built in another function and passed in (a parameter is the caller's business, and
the caller's own ``.run`` is checked where it builds the text), and helpers that take shell text by contract
(``Jobs.srun(args, command)``).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = (ROOT / "pytest_slurmflox", ROOT / "suites")
#: Calls whose first argument is a command line for a shell somewhere: a runner's ``run``, a qemu guest's ``root``.
COMMAND_METHODS = {"run", "root"}
#: Quoting templates: their first argument is command text (checked like any), their other values come out quoted.
#: They are the only quoting there is (:func:`other_quoting` fails on any other); one value is ``quoted("%s", v)``.
TEMPLATES = {"quoted", "command_line"}
#: Where the quoting lives, and the one function there that may call ``shlex.quote``.
QUOTING_HOME = ("pytest_slurmflox/base/run.py", "quoted")
#: Quoting outside the templates: ``shlex.quote``/``shlex.join`` and ``pipes.quote`` (called or imported).
OTHER_QUOTERS = {("shlex", "quote"), ("shlex", "join"), ("pipes", "quote")}
#: A function named like a quoting helper (``_q``, ``_shq``, ``shell_quote``, ``_quote_arg``, ``quoted``).
_QUOTER_NAME = re.compile(r"^_*(q|sh_?q|quoted?|\w*_quote|quote_\w*|shell_?quote)$")
#: Attributes that are shell text by construction, not values.
SHELL_TEXT_ATTRIBUTES = {
    "outdir",  # submit.Jobs.outdir: run.quoted(RUNS_DIR/%s, run id); must stay unquoted text to expand $HOME
}
#: (file, function) -> why an interpolated value there is not a hole. Keep it short; each entry says why.
ALLOWED = {
    # srun's options and command are shell text by the method's contract (callers pass `-N1 -w node`, a wrapped
    # script); the values it adds itself (job name, partition) go through quoted()
    ("pytest_slurmflox/cluster/submit.py", "Jobs.srun"): "args and command are shell text by contract",
    ("suites/test_t10_isolation.py", "_admin_srun.srun"): "Jobs.srun's contract, as root",
    # the steps are built by association_steps, each with quoted(), and unit-tested as text there (test_local.py)
    ("pytest_slurmflox/substrates/local/accounting.py", "_run_steps"): "each step comes from quoted()",
}
_CONSTANT_NAME = re.compile(r"^_?[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True)
class Finding:
    """One ``.run`` that interpolates a value no quoting helper saw."""

    file: str
    line: int
    function: str
    values: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}: unquoted {', '.join(self.values)}"


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _is_join(node: ast.expr) -> bool:
    """``"<constant separator>".join(one iterable)``: command text made of parts."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and isinstance(node.func.value, ast.Constant)
        and len(node.args) == 1
    )


class _Checker(ast.NodeVisitor):
    """Walks one module, keeping the enclosing function (for its local assignments and the allow-list)."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.stack: list[ast.AST] = []
        self.names: list[str] = []
        self.findings: list[Finding] = []

    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.stack.append(node)
        self.names.append(node.name)
        self.generic_visit(node)
        self.names.pop()
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in COMMAND_METHODS and node.args:
            bad = self._command(node.args[0], set())
            if bad:
                function = ".".join(self.names) or "<module>"
                self.findings.append(Finding(self.file, node.lineno, function, tuple(ast.unparse(v) for v in bad)))
        self.generic_visit(node)

    def _assigned(self, name: str) -> list[ast.expr]:
        """What ``name`` is assigned in the enclosing function (all of its assignments)."""
        scope = next((s for s in reversed(self.stack) if not isinstance(s, ast.ClassDef)), None)
        if scope is None:
            return []
        values = []
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                values.append(node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                values.extend([node.value] if node.value is not None else [])
        return values

    def _command(self, expr: ast.expr, seen: set[str]) -> list[ast.expr]:
        """The interpolated values in command text ``expr`` that are not safe."""
        if isinstance(expr, ast.JoinedStr):
            parts = [v.value for v in expr.values if isinstance(v, ast.FormattedValue)]
            return [v for v in parts if not self._safe(v, seen)]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            return [bad for side in (expr.left, expr.right) for bad in self._operand(side, seen)]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
            values = expr.right.elts if isinstance(expr.right, ast.Tuple) else [expr.right]
            return [v for v in values if not self._safe(v, seen)]
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "format":
            values = [*expr.args, *(k.value for k in expr.keywords)]
            return [v for v in values if not self._safe(v, seen)]
        if isinstance(expr, ast.Call) and _call_name(expr) in TEMPLATES and expr.args:
            return self._command(expr.args[0], seen)  # the template itself must not smuggle a value in
        if _is_join(expr):
            return self._joined(expr.args[0], seen)
        if isinstance(expr, ast.IfExp):
            return self._command(expr.body, seen) + self._command(expr.orelse, seen)
        if isinstance(expr, ast.Name) and expr.id not in seen:
            # a command text built earlier in the same function is checked as if written in place
            return [bad for value in self._assigned(expr.id) for bad in self._command(value, seen | {expr.id})]
        return []  # a parameter or a helper's result: checked where that text is built

    def _joined(self, parts: ast.expr, seen: set[str]) -> list[ast.expr]:
        """``"sep".join(parts)`` as command text: each part of a comprehension is more command text (or a value
        that must be safe); any other iterable (a list of job ids) is a value no quoting helper saw."""
        if isinstance(parts, ast.GeneratorExp | ast.ListComp):
            return self._operand(parts.elt, seen)
        if isinstance(parts, ast.Name) and parts.id not in seen and self._assigned(parts.id):
            # a list of command texts built in this function: every element and every append must be safe
            inner = seen | {parts.id}
            return [bad for item in self._items(parts.id) for bad in self._operand(item, inner)]
        return [parts]

    def _items(self, name: str) -> list[ast.expr]:
        """The elements list ``name`` gets in the enclosing function: literal elements, ``.append``/``.extend``
        arguments (an extend's argument as one item, unless it is a literal list); anything else is one item."""
        scope = next(s for s in reversed(self.stack) if not isinstance(s, ast.ClassDef))
        items: list[ast.expr] = []
        for value in self._assigned(name):
            items.extend(value.elts if isinstance(value, ast.List | ast.Tuple) else [value])
        for node in ast.walk(scope):
            func = node.func if isinstance(node, ast.Call) else None
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == name:
                for arg in node.args if func.attr in ("append", "extend") else []:
                    literal = func.attr == "extend" and isinstance(arg, ast.List | ast.Tuple)
                    items.extend(arg.elts if literal else [arg])
        return items

    def _operand(self, side: ast.expr, seen: set[str]) -> list[ast.expr]:
        """One side of ``+``: more command text, or a value that must be safe."""
        if isinstance(side, ast.Constant | ast.JoinedStr | ast.BinOp):
            return self._command(side, seen)
        return [] if self._safe(side, seen) else [side]

    def _safe(self, value: ast.expr, seen: set[str]) -> bool:
        """A value that may stand in command text: a constant, a quoting helper's output, known shell text."""
        if isinstance(value, ast.Constant):
            return True
        if isinstance(value, ast.Name):
            if _CONSTANT_NAME.match(value.id):
                return True
            assigned = self._assigned(value.id) if value.id not in seen else []
            return bool(assigned) and all(self._safe(a, seen | {value.id}) for a in assigned)
        if isinstance(value, ast.Attribute):
            return bool(_CONSTANT_NAME.match(value.attr)) or value.attr in SHELL_TEXT_ATTRIBUTES
        if isinstance(value, ast.Call) and _call_name(value) in TEMPLATES:
            return not (value.args and self._command(value.args[0], seen))
        if _is_join(value):
            return not self._command(value, seen)
        if isinstance(value, ast.JoinedStr | ast.BinOp):
            return not self._command(value, seen)
        return False


def unquoted_values(source: str, file: str = "<snippet>") -> list[Finding]:
    """Every ``.run`` in ``source`` that interpolates a value no quoting helper saw."""
    checker = _Checker(file)
    checker.visit(ast.parse(source))
    return checker.findings


def _findings() -> list[Finding]:
    out = []
    for base in SCANNED:
        for path in sorted(base.rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            out += [f for f in unquoted_values(path.read_text(), rel) if (f.file, f.function) not in ALLOWED]
    return out


def test_no_value_reaches_a_remote_shell_unquoted():
    offenders = [str(f) for f in _findings()]
    assert not offenders, "interpolate with run.quoted() or pass runner args:\n" + "\n".join(offenders)


def test_the_allow_list_names_real_places():
    """An allow-list entry whose function no longer interpolates anything is stale and must go."""
    for file, function in ALLOWED:
        found = unquoted_values((ROOT / file).read_text(), file)
        assert any(f.function == function for f in found), f"{file} {function}: nothing to allow any more"


# ----------------------------------------------------------------------------------------- one way to quote
def other_quoting(source: str, file: str) -> list[str]:
    """Every place in ``source`` that quotes for a shell some other way than run.py's ``quoted``: a call or an
    import of ``shlex.quote``/``shlex.join``/``pipes.quote``, a function named like a quoting helper, or one that
    escapes single quotes by hand (``.replace("'", ...)``). In run.py, ``quoted`` itself is the exception."""
    found: list[str] = []

    def visit(node: ast.AST, function: str) -> None:
        where = f"{file}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if (file, node.name) == QUOTING_HOME:
                return
            if _QUOTER_NAME.match(node.name):
                found.append(f"{where} a quoting helper of its own: def {node.name}")
            function = node.name
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in OTHER_QUOTERS
        ):
            found.append(f"{where} {node.value.id}.{node.attr} in {function or '<module>'}")
        if isinstance(node, ast.ImportFrom) and node.module in {m for m, _ in OTHER_QUOTERS}:
            names = [a.name for a in node.names if (node.module, a.name) in OTHER_QUOTERS]
            found.extend(f"{where} from {node.module} import {name}" for name in names)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "replace"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "'"
        ):
            found.append(f"{where} single quotes escaped by hand in {function or '<module>'}")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "")
    return found


def other_quoting_under(root: Path, bases: tuple[str, ...] = ("pytest_slurmflox", "suites")) -> list[str]:
    """:func:`other_quoting` over every module under ``root``'s ``bases``."""
    out: list[str] = []
    for base in bases:
        for path in sorted((root / base).rglob("*.py")):
            out += other_quoting(path.read_text(), str(path.relative_to(root)))
    return out


def test_run_quoted_is_the_only_quoting_helper():
    offenders = other_quoting_under(ROOT)
    assert not offenders, "quote with pytest_slurmflox.base.run.quoted / command_line:\n" + "\n".join(offenders)


def test_the_quoting_scan_fails_on_a_planted_module(tmp_path: Path):
    """The scan above, on a copy of the tree with one planted module per way around ``quoted``."""
    for base in ("pytest_slurmflox/base", "suites"):
        (tmp_path / base).mkdir(parents=True)
    (tmp_path / "pytest_slurmflox/base/run.py").write_text((ROOT / "pytest_slurmflox/base/run.py").read_text())
    assert other_quoting_under(tmp_path) == []  # run.py's own quoted() is the exception
    (tmp_path / "pytest_slurmflox/planted.py").write_text(
        "import shlex\nfrom shlex import join\n\n"
        "def cat(path):\n    return 'cat ' + shlex.quote(path)\n\n"
        'def _shq(text):\n    return "\'" + text.replace("\'", "\'\\\\\'\'") + "\'"\n'
    )
    (tmp_path / "suites/_planted.py").write_text("def _q(text):\n    return text\n")
    assert other_quoting_under(tmp_path) == [
        "pytest_slurmflox/planted.py:2 from shlex import join",
        "pytest_slurmflox/planted.py:5 shlex.quote in cat",
        "pytest_slurmflox/planted.py:7 a quoting helper of its own: def _shq",
        "pytest_slurmflox/planted.py:8 single quotes escaped by hand in _shq",
        "suites/_planted.py:1 a quoting helper of its own: def _q",
    ]


def _quoted_calls() -> list[tuple[str, int, str, int]]:
    """(file, line, template, number of values) of each ``quoted("<constant>", ...)`` in the package and suites."""
    calls = []
    for base in SCANNED:
        for path in sorted(base.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and _call_name(node) == "quoted" and node.args:
                    first = node.args[0]
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        rel = str(path.relative_to(ROOT))
                        calls.append((rel, node.lineno, first.value, len(node.args) - 1))
    return calls


def test_every_quoted_template_formats_with_its_values():
    """``quoted`` formats its template with ``%``: each call has one ``%s`` per value and a literal ``%`` doubled,
    so the text that reaches the shell is the template's, each ``%%`` one ``%``."""
    calls = _quoted_calls()
    assert len(calls) > 40  # the scan sees the callers
    bad = []
    for file, line, template, count in calls:
        slots = re.findall(r"%%|%s|%", template)
        if "%" in slots or slots.count("%s") != count:
            bad.append(f"{file}:{line} {template!r} with {count} values: {slots.count('%s')} %s, a lone % or not")
        else:
            assert template % (("v",) * count) == template.replace("%%", "\0").replace("%s", "v").replace("\0", "%")
    assert not bad, "\n".join(bad)


# ----------------------------------------------------------------------------------------- the checker itself
def test_the_checker_finds_a_value_in_an_fstring():
    bad = 'def f(runner, partition):\n    runner.run(f"scontrol show partition {partition}")\n'
    assert [(f.function, f.values) for f in unquoted_values(bad)] == [("f", ("partition",))]


def test_the_checker_finds_percent_format_concatenation_and_a_line_built_earlier():
    bad = (
        "def f(sh, job, group, path):\n"
        '    sh.run("scancel %s" % job)\n'
        '    sh.run("chgrp {} x".format(group))\n'
        '    sh.run("cat " + path)\n'
        '    line = f"rm -rf {path}"\n'
        "    sh.run(line)\n"
        '    sh.run(quoted(f"ls {path} %s", job))\n'
    )
    assert [f.values for f in unquoted_values(bad)] == [("job",), ("group",), ("path",), ("path",), ("path",)]


def test_the_checker_accepts_constants_quoted_values_and_runner_args():
    good = (
        "def f(sh, job, node):\n"
        "    sh.run(f\"scontrol show {KIND} {quoted('%s', job)}\")\n"
        '    sh.run(quoted("scancel %s", job))\n'
        '    sh.run("id -u", node)\n'
        '    sh.run(f"mkdir -p {submit.outdir}")\n'
        '    prefix = quoted("cd %s &&", node)\n'
        '    sh.run(f"{prefix} ls")\n'
        '    sh.run(command_line(f"kubectl --kubeconfig {KUBECONFIG}", [node]))\n'
    )
    assert unquoted_values(good) == []


def test_the_checker_reads_joined_command_text():
    bad = (
        "def f(sh, jobs, outdir):\n"
        '    sh.run(" ; ".join(f"cat {outdir}/{job}.out" for job in jobs))\n'
        '    sh.run("scancel " + " ".join(jobs))\n'
        "    steps = []\n"
        '    steps.append(f"sacctmgr add user {outdir}")\n'
        '    sh.run(" && ".join(steps))\n'
    )
    assert [f.values for f in unquoted_values(bad)] == [("outdir", "job"), ("' '.join(jobs)",), ("outdir",)]
    good = (
        "def f(sh, jobs, outdir):\n"
        '    sh.run(" ; ".join(quoted("cat %s/%s.out", outdir, job) for job in jobs))\n'
        '    sh.run("scancel " + " ".join(quoted("%s", job) for job in jobs))\n'
        '    steps = [quoted("mkdir -p %s", outdir)]\n'
        '    steps.append(quoted("sacctmgr add user %s", outdir))\n'
        '    sh.run(" && ".join(steps))\n'
    )
    assert unquoted_values(good) == []
