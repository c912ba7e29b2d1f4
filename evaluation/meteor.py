"""METEOR 1.5, the official Java implementation (Denkowski & Lavie 2014), as the COCO caption evaluation
runs it.

The caption-metric papers (SPICE, CLIPScore, PAC-S) report METEOR from ``pycocoevalcap``: the
``meteor-1.5.jar`` of Denkowski & Lavie, started as ``java -jar -Xmx2G meteor-1.5.jar - - -stdio -l en
-norm`` beside its English paraphrase table (``data/paraphrase-en.gz``), fed PTB-tokenised, lower-cased
text.  Its segment score is

.. math::

    \\mathrm{METEOR} = (1 - \\mathrm{Pen}) \\cdot F_{mean}, \\qquad
    F_{mean} = \\frac{P R}{\\alpha P + (1 - \\alpha) R}, \\qquad
    \\mathrm{Pen} = \\gamma \\left(\\frac{ch}{m}\\right)^{\\beta}

(Denkowski & Lavie 2014, Eqs. 1–3, with the weighted exact / stem / synonym / paraphrase matches and the
``en`` task's tuned α, β, γ, δ), taken against the best-scoring reference.  This module speaks the jar's
``-stdio`` protocol itself (``SCORE ||| ref_1 ||| … ||| ref_n ||| hypothesis`` returns the statistics of
one segment; ``EVAL ||| stats_1 ||| … ||| stats_k`` returns each segment's score, then the aggregate), so
the per-caption scores are the jar's own.

The jar and its paraphrase table come from the optional ``pycocoevalcap`` package (``pip install -e
".[meteor]"``; the test extra installs it too) or from the folder named by ``$ITR_METEOR_JAR`` (the jar
file itself, with ``data/paraphrase-en.gz`` beside it).  A Java runtime must be on the ``PATH`` (Debian:
``apt-get install default-jre-headless``).  :func:`meteor15_available` says whether both are there and,
if not, what is missing; :func:`meteor_nltk` is the labelled fallback.

The fallback, :func:`meteor_nltk` (with :func:`meteor_available`), is METEOR computed with NLTK's
``meteor_score`` – a *variant* (exact, stem and WordNet-synonym matching; no paraphrase table; NLTK's
default parameters), not the Java METEOR 1.5 used by COCO.  Label it "METEOR (NLTK variant)".
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from evaluation.caption_metrics import check_caption_inputs, ptb_tokenize

__all__ = ["METEOR15_NAME", "Meteor15", "Meteor15Error", "find_meteor_jar", "meteor15", "meteor15_available",
           "meteor_available", "meteor_nltk"]

#: Display name of the official METEOR in tables.
METEOR15_NAME = "METEOR"
#: ``java`` options of the COCO caption evaluation (heap, stdio mode, English, normalisation).
JAVA_HEAP = "-Xmx2G"
METEOR_ARGS = ("-", "-", "-stdio", "-l", "en", "-norm")
#: Segments per ``EVAL`` request (keeps each request line a few MB at most).
EVAL_BATCH = 2000


class Meteor15Error(RuntimeError):
    """The METEOR 1.5 process could not be started or stopped answering; the message says why."""


def find_meteor_jar() -> Path | None:
    """The ``meteor-1.5.jar`` to run, with its ``data/paraphrase-en.gz`` beside it, or ``None``.

    ``$ITR_METEOR_JAR`` (a jar file) wins; otherwise the jar shipped in the installed ``pycocoevalcap``
    package (found without importing it).
    """
    env = os.environ.get("ITR_METEOR_JAR")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("pycocoevalcap")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        jar = Path(root) / "meteor" / "meteor-1.5.jar"
        if jar.is_file():
            return jar
    return None


def meteor15_available() -> tuple[bool, str]:
    """Whether the official METEOR 1.5 can run here; with the reason (what is missing) if not."""
    if shutil.which("java") is None:
        return False, ("no Java runtime on the PATH (METEOR 1.5 is a Java program: "
                       "apt-get install default-jre-headless)")
    jar = find_meteor_jar()
    if jar is None:
        return False, ("meteor-1.5.jar not found: pip install pycocoevalcap (the project's 'meteor' extra) "
                       "or set ITR_METEOR_JAR to the jar")
    if not jar.is_file():
        return False, f"ITR_METEOR_JAR={jar}: no such file"
    table = jar.parent / "data" / "paraphrase-en.gz"
    if not table.is_file():
        return False, f"{table}: the English paraphrase table METEOR 1.5 needs is missing"
    return True, f"METEOR 1.5 ({jar})"


def _segment_text(tokens: Sequence[str]) -> str:
    """One segment as the jar reads it: PTB tokens joined by single spaces, no field separator."""
    return " ".join(tokens).replace("|||", "").replace("  ", " ")


class Meteor15:
    """A running METEOR 1.5 process (a context manager; :meth:`close` stops it).

    Parameters
    ----------
    jar : path, optional
        Default :func:`find_meteor_jar`.
    """

    def __init__(self, jar: str | Path | None = None):
        ok, why = meteor15_available() if jar is None else (True, "")
        if not ok:
            raise Meteor15Error(why)
        self.jar = Path(jar) if jar is not None else find_meteor_jar()
        cmd = ["java", "-jar", JAVA_HEAP, self.jar.name, *METEOR_ARGS]
        try:
            self._proc = subprocess.Popen(cmd, cwd=self.jar.parent, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise Meteor15Error(f"cannot start {' '.join(cmd)}: {exc}") from exc
        self._stderr: list[bytes] = []
        # the jar logs to stderr; drain it so a full pipe never blocks the process
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()

    def _read_stderr(self) -> None:
        for line in self._proc.stderr:
            self._stderr.append(line)
            del self._stderr[:-20]

    def _ask(self, line: str, n_answers: int) -> list[str]:
        try:
            self._proc.stdin.write((line + "\n").encode("utf-8"))
            self._proc.stdin.flush()
            answers = [self._proc.stdout.readline().decode("utf-8").strip() for _ in range(n_answers)]
        except (BrokenPipeError, OSError) as exc:
            raise Meteor15Error(self._died(str(exc))) from exc
        if any(a == "" for a in answers):
            raise Meteor15Error(self._died("no answer"))
        return answers

    def _died(self, what: str) -> str:
        tail = b"".join(self._stderr[-5:]).decode("utf-8", "replace").strip()
        return f"METEOR 1.5 ({self.jar}) stopped answering ({what})" + (f": {tail}" if tail else "")

    def score(self, candidates: Sequence[str], references: Sequence[Sequence[str]], *,
              progress: bool = False) -> np.ndarray:
        """Segment-level METEOR 1.5 of each candidate against its references (float64, in [0, 1]).

        Texts are PTB-tokenised and lower-cased (:func:`~evaluation.caption_metrics.ptb_tokenize`), as
        the COCO evaluation's tokenizer does before METEOR sees them.
        """
        check_caption_inputs(candidates, references, "meteor15")
        out = np.empty(len(candidates), dtype=np.float64)
        starts = range(0, len(candidates), EVAL_BATCH)
        bar = tqdm(starts, desc="METEOR 1.5", unit="batch", leave=False, disable=not progress)
        for lo in bar:
            hi = min(len(candidates), lo + EVAL_BATCH)
            stats = []
            for cand, refs in zip(candidates[lo:hi], references[lo:hi]):
                fields = [_segment_text(ptb_tokenize(r)) for r in refs]
                line = " ||| ".join(("SCORE", *fields, _segment_text(ptb_tokenize(cand))))
                stats.append(self._ask(line, 1)[0])
            answers = self._ask(" ||| ".join(("EVAL", *stats)), hi - lo + 1)
            try:
                out[lo:hi] = [float(a) for a in answers[:-1]]
            except ValueError as exc:
                raise Meteor15Error(self._died(f"unreadable score {exc}")) from exc
        return out

    def close(self) -> None:
        """Stop the Java process."""
        proc = self._proc
        if proc.poll() is None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> "Meteor15":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def meteor15(candidates: Sequence[str], references: Sequence[Sequence[str]], *,
             progress: bool = False) -> np.ndarray:
    """Segment-level official METEOR 1.5 (see the module docstring); one Java process per call.

    Raises :class:`Meteor15Error` when Java or the jar is missing (:func:`meteor15_available` says which).
    """
    with Meteor15() as m:
        return m.score(candidates, references, progress=progress)


# ---------------------------------------------------------------------------------------------- NLTK variant
def meteor_available() -> tuple[bool, str]:
    """Whether NLTK's METEOR can run offline (needs the WordNet corpus); with a reason if not."""
    try:
        from corpora.nltk_resources import english_wordnet, find_resource
        from corpora.paths import ensure_nltk_data_path

        ensure_nltk_data_path()
        find_resource("corpora/wordnet")  # also finds wordnet.zip; never downloads
        english_wordnet().synsets("dog")
    except LookupError:
        return False, ("NLTK WordNet data not found: set NLTK_DATA (or ITR_SHARED) to a folder with "
                       "corpora/wordnet, or run `python -m nltk.downloader wordnet` once while online")
    except Exception as exc:  # pragma: no cover - environment specific
        return False, f"NLTK METEOR unavailable: {exc}"
    return True, ""


