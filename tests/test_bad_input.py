"""Bad and unusual input: malformed Flickr8k files, odd images, the captions.txt CSV and Karpathy JSON
variants – all written to tmp files here."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from corpora.base import CorpusError, MissingImagesError
from corpora.flickr8k import (
    load_captions_csv,
    load_flickr8k,
    parse_captions_csv,
    parse_token_file,
    seeded_split,
)
from corpora.images import read_image, to_rgb
from corpora.karpathy import load_karpathy
from corpora.protocol import hodosh_pool

IMGS = [f"{1000 + i}_abc.jpg" for i in range(8)]  # 4 train, 2 dev, 2 test


def write_bundle(root: Path, *, token=None, lemma=None, expert=None, crowd=None, splits=None) -> Path:
    """A miniature Flickr8k standard layout under ``root`` (text in Flickr8k_text/, 2 JPEGs present)."""
    t = root / "Flickr8k_text"
    t.mkdir(parents=True, exist_ok=True)
    if token is None:
        token = "".join(f"{im}#{k}\tcaption {k} of image {im} .\n" for im in IMGS for k in range(5))
    (t / "Flickr8k.token.txt").write_bytes(token if isinstance(token, bytes) else token.encode())
    if lemma is not None:
        (t / "Flickr8k.lemma.token.txt").write_text(lemma)
    splits = splits or {"train": IMGS[:4], "dev": IMGS[4:6], "test": IMGS[6:]}
    for s, ids in splits.items():
        (t / f"Flickr_8k.{s}Images.txt").write_text("".join(i + "\n" for i in ids))
    if expert is None:
        expert = f"{IMGS[6]}\t{IMGS[7]}#1\t1\t2\t1\n{IMGS[7]}\t{IMGS[7]}#1\t4\t4\t3\n"
    (t / "ExpertAnnotations.txt").write_text(expert)
    if crowd is None:
        crowd = (f"{IMGS[6]}\t{IMGS[6]}#3\t1\t3\t0\n{IMGS[6]}\t{IMGS[7]}#1\t0.666666666666667\t2\t1\n"
                 f"{IMGS[7]}\t{IMGS[7]}#1\t1\t3\t0\n{IMGS[7]}\t{IMGS[6]}#3\t0.333333333333333\t1\t2\n")
    (t / "CrowdFlowerAnnotations.txt").write_text(crowd)
    d = root / "Flicker8k_Dataset"
    d.mkdir(exist_ok=True)
    for im in IMGS[:2]:
        Image.new("RGB", (40, 30), (200, 10, 10)).save(d / im)
    return root


def load(root, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_flickr8k(root, **kw)


# ------------------------------------------------------------------------------------ the mini bundle
def test_mini_bundle_loads(tmp_path):
    lemma = "".join(f"{im}#{k}\tlemma {k} {im}\n" for im in reversed(IMGS) for k in range(5)
                    if (im, k) != (IMGS[0], 2)) + "9999_zzz.jpg#0\tstray lemma\n"
    root = write_bundle(tmp_path, lemma=lemma)
    with pytest.warns(UserWarning) as rec:
        c = load_flickr8k(root)
    msgs = " | ".join(str(w.message) for w in rec)
    assert "1 captions have no (or an empty) lemma line" in msgs and "1 lemma lines for unknown" in msgs
    assert c.caption(f"{IMGS[0]}#1").lemma == f"lemma 1 {IMGS[0]}"  # mapped by id, not by line
    assert c.caption(f"{IMGS[0]}#2").lemma is None
    assert c.fixed_pools["test"] == (f"{IMGS[6]}#3", f"{IMGS[7]}#1")
    p = hodosh_pool(c, "test")
    np.testing.assert_array_equal(p.relevance, [[True, True], [False, True]])
    assert c.has_image(IMGS[0]) and not c.has_image(IMGS[5])
    np.testing.assert_allclose(c.load_image(IMGS[0])[0, 0], [200, 10, 10], atol=4)  # JPEG is lossy


def test_text_files_directly_in_root_and_images_folder_names(tmp_path):
    write_bundle(tmp_path / "a")
    flat = tmp_path / "b"
    (tmp_path / "a" / "Flickr8k_text").rename(flat)
    (tmp_path / "a" / "Flicker8k_Dataset").rename(flat / "Images")
    c = load(flat)
    assert len(c.image_ids) == 8 and c.has_image(IMGS[1])
    assert c.image_path(IMGS[0]) == flat / "Images" / IMGS[0]


# ------------------------------------------------------------------------------------ caption files
@pytest.mark.parametrize("bad_line, match", [
    ("1000_abc.jpg#0 no tab here", "no TAB"),
    ("1000_abc.jpg#x\tcaption", "malformed caption id"),
    ("1000_abc.jpg#\u00b2\tcaption", "malformed caption id"),          # '²'.isdigit() but int('²') fails
    ("1000_abc.jpg\tcaption", "malformed caption id"),
    ("#0\tcaption", "malformed caption id"),
    ("1000_abc.jpg#0\t   ", "empty caption"),
    ("1000_abc.jpg#0\tduplicate", "duplicate caption id"),
    ("1000_abc.jpg#00\tthe same number written with a zero", r"duplicate caption id 1000_abc\.jpg#00 \(first on line 1\)"),
])
def test_malformed_caption_line(tmp_path, bad_line, match):
    good = "1000_abc.jpg#0\tA dog runs .\n1001_abc.jpg#0\tA cat sits .\n"
    f = tmp_path / "Flickr8k.token.txt"
    f.write_text(good + "\n" + bad_line + "\n")
    with pytest.raises(CorpusError, match=match) as ei:
        parse_token_file(f)
    assert ei.value.line == 4  # blank line 3 is skipped but counted
    assert str(ei.value).startswith(f"{f}:4: ")


def test_non_utf8_bytes_name_the_line(tmp_path):
    token = b"1000_abc.jpg#0\tA dog .\n1000_abc.jpg#1\tA caf\xe9 sign .\n"
    f = tmp_path / "t.txt"
    f.write_bytes(token)
    with pytest.raises(CorpusError, match=r"t\.txt:2: not valid UTF-8"):
        parse_token_file(f)
    root = write_bundle(tmp_path / "bundle", token=token)
    with pytest.raises(CorpusError, match=r"Flickr8k\.token\.txt:2: not valid UTF-8"):
        load(root)


def test_non_utf8_after_a_bom_names_the_right_line_and_byte(tmp_path):
    """utf-8-sig counts positions after the BOM it skips: every reader adds it back."""
    from corpora.checksums import read_checksum_file
    from corpora.flickr8k import parse_captions_csv

    bom = b"\xef\xbb\xbf"
    cases = [("t.txt", bom + b"1000_abc.jpg#0\tA dog .\n\xff1000_abc.jpg#1\tA cat .\n", parse_token_file),
             ("captions.csv", bom + b"image,caption\n\xffa.jpg,A dog .\n", parse_captions_csv),
             ("ck.txt", bom + b"d41d8cd98f00b204e9800998ecf8427e  a.jpg\n\xff\n", read_checksum_file),
             ("dataset_x.json", bom + b'{"images":\n [\xff]}', load_karpathy)]
    for name, data, reader in cases:
        f = tmp_path / name
        f.write_bytes(data)
        with pytest.raises(CorpusError, match=rf"{name.replace('.', '[.]')}:2: not valid UTF-8 \(byte b'\\xff'") as e:
            reader(f)
        assert e.value.line == 2, name


def test_checksum_file_reads_cr_line_ends_and_names_both_lines_of_a_duplicate(tmp_path):
    """The checksum reader splits lines as every other reader does (a bare CR ends a line: two entries,
    not one with the second line glued into the first path)."""
    from corpora.checksums import read_checksum_file

    md5 = b"0123456789abcdef0123456789abcdef"
    ck = tmp_path / "ck.txt"
    ck.write_bytes(md5 + b"  Flicker8k_Dataset/a.jpg\r" + md5 + b"  Flicker8k_Dataset/b.jpg\r")
    assert read_checksum_file(ck) == {"a.jpg": (md5.decode(), "Flicker8k_Dataset/a.jpg"),
                                      "b.jpg": (md5.decode(), "Flicker8k_Dataset/b.jpg")}
    ck.write_bytes(md5 + b"  a.jpg\n" + md5 + b"  b.jpg\n" + md5 + b"  a.jpg\n")
    with pytest.raises(CorpusError, match=r"ck\.txt:3: a\.jpg listed twice \(first on line 1\)"):
        read_checksum_file(ck)


def test_crlf_and_bom_accepted(tmp_path):
    f = tmp_path / "t.txt"
    f.write_bytes(b"\xef\xbb\xbf1000_abc.jpg#0\tA dog .\r\n1000_abc.jpg#1\tA cat .\r\n")
    recs = parse_token_file(f)
    assert [(r.caption_id, r.text) for r in recs] == [("1000_abc.jpg#0", "A dog ."), ("1000_abc.jpg#1", "A cat .")]


# ------------------------------------------------------------------------------------ annotations
@pytest.mark.parametrize("which, row, match", [
    ("expert", f"9999_nope.jpg\t{IMGS[7]}#1\t1\t1\t1", "unknown image id '9999_nope.jpg'"),
    ("expert", f"{IMGS[7]}\t9999_nope.jpg#1\t1\t1\t1", "unknown caption id"),
    ("expert", f"{IMGS[7]}\t{IMGS[7]}#1\t1\t5\t1", r"scores must be in 1\.\.4"),
    ("expert", f"{IMGS[7]}\t{IMGS[7]}#1\t1\tx\t1", "must be integers"),
    ("expert", f"{IMGS[7]}\t{IMGS[7]}#1\t1\t1", "expected 5 TAB-separated columns"),
    ("crowd", f"9999_nope.jpg\t{IMGS[7]}#1\t1\t3\t0", "unknown image id"),
    ("crowd", f"{IMGS[7]}\t{IMGS[7]}#1\t1.5\t3\t0", r"fraction yes must be in \[0, 1\]"),
    ("crowd", f"{IMGS[7]}\t{IMGS[7]}#1\t0.5\t3\t0", "disagrees with"),
    ("crowd", f"{IMGS[7]}\t{IMGS[7]}#1\tyes\t3\t0", "bad crowd values"),
    ("crowd", f"{IMGS[7]}\t{IMGS[7]}#1\t0\t0\t0", "at least one judgment"),
])
def test_bad_annotation_rows(tmp_path, which, row, match):
    good = f"{IMGS[6]}\t{IMGS[6]}#3\t1\t3\t0\n" if which == "crowd" else f"{IMGS[6]}\t{IMGS[6]}#3\t4\t4\t4\n"
    root = write_bundle(tmp_path, **{which: good + row + "\n"})
    name = "CrowdFlowerAnnotations.txt" if which == "crowd" else "ExpertAnnotations.txt"
    with pytest.raises(CorpusError, match=match) as ei:
        load(root)
    assert ei.value.line == 2 and ei.value.path.name == name


def test_crowd_file_without_one_caption_per_test_image(tmp_path):
    crowd = f"{IMGS[6]}\t{IMGS[6]}#3\t1\t3\t0\n{IMGS[6]}\t{IMGS[6]}#4\t1\t3\t0\n"
    root = write_bundle(tmp_path, crowd=crowd)
    with pytest.raises(CorpusError, match=r"CrowdFlowerAnnotations\.txt: .*2 of 2 test images differ"):
        load(root)


def test_bad_split_files(tmp_path):
    root = write_bundle(tmp_path / "a", splits={"train": IMGS[:4] + ["9999_nope.jpg"], "dev": IMGS[4:6],
                                                "test": IMGS[6:]})
    with pytest.raises(CorpusError, match=r"trainImages\.txt:5: image 9999_nope\.jpg has no captions"):
        load(root)
    root = write_bundle(tmp_path / "b", splits={"train": IMGS[:4], "dev": IMGS[4:6], "test": IMGS[5:]})
    with pytest.raises(CorpusError, match=r"testImages\.txt:1: image 1005_abc\.jpg is also in split 'dev'"):
        load(root)
    for split in ("test", "dev", "train"):   # an empty split file: one error naming it, not a silent 0-image split
        splits = {"train": IMGS[:4], "dev": IMGS[4:6], "test": IMGS[6:]}
        root = write_bundle(tmp_path / f"empty-{split}", splits={**splits, split: []})
        with pytest.raises(CorpusError, match=rf"{split}Images\.txt: the {split} split file lists no image ids"):
            load(root)


def test_bogus_id_generalised(tmp_path):
    token = "".join(f"{im}#{k}\tcap {k} .\n" for im in IMGS for k in range(5)) + "1001_abc.jpg.1#0\tghost .\n"
    root = write_bundle(tmp_path, token=token)
    with pytest.warns(UserWarning, match=r"'1001_abc\.jpg\.1' \(lines 41-41, 1 captions\)"):
        c = load_flickr8k(root)
    assert "1001_abc.jpg.1" not in c.captions and len(c.image_ids) == 8


# ------------------------------------------------------------------------------------ images
def test_corrupt_and_non_image_files(tmp_path):
    good = tmp_path / "good.jpg"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(good, quality=90)
    trunc = tmp_path / "truncated.jpg"
    trunc.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CorpusError, match=r"truncated\.jpg: cannot read image"):
        read_image(trunc)
    text = tmp_path / "notes.jpg"
    text.write_text("this is not an image")
    with pytest.raises(CorpusError, match=r"notes\.jpg: cannot read image"):
        read_image(text)
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    with pytest.raises(CorpusError, match="empty.jpg"):
        read_image(empty)
    with pytest.raises(MissingImagesError, match="absent.jpg"):
        read_image(tmp_path / "absent.jpg")
    assert read_image(good).shape == (64, 64, 3)


def test_a_jpeg_whose_data_ends_before_its_header_says_is_refused(tmp_path):
    """A header claiming 9000 x 9000 on a small photo, or scan data cut short before an end marker: the
    decoder fills the rest with grey without any error; read_image refuses the file, naming it (whole and
    draft decodes alike).  A photo with a single row of that grey is still read."""
    import struct

    rng = np.random.default_rng(3)
    photo = rng.integers(0, 255, (120, 160, 3), dtype=np.uint8)
    photo[-1] = 128
    good = tmp_path / "good.jpg"
    Image.fromarray(photo).save(good, quality=95)
    data = bytearray(good.read_bytes())
    sof = data.find(b"\xff\xc0")
    assert struct.unpack(">HH", bytes(data[sof + 5:sof + 9])) == (120, 160)
    data[sof + 5:sof + 9] = struct.pack(">HH", 9000, 9000)
    big = tmp_path / "big.jpg"
    big.write_bytes(bytes(data))
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2] + b"\xff\xd9")
    for path, size in ((big, "9000 x 9000"), (cut, "160 x 120")):
        for max_side in (None, 64):
            with pytest.raises(CorpusError, match=rf"{path.name}: JPEG data ends before the {size} image its "
                                                   "header declares"):
                read_image(path, max_side=max_side)
    assert read_image(good).shape == (120, 160, 3)


def test_grayscale_to_rgb(tmp_path):
    p = tmp_path / "gray.png"
    Image.fromarray(np.arange(60, dtype=np.uint8).reshape(6, 10), mode="L").save(p)
    a = read_image(p)
    assert a.shape == (6, 10, 3) and a.dtype == np.uint8
    assert (a[..., 0] == a[..., 1]).all() and (a[..., 1] == a[..., 2]).all() and a[0, 7, 0] == 7
    p1 = tmp_path / "bw.png"
    Image.new("1", (5, 4), 1).save(p1)
    assert read_image(p1).min() == 255


def test_rgba_composited_on_white(tmp_path):
    arr = np.zeros((4, 4, 4), dtype=np.uint8)
    arr[..., 0] = 200                 # red ...
    arr[:, :2, 3] = 255               # ... opaque on the left half
    arr[:, 2:, 3] = 0                 # fully transparent on the right half
    arr[0, 3, 3] = 128                # half transparent pixel
    p = tmp_path / "rgba.png"
    Image.fromarray(arr, mode="RGBA").save(p)
    a = read_image(p)
    assert a.shape == (4, 4, 3)
    assert a[0, 0].tolist() == [200, 0, 0]
    assert a[1, 3].tolist() == [255, 255, 255]
    assert abs(int(a[0, 3, 0]) - 227) <= 1 and abs(int(a[0, 3, 1]) - 127) <= 1  # 0.5*200+0.5*255, 0.5*255
    la = tmp_path / "la.png"
    Image.fromarray(arr[..., [0, 3]], mode="LA").save(la)
    assert read_image(la)[1, 3].tolist() == [255, 255, 255]


def test_cmyk_palette_and_16bit(tmp_path):
    cmyk = tmp_path / "cmyk.jpg"
    Image.new("CMYK", (8, 8), (0, 255, 255, 0)).save(cmyk, quality=100)  # pure red in CMYK
    a = read_image(cmyk)
    assert a.shape == (8, 8, 3) and a[4, 4, 0] > 230 and a[4, 4, 1] < 25 and a[4, 4, 2] < 25
    tif = tmp_path / "cmyk.tif"
    Image.new("CMYK", (3, 3), (255, 0, 0, 0)).save(tif)  # cyan
    assert read_image(tif)[0, 0].tolist() == [0, 255, 255]
    pal = Image.new("P", (4, 4), 0)
    pal.putpalette([10, 20, 30, 250, 240, 230] + [0] * 762)
    pal.putpixel((1, 1), 1)
    pp = tmp_path / "pal.png"
    pal.save(pp)
    a = read_image(pp)
    assert a[0, 0].tolist() == [10, 20, 30] and a[1, 1].tolist() == [250, 240, 230]
    pt = tmp_path / "pal_transparent.png"
    pal.save(pt, transparency=0)  # palette entry 0 is transparent -> white
    a = read_image(pt)
    assert a[0, 0].tolist() == [255, 255, 255] and a[1, 1].tolist() == [250, 240, 230]
    p16 = tmp_path / "gray16.png"
    Image.fromarray(np.array([[0, 257 * 100, 65535]], dtype=np.uint16)).save(p16)
    a = read_image(p16)
    assert a[0, :, 0].tolist() == [0, 100, 255] and a.shape == (1, 3, 3)
    f32 = Image.fromarray(np.array([[0.0, 127.6, 255.0]], dtype=np.float32), mode="F")
    assert np.asarray(to_rgb(f32))[0, :, 1].tolist() == [0, 128, 255]


def test_exif_orientation_applied(tmp_path):
    arr = np.zeros((20, 40, 3), dtype=np.uint8)
    arr[:, :20] = (255, 0, 0)  # left half red, right half blue as stored
    arr[:, 20:] = (0, 0, 255)
    img = Image.fromarray(arr)
    exif = img.getexif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    p = tmp_path / "rot.jpg"
    img.save(p, exif=exif, quality=95)
    a = read_image(p)
    assert a.shape == (40, 20, 3)            # upright: portrait
    assert a[2, 10, 0] > 200 and a[2, 10, 2] < 60     # stored-left (red) is now on top
    assert a[-3, 10, 2] > 200 and a[-3, 10, 0] < 60


# ------------------------------------------------------------------------------------ captions.txt CSV
CSV_TEXT = ('image,caption\n'
            '1000_abc.jpg,"A dog, brown and white, runs ."\n'
            '1000_abc.jpg,"A dog says ""woof"" ."\n'
            '1001_abc.jpg,A cat sits .\n'
            '\n'
            '1001_abc.jpg,"A cat\non two lines ."\n')


def test_captions_csv_parse(tmp_path):
    f = tmp_path / "captions.txt"
    f.write_text(CSV_TEXT)
    recs = parse_captions_csv(f)
    assert [(r.caption_id, r.text) for r in recs] == [
        ("1000_abc.jpg#0", "A dog, brown and white, runs ."), ("1000_abc.jpg#1", 'A dog says "woof" .'),
        ("1001_abc.jpg#0", "A cat sits ."), ("1001_abc.jpg#1", "A cat on two lines .")]
    assert [r.line for r in recs] == [2, 3, 4, 7]


@pytest.mark.parametrize("text, line, match", [
    ("img,text\na.jpg,x\n", 1, "header must name columns"),
    ("image,caption\na.jpg,A dog, runs\n", 2, "expected 2 columns"),
    ("image,caption\na.jpg,ok\na.jpg,  \n", 3, "empty caption"),
    ("", 1, "empty file"),
])
def test_captions_csv_errors(tmp_path, text, line, match):
    f = tmp_path / "captions.txt"
    f.write_text(text)
    with pytest.raises(CorpusError, match=match) as ei:
        parse_captions_csv(f)
    assert ei.value.line == line


def test_captions_csv_layout_autodetected_with_seeded_split(tmp_path):
    ids = [f"{2000 + i}_k.jpg" for i in range(16)]
    (tmp_path / "captions.txt").write_text(
        "image,caption\n" + "".join(f"{im},A thing {k} .\n" for im in ids for k in range(5)))
    (tmp_path / "Images").mkdir()
    Image.new("L", (5, 5), 9).save(tmp_path / "Images" / ids[0])
    with pytest.warns(UserWarning, match="seeded split .*NOT the official"):
        c = load_flickr8k(tmp_path)
    assert {k: len(v) for k, v in c.splits.items()} == {"train": 12, "dev": 2, "test": 2}
    assert c.splits == seeded_split(ids, 0)
    assert c.has_image(ids[0]) and c.load_image(ids[0]).shape == (5, 5, 3)
    assert c.caption(f"{ids[3]}#4").text == "A thing 4 ." and c.caption(f"{ids[3]}#4").lemma is None
    c2 = load(tmp_path, split_seed=1)
    assert c2.splits != c.splits
    # With split files beside the CSV, they are used.
    for s, part in (("train", ids[:10]), ("dev", ids[10:13]), ("test", ids[13:])):
        (tmp_path / f"Flickr_8k.{s}Images.txt").write_text("\n".join(part))
    c3 = load_captions_csv(tmp_path / "captions.txt", tmp_path / "Images")
    assert c3.splits["dev"] == tuple(ids[10:13])
    # split files in split_dir, judgment files beside the CSV: both are read (the judgments used to be
    # ignored whenever split_dir was given)
    (tmp_path / "splits").mkdir()
    for s in ("train", "dev", "test"):
        (tmp_path / f"Flickr_8k.{s}Images.txt").rename(tmp_path / "splits" / f"Flickr_8k.{s}Images.txt")
    (tmp_path / "ExpertAnnotations.txt").write_text(f"{ids[13]}\t{ids[14]}#2\t1\t2\t1\n")
    c4 = load_captions_csv(tmp_path / "captions.txt", tmp_path / "Images", split_dir=tmp_path / "splits")
    assert c4.splits == c3.splits
    assert [(j.image_id, j.caption_id, j.scores) for j in c4.expert] == [(ids[13], f"{ids[14]}#2", (1, 2, 1))]


def test_seeded_split_sizes():
    ids = [f"{i}.jpg" for i in range(8091)]
    s = seeded_split(ids, 0)
    assert {k: len(v) for k, v in s.items()} == {"train": 6000, "dev": 1000, "test": 1000}
    assert not set(s["train"]) & set(s["test"])
    assert s == seeded_split(list(reversed(ids)), 0)  # order of the input does not matter
    with pytest.raises(ValueError):
        seeded_split(ids[:10], 0, n_train=10)


# ------------------------------------------------------------------------------------ Karpathy JSON
def karpathy_json(images):
    return {"dataset": "coco", "images": images}


def kimg(fn, split, n=2, filepath=None, sid0=0):
    d = {"filename": fn, "split": split, "sentids": list(range(sid0, sid0 + n)),
         "sentences": [{"raw": f"  A photo {k} of {fn} .", "tokens": ["a", "photo"], "sentid": sid0 + k}
                       for k in range(n)]}
    if filepath:
        d["filepath"] = filepath
    return d


def test_karpathy_json(tmp_path):
    imgs = [kimg("a.jpg", "train", filepath="train2014"), kimg("b.jpg", "restval", filepath="val2014"),
            kimg("c.jpg", "val", 3, filepath="val2014"), kimg("d.jpg", "test", filepath="val2014"),
            kimg("e.jpg", "test", filepath="val2014")]
    f = tmp_path / "dataset_coco.json"
    f.write_text(json.dumps(karpathy_json(imgs)))
    (tmp_path / "val2014").mkdir()
    Image.new("RGB", (6, 4), (1, 2, 3)).save(tmp_path / "val2014" / "c.jpg")
    c = load_karpathy(f, images_dir=tmp_path)
    assert c.name == "coco"
    assert c.splits == {"train": ("a.jpg", "b.jpg"), "dev": ("c.jpg",), "test": ("d.jpg", "e.jpg")}
    assert [x.id for x in c.captions_of("c.jpg")] == ["c.jpg#0", "c.jpg#1", "c.jpg#2"]
    assert c.caption("c.jpg#1").text == "A photo 1 of c.jpg ."
    assert c.image_path("a.jpg") == tmp_path / "train2014" / "a.jpg"
    assert c.has_image("c.jpg") and not c.has_image("d.jpg")
    np.testing.assert_allclose(c.load_image("c.jpg")[0, 0], [1, 2, 3], atol=3)
    p = hodosh_pool(c, "test", seed=0)
    assert p.n_images == 2 and p.relevance.sum() == 2
    t = load_karpathy(f, name="mycoco")
    assert t.name == "mycoco" and t.image_paths is None and not t.has_image("c.jpg")


@pytest.mark.parametrize("payload, match", [
    ('{"images": [\n{"filename": "a.jpg",\n "split": "train" "sentences": []}]}', r"\.json:3: invalid JSON"),
    (json.dumps(karpathy_json([kimg("a.jpg", "holdout")])), r"images\[0\] \(a\.jpg\): unknown split"),
    (json.dumps(karpathy_json([{"filename": "a.jpg", "split": "train"}])), r"images\[0\] has no 'sentences'"),
    (json.dumps(karpathy_json([kimg("a.jpg", "train"), kimg("a.jpg", "test")])), "duplicate filename"),
    (json.dumps(karpathy_json([{"filename": "a.jpg", "split": "val", "sentences": [{"raw": " "}]}])),
     "sentence 0 is empty"),
    (json.dumps({"imgs": []}), "expected a JSON object with an 'images' list"),
    (json.dumps(karpathy_json([{**kimg("a.jpg", "train"), "sentids": 5}])), "'sentids' must be a list"),
])
def test_karpathy_json_errors(tmp_path, payload, match):
    f = tmp_path / "dataset_flickr8k.json"
    f.write_text(payload)
    with pytest.raises(CorpusError, match=match):
        load_karpathy(f)
