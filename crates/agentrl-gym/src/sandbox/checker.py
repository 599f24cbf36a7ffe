# agentrl trusted checker: the hidden cases' checks, where no candidate code has ever run.
#
# Appended to worker.py (for its Landlock, socket filter and framing helpers) and started by
# Rust as `check_serve(config)`: one long-lived process, confined like a fork server (empty
# network namespace, socket filter, Landlock read-only, an unprivileged uid where we are root)
# that never imports a workspace file and never receives code under test. It answers two
# requests, one frame each (the wire format of worker.py, with no blobs):
#
#   {"op": "split", "expr": str, "setup": str}
#     -> {"parts": [str], "skeleton": str | null, "sandbox_check": str | null}
#   A hidden case's expression, cut into the calls under test (`parts`: the largest
#   subexpressions that name anything of the task's modules or setup; they run in the
#   sandbox) and the `skeleton` that combines their values (comparisons, arithmetic, `abs`,
#   `round`, `len`, `math.isclose`, literals...; `_part(i)` stands for part i), which runs here.
#   `abs(f(x) - 2.5) < 1e-6` becomes the part `f(x)` and the skeleton
#   `abs(_part(0) - 2.5) < 1e-6`. No skeleton: the expression is one call under test, whose
#   value is the case's value. `sandbox_check`: why a part still computes a verdict inside the
#   sandbox (a comparison inside a comprehension or a call that has to run there), or null.
#
#   {"op": "eval", "skeleton": str | null, "check": str | null, "parts": [outcome]}
#     -> {"value": plain} | {"raises": name, "lookalike": bool}
#   The skeleton over the parts' outcomes (each {"value": plain} or {"raises": name,
#   "lookalike": bool}, decoded to exact builtin types), then `check` over its value as
#   `result`; the outcome is encoded as the sandbox encodes values (verdict_tree.py, `plain`).

_TRUSTED_NAMES = frozenset((
    "abs", "all", "any", "bool", "dict", "divmod", "enumerate", "float", "frozenset", "int",
    "isinstance", "len", "list", "max", "min", "pow", "range", "repr", "reversed", "round",
    "set", "sorted", "str", "sum", "tuple", "type", "zip", "True", "False", "None", "math",
    "bytes", "chr", "ord", "hash", "map", "filter", "ValueError", "TypeError", "KeyError",
    "IndexError", "ZeroDivisionError", "ArithmeticError", "Exception",
))

# Calls that combine values and may stand in the skeleton (everything else is a call under
# test). `math.f` is the trusted math module here, whatever the task's modules bind to `math`.
_TRUSTED_CALLS = frozenset((
    "abs", "all", "any", "bool", "dict", "divmod", "float", "frozenset", "int", "isinstance",
    "len", "list", "max", "min", "pow", "repr", "reversed", "round", "set", "sorted", "str",
    "sum", "tuple", "type", "bytes", "chr", "ord", "zip", "enumerate", "range",
))
_TRUSTED_MATH = frozenset((
    "isclose", "sqrt", "fabs", "floor", "ceil", "isnan", "isinf", "isfinite", "log", "log2",
    "log10", "exp", "fsum", "prod", "pi", "e", "inf", "nan", "tau", "trunc", "copysign", "hypot",
))


def _assigned(setup):
    """Names the setup binds: they are the sandbox's, whatever their spelling."""
    import ast

    try:
        tree = ast.parse(setup, mode="exec")
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
    return names


_VERDICT_NODES = None