class _Lemma:
    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def name(self) -> str:
        return self._name


class _Synset:
    __slots__ = ("_lemmas",)

    def __init__(self, lemmas: tuple):
        self._lemmas = lemmas

    def lemmas(self) -> tuple:
        return self._lemmas


class _MemoWordNet:
    """Memoised stand-in for ``nltk.corpus.wordnet`` exposing exactly what NLTK's METEOR reads
    (``synsets(word)[k].lemmas()[m].name()``) – same answers, looked up once per word, on the toolkit's
    English WordNet reader (:func:`corpora.nltk_resources.english_wordnet`: no multilingual sense map)."""

    def __init__(self):
        from corpora.nltk_resources import english_wordnet

        self._wn = english_wordnet()
        self._memo: dict[str, list] = {}

    def synsets(self, word: str) -> list:
        v = self._memo.get(word)
        if v is None:
            v = self._memo[word] = [_Synset(tuple(_Lemma(l.name()) for l in s.lemmas()))
                                    for s in self._wn.synsets(word)]
        return v


class _MemoStemmer:
    def __init__(self):
        from nltk.stem import PorterStemmer

        self._stem = lru_cache(maxsize=200_000)(PorterStemmer().stem)

    def stem(self, word: str) -> str:
        return self._stem(word)


