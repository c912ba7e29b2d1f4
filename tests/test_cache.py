"""corpora.cache.DiskCache: any member name round-trips; key parts of numpy scalar types are accepted."""
from __future__ import annotations

import numpy as np
import pytest

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
    # no memory to read it is not damage: the error propagates and the sound entry stays
    def no_memory(*args, **kw):
        raise MemoryError
    monkeypatch.setattr(cache_mod.np, "load", no_memory)
    with pytest.raises(MemoryError):
        cache.load("ns", {"k": 1})
    assert cache.path("ns", {"k": 1}).exists()
    # nor is an operating-system refusal (too many open files, permission): recompute now, keep the entry
    import errno

    for code in (errno.EMFILE, errno.EACCES):
        def refused(*args, _code=code, **kw):
            raise OSError(_code, "refused")
        monkeypatch.setattr(cache_mod.np, "load", refused)
        assert cache.load("ns", {"k": 1}) is None
        assert cache.path("ns", {"k": 1}).exists()
    # nor is an interpreter race (CPython 3.11's "AST constructor recursion depth mismatch" when two
    # threads parse .npy headers at once): the entry is read again, and kept if the race persists
    calls = []

    def raced(*args, **kw):
        calls.append(1)
        if len(calls) <= 2:
            raise SystemError("AST constructor recursion depth mismatch (before=48, after=45)")
        return real_load(*args, **kw)
    monkeypatch.setattr(cache_mod.np, "load", raced)
    np.testing.assert_array_equal(cache.load("ns", {"k": 1})["a"], first["a"])
    assert len(calls) == 3

    def always_raced(*args, **kw):
        raise SystemError("AST constructor recursion depth mismatch (before=48, after=45)")
    monkeypatch.setattr(cache_mod.np, "load", always_raced)
    assert cache.load("ns", {"k": 1}) is None and cache.path("ns", {"k": 1}).exists()
    monkeypatch.setattr(cache_mod.np, "load", real_load)
    np.testing.assert_array_equal(cache.load("ns", {"k": 1})["a"], first["a"])


def test_reserved_member_names_are_refused(tmp_path):
    """The entry's own fields cannot be overwritten by an array of the same name (the entry could then
    never be read back and would be recomputed on every call)."""
    cache = DiskCache(tmp_path)
    for name in ("__digest__", "__key__"):
        with pytest.raises(ValueError, match="reserved"):
            cache.store("ns", {"k": 2}, {name: np.arange(3)})
    assert not (tmp_path / "ns").exists() or not list((tmp_path / "ns").iterdir())


