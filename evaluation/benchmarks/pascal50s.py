"""Pascal-50S (Vedantam et al. 2015, "CIDEr: Consensus-based image description evaluation", CVPR)
in its public release format, as read by CLIPScore (Hessel et al. 2021, Sec. 4 and App.;
github.com/jmhessel/clipscore issue #4) and PAC-S (Sarto et al. 2023, Table 2).

Files (``pyCIDErConsensus.zip`` of the CIDEr release, vrama91.github.io/cider):

``pair_pascal.mat``
    ``new_input``: 1 × 4000 MATLAB struct array, one element per candidate pair with three char fields,
    read by position: the image file name (``2008_000032.jpg``, relative to ``VOC2010/JPEGImages``),
    candidate A, candidate B.  ``category``: 1 × 4000, 1 = HC (two correct human captions),
    2 = HI (a human caption of the image vs one of another image), 3 = HM (human vs machine),
    4 = MM (two machine captions).  ``new_data``: 4000 × 2, the source of each candidate (1–5 machine
    systems, 6 human, 7 human caption of another image); when present it is checked against ``category``.
``consensus_pascal.mat``
    ``triplets``: 1 × 192000 struct array, 48 consecutive elements per pair (pair ``i`` owns
    ``48 i … 48 i + 47``), each with four fields read by position: a reference sentence (1 × 1 cell with a
    char array), candidate A and candidate B (likewise), and the vote (1: A is closer to the reference,
    −1: B is).  The 48 references of a pair are its image's 48 reference sentences.

Protocol (CLIPScore, PAC-S): the human preference of a pair is the candidate with more of its 48 votes
(a 24–24 tie is broken at random, seeded); each metric sees 5 references sampled from the 48 and the
accuracy is averaged over 5 draws (:func:`evaluation.correlation.pairwise_accuracy` with ``n_refs=5,
n_draws=5``); reported per category and as the mean of the four.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.io

from evaluation.benchmarks.common import BenchmarkFormatError
from evaluation.correlation import PairwiseRecord

__all__ = ["PASCAL50S_CATEGORIES", "PASCAL50S_PAIR_FILE", "PASCAL50S_CONSENSUS_FILE", "PASCAL50S_VOTES_PER_PAIR",
           "find_pascal50s_files", "load_pascal50s"]

#: ``category`` value -> name (Vedantam et al. 2015).
PASCAL50S_CATEGORIES = {1: "HC", 2: "HI", 3: "HM", 4: "MM"}
PASCAL50S_PAIR_FILE = "pair_pascal.mat"
PASCAL50S_CONSENSUS_FILE = "consensus_pascal.mat"
#: Votes (= reference sentences) per pair in ``consensus_pascal.mat``.
PASCAL50S_VOTES_PER_PAIR = 48
_RELEASE_SUBDIR = "pyCIDErConsensus"


def find_pascal50s_files(folder: str | Path) -> tuple[Path, Path]:
    """``(pair_pascal.mat, consensus_pascal.mat)`` in ``folder`` or in its ``pyCIDErConsensus/``
    subfolder (the layout of the unpacked release); :class:`BenchmarkFormatError` naming the expected
    file when one is missing."""
    folder = Path(folder)
    for base in (folder, folder / _RELEASE_SUBDIR):
        if (base / PASCAL50S_PAIR_FILE).is_file() or (base / PASCAL50S_CONSENSUS_FILE).is_file():
            break
    else:
        base = folder
    pair, consensus = base / PASCAL50S_PAIR_FILE, base / PASCAL50S_CONSENSUS_FILE
    for p in (pair, consensus):
        if not p.is_file():
            raise BenchmarkFormatError(f"Pascal-50S file not found (expected {PASCAL50S_PAIR_FILE} and "
                                       f"{PASCAL50S_CONSENSUS_FILE} in {folder} or {folder / _RELEASE_SUBDIR})", p)
    return pair, consensus


def _loadmat(path: Path, variables: Sequence[str]) -> dict:
    try:
        mat = scipy.io.loadmat(str(path))
    except Exception as exc:  # scipy raises ValueError, TypeError, OSError ... for a damaged file
        raise BenchmarkFormatError(f"not a MATLAB .mat file that scipy.io.loadmat can read "
                                   f"({type(exc).__name__}: {exc})", path) from None
    for v in variables:
        if v not in mat:
            has = sorted(k for k in mat if not k.startswith("__"))
            raise BenchmarkFormatError(f"variable {v!r} missing (the file has {has})", path)
    return mat


def _row_vector(mat: dict, name: str, path: Path) -> np.ndarray:
    """A 1 × N variable (as MATLAB saves a row) as a flat array; another shape is an error."""
    v = np.asarray(mat[name])
    if v.ndim != 2 or v.shape[0] != 1:
        raise BenchmarkFormatError(f"variable {name!r} has shape {v.shape}, expected 1 × N", path, record=name)
    return v.reshape(-1)


def _unwrap(value):
    """Strip the 1-element array layers scipy puts around MATLAB cells and char arrays."""
    for _ in range(8):
        if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.names is None:
            value = value.reshape(-1)[0]
        else:
            break
    return value


def _text(value, path: Path, record: str) -> str:
    v = _unwrap(value)
    if isinstance(v, str):
        return v.strip()
    what = f"array of shape {v.shape}" if isinstance(v, np.ndarray) else type(v).__name__
    raise BenchmarkFormatError(f"expected a sentence (a char array, possibly in a 1 × 1 cell), got {what}",
                               path, record=record)


def _fields(element, n: int, path: Path, record: str) -> tuple:
    """The first ``n`` fields of one element of a MATLAB struct array (read by position)."""
    names = getattr(getattr(element, "dtype", None), "names", None)
    if not names or len(names) < n:
        raise BenchmarkFormatError(f"expected a struct with {n} fields, got "
                                   f"{len(names) if names else 'no'} field(s)", path, record=record)
    return tuple(element[k] for k in range(n))


def _implied_category(sources: np.ndarray) -> int | None:
    """Category implied by the two candidate sources of ``new_data`` (1–5 machine, 6 human, 7 human
    caption of another image), the rule of the CLIPScore issue-#4 reader."""
    machine = int((sources < 6).sum())
    if machine == 2:
        return 4
    if machine == 1:
        return 3
    return {12: 1, 13: 2}.get(int(sources.sum()))


