# agentrl verdict tree: every hidden case of one verdict, from one warm interpreter.
#
# Embedded after fork.py (its `raw_fork`, the fork helper the worker uses too). Runs as the
# program of ONE sandboxed job (every containment layer already applied by the
# executor). `_tree()` binds the helpers it needs and takes a copy of the pristine builtins
# before any code under test runs: in a fresh interpreter as `__main__`; on the pool, once in
# each fork server at its start (worker.py `_load_verdict_tree`, which also runs `warm_up` so
# the helpers' bytecode is specialised before any fork), and a job whose program is this very
# source calls the returned `main`. What a verdict then costs is mostly its forks (one job, one
# process per case) and the copy-on-write page faults after each: measured per case about 0.45
# ms for the fork and exit alone, the rest the pages the case and this parent touch, so the hot
# paths call as few Python functions as they can. `main` imports the task's modules once, then
# forks one child per hidden case from that warm interpreter. Each child is a case process: its
# own process group, its own CPU limit, its own wall-clock deadline (kept by this parent, which
# kills the child's whole group at it), a fresh namespace with a fresh copy of the pristine
# builtins, and its own result pipe; the workspace is put back as it was before the next case
# starts, so nothing one case writes reaches another. Module state a case changes dies with its
# process. Children run one at a time: a verdict's cases never share a process or overlap.
#
# What a child reports (on its own pipe, one JSON object per line), never a verdict: for each
# *part* of the case (the calls under test that the trusted checker split out of `expr`) the
# value as plain data by exact type, or the exception it raised; then `done`. A case whose
# check the trusted side computes (`unwrap`) reports a subclass of a plain type by the value
# its base type holds (`float.__repr__(v)`, never `v.__repr__`), so an overridden comparison
# or arithmetic never reaches the check. Neither the check nor any expected value is in this
# process: only when a part is an object of the task's own class, which the trusted side
# cannot rebuild, does the verifier run the case again with `in_sandbox` (the check to
# evaluate here over the real objects, reported as `fallback`), and `validate` warns that
# such a check can be forged.
#
# What this parent writes to fd 3, one JSON object per line: `import_error` (the modules failed
# to import: no case ran), then per case `{"case": i, "result": <the child's lines>,
# "truncated": bool, "elapsed_s": s}` with `code`, `signal` or `timed_out`, then `done`.
#
# Stdin: {"modules": [import names], "result_cap": bytes, "cases": [{"setup": str,
#         "parts": [str], "unwrap": bool, "in_sandbox": null | {"skeleton": str | null,
#         "check": str | null}, "time_limit_s": float, "cpu_s": int}]}
import sys

sys.dont_write_bytecode = True
import builtins, gc, importlib, json, math, os, resource, select, signal, time