@lru_cache(maxsize=1)
def _cached_wordnet() -> _MemoWordNet:
    return _MemoWordNet()


@lru_cache(maxsize=1)
def _cached_stemmer() -> _MemoStemmer:
    return _MemoStemmer()


def meteor_nltk(candidates: Sequence[str], references: Sequence[Sequence[str]], *,
                alpha: float = 0.9, beta: float = 3.0, gamma: float = 0.5,
                progress: bool = False) -> np.ndarray:
    """METEOR (NLTK variant): ``nltk.translate.meteor_score.meteor_score`` on PTB tokens.

    NLTK's implementation (Banerjee & Lavie 2005 with exact, Porter-stem and WordNet-synonym matching,
    fragmentation penalty ``γ (chunks / matches)^β``, F_mean with α = 0.9) takes the maximum over
    references.  It is *not* METEOR 1.5 (no paraphrase table, different parameters), so its numbers are
    not comparable to COCO's Java METEOR; report it as "METEOR (NLTK variant)".
    Raises ``LookupError`` with instructions when WordNet is missing (nothing is downloaded).
    ``progress=True`` shows a tqdm bar (≈ 0.4 ms per candidate once WordNet is warm).
    """
    check_caption_inputs(candidates, references, "meteor_nltk")
    ok, why = meteor_available()
    if not ok:
        raise LookupError(why)
    from nltk.translate.meteor_score import meteor_score

    wn, stemmer = _cached_wordnet(), _cached_stemmer()
    out = np.empty(len(candidates), dtype=np.float64)
    memo: dict = {}
    pairs = zip(candidates, references)
    if progress:
        from tqdm import tqdm

        pairs = tqdm(pairs, total=len(candidates), desc="METEOR (NLTK variant)", unit="cap", leave=False)
    for i, (c, refs) in enumerate(pairs):
        key = (c, tuple(refs))
        v = memo.get(key)
        if v is None:
            v = memo[key] = meteor_score([ptb_tokenize(r) for r in refs],
                                         ptb_tokenize(c), stemmer=stemmer, wordnet=wn,
                                         alpha=alpha, beta=beta, gamma=gamma)
        out[i] = v
    return out