def _read_pairs(path: Path) -> tuple[list[tuple[str, str, str]], list[str]]:
    """``[(image file, candidate A, candidate B)]`` and the category names of ``pair_pascal.mat``."""
    mat = _loadmat(path, ("new_input", "category"))
    inputs = _row_vector(mat, "new_input", path)
    cats = _row_vector(mat, "category", path)
    if cats.size != inputs.size:
        raise BenchmarkFormatError(f"category has {cats.size} entries but new_input has {inputs.size}", path,
                                   record="category")
    pairs = []
    for i, el in enumerate(inputs):
        rec = f"new_input[0, {i}]"
        pairs.append(tuple(_text(f, path, rec) for f in _fields(el, 3, path, rec)))
    names = []
    for i, c in enumerate(cats):
        c = _unwrap(c)
        if not isinstance(c, (int, float, np.number)) or float(c) not in PASCAL50S_CATEGORIES:
            raise BenchmarkFormatError(f"category {c!r} out of range (1 = HC, 2 = HI, 3 = HM, 4 = MM)", path,
                                       record=f"category[0, {i}]")
        names.append(PASCAL50S_CATEGORIES[int(c)])
    if "new_data" in mat:
        _check_sources(np.asarray(mat["new_data"]), [int(_unwrap(c)) for c in cats], path)
    return pairs, names


def _check_sources(new_data: np.ndarray, cats: list[int], path: Path) -> None:
    if new_data.shape != (len(cats), 2):
        raise BenchmarkFormatError(f"new_data has shape {new_data.shape}, expected ({len(cats)}, 2)", path,
                                   record="new_data")
    for i, (row, c) in enumerate(zip(new_data, cats)):
        implied = _implied_category(np.asarray(row, dtype=float))
        if implied != c:
            raise BenchmarkFormatError(
                f"candidate sources {row.tolist()} imply category "
                f"{PASCAL50S_CATEGORIES.get(implied, 'none')} but category[0, {i}] is {PASCAL50S_CATEGORIES[c]}",
                path, record=f"new_data[{i}]")