def test_a_killed_writers_temporary_is_swept_by_the_next_write(tmp_path):
    """SIGKILL between the write and the rename leaves ``<stem>.<pid>-<host>.<rand>.tmp``; the next store
    into that namespace removes it (its writer is gone), but never a live writer's or a recent foreign one."""
    import os
    import subprocess
    import sys
    import time

    from corpora.cache import STALE_TMP_AGE_S, _HOST_TAG

    root = tmp_path / "c"
    # a real writer process that dies (os._exit, no clean-up handlers) just before its rename
    code = ("import numpy as np, os, sys; import corpora.cache as c; "
            "c.os.replace = lambda *a: os._exit(9); "
            "c.DiskCache(sys.argv[1]).store('ns', {'k': 'killed'}, {'a': np.arange(1000)})")
    proc = subprocess.Popen([sys.executable, "-c", code, str(root)], stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 9, err
    (dead,) = list((root / "ns").glob("*.tmp"))
    assert f".{proc.pid}-{_HOST_TAG}." in dead.name
    stem = "0" * 64
    live = root / "ns" / f"{stem}.{os.getpid()}-{_HOST_TAG}.abc123.tmp"            # this process: running
    foreign = root / "ns" / f"{stem}.{proc.pid}-00000000.abc123.tmp"               # another host, recent
    foreign_old = root / "ns" / f"{stem}.{proc.pid}-00000000.def456.tmp"           # another host, 2 days
    legacy = root / "ns" / f"{stem}.xyz789.tmp"                                    # no writer id, recent
    legacy_old = root / "ns" / f"{stem}.uvw012.tmp"                                # no writer id, 2 days
    other_ns = root / "other" / dead.name                                          # not swept by 'ns'
    other_ns.parent.mkdir()
    for p in (live, foreign, foreign_old, legacy, legacy_old, other_ns):
        p.write_bytes(b"PK\x03\x04 partial")
    old = time.time() - STALE_TMP_AGE_S - 3600
    for p in (foreign_old, legacy_old):
        os.utime(p, (old, old))

    cache = DiskCache(root)
    assert cache.load("ns", {"k": "killed"}) is None       # the partial write is never an entry
    cache.store("ns", {"k": 1}, {"a": np.arange(3)})
    left = {p.name for p in (root / "ns").glob("*.tmp")}
    assert left == {live.name, foreign.name, legacy.name}
    assert other_ns.exists()
    # once per namespace per cache object: a later temporary of a dead writer waits for the next run
    again = root / "ns" / dead.name
    again.write_bytes(b"x")
    cache.store("ns", {"k": 2}, {"a": np.arange(3)})
    assert again.exists()
    assert set(DiskCache(root).sweep_temporaries()) == {again, other_ns}   # every namespace
    assert cache.load("ns", {"k": 1}) is not None and cache.load("ns", {"k": 2}) is not None


def test_a_temporary_removed_before_its_rename_is_written_again(tmp_path, monkeypatch, caplog):
    """A writer in another PID namespace with the same host name (a container) can take a live temporary for
    a dead writer's and remove it; the store then writes it once more instead of failing."""
    import os

    import corpora.cache as cache_mod

    real_replace = os.replace
    calls = []

    def replace_after_removal(src, dst):
        calls.append(src)
        if len(calls) == 1:
            os.unlink(src)                     # swept by someone else between the write and the rename
        return real_replace(src, dst)

    monkeypatch.setattr(cache_mod.os, "replace", replace_after_removal)
    cache = DiskCache(tmp_path)
    with caplog.at_level("WARNING", logger="corpora.cache"):
        p = cache.store("ns", {"k": 1}, {"a": np.arange(5)})
    assert len(calls) == 2 and calls[0] != calls[1]
    assert "vanished before its rename" in caplog.text
    np.testing.assert_array_equal(cache.load("ns", {"k": 1})["a"], np.arange(5))
    assert p.is_file() and not list(tmp_path.rglob("*.tmp"))


def test_store_and_load_hold_no_second_copy_of_an_entry(tmp_path):
    """The entry is written straight into its temporary file and hashed without ``tobytes`` copies: storing
    a 64 MiB Gram matrix allocates well under its size on top of it, and loading it allocates the array
    once (the earlier in-memory ``.npz`` buffer and copies for the digest doubled both)."""
    import tracemalloc

    K = np.random.default_rng(0).standard_normal((4096, 4096), dtype=np.float32)   # 64 MiB
    cache = DiskCache(tmp_path)
    tracemalloc.start()
    try:
        cache.store("ns", {"k": 1}, {"K": K})
        _, store_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        back = cache.load("ns", {"k": 1})
        _, load_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(back["K"], K)
    assert store_peak < 0.5 * K.nbytes, store_peak / K.nbytes
    assert load_peak - base < 1.25 * K.nbytes, (load_peak - base) / K.nbytes


def test_array_bytes_is_tobytes_without_the_copy():
    import hashlib

    from corpora.cache import array_bytes

    big = np.arange(12.0).reshape(3, 4)
    cases = [big, big[:, ::2], np.asfortranarray(big), np.array(5.0), np.array("abc"), np.array(["ab", "c"]),
             np.zeros((0, 3)), np.array([True, False]), np.zeros(2, dtype=[("a", "i4"), ("b", "f8")]),
             np.array(["2020-01-01"], dtype="M8[D]"), np.array([3], dtype="m8[s]")]
    for a in cases:
        assert bytes(array_bytes(a)) == np.ascontiguousarray(a).tobytes(), a.dtype
        assert hashlib.sha256(array_bytes(a)).digest() == hashlib.sha256(np.ascontiguousarray(a).tobytes()).digest()
    view = array_bytes(big)
    big[0, 0] = 99.0                       # a view, not a copy, of a contiguous array
    assert bytes(view[:8]) == np.float64(99.0).tobytes()


# ------------------------------------------------------------------ unwritable folders
def test_check_cache_dir_creates_and_accepts_a_writable_folder(tmp_path):
    from corpora.cache import check_cache_dir

    folder = tmp_path / "a" / "b"
    assert check_cache_dir(folder) == folder
    assert folder.is_dir() and not list(folder.iterdir())      # its write check leaves nothing behind
    assert check_cache_dir(folder) == folder                   # an existing folder is fine too


def test_check_cache_dir_refuses_a_folder_that_cannot_be_created_or_written(tmp_path, monkeypatch):
    import errno

    import corpora.cache as cache_mod
    from corpora.cache import CacheDirError, check_cache_dir

    plain = tmp_path / "plain"
    plain.write_text("not a folder")
    for folder, reason in ((plain / "c", "Not a directory"), (plain, "File exists")):
        with pytest.raises(CacheDirError) as info:
            check_cache_dir(folder)
        msg = str(info.value)
        assert str(folder) in msg and reason in msg and "cannot be created" in msg and "\n" not in msg
        assert isinstance(info.value, ValueError)
    # a folder that exists but refuses new files (what a read-only folder does to a non-root user)
    ok = tmp_path / "ro"
    ok.mkdir()

    def refused(*args, **kw):
        raise PermissionError(errno.EACCES, "Permission denied", str(ok / "x.tmp"))
    monkeypatch.setattr(cache_mod.tempfile, "mkstemp", refused)
    with pytest.raises(CacheDirError, match=r"ro is not writable: Permission denied$"):
        check_cache_dir(ok)
    monkeypatch.undo()
    # a full disk shows when the test file is flushed: refused, and the test file removed
    real_fsync = cache_mod.os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(cache_mod.os, "fsync", full)
    with pytest.raises(CacheDirError, match="No space left on device"):
        check_cache_dir(ok)
    monkeypatch.setattr(cache_mod.os, "fsync", real_fsync)
    assert not list(ok.iterdir())


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
                    reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused_up_front_and_skipped_mid_run(tmp_path):
    import os
    import warnings

    from corpora.cache import CacheDirError, CacheWriteWarning, check_cache_dir

    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    try:
        with pytest.raises(CacheDirError, match="Permission denied"):
            check_cache_dir(ro)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = DiskCache(ro).get_or_compute("ns", {"k": 1}, lambda: {"a": np.arange(3)})
        np.testing.assert_array_equal(out["a"], np.arange(3))
        assert [w.category for w in caught] == [CacheWriteWarning]
    finally:
        os.chmod(ro, 0o755)


def test_a_failing_write_warns_once_and_the_run_goes_on(tmp_path, monkeypatch):
    """Disk full / permission / read-only file system in the middle of a run: every computed value is still
    returned, one warning per cache object names the folder and the reason, later writes are skipped
    without more warnings, no temporary file is left, and the entries already there are still read."""
    import errno
    import warnings

    import corpora.cache as cache_mod
    from corpora.cache import CacheWriteWarning

    root = tmp_path / "c"
    cache = DiskCache(root)
    cache.store("ns", {"k": 0}, {"a": np.arange(2)})
    real_fsync = cache_mod.os.fsync
    calls = []

    def full(fd):
        calls.append(fd)
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(cache_mod.os, "fsync", full)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in (1, 2, 3):
            out = cache.get_or_compute("ns", {"k": k}, lambda k=k: {"a": np.full(4, k)})
            np.testing.assert_array_equal(out["a"], np.full(4, k))
        back = cache.get_or_compute("ns", {"k": 0}, lambda: pytest.fail("a stored entry was recomputed"))
    np.testing.assert_array_equal(back["a"], np.arange(2))
    assert len(calls) == 1                      # writes after the failure are not even tried
    assert [w.category for w in caught] == [CacheWriteWarning]
    msg = str(caught[0].message)
    assert str(root) in msg and "No space left on device" in msg
    assert isinstance(cache.write_error, OSError) and cache.write_error.errno == errno.ENOSPC
    assert not list(root.rglob("*.tmp"))
    assert {p.name for p in root.rglob("*.npz")} == {cache.path("ns", {"k": 0}).name}
    # each cache object warns for itself
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert DiskCache(root).store("ns", {"k": 5}, {"a": np.arange(1)}) is None
    assert [w.category for w in caught] == [CacheWriteWarning]
    monkeypatch.setattr(cache_mod.os, "fsync", real_fsync)
    assert cache.store("ns", {"k": 6}, {"a": np.arange(1)}) is None      # this object stays read-only
    assert DiskCache(root).store("ns", {"k": 6}, {"a": np.arange(1)}) is not None


def test_a_cache_folder_that_cannot_be_created_warns_and_computes(tmp_path):
    """Not simulated: a cache root below a regular file fails at its first ``mkdir`` (even for root)."""
    import warnings

    from corpora.cache import CacheWriteWarning

    (tmp_path / "plain").write_text("x")
    cache = DiskCache(tmp_path / "plain" / "c")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(3):
            assert cache.get_or_compute("ns", {"k": k}, lambda k=k: {"a": np.arange(k)})["a"].shape == (k,)
    assert [w.category for w in caught] == [CacheWriteWarning]
    assert str(tmp_path / "plain" / "c") in str(caught[0].message)
    assert cache.misses == 3 and cache.hits == 0


def test_the_command_line_tools_refuse_an_unwritable_cache_folder(tmp_path, capsys):
    """``neural.score`` and ``caption_metrics_vs_humans`` print one ``error:`` line and exit 2 before any
    work; ``--no-cache`` skips the check."""
    import json

    from experiments import caption_metrics_vs_humans
    from neural import score

    (tmp_path / "plain").write_text("x")
    bad = tmp_path / "plain" / "cache"
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.jpg").write_bytes(b"not read before the check")
    cands = tmp_path / "cands.json"
    cands.write_text(json.dumps({"a": "a dog runs"}))
    with pytest.raises(SystemExit) as info:
        score.main(["--candidates", str(cands), "--images", str(tmp_path / "imgs"), "--metric", "clip-s",
                    "--clip-model", "tiny", "--cache-dir", str(bad)])
    msg = str(info.value.code)
    assert msg.startswith("error: cache folder ") and str(bad) in msg and "--no-cache" in msg
    assert "\n" not in msg
    data = tmp_path / "flickr"
    data.mkdir()
    capsys.readouterr()
    assert caption_metrics_vs_humans.main(["--data", str(data), "--cache-dir", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cache folder ") and str(bad) in err and err.count("\n") == 1
    # --no-cache: no check, the tool gets as far as the corpus (an empty folder is not Flickr8k)
    assert caption_metrics_vs_humans.main(["--data", str(data), "--cache-dir", str(bad), "--no-cache"]) == 2
    assert "cache folder" not in capsys.readouterr().err


# ------------------------------------------------------------------ the stored key
def test_entries_swapped_on_disk_are_recomputed_not_served(tmp_path, caplog):
    """Two entries' files renamed over each other: each load finds the other key stored, warns, removes it
    and recomputes, instead of returning the other key's (intact, digest-matching) arrays."""
    import os

    cache = DiskCache(tmp_path)
    ka, kb = {"k": "a"}, {"k": "b"}
    cache.store("ns", ka, {"x": np.zeros(3)})
    cache.store("ns", kb, {"x": np.ones(3)})
    pa, pb = cache.path("ns", ka), cache.path("ns", kb)
    os.replace(pa, tmp_path / "swap")
    os.replace(pb, pa)
    os.replace(tmp_path / "swap", pb)
    with caplog.at_level("WARNING", logger="corpora.cache"):
        assert cache.load("ns", ka) is None
        out = cache.get_or_compute("ns", kb, lambda: {"x": np.ones(3)})
    np.testing.assert_array_equal(out["x"], np.ones(3))
    assert caplog.text.count("is corrupt") == 2 and "stored key" in caplog.text
    assert str(pa) in caplog.text and str(pb) in caplog.text
    assert not pa.exists()                                       # removed, to be rewritten
    np.testing.assert_array_equal(cache.load("ns", kb)["x"], np.ones(3))
    # a copy of an entry under another name is refused the same way
    (cache.path("ns", {"k": "c"})).write_bytes(pb.read_bytes())
    assert cache.load("ns", {"k": "c"}) is None


def test_every_kind_of_key_reads_back_its_own_entry(tmp_path):
    """The stored-key check never rejects an entry written for the same key (floats, numpy values and
    arrays, paths, nested and non-string mapping keys, unicode, None)."""
    from pathlib import Path

    cache = DiskCache(tmp_path)
    keys = [{"x": 0.1, "tiny": 1e-300, "big": 2 ** 70, "neg": -0.0, "nan": float("nan")},
            {"arr": np.arange(5, dtype=np.float32), "n": np.int64(3), "f": np.float32(0.3), "b": np.bool_(1)},
            {"path": Path("/data/é x"), "nested": {"b": [1, (2, 3)], "a": None}, 7: "int key"},
            ["a list", "ünïcödé \u202e", ""], "plain string", 42]
    for n, key in enumerate(keys):
        cache.store("ns", key, {"a": np.arange(n)})
    for n, key in enumerate(keys):
        back = cache.load("ns", key)
        assert back is not None, key
        np.testing.assert_array_equal(back["a"], np.arange(n))


# ------------------------------------------------------------------ what warnings quote
def test_quote_error_escapes_and_caps():
    from corpora.cache import quote_error

    assert quote_error(ValueError("digest mismatch")) == "digest mismatch"
    assert quote_error(ValueError()) == "ValueError"
    assert quote_error("é ok") == "é ok"
    assert quote_error("a\x1b[2Jb\nc\x00\udcff\u202e") == "a\\x1b[2Jb\\nc\\x00\\udcff\\u202e"
    junk = "\x9b" * 61803
    q = quote_error(OSError(junk))
    assert q.endswith("... [61803 characters in all]")
    head = q[: q.index("...")]
    assert len(head) <= 200 and head == "\\x9b" * 50                 # never cut inside an escape
    assert len(quote_error("y" * 1000, limit=20)) < 60
    assert quote_error("z" * 200) == "z" * 200


def test_a_damaged_entrys_long_binary_error_is_quoted_short_and_escaped(tmp_path, caplog):
    """A damaged ``.npy`` header makes numpy quote the whole header (thousands of characters of binary
    junk): the warning quotes at most ~200 escaped characters and the total length."""
    import struct
    import zipfile

    cache = DiskCache(tmp_path)
    key = {"k": 1}
    p = cache.store("ns", key, {"a": np.arange(3)})
    with zipfile.ZipFile(p) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    rng = np.random.default_rng(0)
    junk = "".join(map(chr, rng.integers(1, 0x800, 6000))).encode()
    header = b"{'descr': " + junk
    members["a.npy"] = b"\x93NUMPY\x03\x00" + struct.pack("<I", len(header)) + header
    with zipfile.ZipFile(p, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    with caplog.at_level("WARNING", logger="corpora.cache"):
        assert cache.load("ns", key) is None
    (record,) = [r for r in caplog.records if "is corrupt" in r.getMessage()]
    msg = record.getMessage()
    assert "Cannot parse header" in msg and "characters in all]" in msg
    assert len(msg) < len(str(p)) + 350, len(msg)
    assert all(c.isprintable() for c in msg)
    assert not p.exists()


def test_a_long_lived_cache_writes_again_once_the_retry_interval_has_passed(tmp_path, monkeypatch):
    """``retry_writes_after`` (a Dask worker's cache): after a failed write, writes are skipped until the
    interval has passed, then tried again; one warning for the failing stretch, none for the retry that
    fails again, and a write that goes through clears ``write_error``."""
    import errno
    import warnings

    import corpora.cache as cache_mod
    from corpora.cache import CacheWriteWarning

    clock = [1000.0]
    monkeypatch.setattr(cache_mod.time, "monotonic", lambda: clock[0])
    real_fsync, calls = cache_mod.os.fsync, []

    def full(fd):
        calls.append(fd)
        raise OSError(errno.ENOSPC, "No space left on device")

    cache = DiskCache(tmp_path / "c", retry_writes_after=60.0)
    monkeypatch.setattr(cache_mod.os, "fsync", full)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.store("ns", {"k": 1}, {"a": np.arange(2)}) is None
        clock[0] += 59.0
        assert cache.store("ns", {"k": 2}, {"a": np.arange(2)}) is None
        assert len(calls) == 1                                   # inside the interval: not tried
        clock[0] += 1.0
        assert cache.store("ns", {"k": 3}, {"a": np.arange(2)}) is None
        assert len(calls) == 2                                   # tried again, failed again
        monkeypatch.setattr(cache_mod.os, "fsync", real_fsync)
        clock[0] += 30.0
        assert cache.store("ns", {"k": 4}, {"a": np.arange(2)}) is None   # the failure of k=3 restarted it
        clock[0] += 30.0
        assert cache.store("ns", {"k": 5}, {"a": np.arange(2)}) is not None
    assert [w.category for w in caught] == [CacheWriteWarning]
    assert cache.write_error is None and cache.load("ns", {"k": 5}) is not None
    assert cache.store("ns", {"k": 6}, {"a": np.arange(2)}) is not None
    assert not list((tmp_path / "c").rglob("*.tmp"))



def test_hit_and_miss_counts_are_exact_across_threads_and_pickling(tmp_path):
    """The threads of one run share a cache object: no count is lost under a short thread switch
    interval, and a pickled cache (a text kernel sent to Dask workers holds one) keeps its counts and
    counts on."""
    import pickle
    import sys
    from concurrent.futures import ThreadPoolExecutor

    cache = DiskCache(tmp_path)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        def work(_):
            for _ in range(20_000):
                cache.count(hits=1)
                cache.count(misses=2)

        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(work, range(4)))
    finally:
        sys.setswitchinterval(interval)
    assert (cache.hits, cache.misses) == (80_000, 160_000)
    cache.get_or_compute("ns", {"k": 1}, lambda: {"a": np.arange(3)})
    cache.get_or_compute("ns", {"k": 1}, lambda: {"a": np.arange(3)})
    again = pickle.loads(pickle.dumps(cache))
    assert (again.hits, again.misses) == (80_001, 160_001)
    again.count(hits=1)
    assert again.hits == 80_002 and cache.hits == 80_001