def split(expr, setup):
    import ast
    import copy

    global _VERDICT_NODES
    if _VERDICT_NODES is None:
        _VERDICT_NODES = (ast.Compare, ast.BoolOp)
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return {"parts": [expr], "skeleton": None, "sandbox_check": None}
    bound = _assigned(setup)
    trusted = _TRUSTED_NAMES - bound

    def trusted_callee(func):
        if isinstance(func, ast.Name):
            return func.id in _TRUSTED_CALLS and func.id in trusted
        return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == "math" and "math" in trusted and func.attr in _TRUSTED_MATH)

    parts = []
    sandbox_checks = []

    class _Bound(Exception):
        """A subexpression that needs the sandbox names a comprehension's own variable: the
        comprehension has to run in the sandbox whole."""

    def names_in(node):
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    def lift(node, local):
        if names_in(node) & local:
            raise _Bound()
        source = ast.unparse(node)
        if any(isinstance(n, _VERDICT_NODES) or (isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not))
               for n in ast.walk(node)):
            sandbox_checks.append(source)
        parts.append(source)
        return ast.Call(ast.Name("_part", ast.Load()), [ast.Constant(len(parts) - 1)], [])

    combining = (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.IfExp, ast.Tuple,
                 ast.List, ast.Set, ast.Dict, ast.keyword)
    comprehensions = (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)

    def visit(node, local):
        if not any(isinstance(n, ast.Name) and n.id not in trusted and n.id not in local
                   for n in ast.walk(node)):
            return node
        if isinstance(node, combining):
            return rebuild(node, local)
        if isinstance(node, ast.Call) and trusted_callee(node.func) and not any(
                isinstance(a, ast.Starred) for a in node.args) and all(k.arg for k in node.keywords):
            return rebuild(node, local)
        if isinstance(node, ast.Subscript):
            return rebuild(node, local)
        if isinstance(node, comprehensions):
            inner = set(local)
            for generator in node.generators:
                inner |= {n.id for n in ast.walk(generator.target) if isinstance(n, ast.Name)}
            saved = len(parts), len(sandbox_checks)
            original, node = node, copy.deepcopy(node)
            try:
                for generator in node.generators:
                    generator.iter = visit(generator.iter, local)
                    generator.ifs = [visit(c, inner) for c in generator.ifs]
                for field in ("elt", "key", "value"):
                    if hasattr(node, field):
                        setattr(node, field, visit(getattr(node, field), inner))
                return node
            except _Bound:
                del parts[saved[0]:]
                del sandbox_checks[saved[1]:]
                return lift(original, local)
        return lift(node, local)

    def rebuild(node, local):
        for field, value in ast.iter_fields(node):
            if field == "func":
                continue
            if isinstance(value, ast.expr):
                setattr(node, field, visit(value, local))
            elif isinstance(value, list):
                setattr(node, field, [visit(v, local) if isinstance(v, (ast.expr, ast.keyword)) else v
                                      for v in value])
        return node

    try:
        body = visit(tree.body, frozenset())
    except _Bound:
        return {"parts": [expr], "skeleton": None, "sandbox_check": expr}
    if len(parts) == 1 and isinstance(body, ast.Call) and isinstance(body.func, ast.Name) \
            and body.func.id == "_part":
        return {"parts": parts, "skeleton": None,
                "sandbox_check": sandbox_checks[0] if sandbox_checks else None}
    if not parts:
        # Nothing of the task's: the whole expression is trusted, but it still runs as a part
        # so that a case always has a call under test (and the value comes from one place).
        return {"parts": [expr], "skeleton": None, "sandbox_check": None}
    return {"parts": parts, "skeleton": ast.unparse(ast.fix_missing_locations(body)),
            "sandbox_check": sandbox_checks[0] if sandbox_checks else None}


class _Forged(Exception):
    """Stands for an exception of a class that only exists in the sandbox."""


_FORGED_CLASSES = {}


def _exception(name, lookalike):
    import builtins

    real = getattr(builtins, name, None)
    if not lookalike and isinstance(real, type) and issubclass(real, BaseException):
        return real()
    cls = _FORGED_CLASSES.get(name)
    if cls is None:
        cls = type(name, (_Forged,), {})
        _FORGED_CLASSES[name] = cls
    return cls()


