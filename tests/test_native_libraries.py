"""The compiled kernels' libraries are loaded from the cache only when they match the hash recorded when they
were built (kernels.native_lib): a library swapped in the cache never runs (its constructor included)."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kernels.image.native as image_native
import kernels.text.native as text_native
import kernels.text.tagrank_native as tagrank_native
from kernels.native_lib import record_path

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler")

HOSTILE_C = r"""
#include <stdio.h>
__attribute__((constructor)) static void itr_hostile(void) {
    FILE *f = fopen("%s", "w"); if (f) { fputs("ran", f); fclose(f); }
}
int itr_intersect_csc_block(void) { return 0; }
int soft_tri_gram(void) { return 0; }
int soft_tri_cross(void) { return 0; }
"""


def _hostile_library(tmp_path, marker):
    src = tmp_path / "hostile.c"
    src.write_text(HOSTILE_C % marker)
    so = tmp_path / "hostile.so"
    subprocess.run([shutil.which("gcc") or shutil.which("cc"), "-shared", "-fPIC", "-o", str(so), str(src)],
                   check=True)
    return so


def _fresh_image():
    image_native._LIB, image_native._TRIED = None, False
    return image_native.load()


def _fresh_text():
    text_native.load_softtri.cache_clear()
    return text_native.load_softtri()


def _fresh_tagrank():
    tagrank_native.load_tagrank.cache_clear()
    return tagrank_native.load_tagrank()


def _image_lib():
    return image_native._lib_path()


def _tagrank_lib():
    return next((image_native.default_cache_dir() / "native").glob("tagrank-*.so"))


def _text_lib():
    return next((image_native.default_cache_dir() / "native").glob("softtri-*.so"))


LOAD = {"image": "import kernels.image.native as n; f = n.load()",
        "text": "import kernels.text.native as n; f = n.load_softtri()",
        "tagrank": "import kernels.text.tagrank_native as n; f = n.load_tagrank()"}
CHECK_IMAGE = """
import numpy as np
from kernels.image.gram import intersection_gram, intersection_naive
x = np.array([[1.0, 0.0, 2.0], [0.5, 3.0, 0.0]], np.float32)
assert np.allclose(intersection_gram(x, x, backend="c"), intersection_naive(x, x))
"""


def _load_in_new_process(kind: str, cache) -> subprocess.CompletedProcess:
    """Load the library in a fresh interpreter (a process that has loaded a path once gets the same
    handle back from ``dlopen``, so only a new process shows what the loader would load)."""
    code = LOAD[kind] + "; print('loaded' if f is not None else 'fallback')" + (CHECK_IMAGE if kind == "image" else "")
    env = {**os.environ, "ITR_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    env.pop("ITR_NO_CEXT", None)
    env.pop("ITR_NO_NATIVE", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=300)


@pytest.mark.parametrize("kind", ["image", "text", "tagrank"])
@pytest.mark.parametrize("damage", ["swapped, record kept", "swapped, record removed", "record of another source",
                                    "record rewritten to the swapped library's hash of another source"])
def test_a_swapped_library_in_the_cache_never_runs(tmp_path, monkeypatch, kind, damage):
    monkeypatch.setenv("ITR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ITR_NO_CEXT", raising=False)
    monkeypatch.delenv("ITR_NO_NATIVE", raising=False)
    fresh, where = {"image": (_fresh_image, _image_lib), "text": (_fresh_text, _text_lib),
                    "tagrank": (_fresh_tagrank, _tagrank_lib)}[kind]
    assert fresh() is not None                          # built, recorded and loaded
    lib = where()
    record = json.loads(record_path(lib).read_text())
    assert set(record) == {"source_sha256", "library_sha256"}
    marker = tmp_path / "constructor-ran"
    hostile = _hostile_library(tmp_path, marker)
    swap = lib.with_name("swap.tmp")
    shutil.copyfile(hostile, swap)
    os.replace(swap, lib)                               # a new file (the loaded one is not written in place)
    if damage == "swapped, record removed":
        record_path(lib).unlink()
    elif damage == "record of another source":
        record_path(lib).write_text(json.dumps({**record, "source_sha256": "0" * 64}))
    elif damage.startswith("record rewritten"):
        digest = hashlib.sha256(hostile.read_bytes()).hexdigest()
        record_path(lib).write_text(json.dumps({"source_sha256": "f" * 64, "library_sha256": digest}))
    r = _load_in_new_process(kind, tmp_path / "cache")
    assert not marker.exists(), "the swapped library was loaded"
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["loaded"]                # rebuilt from the source, verified, loaded
    assert "not verified" in r.stderr and str(lib) in r.stderr
    assert lib.read_bytes() != hostile.read_bytes()
    assert json.loads(record_path(lib).read_text())["library_sha256"] == hashlib.sha256(lib.read_bytes()).hexdigest()


def test_an_unbuildable_library_falls_back_with_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("ITR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ITR_NO_CEXT", raising=False)
    assert _fresh_image() is not None
    lib = _image_lib()
    marker = tmp_path / "constructor-ran"
    swap = lib.with_name("swap.tmp")
    shutil.copyfile(_hostile_library(tmp_path, marker), swap)
    os.replace(swap, lib)
    monkeypatch.setattr(image_native, "_build", lambda target: (_ for _ in ()).throw(RuntimeError("no compiler")))
    with caplog.at_level(logging.WARNING):
        assert _fresh_image() is None                   # numpy fallback
    assert not marker.exists() and not lib.exists()
    assert any("fallback" in r.getMessage() for r in caplog.records)
    image_native._LIB, image_native._TRIED = None, False
