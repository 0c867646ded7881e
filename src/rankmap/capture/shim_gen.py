"""Generate the PMPI shim's entry points from the one specification, ``native/mpi/calls.spec``.

Every routine the shim intercepts is declared there once, by its C prototype and the accounting it
needs (statements run before and after the library's call). From it this module writes, at build
time, for the MPI that the shim is being built with:

* ``rm_gen.h``: the operation table (one operation per entry and variant, in spec order) and
  which optional routines the MPI has;
* ``wrap_c.c``: the C entry points ``MPI_X`` forwarding to ``PMPI_X``, plus the MPI-4 large-count
  ``MPI_X_c`` forms counted as ``MPI_X``;
* ``wrap_f.c``: the Fortran entry points of ``mpif.h`` / ``use mpi`` (``mpi_x_`` and its other
  manglings) and of ``use mpi_f08`` (``mpi_x_f08_``: all of Open MPI's, MPICH's routines without a
  buffer; both call ``PMPI_`` directly). A Fortran wrapper converts the
  arguments the accounting reads into C views (handles through ``*_f2c``, the Fortran
  ``MPI_IN_PLACE`` / ``MPI_BOTTOM`` sentinels into the C ones, statuses after the call), runs the
  same accounting statements as the C wrapper, and forwards the untouched Fortran arguments to the
  library's own Fortran routine, so Fortran semantics stay the library's.

An entry point is generated only where the MPI's ``mpi.h`` declares its ``PMPI_`` routine (the
``declared`` set, read from the preprocessed header by :mod:`rankmap.capture.shim_build`), so one
spec serves MPI-3.1 and MPI-4 libraries alike. Nothing generated is kept in the repository: the
spec is the single source, and ``python -m rankmap.capture.shim_gen OUTDIR`` writes the files for
inspection.

Why generated and not macro-expanded C: the three families (C, Fortran, f08) and the large-count
forms differ in parameter passing, not in what is counted; writing each wrapper by hand (or by a
macro per shape) is how the Fortran side fell behind the C side. Here a new routine is one spec entry.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from rankmap.errors import RankmapError
from rankmap.native_sources import native_dir

ATTRS = {"pre", "post", "after", "err", "persist", "status_if", "variants", "families", "plain", "timing",
         "fast", "fast.post", "fast.after", "fast.ways", "fast.jump", "pre.f", "post.f", "after.f", "err.f"}
FAMILIES = ("c", "f", "f08")

# Handle types and their Fortran -> C conversion.
F2C = {"MPI_Datatype": "PMPI_Type_f2c", "MPI_Comm": "PMPI_Comm_f2c", "MPI_Win": "PMPI_Win_f2c",
       "MPI_Op": "PMPI_Op_f2c", "MPI_Info": "PMPI_Info_f2c", "MPI_Request": "PMPI_Request_f2c",
       "MPI_Message": "PMPI_Message_f2c", "MPI_Group": "PMPI_Group_f2c"}
C_ONLY = {("int", 1, "argc"), ("char", 3, "argv")}      # C's MPI_Init arguments have no Fortran twin


@dataclass(frozen=True)
class Param:
    """One C parameter: base type (``const int``), pointer depth, array (``[]``) and name."""
    base: str
    ptr: int
    array: bool
    name: str

    def decl(self) -> str:
        return f"{self.base} {'*' * self.ptr}{self.name}{'[]' if self.array else ''}"

    @property
    def key(self) -> str:
        """Type without qualifiers' spacing ambiguity: ``const int[]``, ``MPI_Status*``."""
        return f"{self.base}{'*' * self.ptr}{'[]' if self.array else ''}"


@dataclass
class Call:
    """One generated entry point (an entry of the spec, or one of its variants)."""
    name: str
    params: list[Param]
    attrs: dict[str, str]
    families: tuple[str, ...]
    op: str | None                 # operation it is counted under (None: init/finalize)
    plain: bool = False

    @property
    def pmpi(self) -> str:
        return "P" + self.name

    def code(self, key: str, fortran: bool) -> str:
        """The attribute ``key`` (pre/post/after) as the family sees it."""
        if fortran and f"{key}.f" in self.attrs:
            return self.attrs[f"{key}.f"]
        return self.attrs.get(key, "")


