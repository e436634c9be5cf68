#!/usr/bin/python3
"""python/shardps against the C headers it copies (ctest py_binding_header;
argument: the source tree). Nothing is loaded or run: include/shardps.h and
common/model_spec.h are read as text, and

- every C signature the package gives ctypes (shardps._SIGNATURES, its one
  table) is the header's: the function exists, its return type, argument
  count and each argument's type, by the rules of _ctype below;
- every function the package calls (lib.shardps_* in its source) has its
  signature in that table, so none is called with ctypes' default int;
- the row table struct (_RowTable) is shardps_row_table, field for field;
- the constants it copies are the headers' values: INIT_*, KIND_*, the
  dtypes' order, the row initializers, SHARDPS_EVERSION, MAX_TENSORS and
  MAX_NAME_BYTES, and __version__ and the soname carry the header's
  version.
"""
import ctypes
import os
import re
import sys
import unittest

ROOT = None  # the source tree, from argv

#: C scalar types by name, as ctypes has them.
_SCALARS = {"int": ctypes.c_int, "size_t": ctypes.c_size_t, "double": ctypes.c_double,
            "float": ctypes.c_float, "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64,
            "uint32_t": ctypes.c_uint32}


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def _code(text):
    """text without comments and preprocessor lines (macros are read apart)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))


def _macros(text):
    """{name: int value} of the headers' #define NAME number lines."""
    out = {}
    for name, value in re.findall(r"^\s*#define\s+(\w+)\s+\(?\s*(-?\d+)\s*\)?\s*(?:/\*.*)?$",
                                  text, flags=re.M):
        out[name] = int(value)
    return out


def _ctype(decl, row_table):
    """The ctypes type of a C type (a parameter's, a field's or a return
    type, its name already removed): a char pointer (in or out) is c_char_p,
    the opaque handle (shardps *) and void * are c_void_p, shardps_row_table
    is row_table, other pointers are POINTER of what they point to; const
    and volatile do not count. None for void; raises ValueError for a type
    the package could not pass."""
    words = decl.replace("*", " * ").split()
    words = [w for w in words if w not in ("const", "volatile")]
    base, stars = [w for w in words if w != "*"], words.count("*")
    if len(base) != 1:
        raise ValueError(f"no ctypes rule for C type {decl!r}")
    base = base[0]
    if base == "char" and stars >= 1:
        t, stars = ctypes.c_char_p, stars - 1
    elif base in ("void", "shardps") and stars >= 1:
        t, stars = ctypes.c_void_p, stars - 1
    elif base == "void" and stars == 0:
        return None
    elif base == "shardps_row_table":
        t = row_table
    elif base in _SCALARS:
        t = _SCALARS[base]
    else:
        raise ValueError(f"no ctypes rule for C type {decl!r}")
    for _ in range(stars):
        t = ctypes.POINTER(t)
    return t


def _split_decl(decl):
    """(type, name) of a declaration such as "const char *const *servers"."""
    m = re.match(r"^(.*?)(\w+)\s*$", decl.strip(), flags=re.S)
    return m.group(1).strip(), m.group(2)


def _functions(code):
    """{name: (return type text, [parameter type texts])} of every shardps_
    function the header declares."""
    out = {}
    for ret, name, params in re.findall(r"([\w\s\*]+?)\b(shardps_\w+)\s*\(([^;{}()]*)\)\s*;",
                                        code):
        params = " ".join(params.split())
        args = [] if params in ("", "void") else [_split_decl(p)[0] for p in params.split(",")]
        out[name] = (" ".join(ret.split()), args)
    return out


def _struct_fields(code, name):
    """[(field, type text)] of typedef struct {...} name;, in order."""
    m = re.search(r"typedef\s+struct\s*\{([^}]*)\}\s*" + name + r"\s*;", code)
    fields = []
    for decl in m.group(1).split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        first, *more = [d.strip() for d in decl.split(",")]
        ftype, fname = _split_decl(first)
        fields.append((fname, ftype))
        fields.extend((n, ftype) for n in more)
    return fields


def _name(t):
    return "void" if t is None else getattr(t, "__name__", repr(t))