def _tree(type=type, repr=repr, str=str, len=len, dict=dict, list=list, tuple=tuple, set=set,
         frozenset=frozenset, int=int, float=float, bool=bool, bytes=bytes, compile=compile,
         exec=exec, eval=eval, BaseException=BaseException, getattr=getattr, enumerate=enumerate,
         isinstance=isinstance, bytearray=bytearray, memoryview=memoryview, sorted=sorted):
    pristine = dict(vars(builtins))
    open_file = pristine["open"]
    dumps, loads = json.dumps, json.loads
    write, read, close, pipe, _exit = os.write, os.read, os.close, os.pipe, os._exit
    fork = raw_fork()
    waitpid, kill, killpg, setpgid, pidfd_open = os.waitpid, os.kill, os.killpg, os.setpgid, os.pidfd_open
    wifsignaled, wtermsig, wexitstatus = os.WIFSIGNALED, os.WTERMSIG, os.WEXITSTATUS
    scandir, lstat, unlink, rmdir, makedirs, chmod = os.scandir, os.lstat, os.unlink, os.rmdir, os.makedirs, os.chmod
    path_join, path_dirname = os.path.join, os.path.dirname
    open_fd, O_WRONLY, O_CREAT, O_TRUNC, O_NOFOLLOW = os.open, os.O_WRONLY, os.O_CREAT, os.O_TRUNC, os.O_NOFOLLOW
    poll, POLLIN = select.poll, select.POLLIN
    monotonic = time.monotonic
    gc_collect, gc_freeze = gc.collect, gc.freeze
    setrlimit, RLIMIT_CPU = resource.setrlimit, resource.RLIMIT_CPU
    SIGKILL = signal.SIGKILL
    import_module = importlib.import_module
    modules_table = sys.modules
    trusted_math = math
    # json.dumps's own encoder, made once: each dumps call builds one through two Python-level
    # functions of the json package, and every function a case process calls is pages it
    # copies (measured: about 50 fewer page faults per case). Same output as json.dumps.
    make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if make_encoder is not None:
        encode_chunks = make_encoder(None, json.JSONEncoder().default,
                                     json.encoder.encode_basestring_ascii, None, ": ", ", ",
                                     False, False, True)
        join = "".join

        def encode(record):
            return join(encode_chunks(record, 0))
    else:
        encode = dumps

    def emit(fd, record):
        view = memoryview((encode(record) + "\n").encode())
        while view:
            view = view[write(fd, view):]

    issubclass = builtins.issubclass
    dict_items = dict.items
    base_iter = {list: list.__iter__, tuple: tuple.__iter__, set: set.__iter__, frozenset: frozenset.__iter__}

    def plain(v, depth, unwrap=False):
        # Exact types only: a subclass (or any object) could lie through __eq__ or __repr__.
        # With `unwrap`, a subclass of a plain type is read through its base type's own methods
        # (the value it really holds), which no subclass can override.
        if depth > 100:
            raise ValueError("value nested more than 100 levels deep")
        t = type(v)
        if v is None:
            return None
        if t is bool or t is str:
            return v
        if t is int:
            return {"int": str(v)}
        if t is float:
            return {"float": repr(v)}
        if t is bytes:
            return {"bytes": v.hex()}
        if t is list or t is tuple or t is set or t is frozenset:
            return {t.__name__: [plain(x, depth + 1, unwrap) for x in v]}
        if t is dict:
            return {"dict": [[plain(k, depth + 1, unwrap), plain(x, depth + 1, unwrap)] for k, x in v.items()]}
        if unwrap:
            try:
                if issubclass(t, float):
                    return {"float": float.__repr__(v)}
                if issubclass(t, int):
                    return {"int": int.__repr__(v)}
                if issubclass(t, str):
                    return str.__str__(v)
                if issubclass(t, bytes):
                    return {"bytes": bytes.hex(v)}
                if issubclass(t, dict):
                    return {"dict": [[plain(k, depth + 1, unwrap), plain(x, depth + 1, unwrap)]
                                     for k, x in dict_items(v)]}
                for base in (list, tuple, set, frozenset):
                    if issubclass(t, base):
                        return {base.__name__: [plain(x, depth + 1, unwrap) for x in base_iter[base](v)]}
            except RecursionError:
                raise
            except BaseException:
                pass
        try:
            text = repr(v)
            text = text if type(text) is str else None
        except BaseException:
            text = None
        return {"other": "%s.%s" % (getattr(t, "__module__", "?"), getattr(t, "__qualname__", "?")),
                "repr": text}

    def raised(exc):
        t = type(exc)
        name = t.__name__
        return {"raises": name, "lookalike": name in pristine and pristine[name] is not t}

    # The workspace as it was after the import: put back before each case (files a case added
    # removed, changed or deleted ones rewritten with their bytes and mode).
    def snapshot():
        files, dirs, pending, total = {}, set(), ["."], 0
        while pending:
            folder = pending.pop()
            with scandir(folder) as entries:
                for entry in entries:
                    rel = path_join(folder, entry.name)
                    if entry.is_dir(follow_symlinks=False):
                        dirs.add(rel)
                        pending.append(rel)
                        continue
                    info = entry.stat(follow_symlinks=False)
                    data = None
                    if entry.is_file(follow_symlinks=False) and total + info.st_size <= (16 << 20):
                        with open_file(rel, "rb") as handle:
                            data = handle.read()
                        total += len(data)
                    files[rel] = (info.st_mode, info.st_size, info.st_mtime_ns, data)
        return files, dirs

    def restore(files, dirs):
        pending, extra_dirs = ["."], []
        while pending:
            folder = pending.pop()
            try:
                entries = list(scandir(folder))
            except OSError:
                continue
            for entry in entries:
                rel = path_join(folder, entry.name)
                if entry.is_dir(follow_symlinks=False):
                    pending.append(rel)
                    if rel not in dirs:
                        extra_dirs.append(rel)
                    continue
                kept = files.get(rel)
                if kept is None:
                    try:
                        unlink(rel)
                    except OSError:
                        pass
                    continue
                try:
                    info = lstat(rel)
                except OSError:
                    continue
                if (info.st_mode, info.st_size, info.st_mtime_ns) != kept[:3] and kept[3] is not None:
                    rewrite(rel, kept)
        for rel in sorted(extra_dirs, key=len, reverse=True):
            try:
                rmdir(rel)
            except OSError:
                pass
        for rel, kept in files.items():
            if kept[3] is not None:
                try:
                    lstat(rel)
                except OSError:
                    rewrite(rel, kept)

    def rewrite(rel, kept):
        try:
            try:
                unlink(rel)
            except OSError:
                pass
            makedirs(path_dirname(rel) or ".", exist_ok=True)
            fd = open_fd(rel, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0o600)
            try:
                view = memoryview(kept[3])
                while view:
                    view = view[write(fd, view):]
            finally:
                close(fd)
            chmod(rel, kept[0] & 0o7777)
        except OSError:
            pass

    def compiled(case):
        # Compiled here, once, before the fork: a case process only runs code.
        def code(source, mode):
            try:
                return compile(source, "<setup>" if mode == "exec" else "<expr>", mode)
            except BaseException as exc:
                return exc

        return code(case["setup"], "exec"), [code(p, "eval") for p in case["parts"]]

    def run_case(case, setup, parts, out, ns):
        # `ns` is this process's own copy (the fork's): what the case does to it dies with the
        # process.
        try:
            if isinstance(setup, BaseException):
                raise setup
            exec(setup, ns)
        except BaseException as exc:
            emit(out, raised(exc))
            emit(out, {"done": True})
            return
        objects = []
        unwrap = case["unwrap"]
        for index, code in enumerate(parts):
            try:
                if isinstance(code, BaseException):
                    raise code
                value = eval(code, ns)
            except BaseException as exc:
                objects.append((False, exc))
                record = raised(exc)
            else:
                objects.append((True, value))
                try:
                    record = {"value": plain(value, 0, unwrap)}
                except BaseException as exc:
                    record = {"unencodable": "%s: %s" % (type(exc).__name__, str(exc)[:200])}
            record["part"] = index
            emit(out, record)
        check = case["in_sandbox"]
        if check is not None:

            def _part(i):
                ok, obj = objects[i]
                if not ok:
                    raise obj
                return obj

            check_ns = {"__builtins__": dict(pristine), "math": trusted_math, "_part": _part}
            try:
                value = eval(compile(check["skeleton"] or "_part(0)", "<check>", "eval"), check_ns)
                if check["check"] is not None:
                    check_ns["result"] = value
                    value = eval(compile(check["check"], "<check>", "eval"), check_ns)
                record = {"fallback": plain(value, 0)}
            except BaseException as exc:
                record = raised(exc)
                record = {"fallback_raises": record["raises"], "lookalike": record["lookalike"]}
            emit(out, record)
        emit(out, {"done": True})

    def warm_up():
        # Runs this harness's own code paths on nothing of a task's, into /dev/null. CPython
        # specialises bytecode in place as it runs, and every code object a case process would
        # specialise is a page it would copy: the fork server calls this once, so every job it
        # forks starts with the harness's code already specialised (in a job of its own this
        # costs more than it saves).
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            warm_case = {"unwrap": True, "in_sandbox": None}
            warm_codes = compile("pass", "<setup>", "exec"), [compile("None", "<expr>", "eval")]
            warm_ns = {"__builtins__": dict(pristine)}
            for _ in range(64):
                emit(devnull, {"value": plain([1, 2.5, "x", (None, True), {"k": b"v"}], 0), "part": 0})
                emit(devnull, raised(ValueError()))
                run_case(warm_case, warm_codes[0], warm_codes[1], devnull, warm_ns)
        finally:
            close(devnull)

    def main():
        spec = loads(sys.stdin.read())
        result_cap = spec.get("result_cap", 4 << 20)
        if hasattr(sys, "set_int_max_str_digits"):
            sys.set_int_max_str_digits(0)
        namespace = {}
        try:
            for name in spec["modules"]:
                module = import_module(name)
                for key, value in list(vars(module).items()):
                    if key.startswith("__") and key.endswith("__"):
                        continue
                    if key in pristine:
                        continue
                    namespace[key] = value
            for name in spec["modules"]:
                top = name.split(".")[0]
                if top not in pristine:
                    namespace.setdefault(top, modules_table[top])
        except BaseException as exc:
            emit(3, {"import_error": "%s: %s" % (type(exc).__name__, str(exc)[:500])})
            return

        files, dirs = snapshot()
        codes = [compiled(case) for case in spec["cases"]]
        case_namespace = dict(namespace)
        case_namespace["__builtins__"] = dict(pristine)
        # Objects that exist now are never collected by a case: keep the collector off their pages
        # (each page it touched would be copied for every case process).
        gc_collect()
        gc_freeze()
        poller = poll()
        for index, case in enumerate(spec["cases"]):
            if index:
                restore(files, dirs)
            setup, parts = codes[index]
            readable, writable = pipe()
            start = monotonic()
            pid = fork()
            if pid == 0:
                try:
                    close(readable)
                    setpgid(0, 0)
                    cpu = case["cpu_s"]
                    setrlimit(RLIMIT_CPU, (cpu, cpu + 1))
                    run_case(case, setup, parts, writable, case_namespace)
                    for stream in (sys.stdout, sys.stderr):
                        try:
                            stream.flush()
                        except BaseException:
                            pass
                finally:
                    _exit(0)
            close(writable)
            exited = pidfd_open(pid)
            poller.register(readable, POLLIN)
            poller.register(exited, POLLIN)
            data, seen, truncated = bytearray(), 0, False
            reading, status, timed_out = True, None, False
            deadline = start + case["time_limit_s"]
            while reading or status is None:
                remaining = deadline - monotonic()
                if remaining <= 0:
                    timed_out = status is None
                    break
                for fd, _ in poller.poll(remaining * 1000.0):
                    if fd == exited and status is None:
                        poller.unregister(exited)
                        _, status = waitpid(pid, 0)
                        try:
                            killpg(pid, SIGKILL)  # what the case started dies with it
                        except OSError:
                            pass
                    elif fd == readable and reading:
                        chunk = read(readable, 1 << 16)
                        if not chunk:
                            reading = False
                            poller.unregister(readable)
                            continue
                        seen += len(chunk)
                        room = result_cap - len(data)
                        if room > 0:
                            data += chunk[:room]
                        if seen > result_cap:
                            truncated = True
                        if seen > 4 * result_cap:
                            # A flood: stop it now rather than wait for its deadline.
                            reading = False
                            poller.unregister(readable)
                            for stop in (killpg, kill):
                                try:
                                    stop(pid, SIGKILL)
                                except OSError:
                                    pass
            # Only what is still registered (an exception per case costs its process pages).
            if reading:
                poller.unregister(readable)
            if status is None:
                poller.unregister(exited)
            if status is None:
                for stop in (killpg, kill):
                    try:
                        stop(pid, SIGKILL)
                    except OSError:
                        pass
                _, status = waitpid(pid, 0)
            close(exited)
            close(readable)
            record = {"case": index, "result": bytes(data).decode("utf-8", "replace"),
                      "truncated": truncated, "elapsed_s": monotonic() - start}
            if timed_out:
                record["timed_out"] = True
            elif wifsignaled(status):
                record["signal"] = wtermsig(status)
            else:
                record["code"] = wexitstatus(status)
            emit(3, record)
        emit(3, {"done": True})

    return main, warm_up


if __name__ == "__main__":
    # A fresh interpreter: bind, then run (the fork server binds once and runs `main` per job).
    _tree()[0]()