@dataclass
class Spec:
    calls: list[Call] = field(default_factory=list)

    @property
    def ops(self) -> list[str]:
        seen: list[str] = []
        for c in self.calls:
            if c.op and c.op not in seen:
                seen.append(c.op)
        return seen

    @property
    def start_ops(self) -> list[str]:
        """The operations whose calls only start a transfer (``timing: start``)."""
        return [op for op in self.ops if any(c.op == op and c.attrs.get("timing") == "start" for c in self.calls)]


# ---- parsing ---------------------------------------------------------------------------------------

def _parse_param(text: str, where: str) -> Param | None:
    t = " ".join(re.sub(r"\s*\[\s*\]", " []", text.replace("*", " * ")).split())
    if t == "void":
        return None
    m = re.fullmatch(r"((?:const )?[A-Za-z_][A-Za-z0-9_]*)((?: \*)*) ([A-Za-z_][A-Za-z0-9_]*)( \[\])?", t)
    if not m:
        raise RankmapError(f"{where}: cannot read parameter {text.strip()!r}")
    return Param(m.group(1), m.group(2).count("*"), bool(m.group(4)), m.group(3))


def _params(text: str, where: str) -> list[Param]:
    out = [_parse_param(p, where) for p in text.split(",")] if text.strip() else []
    return [p for p in out if p is not None]