def _vote_value(v, path: Path, record: str) -> int:
    v = _unwrap(v)
    if not isinstance(v, (int, float, np.number)) or float(v) not in (1.0, -1.0):
        raise BenchmarkFormatError(f"vote must be 1 (first candidate) or -1 (second), got {v!r}", path,
                                   record=record)
    return int(v)


def _read_votes(path: Path, pairs: list[tuple[str, str, str]], pair_path: Path
                ) -> tuple[list[list[str]], np.ndarray]:
    """References and ``(votes for A, votes for B)`` of every pair from ``consensus_pascal.mat``."""
    mat = _loadmat(path, ("triplets",))
    trip = _row_vector(mat, "triplets", path)
    k = PASCAL50S_VOTES_PER_PAIR
    if trip.size != k * len(pairs):
        raise BenchmarkFormatError(f"triplets has {trip.size} elements, expected {k} per pair × {len(pairs)} "
                                   f"pairs of {pair_path.name} = {k * len(pairs)}", path, record="triplets")
    refs: list[list[str]] = []
    votes = np.zeros((len(pairs), 2), dtype=np.int64)
    for i, (_, a, b) in enumerate(pairs):
        refs.append([])
        for j in range(i * k, (i + 1) * k):
            rec = f"triplets[0, {j}]"
            ref, ca, cb, vote = _fields(trip[j], 4, path, rec)
            ca, cb = _text(ca, path, rec), _text(cb, path, rec)
            if (ca, cb) == (a, b):
                first_is_a = True
            elif (ca, cb) == (b, a):
                first_is_a = False
            else:
                raise BenchmarkFormatError(f"candidates {ca!r} / {cb!r} are not those of pair {i} of "
                                           f"{pair_path.name} ({a!r} / {b!r})", path, record=rec)
            refs[-1].append(_text(ref, path, rec))
            votes[i, 0 if (_vote_value(vote, path, rec) == 1) == first_is_a else 1] += 1
    return refs, votes


def load_pascal50s(folder: str | Path, *, seed: int = 0) -> list[PairwiseRecord]:
    """The 4,000 Pascal-50S pairs as :class:`~evaluation.correlation.PairwiseRecord` (see the module
    docstring for the files and the protocol).

    Parameters
    ----------
    folder : str or Path
        Holds ``pair_pascal.mat`` and ``consensus_pascal.mat``, directly or in ``pyCIDErConsensus/``.
    seed : int
        Breaks the pairs whose 48 votes are split 24–24 (CLIPScore breaks them at random).

    Returns
    -------
    list of PairwiseRecord
        In file order.  ``image_id`` is the image's file name relative to ``VOC2010/JPEGImages``;
        ``references`` are the pair's 48 reference sentences (pass ``n_refs=5, n_draws=5`` to
        :func:`~evaluation.correlation.pairwise_accuracy`); ``preferred`` is 0 when more votes chose
        ``candidate_a``; ``category`` is ``"HC"``, ``"HI"``, ``"HM"`` or ``"MM"``.

    Raises
    ------
    BenchmarkFormatError
        One error naming the file and the variable / element: a missing file or variable, a shape
        that is not the release's, a category outside 1–4 (or contradicting ``new_data``), a vote that
        is not ±1, or a triplet whose candidates are not those of its pair.
    """
    pair_path, consensus_path = find_pascal50s_files(folder)
    pairs, cats = _read_pairs(pair_path)
    refs, votes = _read_votes(consensus_path, pairs, pair_path)
    rng = np.random.default_rng(seed)
    out = []
    for (image, a, b), cat, r, (va, vb) in zip(pairs, cats, refs, votes):
        preferred = 0 if va > vb else 1 if vb > va else int(rng.integers(2))
        out.append(PairwiseRecord(image_id=image, candidate_a=a, candidate_b=b, references=tuple(r),
                                  preferred=preferred, category=cat))
    return out
