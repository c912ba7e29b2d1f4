"""Loader for Karpathy's split files (``dataset_flickr8k.json``, ``dataset_flickr30k.json``,
``dataset_coco.json``; Karpathy & Fei-Fei 2015), so Flickr8k, Flickr30k and MS-COCO load into the same
:class:`~corpora.base.Corpus`.

File format::

    {"dataset": "flickr8k",
     "images": [{"filename": "1000268201_693b08cb0e.jpg",
                 "filepath": "val2014",                # COCO only: sub-folder of the image
                 "split": "train" | "val" | "test" | "restval",
                 "sentids": [0, 1, 2, 3, 4],
                 "sentences": [{"raw": "A child in a pink dress ...", "tokens": ["a", "child", ...],
                                "sentid": 0, "imgid": 0}, ...]}, ...]}

Mapping to the corpus:

* image id = ``filename`` (unique in all three files); image path = ``images_dir/filepath/filename``
  when ``filepath`` is present, else ``images_dir/filename``;
* caption ``k`` of an image = ``sentences[k]``: id ``"<filename>#<k>"``, text = ``raw`` (whitespace
  collapsed).  ``tokens`` are lower-cased word tokens, *not* lemmas, so ``Caption.lemma`` stays ``None``
  (the text side lemmatises);
* splits: ``train`` → ``"train"``, ``val`` → ``"dev"``, ``test`` → ``"test"``, ``restval`` → ``"train"``
  (the 30,504 COCO "restval" images are training images in Karpathy's own setup, giving the usual
  113,287 / 5,000 / 5,000 COCO split);
* there are no human judgments, so relevance is the original pairing only and no pool is fixed
  (:func:`corpora.protocol.hodosh_pool` chooses one caption per image from its seed); the corpus' notes
  (and so the main job's report) say so.

``filename`` and ``filepath`` come from the file and are not trusted: a name that is absolute or has a
``..`` part (it would leave ``images_dir``) is an error naming the image's position.

Errors (:class:`~corpora.base.CorpusError`): invalid JSON (with line), a missing key, an unknown split,
an empty caption, a duplicate filename, ``sentids`` inconsistent with ``sentences`` – each names the
file and the image's position in ``images``.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from corpora.base import Caption, Corpus, CorpusError, caption_id, decode_utf8
from corpora.images import PathImageLoader

__all__ = ["load_karpathy", "KARPATHY_SPLITS"]

#: Karpathy split name → corpus split name.
KARPATHY_SPLITS = {"train": "train", "restval": "train", "val": "dev", "test": "test"}


def _entry_captions(entry, n: int, seen: Mapping[str, object], path: Path) -> tuple[str, str, list[Caption]]:
    """``(filename, Karpathy split, captions)`` of the ``n``-th entry of the ``images`` list, checked
    (``seen``: the filenames read so far)."""
    where = f"images[{n}]"
    if not isinstance(entry, dict):
        raise CorpusError(f"{where} is not an object", path)
    try:
        filename = str(entry["filename"]).strip()
        ksplit = entry["split"]
        sentences = entry["sentences"]
    except KeyError as exc:
        raise CorpusError(f"{where} has no {exc.args[0]!r} key", path) from None
    if not filename:
        raise CorpusError(f"{where} has an empty filename", path)
    sub = str(entry.get("filepath") or "").strip()
    for part in (filename, sub):
        if Path(part).is_absolute() or ".." in Path(part).parts or "\\" in part:
            raise CorpusError(f"{where}: image path {part!r} would leave the images folder", path)
    if filename in seen:
        raise CorpusError(f"{where}: duplicate filename {filename!r}", path)
    if ksplit not in KARPATHY_SPLITS:
        raise CorpusError(f"{where} ({filename}): unknown split {ksplit!r} (expected one of "
                          f"{sorted(KARPATHY_SPLITS)})", path)
    if not isinstance(sentences, list) or not sentences:
        raise CorpusError(f"{where} ({filename}): 'sentences' must be a non-empty list", path)
    sentids = entry.get("sentids")
    if sentids is not None and not isinstance(sentids, list):
        raise CorpusError(f"{where} ({filename}): 'sentids' must be a list, got {sentids!r}", path)
    if sentids is not None and len(sentids) != len(sentences):
        raise CorpusError(f"{where} ({filename}): {len(sentids)} sentids for {len(sentences)} sentences",
                          path)
    caps = []
    for k, s in enumerate(sentences):
        raw = s.get("raw") if isinstance(s, dict) else None
        if raw is None and isinstance(s, dict) and s.get("tokens"):
            raw = " ".join(s["tokens"])
        text = " ".join(str(raw or "").split())
        if not text:
            raise CorpusError(f"{where} ({filename}): sentence {k} is empty or has no 'raw' text", path)
        caps.append(Caption(caption_id(filename, k), filename, k, text))
    return filename, ksplit, caps


def load_karpathy(json_path: str | Path, images_dir: str | Path | None = None,
                  name: str | None = None) -> Corpus:
    """Load a Karpathy ``dataset_*.json`` file as a :class:`Corpus`.

    Parameters
    ----------
    json_path : path
        ``dataset_flickr8k.json``, ``dataset_flickr30k.json`` or ``dataset_coco.json``.
    images_dir : path, optional
        Folder of the images (COCO: the folder holding ``train2014/`` and ``val2014/``).  ``None``
        builds a text-only corpus (``has_image`` is ``False``).
    name : str, optional
        Corpus name; default: the file's ``"dataset"`` field, else the file stem.
    """
    path = Path(json_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"Karpathy JSON not found: {path}")
    text = decode_utf8(path.read_bytes(), path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CorpusError(f"invalid JSON: {exc.msg} (column {exc.colno})", path, exc.lineno) from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise CorpusError("expected a JSON object with an 'images' list", path)
    name = name or str(data.get("dataset") or path.stem.removeprefix("dataset_"))
    idir = None if images_dir is None else Path(images_dir).expanduser()

    image_ids: list[str] = []
    captions: dict[str, tuple[Caption, ...]] = {}
    splits: dict[str, list[str]] = {"train": [], "dev": [], "test": []}
    paths = {}
    counts = {k: 0 for k in KARPATHY_SPLITS}
    for n, entry in enumerate(data["images"]):
        filename, ksplit, caps = _entry_captions(entry, n, captions, path)
        image_ids.append(filename)
        captions[filename] = tuple(caps)
        splits[KARPATHY_SPLITS[ksplit]].append(filename)
        counts[ksplit] += 1
        if idir is not None:
            sub = str(entry.get("filepath") or "").strip()
            paths[filename] = (idir / sub / filename) if sub else (idir / filename)

    notes = [f"{path.name}: {len(image_ids)} images, {sum(len(c) for c in captions.values())} captions; "
             f"Karpathy splits " + ", ".join(f"{k}={v}" for k, v in counts.items())
             + " (val -> dev, restval -> train)",
             "no human judgments: relevance is the original pairing (a caption is relevant to the image "
             "it was written for, and to no other)"]
    return Corpus(name=name, image_ids=tuple(image_ids), captions=captions,
                  splits={k: tuple(v) for k, v in splits.items() if v},
                  image_loader=None if idir is None else PathImageLoader(paths, name),
                  image_paths=None if idir is None else paths, notes=notes)