def parse(text: str, source: str = "calls.spec") -> list[tuple[list[str], list[Param], dict[str, str], int]]:
    """Entries of the spec: (names, parameters, attributes, line number)."""
    entries: list[tuple[list[str], list[Param], dict[str, str], int]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        raw = lines[i]
        i += 1
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        where = f"{source}:{i}"
        if raw[0].isspace():
            if not entries:
                raise RankmapError(f"{where}: attribute before any prototype")
            key, sep, val = raw.strip().partition(":")
            if not sep or key not in ATTRS:
                raise RankmapError(f"{where}: unknown attribute {raw.strip()!r} (known: {', '.join(sorted(ATTRS))})")
            attrs = entries[-1][2]
            attrs[key] = (attrs[key] + "\n" + val.strip()) if key in attrs else val.strip()
            continue
        head = raw.strip()
        while head.count("(") > head.count(")") and i < len(lines):
            head += " " + lines[i].strip()
            i += 1
        m = re.fullmatch(r"([A-Za-z0-9_ ]+)\((.*)\)", head)
        if not m:
            raise RankmapError(f"{where}: expected 'MPI_Name [MPI_Name...](parameters)', got {head!r}")
        names = m.group(1).split()
        bad = [n for n in names if not re.fullmatch(r"MPI_[A-Z][a-z0-9_]*", n)]
        if bad:
            raise RankmapError(f"{where}: not an MPI routine name: {', '.join(bad)}")
        entries.append((names, _params(m.group(2), where), {}, i))
    return entries


def _large(params: list[Param]) -> list[Param]:
    """MPI-4 large-count parameters: counts become MPI_Count, displacement arrays MPI_Aint."""
    out = []
    for p in params:
        base = p.base
        if base in ("int", "const int") and p.ptr == 0 and "count" in p.name:
            base = base.replace("int", "MPI_Count")
        elif base == "const int" and p.array and "displs" in p.name:
            base = "const MPI_Aint"
        out.append(replace(p, base=base))
    return out


def _nonblocking_name(name: str) -> str:
    return "MPI_I" + name[4].lower() + name[5:]


def _nbc_body(body: dict[str, str]) -> dict[str, str]:
    """A collective's code for its nonblocking form: the tag its schedule will use expected at
    the start, kept with the request (``rm_nbc_begin``, shim_core.h)."""
    out = dict(body)
    out["pre"] = body.get("pre", "") + "\nrm_nbc_begin(comm);"
    out["post"] = (body["post"] + "\n" if body.get("post") else "") + "rm_nbc_started(*request);"
    out["after"] = (body["after"] + "\n" if body.get("after") else "") + "rm_t.nb_start = 0;"
    if "fast" in body:
        out["fast"] = f"({body['fast']}) && rm_nbc_begin(comm)"
        out["fast.post"] = (body["fast.post"] + "\n" if body.get("fast.post") else "") + "rm_nbc_started(*request);"
        out["fast.after"] = (body["fast.after"] + "\n" if body.get("fast.after") else "") + "rm_t.nb_start = 0;"
    return out


def expand(entries) -> Spec:
    """Entries -> every entry point, with the variants each asks for."""
    spec = Spec()
    for names, params, attrs, line in entries:
        variants = set(attrs.get("variants", "").split())
        unknown = variants - {"i", "init", "large"}
        if unknown:
            raise RankmapError(f"calls.spec:{line}: unknown variant {', '.join(sorted(unknown))}")
        fams = tuple(attrs.get("families", " ".join(FAMILIES)).split())
        if set(fams) - set(FAMILIES):
            raise RankmapError(f"calls.spec:{line}: unknown family in {fams}")
        plain = attrs.get("plain", "") == "yes"
        for k in ("fast.post", "fast.after", "fast.ways", "fast.jump"):
            if k in attrs and "fast" not in attrs:
                raise RankmapError(f"calls.spec:{line}: '{k}' without 'fast'")
        if "fast" in attrs and plain:
            raise RankmapError(f"calls.spec:{line}: a 'plain' entry has no 'fast' path")
        body = {k: v for k, v in attrs.items() if k not in ("variants", "families", "plain")}
        for name in names:
            forms = [Call(name, params, body, fams, None if plain else name, plain)]
            if "i" in variants:
                nb = _nonblocking_name(name)
                forms.append(Call(nb, params + [Param("MPI_Request", 1, False, "request")], _nbc_body(body), fams, nb))
            if "init" in variants:
                m = re.fullmatch(r"n = (.*);", body.get("pre", ""), re.S)
                if not m or set(body) - {"pre", "fast", "fast.post", "fast.after", "fast.ways", "fast.jump"}:
                    raise RankmapError(f"calls.spec:{line}: 'init' needs exactly one 'pre: n = <expression>;'")
                pers = {"persist": m.group(1),     # (counted at MPI_Start: no fast path)
                        "after": "rm_nbc_skip(comm);"}  # its schedule's tag is taken once, here
                forms.append(Call(name + "_init", params + [Param("MPI_Info", 0, False, "info"),
                                                           Param("MPI_Request", 1, False, "request")],
                                  pers, fams, name + "_init"))
            if "large" in variants:
                forms += [Call(f.name + "_c", _large(f.params), f.attrs, ("c",), f.op) for f in list(forms)]
            spec.calls.extend(forms)
    return spec


def load(path: Path | None = None) -> Spec:
    """The specification, ``native/mpi/calls.spec`` unless ``path`` says otherwise."""
    path = path or native_dir() / "mpi" / "calls.spec"
    try:
        text = path.read_text()
    except OSError as e:
        raise RankmapError(f"cannot read the shim specification {path}: {e.strerror}") from None
    return expand(parse(text, path.name))


# ---- code generation ----------------------------------------------------------------------------------

HEADER = "/* Generated by rankmap.capture.shim_gen from native/mpi/calls.spec -- do not edit. */\n"


def _idents(code: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))


def _sub_op(code: str, op: str | None) -> str:
    return re.sub(r"\bOP\b", f"OP_{op}", code) if op else code


def _indent(code: str, pad: str = "  ") -> str:
    return "".join(f"{pad}{line}\n" for line in code.splitlines() if line.strip())


def _status_param(c: Call) -> Param | None:
    return next((p for p in c.params if p.base == "MPI_Status" and p.ptr == 1 and not p.array), None)


def _status_cond(c: Call, fortran: bool, post: str = "post") -> str | None:
    """When to pass our own status because the caller ignores it (None: never): the accounting
    after the call (``post``, or the fast path's ``fast.post``) reads it."""
    st = _status_param(c)
    if st is None:
        return None
    if post == "post" and "status_if" in c.attrs:
        return c.attrs["status_if"]
    return c.attrs.get("status_if", "1") if st.name in _idents(c.code(post, fortran)) else None


