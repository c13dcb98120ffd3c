"""benchmarks/_julia_serialization.py against streams written byte by byte from the format
of Julia's `Serialization` stdlib (tag numbers from its `TAGS` table, written out here as
literals), and against the authors' files where a local mirror of their repository exists."""

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _julia_serialization as js  # noqa: E402

HEADER = b"\x37JL\x14\x04\x00\x00\x00"  # version 20, little-endian, 64-bit
SYMBOL, INT64, FLOAT64, DATATYPE, TUPLE, ARRAY, MODULE, STRING = 1, 8, 14, 16, 20, 21, 31, 33
SHORTBACKREF, OBJECT, REF_OBJECT, EMPTY_TUPLE, NOTHING = 44, 52, 53, 68, 78
CORE, BASE = 155, 158  # the symbols :Core and :Base
INT64_0 = 223  # Int64 literals 0..32


def sym(name: str) -> bytes:
    b = name.encode()
    return bytes([SYMBOL, len(b)]) + b


def module(name_tag: int) -> bytes:
    return bytes([MODULE, NOTHING, name_tag, EMPTY_TUPLE])


def datatype(name: str, mod: int, params: bytes = b"", n: int | None = None) -> bytes:
    out = bytes([DATATYPE]) + sym(name) + module(mod)
    return out if n is None else out + struct.pack("<i", n) + params


def f64_array(a: np.ndarray) -> bytes:
    elty = bytes([0, FLOAT64])
    dims = (
        bytes([INT64_0 + a.shape[0]]) if a.ndim == 1 else bytes([TUPLE, a.ndim]) + bytes(INT64_0 + d for d in a.shape)
    )
    return bytes([ARRAY]) + elty + dims + a.ravel(order="F").astype("<f8").tobytes()


def test_dict_of_arrays_tuples_and_numbers():
    m = np.arange(6.0).reshape(2, 3)
    body = (
        bytes([REF_OBJECT])
        + datatype("Dict", BASE, bytes([0, STRING, 70]), n=2)  # Dict{String, Any}
        + struct.pack("<i", 3)
        + bytes([STRING, 1])
        + b"m"
        + f64_array(m)
        + bytes([STRING, 5])
        + b"tuple"
        + bytes([TUPLE, 3, INT64_0 + 7, 49])
        + struct.pack("<i", -5)  # SHORTINT64
        + bytes([FLOAT64])
        + struct.pack("<d", 0.25)
        + bytes([STRING, 1])
        + b"v"
        + f64_array(np.array([1.5, -2.0]))
    )
    v = js.read(HEADER + body)
    assert list(v) == ["m", "tuple", "v"]
    np.testing.assert_array_equal(v["m"], m)  # column-major bytes, Julia's shape
    assert v["tuple"] == (7, -5, 0.25)
    np.testing.assert_array_equal(v["v"], [1.5, -2.0])


def test_named_tuple_and_back_references():
    # NamedTuple{(:longname1, :b), Tuple{Float64, Float64}}: slots are numbered as read,
    # the data type 0, its name :NamedTuple 1 (symbols over 7 bytes take one), :longname1 2;
    # the second field is a back-reference to slot 2.
    names = bytes([TUPLE, 2]) + sym("longname1") + bytes([103])  # :b is a value tag
    types = datatype("Tuple", CORE, bytes([0, FLOAT64, 0, FLOAT64]), n=2)
    body = bytes([OBJECT]) + datatype("NamedTuple", CORE, names + types, n=2)
    body += bytes([FLOAT64]) + struct.pack("<d", 3.0) + bytes([SHORTBACKREF]) + struct.pack("<H", 2)
    assert js.read(HEADER + body) == {"longname1": 3.0, "b": "longname1"}


def test_bad_streams_are_refused_with_the_reason():
    good = HEADER + bytes([FLOAT64]) + struct.pack("<d", 1.0)
    assert js.read(good) == 1.0
    with pytest.raises(js.JuliaSerializationError, match="the rest was not read"):
        js.read(good + b"\x00")
    with pytest.raises(js.JuliaSerializationError, match="the stream ends"):
        js.read(good[:-1])
    with pytest.raises(js.JuliaSerializationError, match="header"):
        js.read(b"JL" + good)
    with pytest.raises(js.JuliaSerializationError, match="format version 99"):
        js.read(b"\x37JL\x63" + good[4:])
    unknown = bytes([OBJECT]) + datatype("Frobnicator", BASE)
    with pytest.raises(js.JuliaSerializationError, match="Frobnicator.*STRUCTS"):
        js.read(HEADER + unknown)


MIRROR = Path("/work/.mirror/flavio-martinelli+channels-to-infinity/repo")


@pytest.mark.skipif(not MIRROR.exists(), reason="no local mirror of the authors' repository")
def test_the_authors_initialization_reads_as_the_fixed_offsets_did():
    """`edge_of_stability/initialization.dat`, whose five vectors channels_paper_data.py reads
    at fixed byte offsets (checked there against their CSVs to 1e-12)."""
    from channels_paper_data import INIT_OFFSETS, INIT_PATH

    raw = subprocess.run(
        ["git", "-C", str(MIRROR), "show", f"HEAD:{INIT_PATH}"], capture_output=True, check=True
    ).stdout
    p, v2, ls = js.read(raw)
    fixed = {k: np.frombuffer(raw, "<f8", count=4, offset=o) for k, o in INIT_OFFSETS.items()}
    data = lambda x: x.fields["data"] if isinstance(x, js.JlStruct) else x  # noqa: E731
    ours = dict(p=p, v2=v2, ref=ls.fields["ref"], v1=ls.fields["v1"], ls_v2=ls.fields["v2"])
    ours = {k: data(x) for k, x in ours.items()}
    for k in fixed:
        np.testing.assert_array_equal(np.asarray(ours[k]).ravel(), fixed[k])
