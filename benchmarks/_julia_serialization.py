"""A reader of Julia's `Serialization` format (the stdlib's `serialize(io, x)`), for the data
files the flat-channels authors commit (`paper_data/**/*.dat`).

The format is a stream of tagged values: a one-byte tag, then the value's bytes. Built-in
values (numbers, strings, symbols, tuples, arrays, `Dict`s, modules and data types) carry
all that is needed to read them. A struct is written as its type, then its fields one after
another, without their number; that number is a property of the type's definition in Julia,
which the stream does not hold. So this reader knows a table of the structs it can read
(`STRUCTS`: the types in the authors' files) and stops with the type's name at any other.

Values come back as Python values: numbers, `str` (strings and symbols), `tuple`, `dict`
(`Dict`, `OrderedDict`, `NamedTuple`), NumPy arrays in Julia's shape (column-major data,
read in Fortran order), `JlType` for types and `JlStruct` for other structs.
`component_arrays` turns a ComponentArrays.jl `ComponentArray` into named arrays.

Only what the authors' files use is read: no code (`Expr`, `Method`, `CodeInfo`), no
anonymous types, no `IdDict`. Each stops with an error that names it. `read` also checks
that the stream ends where the value ends, so a misread field count cannot pass unseen.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

SUPPORTED_VERSIONS = range(8, 31)  # the header's byte 3; tested on 20 (the authors' files)

_N_INT_LITERALS = 33
_SYMBOL_LITERALS = (
    "Any Array TypeVar Box Tuple Ptr return call :: Function = == === gotoifnot "
    "A B C M N T S X Y a b c d e f g h i j k l m n o p q r s t u v w x y z "
    "add_int sub_int mul_int add_float sub_float new mul_float bitcast start done next "
    "indexed_iterate getfield meta eq_int slt_int sle_int ne_int push_loc pop_loc pop "
    "arrayset arrayref apply_type inbounds getindex setindex! Core ! + Base static_parameter "
    "convert colon #self# #temp# tuple"
).split() + [""]


@dataclass(frozen=True)
class JlType:
    """A Julia data type: its name, its module path, and its parameters (`None` for the
    bare, unparametrized type)."""

    name: str
    module: tuple[str, ...] = ("Core",)
    params: tuple | None = ()

    def __repr__(self) -> str:
        p = "" if not self.params else "{" + ", ".join(map(repr, self.params)) + "}"
        return f"{self.name}{p}"


@dataclass
class JlStruct:
    """An instance of a struct from `STRUCTS`: its type and its fields by name."""

    type: JlType
    fields: dict


def _builtin(name: str) -> JlType:
    return JlType(name, ("Core",), ())


# The stdlib's tag table: a tag byte t in 1..255 stands for _TAGS[t - 1].
_TAGS: list = [
    *map(_builtin, "Symbol Int8 UInt8 Int16 UInt16 Int32 UInt32 Int64 UInt64 Int128 UInt128".split()),
    *map(_builtin, "Float16 Float32 Float64 Char DataType Union UnionAll TypeName Tuple".split()),
    *map(_builtin, "Array Expr LineNumberNode __LabelNode__ GotoNode QuoteNode CodeInfo TypeVar".split()),
    *map(_builtin, "Box MethodInstance Module Task String SimpleVector Method GlobalRef".split()),
    *map(_builtin, "SlotNumber Const NewvarNode SSAValue".split()),
    *(["special"] * 17),  # UNDEFREF .. SHARED_REF, below
    _builtin("ReturnNode"),
    _builtin("GotoIfNot"),
    *(["reserved"] * 8),
    (),  # the first of the value tags: each stands for itself
    _builtin("Bool"),
    _builtin("Any"),
    _builtin("Union{}"),
    _builtin("TypeofBottom"),
    _builtin("Type"),
    (),  # svec()
    _builtin("Tuple{}"),
    False,
    True,
    None,
    *_SYMBOL_LITERALS,
    *(["reserved"] * 24),
    *range(_N_INT_LITERALS),  # Int32 0..32
    *range(_N_INT_LITERALS),  # Int64 0..32
]
assert len(_TAGS) == 255, len(_TAGS)

_T = {name: i + 1 for i, name in enumerate(t.name for t in _TAGS[:40])}
_UNDEFREF = 41
(BACKREF, LONGBACKREF, SHORTBACKREF, LONGTUPLE, LONGSYMBOL, LONGEXPR, LONGSTRING, SHORTINT64) = range(42, 50)
(FULL_DATATYPE, WRAPPER_DATATYPE, OBJECT, REF_OBJECT, FULL_GLOBALREF, HEADER, IDDICT, SHARED_REF) = range(50, 58)
_VALUE_TAGS = _TAGS.index(()) + 1

_NUMBERS = {  # tag -> NumPy dtype of a raw little-endian number
    _T[n]: np.dtype(d)
    for n, d in dict(
        Int8="i1",
        UInt8="u1",
        Int16="<i2",
        UInt16="<u2",
        Int32="<i4",
        UInt32="<u4",
        Int64="<i8",
        UInt64="<u8",
        Float16="<f2",
        Float32="<f4",
        Float64="<f8",
    ).items()
}
_BITS = {_TAGS[t - 1].name: d for t, d in _NUMBERS.items()} | {"Bool": np.dtype("?")}


@dataclass(frozen=True)
class _Struct:
    fields: tuple[str, ...]
    mutable: bool = False


STRUCTS = {
    # OrderedCollections.jl: `OrderedDict` (turned into a dict) and Base's ranges.
    "OrderedDict": _Struct(("slots", "keys", "vals", "ndel", "maxprobe", "dirty"), mutable=True),
    "UnitRange": _Struct(("start", "stop")),
    # ComponentArrays.jl: the array and its axes (the axes' layout is in their type).
    "ComponentArray": _Struct(("data", "axes")),
    "Axis": _Struct(()),
    "NullAxis": _Struct(()),
    "ViewAxis": _Struct(("ax",)),
    "ShapedAxis": _Struct(()),
    # MLPGradientFlow.jl's `LinearSubspace`, in `edge_of_stability/initialization.dat`.
    "LinearSubspace": _Struct(("ref", "v1", "v2", "u", "b")),
}
"""The structs this reader knows: their field names in order, and whether they are mutable
(a mutable struct takes a back-reference slot). Add a type here to read it. All but those in
`_PLAIN` have type parameters."""

_PARAMETRIC = {"Array", "Tuple", "NamedTuple", "Dict", "Type", "Val"}  # besides STRUCTS
_PLAIN = {"String", "Symbol", "Nothing", "Missing", "Float64", "Float32", "Int64", "Int32", "Bool", "Any"}
_PLAIN |= {"NullAxis", "Char", "Module", "DataType"}


class JuliaSerializationError(ValueError):
    pass


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = memoryview(data), 0
        self.refs: dict[int, object] = {}
        self.counter = 0
        self.pending: list[int] = []

    # -- raw bytes ---------------------------------------------------------------------
    def raw(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise JuliaSerializationError(f"the stream ends at byte {len(self.data)}, inside a value at {self.pos}")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def number(self, dtype) -> object:
        return np.frombuffer(self.raw(dtype.itemsize), dtype)[0].item()

    def u8(self) -> int:
        return self.raw(1)[0]

    def i32(self) -> int:
        return struct.unpack("<i", self.raw(4))[0]

    def slot(self) -> int:
        s, self.counter = self.counter, self.counter + 1
        return s

    def fail(self, what: str):
        raise JuliaSerializationError(f"byte {self.pos}: {what}")

    # -- values ------------------------------------------------------------------------
    def value(self):
        return self.tagged(self.u8())

    def tagged(self, b: int):  # noqa: C901 (one branch per tag, as in the format)
        if b == 0:
            return _TAGS[self.u8() - 1]
        if b >= _VALUE_TAGS:
            return _TAGS[b - 1]
        if b in _NUMBERS:
            return self.number(_NUMBERS[b])
        if b in (_T["Int128"], _T["UInt128"]):
            return int.from_bytes(self.raw(16), "little", signed=b == _T["Int128"])
        if b == SHORTINT64:
            return self.i32()
        if b in (_T["Tuple"], LONGTUPLE):
            n = self.u8() if b == _T["Tuple"] else self.i32()
            return tuple(self.value() for _ in range(n))
        if b in (SHORTBACKREF, BACKREF, LONGBACKREF):
            dtype = {SHORTBACKREF: "<u2", BACKREF: "<i4", LONGBACKREF: "<i8"}[b]
            i = self.number(np.dtype(dtype))
            if i not in self.refs:
                self.fail(f"a back-reference to slot {i}, which nothing filled")
            return self.refs[i]
        if b in (_T["Symbol"], LONGSYMBOL):
            n = self.u8() if b == _T["Symbol"] else self.i32()
            sym = bytes(self.raw(n)).decode()
            if n > 7:
                self.refs[self.slot()] = sym
            return sym
        if b in (_T["String"], LONGSTRING):
            n = self.u8() if b == _T["String"] else self.number(np.dtype("<i8"))
            return bytes(self.raw(n)).decode()
        if b == SHARED_REF:
            s = self.slot()
            self.refs[s] = v = self.value()
            return v
        if b == _T["Array"]:
            return self.array()
        if b == _T["DataType"]:
            return self.datatype()
        if b in (OBJECT, REF_OBJECT):
            if b == REF_OBJECT:
                self.pending.append(self.slot())
            return self.instance(self.value())
        if b == _T["Module"]:
            return self.module()
        if b == _T["SimpleVector"]:
            return tuple(self.value() for _ in range(self.i32()))
        if b == _T["Union"]:
            return JlType("Union", ("Core",), (self.value(), self.value()))
        if b == _T["UnionAll"]:
            return self.unionall()
        if b == HEADER:
            self.header()
            return self.value()
        name = _TAGS[b - 1].name if b <= 40 else f"tag {b}"
        self.fail(f"{name} values are not read by this reader (Julia code and internals are not data)")

    def header(self):
        if bytes(self.raw(2)) != b"JL":
            self.fail("not a Julia Serialization stream (no 'JL' after the header tag)")
        version, flags = self.u8(), self.u8()
        self.raw(3)
        if version not in SUPPORTED_VERSIONS:
            self.fail(
                f"format version {version}; this reader reads {SUPPORTED_VERSIONS.start}..{SUPPORTED_VERSIONS.stop - 1}"
            )
        if flags & 3 != 0 or (flags >> 2) & 3 != 1:
            self.fail(f"header flags {flags:#x}: only little-endian 64-bit streams are read")

    def module(self) -> tuple[str, ...]:
        key = self.value()
        if isinstance(key, tuple):  # the old form: a tuple of names
            return key
        path = [self.value()]
        while (name := self.value()) != ():
            path.append(name)
        return tuple(path)

    def datatype(self) -> JlType:
        s = self.slot()
        name, module = self.value(), self.value()
        if name in _PLAIN:
            t = JlType(name, module, ())
        elif name in _PARAMETRIC or name in STRUCTS:
            n = self.i32()
            t = JlType(name, module, tuple(self.value() for _ in range(n)) if n else None)
        else:
            self.fail(
                f"the type {'.'.join(module)}.{name}: this reader does not know whether it has parameters; add it to STRUCTS"
            )
        self.refs[s] = t
        return t

    def unionall(self) -> JlType:
        if self.u8() == 0:
            self.value()  # the type variable
            return self.value()
        self.raw(2)
        t = self.value()
        return JlType(t.name, t.module, None)

    def array(self) -> np.ndarray | list:
        s = self.slot()
        d = self.value()
        elty = _builtin("UInt8")
        if isinstance(d, JlType):
            elty, d = d, self.value()
        dims = (d,) if isinstance(d, int) else tuple(d)
        n = int(np.prod(dims))
        if elty.name == "Bool":  # run-length coded: (value << 7) | count per byte
            flat = []
            while len(flat) < n:
                byte = self.u8()
                flat += [bool(byte >> 7)] * (byte & 0x7F)
            a = np.array(flat, bool).reshape(dims, order="F")
        elif elty.name in _BITS:
            dt = _BITS[elty.name]
            a = np.frombuffer(self.raw(n * dt.itemsize), dt).reshape(dims, order="F").copy()
        elif elty.name in STRUCTS:
            self.fail(f"an array of {elty!r}: arrays of structs (raw when they are bits types) are not read")
        else:
            a = []
            self.refs[s] = a
            for _ in range(n):
                b = self.u8()
                a.append(None if b == _UNDEFREF else self.tagged(b))
            return a if len(dims) == 1 else np.array(a, dtype=object).reshape(dims, order="F")
        self.refs[s] = a
        return a

    def instance(self, t):
        if not isinstance(t, JlType):
            self.fail(f"an object whose type is {t!r}")
        if t.name == "Missing":
            return None
        if t.name == "Dict":
            out: dict = {}
            n = self.i32()
            self.refs[self.pending.pop()] = out
            for _ in range(n):
                k = self.value()
                out[k] = self.value()
            return out
        if t.name == "NamedTuple":
            return dict(zip(t.params[0], (self.value() for _ in t.params[0])))
        spec = STRUCTS.get(t.name)
        if spec is None:
            self.fail(
                f"a struct of type {'.'.join(t.module)}.{t!r}, whose fields this reader does not know; add it to STRUCTS"
            )
        obj = JlStruct(t, {})
        if spec.mutable:
            self.refs[self.pending.pop()] = obj
        for f in spec.fields:
            b = self.u8()
            obj.fields[f] = None if b == _UNDEFREF else self.tagged(b)
        return _ordered_dict(obj) if t.name == "OrderedDict" else obj


def _ordered_dict(obj: JlStruct) -> dict:
    f = obj.fields
    if f["ndel"] != 0:
        raise JuliaSerializationError("an OrderedDict with deleted entries (ndel > 0) is not read")
    return dict(zip(f["keys"], f["vals"]))


def read(data: bytes):
    """The value serialized in `data` (with its 8-byte header). Raises
    `JuliaSerializationError` if the stream holds what this reader does not read, or
    anything after the value."""
    r = _Reader(data)
    if r.u8() != HEADER:
        r.fail("no Julia Serialization header (the stream must start with 0x37 'JL')")
    r.header()
    v = r.value()
    if r.pos != len(data):
        r.fail(f"the value ends at byte {r.pos} of {len(data)}: the rest was not read")
    return v


def _axis_layout(ax) -> dict:
    """An `Axis` type's index map: `{name: a 1-based index, or a ViewAxis struct}`."""
    if ax.name == "Axis":
        (index_map,) = ax.params
        return index_map
    raise JuliaSerializationError(f"a component axis of type {ax!r}")


def component_arrays(ca: JlStruct) -> dict[str, np.ndarray]:
    """A flat `ComponentArray` as `{name: array}`: each component's slice of the data,
    reshaped (column-major) where its axis is a `ShapedAxis`."""
    if not (isinstance(ca, JlStruct) and ca.type.name == "ComponentArray"):
        raise JuliaSerializationError(f"not a ComponentArray: {ca!r}")
    data = np.asarray(ca.fields["data"])
    (ax,) = ca.fields["axes"]
    out = {}
    for name, view in _axis_layout(ax.type).items():
        if isinstance(view, int):
            out[name] = data[view - 1]
            continue
        inds, inner = view.type.params[0], view.fields["ax"]
        part = data[inds.fields["start"] - 1 : inds.fields["stop"]]
        if isinstance(inner, JlStruct) and inner.type.name == "ShapedAxis":
            part = part.reshape(inner.type.params[0], order="F")
        out[name] = part
    return out