class _Opaque:
    """An object the sandbox could only name (type and repr): it equals nothing."""

    def __init__(self, type_name, text):
        self.type_name, self.text = type_name, text

    def __repr__(self):
        return self.text if self.text is not None else "<%s>" % self.type_name


def decode(wire, depth=0):
    if depth > 100:
        raise ValueError("value nested too deeply")
    if wire is None or isinstance(wire, (bool, str)):
        return wire
    if not isinstance(wire, dict) or not wire:
        raise ValueError("not a plain-data encoding")
    tag, body = next(iter(wire.items()))
    if tag == "int":
        return int(body)
    if tag == "float":
        return float(body)
    if tag == "bytes":
        return bytes.fromhex(body)
    if tag in ("list", "tuple", "set", "frozenset"):
        items = [decode(x, depth + 1) for x in body]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict":
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in body}
    if tag == "other":
        return _Opaque(body, wire.get("repr"))
    raise ValueError("unknown tag %r" % tag)


def encode(v, depth=0):
    if depth > 100:
        raise ValueError("value nested more than 100 levels deep")
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return {"int": str(v)}
    if t is float:
        return {"float": repr(v)}
    if t is bytes:
        return {"bytes": v.hex()}
    if t in (list, tuple, set, frozenset):
        return {t.__name__: [encode(x, depth + 1) for x in v]}
    if t is dict:
        return {"dict": [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in v.items()]}
    if t is _Opaque:
        return {"other": v.type_name, "repr": v.text}
    return {"other": "%s.%s" % (t.__module__, t.__qualname__), "repr": repr(v)}


def evaluate(skeleton, check, parts):
    import builtins
    import math

    def _part(i):
        outcome = parts[i]
        if "raises" in outcome:
            raise _exception(outcome["raises"], outcome.get("lookalike", False))
        return decode(outcome["value"])

    namespace = {"__builtins__": dict(vars(builtins)), "math": math, "_part": _part}
    try:
        value = eval(compile(skeleton or "_part(0)", "<check>", "eval"), namespace)
        if check is not None:
            namespace["result"] = value
            value = eval(compile(check, "<check>", "eval"), namespace)
        return {"value": encode(value)}
    except BaseException as exc:
        return {"raises": type(exc).__name__,
                "lookalike": isinstance(exc, _Forged) and hasattr(builtins, type(exc).__name__)}


def check_serve(config_json):
    import json
    import resource
    import struct

    globals()["json"], globals()["struct"] = json, struct
    _load_libc()
    config = json.loads(config_json)
    os.environ.clear()
    os.environ.update(config["env"])
    while "" in sys.path:
        sys.path.remove("")
    import ast  # noqa: F401  (before Landlock: everything the checker needs is loaded now)
    import builtins  # noqa: F401
    import math  # noqa: F401

    if config.get("landlock_abi", 0) > 0:
        landlock = Landlock(config["landlock_abi"], config["read_only_paths"], config["read_write_files"])
        restrict_self(landlock.ruleset_static())
    if config.get("socket_filter"):
        SocketFilter(config["socket_filter"]).apply()
    memory = config.get("address_space_bytes")
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    uid = config.get("uid")
    parent = os.getppid()
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    # After the uid change, which clears it: die with the process that started us (a checker
    # stuck in a check is killed from there, and must not outlive it).
    import signal

    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
    while True:
        frame = _read_frame(0)
        if frame is None:
            return
        request, _ = frame
        try:
            if request.get("op") == "split":
                reply = split(request["expr"], request.get("setup", ""))
            elif request.get("op") == "eval":
                reply = evaluate(request.get("skeleton"), request.get("check"), request["parts"])
            else:
                reply = {"error": "unknown op %r" % request.get("op")}
        except BaseException as exc:  # a bad request is answered, the checker keeps serving
            reply = {"error": "%s: %s" % (type(exc).__name__, str(exc)[:500])}
        _write_frame(1, reply, [])