def _own_status(c: Call, cond: str | None, pad: str) -> str:
    """The lines that pass our own status when cond holds and the caller ignores it."""
    if not cond:
        return ""
    st = _status_param(c).name
    test = f"{st} == MPI_STATUS_IGNORE" if cond == "1" else f"({cond}) && {st} == MPI_STATUS_IGNORE"
    return f"{pad}MPI_Status {st}_own_;\n{pad}if ({test}) {st} = &{st}_own_;"


# PMPI_ routines the hand-written sources use where the MPI has them (RM_HAVE_PMPI_x)
FEATURES = ("PMPI_Status_f082c",)


def gen_header(spec: Spec, declared: set[str] | None) -> str:
    body = " \\\n".join(f"  X({op})" for op in spec.ops)
    starts = " ".join(f"X({op})" for op in spec.start_ops)
    have = "".join(f"#define RM_HAVE_{f} 1\n" for f in FEATURES if declared is None or f in declared)
    return (HEADER + "#ifndef RANKMAP_RM_GEN_H\n#define RANKMAP_RM_GEN_H\n"
            "/* every operation the shim records, in spec order; the id of OP_x equals its rmrec id */\n"
            f"#define RM_OPS(X) \\\n{body}\n"
            "/* the operations that only start a transfer (timing: start), timed more sparsely */\n"
            f"#define RM_START_OPS(X) {starts}\n"
            f"/* optional routines this MPI declares */\n{have}#endif\n")


def _gen_full(c: Call, call: str) -> str:
    """The wrapper's body: its clock, the accounting before and after the library's call."""
    out = []
    if not c.plain:
        out.append(f"  RM_T0(OP_{c.op});\n  uint64_t n = 0;")
    out.append(_indent(_sub_op(c.code("pre", False), c.op)).rstrip("\n"))
    out.append(_own_status(c, _status_cond(c, False), "  "))
    out.append(f"  int rc = {call};")
    ok = _sub_op(c.code("post", False), c.op)
    if "persist" in c.attrs:
        ok += (f"\n{{ rm_rowset_t *rs_ = rm_persist_begin(OP_{c.op});\n"
               f"  if (rs_) {{ rs_->payload = {_sub_op(c.attrs['persist'], c.op)}; rm_persist_end(rs_, *request); }} }}")
    if ok.strip():
        out.append("  if (rc == MPI_SUCCESS) {\n" + _indent(ok, "    ") + "  }")
    err = _sub_op(c.code("err", False), c.op)
    if err.strip():
        out.append("  if (rc != MPI_SUCCESS) {\n" + _indent(err, "    ") + "  }")
    out.append(_indent(_sub_op(c.code("after", False), c.op)).rstrip("\n"))
    if not c.plain:
        out.append(f"  RM_DONE(OP_{c.op}, n);")
    out.append("  return rc;")
    return "\n".join(line for line in out if line)


