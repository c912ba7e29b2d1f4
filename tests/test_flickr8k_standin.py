"""benchmarks/flickr8k_standin.py: the full-size Flickr8k stand-in used to time the real-data path."""
from __future__ import annotations

import hashlib

import cv2
import pytest


def _md5(p):
    return hashlib.md5(p.read_bytes()).hexdigest()


def test_standin_images_are_distinct_deterministic_and_load_as_flickr8k(benchmark_module, flickr8k_dir, tmp_path):
    mod = benchmark_module("flickr8k_standin")
    names = mod.image_names(flickr8k_dir)
    assert len(names) == 8091 and all(n.endswith(".jpg") for n in names)    # every original file name
    a = mod.build(tmp_path / "a", flickr8k_dir, limit=12, show_progress=False)
    assert a["images"] == a["written"] == 12 and a["derived_from"] == 14
    files = sorted((tmp_path / "a" / "Flicker8k_Dataset").glob("*.jpg"))
    assert [f.name for f in files] == names[:12]
    assert len({_md5(f) for f in files}) == 12                                 # all different
    for f in files:
        im = cv2.imread(str(f))
        assert im is not None and max(im.shape[:2]) == 500 and min(im.shape[:2]) in mod.SHORT_SIDES
    # the same inputs give the same bytes; an existing folder is resumed, not rewritten
    mod.build(tmp_path / "b", flickr8k_dir, limit=12, show_progress=False, copy_text=True)
    assert [_md5(f) for f in files] == [_md5(tmp_path / "b" / "Flicker8k_Dataset" / f.name) for f in files]
    again = mod.build(tmp_path / "a", flickr8k_dir, limit=15, show_progress=False)
    assert again["written"] == 3 and again["images"] == 15
    assert not list((tmp_path / "a" / "Flicker8k_Dataset").glob(".*tmp*"))
    # the folder is a standard-layout Flickr8k: real captions and splits, these images on disk
    from corpora.flickr8k import load_flickr8k

    with pytest.warns(UserWarning, match="known quirk"):
        corpus = load_flickr8k(tmp_path / "b")
    assert len(corpus.image_ids) == 8091 and len(corpus.split("train")) == 6000
    assert sum(corpus.has_image(i) for i in corpus.image_ids) == 12


def test_standin_command_line_refuses_bad_counts(benchmark_module, tmp_path):
    mod = benchmark_module("flickr8k_standin")
    with pytest.raises(SystemExit):
        mod.main([str(tmp_path / "x"), "--limit", "0"])
    with pytest.raises(SystemExit):
        mod.main([str(tmp_path / "x"), "--quality", "101"])


def test_standin_refuses_other_layouts_and_repairs_leftovers(benchmark_module, flickr8k_dir, tmp_path):
    import shutil

    mod = benchmark_module("flickr8k_standin")
    # Kaggle layout (captions.txt + Images/), even with the MD5 list beside it: refused before OUT is made
    kaggle = tmp_path / "kaggle"
    (kaggle / "Images").mkdir(parents=True)
    (kaggle / "captions.txt").write_text("image,caption\n1000268201_693b08cb0e.jpg,A child .\n")
    shutil.copytree(flickr8k_dir / "checksums", kaggle / "checksums")
    with pytest.raises(SystemExit, match="captions.txt layout is not supported"):
        mod.build(tmp_path / "out_k", kaggle, limit=2, show_progress=False)
    assert not (tmp_path / "out_k").exists()
    with pytest.raises(SystemExit, match="error: .*not found"):
        mod.build(tmp_path / "out_m", tmp_path / "missing", limit=2, show_progress=False)
    # an interrupted build's temporary file and a dangling text link are cleaned up on the next run
    out = tmp_path / "out"
    (out / "Flicker8k_Dataset").mkdir(parents=True)
    (out / "Flicker8k_Dataset" / ".x.jpg.tmp.jpg").write_bytes(b"partial")
    (out / "Flickr8k_text").symlink_to(tmp_path / "moved_away", target_is_directory=True)
    res = mod.build(out, flickr8k_dir, limit=3, show_progress=False)
    assert res["written"] == 3 and (out / "Flickr8k_text" / "Flickr8k.token.txt").is_file()
    assert not list((out / "Flicker8k_Dataset").glob(".*"))
    assert res["image_bytes"] == sum(p.stat().st_size for p in (out / "Flicker8k_Dataset").iterdir())
