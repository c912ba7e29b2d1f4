"""corpora.npzfile: the in-memory .npz writer gives the members numpy writes, in an archive every reader
takes; large payloads are streamed."""
from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

import corpora.npzfile as npzfile
from corpora.npzfile import npy_header, npz_bytes, write_npz, write_npz_streaming


def _arrays_of_every_kind() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    big = rng.standard_normal((5, 7))
    return {
        "sift": rng.integers(0, 1000, 900).astype(np.uint16), "shape": np.array([30, 30]),
        "scalar": np.array(2.5), "key": np.array('{"a": 1}'), "bytes": np.array([b"ab", b"c"]),
        "fortran": np.asfortranarray(big), "strided": big[:, ::2], "empty": np.zeros((0, 3), np.float32),
        "bool": np.array([True, False]), "big_endian": np.arange(4, dtype=">f4"), "complex": np.ones(2, np.complex128),
        "record": np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]), "date": np.array(["2020-01-01"], dtype="M8[D]"),
        "file": np.arange(3), "allow_pickle": np.eye(2, dtype=np.float32), "naïve": np.arange(2),
    }


def test_npy_header_is_the_one_numpy_writes():
    rng = np.random.default_rng(1)
    dtypes = ["<u2", "<f4", "<f8", "|b1", "<i8", "<U7", "|S3", "<c16", ">f4", "<M8[s]", "<i4,<f8"]
    for _ in range(400):
        ndim = int(rng.integers(0, 5))
        shape = [int(n) for n in rng.integers(0, 10 ** int(rng.integers(1, 7)), size=ndim)]
        while ndim and np.prod(shape, dtype=float) > 1e5:
            shape[int(rng.integers(0, ndim))] //= 10
        a = np.zeros(tuple(shape), np.dtype(str(rng.choice(dtypes))))
        f = io.BytesIO()
        np.lib.format.write_array(f, a)
        head = npy_header(a)
        assert f.getvalue()[:len(head)] == head and len(f.getvalue()) == len(head) + a.nbytes, (a.shape, a.dtype)


def test_an_archive_built_in_memory_holds_what_savez_writes():
    arrays = _arrays_of_every_kind()
    data = npz_bytes(arrays)
    with zipfile.ZipFile(io.BytesIO(data)) as ours:
        assert ours.testzip() is None
        assert ours.namelist() == [name + ".npy" for name in arrays]          # in the mapping's order
        reference = io.BytesIO()
        write_npz_streaming(reference, arrays)
        with zipfile.ZipFile(reference) as theirs:
            for name in arrays:
                # each member's bytes are the ones numpy's own writer gives (C order for any layout)
                expected = theirs.read(name + ".npy")
                if not arrays[name].flags.c_contiguous:
                    f = io.BytesIO()
                    np.lib.format.write_array(f, np.ascontiguousarray(arrays[name]))
                    expected = f.getvalue()
                assert ours.read(name + ".npy") == expected, name
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        assert z.files == list(arrays)
        for name, a in arrays.items():
            assert z[name].dtype == a.dtype and z[name].shape == a.shape, name
            np.testing.assert_array_equal(z[name], a)


def test_object_arrays_are_refused_as_without_pickle():
    with pytest.raises(ValueError, match="Python objects"):
        npz_bytes({"o": np.array([1, "a"], dtype=object)})


def test_write_npz_streams_large_payloads_and_builds_small_ones(monkeypatch):
    built: list[int] = []
    real = npzfile.npz_bytes
    monkeypatch.setattr(npzfile, "npz_bytes", lambda arrays: built.append(len(arrays)) or real(arrays))
    monkeypatch.setattr(npzfile, "IN_MEMORY_MAX_BYTES", 1000)
    small, large = {"a": np.arange(100, dtype=np.int64)}, {"a": np.arange(126, dtype=np.int64)}   # 800, 1,008 B
    for arrays, in_memory in ((small, True), (large, False)):
        built.clear()
        f = io.BytesIO()
        write_npz(f, arrays)
        assert built == ([1] if in_memory else [])
        with np.load(io.BytesIO(f.getvalue())) as z:
            np.testing.assert_array_equal(z["a"], arrays["a"])