def gen_c(c: Call) -> str:
    decl = ", ".join(p.decl() for p in c.params) or "void"
    args = ", ".join(p.name for p in c.params)
    call = f"{c.pmpi}({args})"
    guard = "" if c.plain else f"  if (!RM_CAPTURE) return {call};\n"
    if "fast" not in c.attrs:
        return f"int {c.name}({decl}) {{\n{guard}{_gen_full(c, call)}\n}}\n\n"
    # The common untimed call stays in the entry point; everything else is a function of its own
    # that the entry point jumps to, so the entry point saves no registers (GCC sets a function's
    # frame up at its entry when any of its paths needs one).
    full = f"rmw_{c.name}"
    ways = c.attrs.get("fast.ways", "").strip()
    fast = _sub_op(c.attrs["fast"], c.op)
    post = _sub_op(c.code("fast.post", False), c.op)
    after = _sub_op(c.code("fast.after", False), c.op)
    lib = f"      return {call};"                 # a jump: nothing left to do after the library's call
    helper = ""
    if post.strip() or after.strip():
        # Work after the library's call needs a frame (the return, what the work reads): it goes to
        # a function of its own too, which the entry point jumps to, so that the entry point still
        # saves nothing (GCC would set the frame up at its entry, for every path).
        tail = f"rma_{c.name}"
        helper = (f"static __attribute__((noinline)) int {tail}({decl}) {{\n" + "\n".join(line for line in (
            "  uint64_t n = 0;" if "n" in _idents(post + after) else "",
            _own_status(c, _status_cond(c, False, "fast.post"), "  "),
            f"  int rc = {call};",
            f"  if (rc == MPI_SUCCESS) {{\n{_indent(post, '    ')}  }}" if post.strip() else "",
            _indent(after, "  ").rstrip("\n"),
            "  return rc;") if line) + "\n}\n")
        lib = f"      return {tail}({args});"
    out = f"static __attribute__((noinline)) int {full}({decl}) {{\n{_gen_full(c, call)}\n}}\n{helper}"
    # rm_fast_ok implies capture (RM_CAPTURE), so the fast path comes before the capture test
    if not ways:
        body = f"    if ({fast}) {{\n      RM_SKIP(OP_{c.op})--;\n{lib}\n    }}\n"
        if "fast.jump" in c.attrs:       # a second fast path, with nothing after the library's call
            body += (f"    if ({_sub_op(c.attrs['fast.jump'], c.op)}) {{\n      RM_SKIP(OP_{c.op})--;\n"
                     f"      return {call};\n    }}\n")
        return (out + f"int {c.name}({decl}) {{\n"
                f"  if (rm_fast_ok(OP_{c.op})) {{\n{body}  }}\n{guard}"
                f"  return {full}({args});\n}}\n\n")
    # The entry point tries way 0 (where a call that repeats alone is remembered: its code is what
    # it is with one way); an untimed call that misses it jumps to a function of its own that tries
    # way 1 (two signatures in turn: its code is what it is with two ways), which jumps to another
    # that tries the ways after it (the collectives: one look, at the call's hashed set), then the
    # full wrapper: each way adds nothing to the paths of the ways before it (a function that
    # looked at more ways would save more registers on entry).
    nxt, rest = f"rmf_{c.name}", f"rmg_{c.name}"
    first, second, other = (re.sub(r"\bWAY\b", w, fast) for w in ("0", "1", "way_"))
    return (out + f"static __attribute__((noinline)) int {rest}({decl}) {{\n"
            "#pragma GCC unroll 8\n"
            f"  for (int way_ = 2; way_ < {ways}; way_++)\n"
            f"    if ({other}) {{\n"
            f"      RM_SKIP(OP_{c.op})--;\n{lib}\n    }}\n"
            f"  return {full}({args});\n}}\n"
            f"static __attribute__((noinline)) int {nxt}({decl}) {{\n"
            f"  if ({ways} > 1 && {second}) {{\n"
            f"    RM_SKIP(OP_{c.op})--;\n{lib[2:]}\n  }}\n"
            f"  return {rest}({args});\n}}\n"
            f"int {c.name}({decl}) {{\n"
            f"  if (rm_fast_ok(OP_{c.op})) {{\n"
            f"    if ({first}) {{\n"
            f"      RM_SKIP(OP_{c.op})--;\n{lib}\n    }}\n"
            f"    return {nxt}({args});\n  }}\n{guard}"
            f"  return {full}({args});\n}}\n\n")


def _fortran_params(c: Call) -> list[Param]:
    return [p for p in c.params if (p.base.replace("const ", ""), p.ptr, p.name) not in C_ONLY]


def _f_arg_type(p: Param) -> str:
    """C type of the Fortran argument (everything by reference)."""
    b = p.base.replace("const ", "")
    if p.ptr == 1 and b == "void" and not p.array:
        return "void *"
    if b in ("MPI_Aint", "MPI_Count"):
        return f"{b} *"
    return "MPI_Fint *"