class BindingHeader(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import shardps  # noqa: E402 (the tree's copy, without loading the library)
        cls.py = shardps
        header = _read("include", "shardps.h")
        cls.code = _code(header)
        cls.c_functions = _functions(cls.code)
        cls.macros = _macros(header)
        cls.macros.update(_macros(_read("common", "model_spec.h")))

    def test_the_header_was_read(self):
        # A parser that found nothing would pass every other test.
        for name in ("shardps_new", "shardps_pull_into", "shardps_push_rows", "shardps_abandon"):
            self.assertIn(name, self.c_functions)
        self.assertGreaterEqual(len(self.py._SIGNATURES), 20)

    def test_signatures_are_the_headers(self):
        for name, (res, args) in self.py._SIGNATURES.items():
            with self.subTest(function=name):
                self.assertIn(name, self.c_functions, f"{name} is not in include/shardps.h")
                c_ret, c_args = self.c_functions[name]
                want = _ctype(c_ret, self.py._RowTable)
                self.assertIs(res, want, f"{name} returns {c_ret} ({_name(want)}); the package "
                                         f"says {_name(res)}")
                self.assertEqual(len(args), len(c_args),
                                 f"{name} takes {len(c_args)} arguments; the package gives "
                                 f"{len(args)}")
                for i, (got, decl) in enumerate(zip(args, c_args)):
                    want = _ctype(decl, self.py._RowTable)
                    self.assertIs(got, want, f"{name} argument {i + 1} is {decl} ({_name(want)}); "
                                             f"the package says {_name(got)}")

    def test_every_function_called_has_its_signature(self):
        pkg = os.path.join(ROOT, "python", "shardps")
        called = set()
        for f in os.listdir(pkg):
            if f.endswith(".py"):
                with open(os.path.join(pkg, f), encoding="utf-8") as src:
                    called |= set(re.findall(r"\.(shardps_\w+)\b", src.read()))
        self.assertTrue(called)
        self.assertEqual(sorted(called - set(self.py._SIGNATURES)), [],
                         "called without a signature in shardps._SIGNATURES")

    def test_row_table_struct_is_the_headers(self):
        c_fields = _struct_fields(self.code, "shardps_row_table")
        py_fields = self.py._RowTable._fields_
        self.assertEqual([f for f, _ in py_fields], [f for f, _ in c_fields])
        for (field, got), (_, decl) in zip(py_fields, c_fields):
            with self.subTest(field=field):
                self.assertIs(got, _ctype(decl, self.py._RowTable), f"{field} is {decl}")

    def test_constants_are_the_headers(self):
        py, m = self.py, self.macros
        pairs = [("INIT_ZERO", py.INIT_ZERO, "SHARDPS_INIT_ZERO"),
                 ("INIT_HE_UNIFORM", py.INIT_HE_UNIFORM, "SHARDPS_INIT_HE_UNIFORM"),
                 ("INIT_XAVIER_UNIFORM", py.INIT_XAVIER_UNIFORM, "SHARDPS_INIT_XAVIER_UNIFORM"),
                 ("KIND_PARAMETER", py.KIND_PARAMETER, "SHARDPS_KIND_PARAMETER"),
                 ("KIND_BUFFER", py.KIND_BUFFER, "SHARDPS_KIND_BUFFER"),
                 ("KIND_FROZEN", py.KIND_FROZEN, "SHARDPS_KIND_FROZEN"),
                 ("_DTYPES float32", py._DTYPES.index(py.np.dtype(py.np.float32)),
                  "SHARDPS_DTYPE_FLOAT32"),
                 ("_DTYPES int64", py._DTYPES.index(py.np.dtype(py.np.int64)),
                  "SHARDPS_DTYPE_INT64"),
                 ("_ROW_INITS zeros", py._ROW_INITS["zeros"], "SHARDPS_ROW_INIT_ZEROS"),
                 ("_ROW_INITS uniform", py._ROW_INITS["uniform"], "SHARDPS_ROW_INIT_UNIFORM"),
                 ("_ROW_INITS normal", py._ROW_INITS["normal"], "SHARDPS_ROW_INIT_NORMAL"),
                 ("_EVERSION", py._EVERSION, "SHARDPS_EVERSION"),
                 ("MAX_TENSORS", py.MAX_TENSORS, "PS_MAX_TENSORS"),
                 ("MAX_NAME_BYTES", py.MAX_NAME_BYTES, "PS_MAX_NAME_BYTES")]
        for what, got, macro in pairs:
            with self.subTest(constant=what):
                self.assertIn(macro, m)
                self.assertEqual(got, m[macro], f"{what} is {got}; {macro} is {m[macro]}")
        self.assertEqual(len(py._DTYPES), 2)
        self.assertEqual(len(py._ROW_INITS), 3)
        major, minor = m["SHARDPS_VERSION_MAJOR"], m["SHARDPS_VERSION_MINOR"]
        self.assertTrue(py.__version__.startswith(f"{major}.{minor}."),
                        f"__version__ {py.__version__}; the header is {major}.{minor}")
        self.assertEqual(py._SONAME, f"libshardps.so.{major}")


if __name__ == "__main__":
    ROOT = os.path.abspath(sys.argv.pop(1))
    unittest.main()
