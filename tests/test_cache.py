"""corpora.cache.DiskCache: any member name round-trips; key parts of numpy scalar types are accepted."""
from __future__ import annotations

import numpy as np

from corpora.cache import DiskCache, cache_key


def test_member_names_that_are_savez_keywords_round_trip(tmp_path):
    cache = DiskCache(tmp_path / "c")
    arrays = {"file": np.arange(3), "allow_pickle": np.eye(2, dtype=np.float32), "args": np.array("text")}
    cache.store("ns", {"k": 1}, arrays)
    back = cache.load("ns", {"k": 1})
    assert back is not None and set(back) == set(arrays)
    for k, v in arrays.items():
        np.testing.assert_array_equal(back[k], v)
        assert back[k].dtype == v.dtype
    assert not list((tmp_path / "c").rglob("*.tmp"))
    # the file is an ordinary .npz
    (p,) = list((tmp_path / "c").rglob("*.npz"))
    with np.load(p) as z:
        np.testing.assert_array_equal(z["file"], arrays["file"])


def test_numpy_scalars_in_keys_equal_their_python_values():
    assert cache_key({"flag": np.bool_(True), "n": np.int64(3), "x": np.float32(0.5)}) == \
        cache_key({"flag": True, "n": 3, "x": 0.5})
    assert cache_key({"flag": np.bool_(False)}) != cache_key({"flag": np.bool_(True)})


def test_cache_files_get_the_umask_mode_not_mkstemps_0600(tmp_path):
    import os
    import subprocess
    import sys

    # a fresh interpreter with umask 022: the module reads the umask at import
    code = ("import numpy as np, os, sys; from corpora.cache import DiskCache; "
            "p = DiskCache(sys.argv[1]).store('ns', {'k': 1}, {'a': np.arange(2)}); "
            "print(oct(os.stat(p).st_mode & 0o777))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "c")], capture_output=True, text=True,
                         check=True, preexec_fn=lambda: os.umask(0o022))
    assert out.stdout.strip() == "0o644"
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "d")], capture_output=True, text=True,
                         check=True, preexec_fn=lambda: os.umask(0o007))
    assert out.stdout.strip() == "0o660"


def test_any_damage_to_an_entry_is_removed_and_recomputed(tmp_path, monkeypatch):
    """A flipped bit in a zip's directory can make numpy raise NotImplementedError or RuntimeError
    ("zip file version", "is encrypted"), not only BadZipFile: every such entry is recomputed."""
    import corpora.cache as cache_mod

    cache = DiskCache(tmp_path)
    first = cache.get_or_compute("ns", {"k": 1}, lambda: {"a": np.arange(3)})
    real_load = np.load
    for exc in (NotImplementedError("zip file version 10.9"), RuntimeError("File 'a.npy' is encrypted")):
        def broken(*args, _exc=exc, **kw):
            raise _exc
        monkeypatch.setattr(cache_mod.np, "load", broken)
        assert cache.load("ns", {"k": 1}) is None and not cache.path("ns", {"k": 1}).exists()
        monkeypatch.setattr(cache_mod.np, "load", real_load)
        again = cache.get_or_compute("ns", {"k": 1}, lambda: {"a": np.arange(3)})
        np.testing.assert_array_equal(again["a"], first["a"])