def _view(p: Param, c: Call, used: set[str]) -> tuple[str, str, str]:
    """(declaration before the call, refresh after the call, cleanup) of the C view of Fortran arg p."""
    n, f, b = p.name, f"f_{p.name}", p.base.replace("const ", "")
    if p.ptr == 1 and b == "void" and not p.array:
        cast = "" if p.base.startswith("const") else "(void *)"
        return f"{p.base} *{n} = {cast}rm_fbuf({f});", "", ""
    if p.ptr == 0 and not p.array:
        if b in ("int", "MPI_Aint", "MPI_Count"):
            return f"{b} {n} = *{f};", "", ""
        if b in F2C:
            return f"{b} {n} = {F2C[b]}(*{f});", "", ""
    if (p.ptr == 1 or p.array) and b in ("int", "MPI_Aint") and not (p.ptr and p.array):
        return f"{p.base} *{n} = {f};", "", ""
    if p.ptr == 1 and b in ("MPI_Request", "MPI_Message") and not p.array:
        pre_used = n in _idents(c.code("pre", True))
        init = f"{F2C[b]}(*{f})" if pre_used else ("MPI_REQUEST_NULL" if b == "MPI_Request" else "MPI_MESSAGE_NULL")
        return f"{b} {n}_v_ = {init}, *{n} = &{n}_v_;", f"{n}_v_ = {F2C[b]}(*{f});", ""
    if p.ptr == 1 and b == "MPI_Status" and not p.array:
        return f"MPI_Status {n}_v_, *{n} = MPI_STATUS_IGNORE;", f"{n} = rm_fstatus({f}, &{n}_v_);", ""
    if p.array and b == "MPI_Datatype" and p.ptr == 0:
        which = ("RM_FT_RECV" if p.name.startswith("recv") else "RM_FT_SEND") + \
                (" | RM_FT_NEIGHBOR" if "neighbor" in c.name.lower() else "")
        src = f if p.name.startswith("recv") else f"sendbuf == MPI_IN_PLACE ? NULL : {f}"
        return f"MPI_Datatype *{n} = rm_ftypes({src}, comm, {which});", "", f"free({n});"
    raise RankmapError(f"calls.spec: {c.name}: no Fortran view of parameter {p.decl()!r}; "
                       f"use f_{n} in a '.f' attribute")


def gen_f(c: Call, family: str) -> str:
    """One Fortran wrapper; family 'f' (mpif.h / use mpi) or 'f08' (Open MPI's use mpi_f08)."""
    fps = _fortran_params(c)
    lower = c.name.lower()
    fname = f"{lower}_f08_" if family == "f08" else lower
    fn = f"rmf_{fname}"
    decl = ", ".join(f"{_f_arg_type(p)}f_{p.name}" for p in fps)
    decl = (decl + ", " if decl else "") + "MPI_Fint *ierr"
    args = ", ".join([f"f_{p.name}" for p in fps] + ["ierr"])
    ftype = ", ".join([_f_arg_type(p).strip() for p in fps] + ["MPI_Fint *"])
    codes = {k: _sub_op(c.code(k, True), c.op) for k in ("pre", "post", "after", "err")}
    persist = _sub_op(c.attrs.get("persist", ""), c.op)
    cond = _status_cond(c, True)
    used = set().union(*(_idents(v) for v in codes.values()), _idents(persist), _idents(cond or ""))
    if persist:
        used.add("request")
    if any(p.array and p.base.endswith("MPI_Datatype") and p.name in used for p in fps):
        used |= {"comm", "sendbuf"}
    views = [(p, _view(p, c, used)) for p in fps if p.name in used]
    views.sort(key=lambda pv: pv[0].array and pv[0].base.endswith("MPI_Datatype"))
    resolve = f'rm_fresolve_exact("{fname}")' if family == "f08" else f'rm_fresolve("{lower}")'
    out = [f"typedef void (*{fn}_t)({ftype});",
           f"static void {fn}({decl}) {{",
           f"  static {fn}_t real_;",
           f"  if (!real_ && !(real_ = ({fn}_t){resolve})) {{ rm_fmissing(\"{fname}\", ierr); return; }}"]
    if not c.plain:
        out.append(f"  if (!RM_CAPTURE) {{ real_({args}); return; }}")
    if family == "f08":      # ierror is OPTIONAL in mpi_f08: absent, it arrives as NULL
        out.append("  MPI_Fint ierr_own_ = MPI_SUCCESS;\n  if (!ierr) ierr = &ierr_own_;")
    if not c.plain:
        out.append(f"  RM_T0(OP_{c.op});\n  uint64_t n = 0;")
    out += [f"  {v[0]}" for _p, v in views]
    out.append(_indent(codes["pre"]).rstrip("\n"))
    if cond:
        st = _status_param(c).name
        test = f"rm_fstatus_ignored(f_{st})" if cond == "1" else f"({cond}) && rm_fstatus_ignored(f_{st})"
        out.append(f"  MPI_Fint {st}_own_[RM_F_STATUS_SIZE];\n  if ({test}) f_{st} = {st}_own_;")
    out.append(f"  RM_F_LIB(real_({args}));")
    refresh = "".join(f"{v[1]}\n" for _p, v in views if v[1])   # the views, after the call
    ok = refresh + codes["post"]
    if persist:
        ok += (f"\n{{ rm_rowset_t *rs_ = rm_persist_begin(OP_{c.op});\n"
               f"  if (rs_) {{ rs_->payload = {persist}; rm_persist_end(rs_, *request); }} }}")
    if codes["post"].strip() or persist:
        out.append("  if (*ierr == MPI_SUCCESS) {\n" + _indent(ok, "    ") + "  }")
    if codes["err"].strip():
        out.append("  if (*ierr != MPI_SUCCESS) {\n" + _indent(refresh + codes["err"], "    ") + "  }")
    out.append(_indent(codes["after"]).rstrip("\n"))
    if not c.plain:
        out.append(f"  RM_DONE(OP_{c.op}, n);")
    out += [f"  {v[2]}" for _p, v in views if v[2]]
    out.append("}")
    if family == "f08":
        out.append(f"RM_F08_EXPORT({fname})")
    else:
        out.append(f"RM_F_EXPORT({lower}, {c.name.upper()})")
    return "\n".join(l for l in out if l) + "\n\n"


def _guarded(c: Call, declared: set[str] | None) -> bool:
    return declared is None or c.pmpi in declared


def generate(spec: Spec, declared: set[str] | None = None) -> dict[str, str]:
    """File name -> text of the generated sources. ``declared``: the ``PMPI_`` routines the MPI's
    ``mpi.h`` declares (None: all, e.g. to inspect the output)."""
    calls = [c for c in spec.calls if _guarded(c, declared)]
    cfile = [HEADER, '#include "shim_core.h"\n\n']
    cfile += [gen_c(c) for c in calls if "c" in c.families]
    ffile = [HEADER, '#include "shim_fort.h"\n\n/* ---- mpif.h, use mpi ---- */\n#define RM_F08 0\n\n']
    ffile += [gen_f(c, "f") for c in calls if "f" in c.families]
    ffile.append("/* ---- use mpi_f08: Open MPI's mpi_x_f08_ routines call PMPI_ directly; so do MPICH's\n"
                 " * mpi_x_f08_ (routines without a buffer; its buffer routines, mpi_x_f08ts_, call the C\n"
                 " * MPI_ entry points, which the C wrappers count) ---- */\n#undef RM_F08\n#define RM_F08 1\n\n")
    ffile += [gen_f(c, "f08") for c in calls if "f08" in c.families]
    return {"rm_gen.h": gen_header(spec, declared), "wrap_c.c": "".join(cfile), "wrap_f.c": "".join(ffile)}


def entry_points(spec: Spec, declared: set[str] | None = None) -> dict[str, list[str]]:
    """Family -> names of the entry points generated for it (C names; Fortran ones are lowercased)."""
    calls = [c for c in spec.calls if _guarded(c, declared)]
    return {fam: [c.name for c in calls if fam in c.families] for fam in FAMILIES}


def main(argv: list[str] | None = None) -> int:
    """``python -m rankmap.capture.shim_gen OUTDIR``: write the generated sources for every routine."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m rankmap.capture.shim_gen OUTDIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in generate(load()).items():
        (out / name).write_text(text)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
