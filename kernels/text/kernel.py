# Size (~960 lines): one estimator, TextKernel, whose BoW / TagRank / soft-TRI Gram paths share its fitted state.
"""The text kernels of Hodosh et al. (2013), Sec. 3.4, behind one scikit-learn-style class.

>>> tk = TextKernel.from_name("TRI5SEM")            # = TRI5_{A,D_ext+ic}^{sqrt idf}
>>> tk.fit(corpus, corpus.split("train"))
>>> K = tk.gram_train()                            # (n_train, n_train) float32
>>> Q = tk.gram_queries(captions)                  # (n_q, n_train) float32

Names (ASCII spelling of the paper's Appendix B; see :data:`PAPER_NAMES` and ``docs/text_kernels.md``)::

    BoW1  BoW5  BoW5^idf  BoW5^sqrtidf  TagRank  TRI1  TRI5  TRI5^sqrtidf
    TRI5_Lin  TRI5_D_ic  TRI5_D_ext  TRI5_D_ext+ic  TRI5_A  TRI5_A,D_ic  TRI5_A,D_ext  TRI5_A,D_ext+ic
    (each TRI5_* also with ^sqrtidf)   TRI5SEM = TRI5_A,D_ext+ic^sqrtidf

LaTeX-ish spellings (``TRI5_{A,D_{ext}+ic}^{\\sqrt{idf}}``, ``√idf``) are accepted by :meth:`from_name`.
"""
from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

import kernels.text.bow as _bow
import kernels.text.native as native
import kernels.text.tri as _tri
from corpora.base import Caption, Corpus, caption_key_text
from corpora.cache import NO_CACHE, DiskCache
from corpora.protocol import select_caption_index
from kernels.text.blocks import gram_on_executor, queries_on_executor, text_columns
from kernels.text.items import apply_diag, clip_psd, normalise_items, symmetrise_inplace
from kernels.text.packing import PackedArrays
from kernels.text.preprocess import Preprocessor, ProcessedCaption, Vocabulary
from kernels.text.similarity import build_word_kernel, external_corpus_identity
from kernels.text.tagrank import TagRank
from kernels.threads import default_threads, torch_threads

KINDS = ("BoW", "TagRank", "TRI")
SIMILARITY_PARTS = ("D_ic", "D_ext", "D_ext+ic", "A", "Lin")

#: The paper's system names (Appendix B), ASCII spelling -> constructor arguments.
PAPER_NAMES: dict[str, dict] = {
    "BoW1": dict(kind="BoW", captions_per_item=1),
    "BoW5": dict(kind="BoW", captions_per_item=5, merge=True),
    "BoW5^idf": dict(kind="BoW", captions_per_item=5, merge=True, idf="idf"),
    "BoW5^sqrtidf": dict(kind="BoW", captions_per_item=5, merge=True, idf="sqrt"),
    "TagRank": dict(kind="TagRank", captions_per_item=5),
    "TRI1": dict(kind="TRI", captions_per_item=1),
    "TRI5": dict(kind="TRI", captions_per_item=5),
    "TRI5^sqrtidf": dict(kind="TRI", captions_per_item=5, idf="sqrt"),
}
for _s in ("Lin", "D_ic", "D_ext", "D_ext+ic", "A", "A,D_ic", "A,D_ext", "A,D_ext+ic"):
    PAPER_NAMES[f"TRI5_{_s}"] = dict(kind="TRI", captions_per_item=5, similarity=_s)
    PAPER_NAMES[f"TRI5_{_s}^sqrtidf"] = dict(kind="TRI", captions_per_item=5, similarity=_s, idf="sqrt")
PAPER_NAMES["TRI5SEM"] = dict(kind="TRI", captions_per_item=5, similarity="A,D_ext+ic", idf="sqrt")


def _canonical_name(name: str) -> str:
    s = name.strip().replace("√", "sqrt").replace("\\sqrt", "sqrt").replace(" ", "")
    s = s.replace("{", "").replace("}", "").replace("sqrt(idf)", "sqrtidf")
    s = re.sub(r"D_?BNC", "D_ext", s)
    s = s.replace("D_ext+D_ic", "D_ext+ic").replace("D_ext,ic", "D_ext+ic")
    return s


def parse_similarity(spec: str | None) -> tuple[str, ...]:
    """``"A,D_ext+ic"`` -> ``("A", "D_ext+ic")`` (components combined by max, Eq. 27)."""
    if spec is None or spec == "" or spec == "none":
        return ()
    parts = tuple(p.strip() for p in spec.split(","))
    for p in parts:
        if p not in SIMILARITY_PARTS:
            raise ValueError(f"similarity={spec!r}: unknown component {p!r} (expected {SIMILARITY_PARTS}, "
                             f"comma-separated)")
    return parts


def _progress(total: int, desc: str, enabled: bool):
    return tqdm(total=total, desc=desc, disable=not enabled, leave=False, mininterval=1.0)


class TextKernel:
    """BoW / TagRank / TRI text kernels between items (a training image's captions) and queries.

    Parameters
    ----------
    kind : {"BoW", "TagRank", "TRI"}
        Sentence kernel: cosine of tf vectors (Sec. 3.4.1), TagRank (Eqs. 9-11), gapped-subsequence
        kernel (Eqs. 15-16; with ``similarity``: Eqs. 17-21).
    captions_per_item : {5, 1}
        5: all captions of a training image; 1: one caption chosen per image with
        :func:`corpora.protocol.select_caption_index` (``seed``).
    merge : bool
        BoW only: merge an item's captions into one document (BoW5).  Otherwise the item kernel is the
        normalised sum over the caption cross product (:mod:`kernels.text.items`).
    idf : {"none", "idf", "sqrt"}
        Word weights omega_w = 1, lambda_w, sqrt(lambda_w) with lambda_w = log(|D|/(|D(w)|+1)), ``D`` the
        training images (each image's captions merged into one document; Sec. 3.4.1, Eq. 16).
    similarity : str or None
        TRI only: lexical similarities, e.g. ``"A"``, ``"D_ic"``, ``"D_ext+ic"``, ``"Lin"``,
        ``"A,D_ext+ic"`` (comma = max, Eq. 27).
    diag : float
        Multiply the training Gram's diagonal by ``diag`` (text kernel regularisation).
    lambda_m : float
        TRI match decay (0.5).
    max_len : int
        Longest subsequence (3).
    external_corpus : path or None
        Plain-text file (one sentence per line) for D_ext; ``None`` = NLTK Brown corpus.
    seed : int
        Caption choice for ``captions_per_item=1``.
    cache : DiskCache or None
        Caches Gram matrices and similarity tables (key: corpus fingerprint, ids, every parameter).
    show_progress : bool
        tqdm bars for long steps.
    psd : {"none", "clip"}
        What to do with possibly indefinite Grams (Eq. 27's max): nothing, or clip negative eigenvalues.
    n_threads : int or None
        torch threads for the torch soft-matching DP, the fallback without the compiled kernel (``None`` =
        leave torch's setting).  Its float sums may depend on the number of threads, hence one by default
        (the systems run side by side on threads, :func:`kcca.runner.run_systems`, and
        ``ITR_NUM_THREADS=1`` means one).  TagRank's kernel blocks, the soft-TRI self-kernels and the
        compiled kernel's paths are numpy / C and never import torch.
    native_threads : int or None
        OpenMP threads of the compiled soft-TRI kernel (``None`` = ``$ITR_NUM_THREADS`` or every usable
        core, as the image kernels).  Its result does not depend on them: each Gram entry is summed by one
        thread, in a fixed order.
    block_entries : int
        Size (float32 entries) of each DP work buffer.
    row_block : int
        Row captions per DP block.
    min_count : int
        Minimum training count of words in the similarity vocabularies (5).
    backend : {"auto", "native", "torch"}
        Soft-TRI DP implementation: the compiled C kernel (:mod:`kernels.text.native`, built on first
        use), the torch one, or native-if-available (both exact, same result up to float rounding).

    Attributes
    ----------
    feature_block : int
        Documents per block when the explicit BoW / TRI features are built (bounds their memory; the
        features do not depend on it).
    """

    feature_block: int = 20_000

    def __init__(self, kind: str = "TRI", captions_per_item: int = 5, merge: bool = False, idf: str = "none",
                 similarity: str | None = None, diag: float = 1.0, lambda_m: float = 0.5, max_len: int = 3,
                 external_corpus=None, seed: int = 0, cache: DiskCache | None = None,
                 show_progress: bool = True, psd: str = "none", n_threads: int | None = 1,
                 native_threads: int | None = None, block_entries: int = 1 << 22, row_block: int = 64,
                 min_count: int = 5, backend: str = "auto", name: str | None = None):
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r}: expected one of {KINDS}")
        if captions_per_item not in (1, 5):
            raise ValueError(f"captions_per_item={captions_per_item!r}: expected 5 or 1")
        if idf not in _bow.IDF_MODES:
            raise ValueError(f"idf={idf!r}: expected one of {_bow.IDF_MODES}")
        if merge and kind != "BoW":
            raise ValueError(f"merge=True is only defined for kind='BoW' (got kind={kind!r})")
        if backend not in ("auto", "native", "torch"):
            raise ValueError(f"backend={backend!r}: expected 'auto', 'native' or 'torch'")
        if psd not in ("none", "clip"):
            raise ValueError(f"psd={psd!r}: expected 'none' or 'clip'")
        if not 1 <= int(max_len) <= 3:
            raise ValueError(f"max_len={max_len!r}: expected 1, 2 or 3")
        self.sim_parts = parse_similarity(similarity)
        if self.sim_parts and kind != "TRI":
            raise ValueError(f"similarity={similarity!r} is only defined for kind='TRI'")
        self.kind, self.captions_per_item, self.merge, self.idf = kind, int(captions_per_item), bool(merge), idf
        self.similarity = ",".join(self.sim_parts) or None
        self.diag, self.lambda_m, self.max_len = float(diag), float(lambda_m), int(max_len)
        self.external_corpus = external_corpus
        self.seed, self.cache = int(seed), (cache if cache is not None else NO_CACHE)
        self.show_progress, self.psd, self.n_threads = show_progress, psd, n_threads
        self.native_threads = native_threads
        self.block_entries = int(block_entries)
        self.row_block = int(row_block)
        self.backend = backend
        self.min_count = int(min_count)
        self.name = name or self._default_name()
        #: The Dask block executor of the last :meth:`fit` (a cluster only; ``None``: in this process).
        self.executor = None
        self._fitted = False

    # ------------------------------------------------------------------ names
    def _default_name(self) -> str:
        n = f"{self.kind}{self.captions_per_item}" if self.kind != "TagRank" else "TagRank"
        if self.similarity:
            n += "_" + self.similarity
        if self.idf != "none":
            n += "^" + ("sqrtidf" if self.idf == "sqrt" else "idf")
        return n

    @classmethod
    def from_name(cls, name: str, **kwargs) -> "TextKernel":
        """Build a paper system by name (Appendix B; ASCII or LaTeX-ish spelling)."""
        key = _canonical_name(name)
        if key not in PAPER_NAMES:
            raise ValueError(f"unknown text kernel name {name!r} (known: {sorted(PAPER_NAMES)})")
        args = dict(PAPER_NAMES[key])
        args.update(kwargs)
        return cls(name=key, **args)

    def params(self) -> dict:
        return {"kind": self.kind, "cpi": self.captions_per_item, "merge": self.merge, "idf": self.idf,
                "sim": self.similarity, "lambda_m": self.lambda_m, "max_len": self.max_len,
                "ext": self.ext_identity(), "seed": self.seed, "min_count": self.min_count, "version": 3}

    def ext_identity(self) -> dict | None:
        """The external corpus as cache keys see it (:func:`~kernels.text.similarity.external_corpus_identity`:
        path, size, mtime), or ``None`` when no similarity uses D_ext (the file is then never read)."""
        if not any("D_ext" in part for part in self.sim_parts):
            return None
        return external_corpus_identity(self.external_corpus)

    # ------------------------------------------------------------------ fit
    def fit(self, corpus: Corpus, train_ids: Sequence[str], executor=None) -> "TextKernel":
        """Vocabulary, IDF, compound rules and lexical similarities from the *training* captions.

        ``executor`` (:class:`~corpora.parallel.BlockExecutor`, optional): captions without corpus POS
        tags are tagged on its cluster's workers (:func:`~kernels.text.preprocess.pos_tags`), and on a
        cluster TagRank's and soft TRI's training Gram and query rows are computed there in blocks
        (:mod:`kernels.text.blocks`; the same numbers as in one process).

        The IDF ``lambda_w = log(|D| / (|D(w)| + 1))`` of Hodosh et al. (2013), Sec. 3.4.1 and Eq. 16
        (and the word weights of the lexical-similarity kernels, Eqs. 17-21) counts documents over the
        training *images*: ``D`` is the set of items, each item's captions merged into one document
        (:meth:`item_documents`), whether or not the kernel itself merges them.
        """
        self.corpus_fingerprint = corpus.fingerprint
        self.train_ids = tuple(train_ids)
        caps: list[Caption] = []
        n_per: list[int] = []
        for im in self.train_ids:
            cs = corpus.captions_of(im)
            if not cs:
                raise ValueError(f"TextKernel.fit: training image {im!r} has no captions in corpus {corpus.name!r}")
            if self.captions_per_item == 1:
                cs = (cs[select_caption_index(im, len(cs), self.seed)],)
            caps.extend(cs)
            n_per.append(len(cs))
        self.train_captions = caps
        self.item_of = np.repeat(np.arange(len(n_per)), n_per)
        self.n_items = len(n_per)
        self.pre = Preprocessor().fit(caps)
        self.processed: list[ProcessedCaption] = self.pre.transform(caps, tags=False, executor=executor,
                                                                    cache=self.cache, show_progress=self.show_progress)
        self._tagged = None
        self.vocab = Vocabulary(p.tokens for p in self.processed)
        self.V = len(self.vocab)
        if self.V > _tri.MAX_ID - 100_000:
            raise ValueError(f"vocabulary too large ({self.V} words) for subsequence codes")
        self.docs = [np.array(self.vocab.encode(p.tokens), dtype=np.int64) for p in self.processed]
        # IDF documents are the training *images* (an item's captions merged), for every kernel
        self.idf_values, self.idf_unseen = _bow.idf_weights(self.item_documents(), self.V)
        self.omega = _bow.word_weights(self.idf_values, self.idf)
        self.omega_unseen = float(_bow.word_weights(np.array([self.idf_unseen]), self.idf)[0])
        self._key = {"corpus": corpus.fingerprint, "train": list(self.train_ids), "params": self.params()}
        # everything derived from a previous fit goes (a second fit on other data must not reuse it)
        self._gram = None
        self._item_self = None
        self.word_kernel = None
        self._W = self._scale = self._train_self = None
        self.__dict__.pop("_tagrank", None)
        self.__dict__.pop("_postings", None)
        if self.sim_parts:
            self.word_kernel = build_word_kernel(self)
        if self.kind in ("BoW", "TRI") and not self.sim_parts:
            self._fit_features()
        self.executor = executor if executor is not None and executor.distributed else None
        self._fitted = True
        return self

    def item_documents(self) -> list[np.ndarray]:
        """Each training item's captions merged into one document (word ids), as for BoW5."""
        starts = np.r_[0, np.cumsum(np.bincount(self.item_of, minlength=self.n_items))]
        return [np.concatenate(self.docs[starts[i]:starts[i + 1]]) if starts[i + 1] > starts[i]
                else np.zeros(0, np.int64) for i in range(self.n_items)]

    @property
    def tagged(self) -> list[ProcessedCaption]:
        """The training captions preprocessed *with* POS tags (computed on first use; the alignment and
        Lin similarities need them, and are cached, so a cache hit never tags)."""
        if self._tagged is None:
            self._tagged = self.pre.transform(self.train_captions, tags=True, cache=self.cache,
                                              show_progress=self.show_progress)
            if [p.tokens for p in self._tagged] != [p.tokens for p in self.processed]:
                raise AssertionError("tagging changed the token sequence")
        return self._tagged

    def _check(self):
        if not self._fitted:
            raise RuntimeError("TextKernel: call fit(corpus, train_ids) first")

    def omega_of(self, ids: np.ndarray) -> np.ndarray:
        """Word weights ``omega_w`` of word ids (Sec. 3.4.1: 1, ``lambda_w`` or ``sqrt(lambda_w)``); ids
        ``>= V`` (words unseen in training) get the weight of an unseen word."""
        ids = np.asarray(ids)
        out = np.full(ids.shape, self.omega_unseen, dtype=np.float64)
        seen = ids < self.V
        out[seen] = self.omega[ids[seen]]
        return out

    def encode_queries(self, captions: Sequence[Caption]) -> list[np.ndarray]:
        """Preprocess query captions; unseen words get fresh ids ``>= V`` (distinct per word)."""
        proc = self.pre.transform(list(captions), tags=False, show_progress=self.show_progress)
        extra: dict[str, int] = {}
        out = []
        for p in proc:
            ids = []
            for t in p.tokens:
                i = self.vocab.index.get(t)
                if i is None:
                    i = extra.setdefault(t, self.V + len(extra))
                ids.append(i)
            out.append(np.array(ids, dtype=np.int64))
        return out

    # ------------------------------------------------------------------ explicit-feature kernels
    def _features(self, docs, columns=None):
        """Explicit feature matrix of ``docs`` (BoW, Eq. 12; subsequences, Eq. 16), built a block of
        documents at a time (:func:`kernels.text.tri.blocked_features_csr`)."""
        return _tri.blocked_features_csr(docs, self._occurrences, columns, block=self.feature_block)

    def _occurrences(self, docs):
        """``(rows, codes, values)``: one entry per feature occurrence in ``docs`` (not yet summed)."""
        if self.kind == "BoW":
            if not docs:
                return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
            rows = np.concatenate([np.full(len(d), i) for i, d in enumerate(docs)])
            codes = np.concatenate(docs).astype(np.int64)
            return rows, codes, self.omega_of(codes)
        return _tri.subsequence_features(docs, self.max_len, self.lambda_m, self.omega_of)

    def _fit_features(self):
        if self.merge:
            X, self.columns, norms = self._features(self.item_documents())
            self.F_items = _bow.row_normalise(X, norms)
        else:
            X, self.columns, norms = self._features(self.docs)
            Xn = _bow.row_normalise(X, norms)
            P = sp.csr_matrix((np.ones(len(self.item_of)), (self.item_of, np.arange(len(self.item_of)))),
                              shape=(self.n_items, len(self.item_of)))
            self.F_items = (P @ Xn).tocsr()
        self._item_self = np.asarray(self.F_items.multiply(self.F_items).sum(axis=1)).ravel()

    # ------------------------------------------------------------------ Gram matrices
    def gram_train(self) -> np.ndarray:
        """Training Gram ``(n_train, n_train)`` float32, items normalised, diagonal times ``diag``."""
        self._check()
        if self._gram is None:
            arrays = self.cache.get_or_compute("text_gram", {"stage": "gram_train", **self._key},
                                               self._compute_gram)
            self._gram = arrays["K"].astype(np.float32)
            self._item_self = arrays["item_self"].astype(np.float64)
            if "train_self" in arrays and getattr(self, "_scale", None) is None:
                ts = arrays["train_self"].astype(np.float64)
                self._train_self = ts
                self._scale = np.where(ts > 0, 1.0 / np.sqrt(np.maximum(ts, 1e-300)), 0.0)
        K = self._gram.copy()
        if self.psd == "clip":
            K = clip_psd(K)
        return apply_diag(K, self.diag)

    def _compute_gram(self) -> dict:
        t0 = time.perf_counter()
        if self.kind == "TagRank":
            Kraw = (gram_on_executor(self, self.executor, self.cache) if self._rows_on_cluster() else
                    self._fitted_tagrank().gram(self.docs, self.item_of, self.n_items,
                                                show_progress=self.show_progress))
        elif self.sim_parts:
            Kraw = self._soft_gram()
        else:
            Kraw = _tri.sparse_gram(self.F_items).astype(np.float64)
        item_self = np.diag(Kraw).copy()
        r = np.where(item_self > 0, 1.0 / np.sqrt(np.maximum(item_self, 1e-300)), 0.0)
        Kraw *= r[:, None]
        Kraw *= r[None, :]
        K = Kraw.astype(np.float32)
        del Kraw
        self.last_gram_seconds = time.perf_counter() - t0
        out = {"K": K, "item_self": item_self}
        if self.sim_parts:
            out["train_self"] = self._train_self      # caption self-kernels, reused by gram_queries
        return out

    # ------------------------------------------------------------------ training Gram columns
    def columns_supported(self) -> bool:
        """Whether :meth:`gram_columns` can give training Gram columns without the whole Gram: BoW, TRI
        (with or without lexical similarities) and TagRank, unless ``psd="clip"`` (a clipped Gram needs
        all of its eigenvalues)."""
        return self.psd == "none"

    def gram_diagonal(self) -> np.ndarray:
        """The diagonal of :meth:`gram_train` ``(n_train,)`` float32, without the Gram: each item's
        normalised self-kernel (1, or 0 for an item without words) times ``diag``."""
        self._check()
        self._ensure_item_self()
        s = self._item_self.astype(np.float64)
        r = np.where(s > 0, 1.0 / np.sqrt(np.maximum(s, 1e-300)), 0.0)
        return ((s * r) * r).astype(np.float32) * np.float32(self.diag)

    def gram_columns(self, items: Sequence[int], executor=None, context=None) -> np.ndarray:
        """Columns ``items`` of :meth:`gram_train` ``(n_train, len(items))`` float32 without the
        ``n_train²`` Gram (the low-rank solver's pivot columns): the items' captions as queries against
        every training item (explicit features, Sec. 3.4.1 / Eqs. 15-16; or the soft-matching DP,
        Eqs. 17-21), normalised by the item self-kernels, the diagonal entry times ``diag``.  Computed in
        blocks of training items (:func:`kernels.text.blocks.text_columns`), on ``executor``'s Dask
        workers when given (``context``: this kernel as a :class:`corpora.parallel.Shared`, sent once for
        all columns), each block cached (key: the training Gram's key, the item and the block)."""
        self._check()
        if not self.columns_supported():
            raise NotImplementedError(f"{self.name}: no column access (psd='clip')")
        self._ensure_item_self()
        if self.sim_parts:
            self._train_scale()
            self.weighted_word_kernel()
        elif self.kind in ("BoW", "TRI") and context is None:
            self._feature_postings()    # made once here, not by the first blocks on several threads
        K = text_columns(self, [int(i) for i in items], executor, self.cache, context)
        diag = self.gram_diagonal()
        for k, i in enumerate(items):
            K[int(i), k] = diag[int(i)]
        return K

    def release_columns(self) -> None:
        """Drop what column access keeps between the columns of one decomposition (TagRank's postings of
        each block of training captions)."""
        tr = getattr(self, "_tagrank", None)
        if tr is not None:
            tr.forget_spans()
        self.__dict__.pop("_postings", None)

    #: What :meth:`column_block` never reads: the training captions and their preprocessing (at COCO size
    #: 0.65 GB of Python objects), left out of :meth:`column_context`.
    NOT_FOR_COLUMNS = ("train_captions", "processed", "_tagged")

    def column_context(self) -> "TextKernel":
        """What a Dask worker needs to compute :meth:`column_block`: :meth:`cluster_context` with the item
        self-kernels computed here too."""
        self._check()
        self._ensure_item_self()
        return self.cluster_context()

    def cluster_context(self) -> "TextKernel":
        """What a Dask worker needs to compute :meth:`column_block`, :meth:`gram_rows` and
        :meth:`query_rows`: a shallow copy of this fitted kernel without :attr:`NOT_FOR_COLUMNS`, with
        everything the blocks read computed here, once (TagRank's statistics, Eqs. 9-10; soft TRI's
        caption scales and weighted word kernel; the explicit features' postings), instead of on every
        worker.  Its blocks are this kernel's, bit for bit."""
        self._check()
        if self.kind == "TagRank":
            self._fitted_tagrank()
        if self.sim_parts:
            self._train_scale()
            self.weighted_word_kernel()
        elif self.kind in ("BoW", "TRI"):
            self._feature_postings()
        slim = object.__new__(type(self))   # a shallow copy that shares the arrays (no pickling round)
        slim.__dict__.update(self.__dict__)
        for name in self.NOT_FOR_COLUMNS:
            slim.__dict__[name] = None
        slim.__dict__["executor"] = None
        return slim

    def __getstate__(self) -> dict:
        """Pickled (e.g. sent to Dask workers) with the per-caption word ids packed into one array
        (:class:`~kernels.text.packing.PackedArrays`: a third of the Python objects once unpickled)."""
        state = dict(self.__dict__)
        state["executor"] = None                       # a connection to the cluster: this process's own
        state.pop("_native_inputs", None)              # rebuilt where used (it shares the word kernel)
        if isinstance(state.get("docs"), list):
            state["docs"] = PackedArrays(state["docs"], np.int64)
        return state

    def __setstate__(self, state: dict) -> None:
        if isinstance(state.get("docs"), PackedArrays):
            state = {**state, "docs": state["docs"].unpack()}
        self.__dict__.update(state)

    def column_cache_key(self) -> dict:
        """What the training Gram, and so each of its columns, depends on (corpus, training ids, every
        parameter)."""
        return {"stage": "gram_train", **self._key}

    def column_block(self, item: int, lo: int, hi: int) -> np.ndarray:
        """Training items ``lo:hi`` of the training Gram column of ``item`` (float32, before the diagonal
        factor), normalised by the item self-kernels: one block of :meth:`gram_columns`."""
        caps = np.flatnonzero(self.item_of == item)
        c0, c1 = np.searchsorted(self.item_of, [lo, hi])     # item_of is sorted: items' captions in a row
        if self.kind == "TagRank":
            raw = self._fitted_tagrank().item_block(caps, int(c0), int(c1), self.item_of[c0:c1] - lo, hi - lo)
        elif self.sim_parts:
            scale = self._train_scale()
            qdocs = [self.docs[c] for c in caps]
            args = (qdocs, scale[caps], self.docs[c0:c1], scale[c0:c1], self.item_of[c0:c1] - lo, hi - lo)
            Q = self._native(native.soft_cross_native, self.weighted_word_kernel(), *args,
                             self.max_len, self._native_threads())
            if Q is None:
                self.last_backend = "torch"
                Q = self._soft_cross(*args, symmetric=False, desc="soft TRI column")
            raw = np.asarray(Q, dtype=np.float64).sum(axis=0)
        else:
            raw = self._feature_column_block(item, lo, hi)
        s = self._item_self.astype(np.float64)
        return normalise_items(raw[:, None], s[lo:hi], s[[item]])[:, 0].astype(np.float32)

    def _feature_postings(self) -> np.ndarray:
        """The inverted index of the explicit item features that :meth:`_feature_column_block` reads: one
        sorted int64 key ``f · nnz + k`` per stored entry ``k`` of :attr:`F_items` (``f`` its feature), so
        each feature's occurrences are one ascending run, in item order.  Kept until
        :meth:`release_columns` (8 bytes per stored entry)."""
        keys = self.__dict__.get("_postings")
        if keys is None:
            F = self.F_items
            m = max(F.nnz, 1)
            if F.shape[1] >= np.iinfo(np.int64).max // m:
                raise OverflowError(f"{F.shape[1]} features x {F.nnz} entries do not fit int64 keys")
            keys = F.indices.astype(np.int64) * m + np.arange(F.nnz, dtype=np.int64)
            keys.sort()
            self._postings = keys
        return keys

    def _feature_column_block(self, item: int, lo: int, hi: int) -> np.ndarray:
        """``F[lo:hi] · F[item]^T`` (float64, unnormalised) through the inverted index: only the
        occurrences of the item's own features in the block are read, where a product with the block's
        rows reads every feature of every row (at COCO size tens of millions of entries a column for
        TRI).  The terms are added in the order of ``F``'s stored entries, starting from zero, as
        scipy's sparse product adds them, so each entry is that product's bit for bit (tested; ``F``'s
        rows need not be sorted)."""
        F, keys = self.F_items, self._feature_postings()
        m = max(F.nnz, 1)
        s, e = F.indptr[item], F.indptr[item + 1]
        base = F.indices[s:e].astype(np.int64) * m
        i0 = np.searchsorted(keys, base + F.indptr[lo])     # each feature's occurrences in rows lo:hi
        n = np.searchsorted(keys, base + F.indptr[hi]) - i0
        total = int(n.sum())
        if total == 0:
            return np.zeros(hi - lo)
        at = np.arange(total) + np.repeat(i0 - (np.cumsum(n) - n), n)
        k = keys[at] - np.repeat(base, n)                    # stored-entry positions
        v = np.repeat(F.data[s:e], n)
        order = np.argsort(k, kind="stable")                 # F's stored order: row by row, as stored
        k, v = k[order], v[order]
        rows = np.searchsorted(F.indptr, k, side="right") - 1 - lo
        return np.bincount(rows, weights=F.data[k] * v, minlength=hi - lo)

    def gram_queries(self, captions: Sequence[Caption], items: Sequence[int] | None = None) -> np.ndarray:
        """Kernel between each query caption and every training item: ``(n_q, n_train)`` float32; with
        ``items`` (training item positions, e.g. a low-rank factor's pivots), only against those items, in
        their order: ``(n_q, len(items))``, each entry the full row's (the item's captions alone enter it)."""
        self._check()
        captions = list(captions)
        h = hashlib.sha256()
        for c in captions:   # queries are not tagged: POS tags do not change their kernel rows
            h.update((caption_key_text(c, pos=False) + "\0").encode("utf-8"))
        key = {"stage": "gram_queries", "queries": h.hexdigest(), **self._key}
        if items is not None:
            items = np.asarray(items, dtype=np.int64).reshape(-1)
            if items.size and (items.min() < 0 or items.max() >= self.n_items):
                raise ValueError(f"items must be training item positions in [0, {self.n_items})")
            key["items"] = hashlib.sha256(items.tobytes()).hexdigest()
        return self.cache.get_or_compute("text_gram", key,
                                         lambda: {"Q": self._compute_queries(captions, items, key)})["Q"]

    def gram_queries_captions(self, captions: Sequence[Caption]) -> np.ndarray:
        """Sentence kernel between each query caption and every *training caption* (not item):
        ``(n_q, n_train_captions)`` float32, both sides normalised: the cosine of the explicit BoW
        (Sec. 3.4.1) or TRI (Eqs. 15-16) feature vectors, or the normalised soft TRI kernel (Eqs. 17-21),
        with this kernel's word weights.  Column ``c`` belongs to training item ``item_of[c]``.  Not
        defined for TagRank (``NotImplementedError``)."""
        self._check()
        if self.kind == "TagRank":
            raise NotImplementedError(f"{self.name}: no caption-level query kernel for TagRank")
        captions = list(captions)
        h = hashlib.sha256()
        for c in captions:
            h.update((caption_key_text(c, pos=False) + "\0").encode("utf-8"))
        key = {"stage": "gram_queries_captions", "queries": h.hexdigest(), **self._key}
        return self.cache.get_or_compute("text_gram", key,
                                         lambda: {"Q": self._compute_caption_queries(captions)})["Q"]

    def _compute_caption_queries(self, captions) -> np.ndarray:
        qdocs = self.encode_queries(captions)
        if self.sim_parts:
            return self._soft_queries(qdocs, per_caption=True).astype(np.float32)
        Xc, columns, norms = self._features(self.docs)
        Xc = _bow.row_normalise(Xc, norms)
        Xq, _, qnorms = self._features(qdocs, columns)
        Xq = _bow.row_normalise(Xq, qnorms)
        return _tri.sparse_gram(Xq.tocsr(), Xc.tocsr()).astype(np.float32)

    def _fitted_tagrank(self) -> TagRank:
        """The TagRank statistics of the training captions (Eqs. 9-11), fitted once."""
        if getattr(self, "_tagrank", None) is None:
            self._tagrank = TagRank().fit(self.docs, self.V)
        return self._tagrank

    def _ensure_item_self(self):
        """The items' unnormalised self-kernels: from the training Gram when it was built (its diagonal),
        else computed item by item without it (TagRank, soft TRI; explicit features have them from
        fitting)."""
        if self._item_self is not None:
            return
        if self.kind == "TagRank":
            self._item_self = self._fitted_tagrank().item_self(self.item_of, self.n_items)
        elif self.sim_parts:
            self._item_self = self._soft_item_self()

    def _item_captions(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The training captions (positions) of ``items`` in item order, and the item (counted in
        ``items``) of each."""
        starts = np.searchsorted(self.item_of, np.arange(self.n_items + 1))   # item_of is sorted
        counts = starts[items + 1] - starts[items]
        caps = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in items]) if len(items) else \
            np.zeros(0, np.int64)
        return caps, np.repeat(np.arange(len(items)), counts)

    def _compute_queries(self, captions, items: np.ndarray | None = None, key: dict | None = None) -> np.ndarray:
        """:meth:`gram_queries` without the cache: against every training item, or against ``items``
        (their captions only, in item order); on the fit's cluster (:meth:`_rows_on_cluster`) in blocks
        of query captions, each cached under ``key`` and its captions."""
        qdocs = self.encode_queries(captions)
        if self.kind == "TagRank" or self.sim_parts:
            self._ensure_item_self()
        item_self = self._item_self if items is None else self._item_self[items]
        if key is not None and self._rows_on_cluster():
            qscale = self._query_scales(qdocs) if self.sim_parts else None
            Q = queries_on_executor(self, qdocs, qscale, items, self.executor, self.cache, key)
        else:
            Q = self._query_rows(qdocs, items)
        return normalise_items(Q, np.ones(len(qdocs)), item_self).astype(np.float32)

    def _query_columns(self, items: np.ndarray | None) -> tuple:
        """``(captions, item_of, n_items)`` of the training items the queries are compared with: all of
        them (``captions`` ``None``), or those at positions ``items``."""
        if items is None:
            return None, self.item_of, self.n_items
        caps, item_of = self._item_captions(items)
        return caps, item_of, len(items)

    def _query_rows(self, qdocs, items: np.ndarray | None) -> np.ndarray:
        """Unnormalised rows of ``qdocs`` against the training items (or ``items``), in this process."""
        caps, item_of, n_items = self._query_columns(items)
        if self.kind == "TagRank":
            return self._fitted_tagrank().cross(qdocs, None, item_of, n_items, show_progress=self.show_progress,
                                                captions=caps)
        if self.sim_parts:
            return self._soft_queries(qdocs, captions=caps, col_item=item_of, n_cols=n_items)
        Xq, _, norms = self._features(qdocs, self.columns)
        Xq = _bow.row_normalise(Xq, norms)
        if items is None:
            return _tri.sparse_gram(Xq.tocsr(), self.F_items).astype(np.float64)
        # the dense / sparse split of the whole product: each entry is the full row's
        return _tri.sparse_gram(Xq.tocsr(), self.F_items[items],
                                dense=_tri.dense_features(Xq, self.F_items)).astype(np.float64)

    # ------------------------------------------------------------------ rows on a cluster
    def _rows_on_cluster(self) -> bool:
        """Whether the training Gram and query rows go to the fit's cluster in blocks
        (:mod:`kernels.text.blocks`): TagRank, and soft TRI with its compiled kernel; the explicit
        features' Grams are one sparse product here."""
        if self.executor is None:
            return False
        if self.kind == "TagRank":
            return True
        return bool(self.sim_parts) and self.backend != "torch" and self._native_gram_inputs() is not None

    def _native_gram_inputs(self):
        """The compiled soft-TRI kernel's inputs for the training Gram
        (:func:`~kernels.text.native.soft_gram_inputs`), made once; ``None`` when it is unavailable."""
        if "_native_inputs" not in self.__dict__:
            self.__dict__["_native_inputs"] = native.soft_gram_inputs(
                self.weighted_word_kernel(), self.docs, self._train_scale(), self.item_of, self.n_items,
                self.max_len)
        return self.__dict__["_native_inputs"]

    def gram_rows(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        """Rows ``lo:hi`` of the unnormalised training Gram before symmetrising, one block of
        :func:`~kernels.text.blocks.gram_on_executor`: TagRank, training captions ``lo:hi``
        (:meth:`~kernels.text.tagrank.TagRank.gram_rows`, ``R0, R1, ...``); soft TRI, items ``lo:hi``
        (:func:`~kernels.text.native.soft_gram_rows`, ``K``).  The entries are the one-process Gram's."""
        if self.kind == "TagRank":
            parts = self._fitted_tagrank().gram_rows(self.item_of, lo, hi)
            return {f"R{k}": R for k, R in enumerate(parts)}
        inputs = self._native_gram_inputs() if self.sim_parts else None
        rows = None if inputs is None else native.soft_gram_rows(inputs, lo, hi, self._native_threads())
        if rows is None:
            raise RuntimeError(f"{self.name}: Gram rows in blocks need TagRank or soft TRI's compiled kernel "
                               f"(kernels.text.native), which this process does not have")
        return {"K": rows}

    def add_gram_rows(self, K: np.ndarray, lo: int, hi: int, part: dict[str, np.ndarray]) -> None:
        """Add one block of :meth:`gram_rows` into the unnormalised item Gram ``K`` (before symmetrising)."""
        if self.kind == "TagRank":
            self._fitted_tagrank().add_gram_rows(K, self.item_of, lo, hi, [part[f"R{k}"] for k in range(len(part))])
        else:
            K[lo:hi] += part["K"]

    def query_rows(self, qdocs, qscale: np.ndarray | None, items: np.ndarray | None) -> np.ndarray:
        """Unnormalised rows of the query captions ``qdocs`` (word ids; soft TRI: ``qscale``, their scales
        from the whole query set, :meth:`_query_scales`) against the training items, or the items at
        positions ``items``: one block of :func:`~kernels.text.blocks.queries_on_executor`, each row the
        one-process row."""
        caps, item_of, n_items = self._query_columns(items)
        if self.kind == "TagRank":
            return self._fitted_tagrank().cross(qdocs, None, item_of, n_items, captions=caps)
        Q = self._soft_cross_rows(qdocs, qscale, caps, item_of, n_items) if self.sim_parts else None
        if Q is None:
            raise RuntimeError(f"{self.name}: query rows in blocks need TagRank or soft TRI's compiled kernel "
                               f"(kernels.text.native), which this process does not have")
        return Q

    # ------------------------------------------------------------------ soft matching (Eqs. 17-21)
    def weighted_word_kernel(self) -> np.ndarray:
        """``(V+1, V+1)`` float32: ``lambda_m^2 omega_u kappa(u, v) omega_v``; row/col ``V`` = 0 (sentinel
        for query words unseen in training)."""
        if getattr(self, "_W", None) is None:
            wk = self.word_kernel
            w = self.omega.astype(np.float64)
            lam2 = self.lambda_m ** 2
            W = np.zeros((self.V + 1, self.V + 1), dtype=np.float32)
            d = np.arange(self.V)
            W[d, d] = lam2 * w * w                       # identity outside the similarity vocabulary
            if len(wk.idx):
                wi = w[wk.idx]
                W[np.ix_(wk.idx, wk.idx)] = (lam2 * (wi[:, None] * wk.K * wi[None, :])).astype(np.float32)
            self._W = W
        return self._W

    def _kfun(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Weighted word kernel for integer id arrays; ids >= V are unseen words (identity with themselves:
        ``lambda_m^2 omega_unseen^2``)."""
        W = self.weighted_word_kernel()
        V = self.V
        out = W[np.minimum(u, V), np.minimum(v, V)]
        same_oov = (u == v) & (u >= V)
        if same_oov.any():
            out = np.where(same_oov, np.float32((self.lambda_m ** 2) * self.omega_unseen ** 2), out)
        return out

    def _self_kernels(self, docs) -> np.ndarray:
        """Unnormalised soft-TRI self-kernels ``k(s, s)`` of ``docs`` (:func:`~kernels.text.tri.soft_tri_pairs`,
        captions of one length at a time)."""
        lengths = np.array([len(d) for d in docs])
        out = np.zeros(len(docs))
        for n in np.unique(lengths):
            if n == 0:
                continue
            idx = np.nonzero(lengths == n)[0]
            t = np.stack([docs[i] for i in idx])
            for s in range(0, len(idx), 4096):
                out[idx[s:s + 4096]] = _tri.soft_tri_pairs(self._kfun, t[s:s + 4096], t[s:s + 4096], self.max_len)
        return out

    def _soft_item_self(self) -> np.ndarray:
        """``K(I, I) = sum_{s, s' in I} k^(s, s')`` from the within-item pairs only."""
        scale = self._train_scale()
        out = np.zeros(self.n_items)
        starts = np.r_[0, np.cumsum(np.bincount(self.item_of, minlength=self.n_items))]
        pa, pb = [], []
        for i in range(self.n_items):
            r = range(starts[i], starts[i + 1])
            for a in r:
                for b in r:
                    pa.append(a)
                    pb.append(b)
        pa, pb = np.array(pa), np.array(pb)
        la = np.array([len(self.docs[a]) for a in pa])
        lb = np.array([len(self.docs[b]) for b in pb])
        vals = np.zeros(len(pa))
        for n, m in set(zip(la.tolist(), lb.tolist())):
            if n == 0 or m == 0:
                continue
            sel = np.nonzero((la == n) & (lb == m))[0]
            ta = np.stack([self.docs[a] for a in pa[sel]])
            tb = np.stack([self.docs[b] for b in pb[sel]])
            vals[sel] = _tri.soft_tri_pairs(self._kfun, ta, tb, self.max_len)
        vals *= scale[pa] * scale[pb]
        np.add.at(out, self.item_of[pa], vals)
        return out

    def _train_scale(self) -> np.ndarray:
        if getattr(self, "_scale", None) is None:
            s = self._self_kernels(self.docs)
            self._train_self = s
            self._scale = np.where(s > 0, 1.0 / np.sqrt(np.maximum(s, 1e-300)), 0.0)
        return self._scale

    def _soft_cross(self, *args, **kwargs) -> np.ndarray:
        """:meth:`_soft_cross_dp` (the torch DP fallback) on ``n_threads`` torch threads."""
        with torch_threads(self.n_threads):
            return self._soft_cross_dp(*args, **kwargs)

    def _soft_cross_dp(self, row_docs, row_scale, col_docs, col_scale, col_item, n_col_items, symmetric: bool,
                       row_item=None, n_row_items=None, desc="soft TRI"):
        """Sum of normalised soft-TRI sentence kernels aggregated into items (see module doc).

        Returns ``(n_rows or n_row_items, n_col_items)`` float64.  With ``symmetric`` (rows = cols) only
        caption pairs ``a <= b`` are computed and the result is symmetrised.
        """
        import torch  # heavy (seconds to import): only this DP fallback (no compiled kernel) needs it

        W = torch.from_numpy(self.weighted_word_kernel())
        rl = np.array([len(d) for d in row_docs])
        cl = np.array([len(d) for d in col_docs])
        r_order = np.argsort(rl, kind="stable")
        c_order = np.argsort(cl, kind="stable")
        c_sorted_len = cl[c_order]
        c_groups = [(int(m), int(np.searchsorted(c_sorted_len, m, "left")), int(np.searchsorted(c_sorted_len, m, "right")))
                    for m in np.unique(c_sorted_len) if m > 0]
        col_ids = {m: torch.from_numpy(np.stack([col_docs[c] for c in c_order[s:e]]).clip(max=self.V))
                   for m, s, e in c_groups}
        col_sc = {m: torch.from_numpy(col_scale[c_order[s:e]].astype(np.float32)) for m, s, e in c_groups}
        col_it = {m: torch.from_numpy(col_item[c_order[s:e]].astype(np.int64)) for m, s, e in c_groups}
        n_out = n_row_items if row_item is not None else len(row_docs)
        out = torch.zeros((n_out, n_col_items), dtype=torch.float64)
        ws = _tri.SoftTRIWorkspace(self.block_entries)
        A_max = self.row_block
        # work units for the progress bar: sum over row chunks of (row len * remaining col entries)
        r_sorted_len = rl[r_order]
        chunks = []
        for n in np.unique(r_sorted_len):
            if n == 0:
                continue
            s, e = int(np.searchsorted(r_sorted_len, n, "left")), int(np.searchsorted(r_sorted_len, n, "right"))
            for cs in range(s, e, A_max):
                chunks.append((int(n), cs, min(cs + A_max, e)))
        total = 0
        for n, cs, ce in chunks:
            for m, s, e in c_groups:
                lo = max(s, cs) if symmetric else s
                if e > lo:
                    total += (ce - cs) * n * m * (e - lo)
        bar = _progress(total, desc, self.show_progress)
        for n, cs, ce in chunks:
            rows = r_order[cs:ce]
            A = len(rows)
            ta = torch.from_numpy(np.stack([row_docs[r] for r in rows]).clip(max=self.V))
            RT, PT = _tri.row_tables(W, ta)
            rsc = torch.from_numpy(row_scale[rows].astype(np.float32))
            if row_item is not None:
                r_it = torch.from_numpy(row_item[rows].astype(np.int64))
            for m, s, e in c_groups:
                lo = max(s, cs) if symmetric else s
                if e <= lo:
                    continue
                Bmax = max(1, self.block_entries // (n * m * A))
                for b0 in range(lo - s, e - s, Bmax):
                    b1 = min(b0 + Bmax, e - s)
                    Y = _tri.soft_tri_block(RT, PT, col_ids[m][b0:b1], ws, self.max_len)
                    Y *= col_sc[m][b0:b1, None]
                    Y *= rsc[None, :]
                    if symmetric and m == n:
                        # the square part (row chunk against itself) is computed twice -> weight 1/2
                        q0, q1 = max(b0 + s, cs), min(b1 + s, ce)
                        if q1 > q0:
                            Y[q0 - s - b0:q1 - s - b0] *= 0.5
                    T1 = torch.zeros((n_col_items, A), dtype=torch.float64)
                    T1.index_add_(0, col_it[m][b0:b1], Y.to(torch.float64))
                    if row_item is not None:
                        out.index_add_(0, r_it, T1.T.contiguous())
                    else:
                        out[torch.from_numpy(rows)] += T1.T
                    bar.update(A * n * m * (b1 - b0))
        bar.close()
        res = out.numpy()
        if symmetric:
            symmetrise_inplace(res)
        return res

    def _native(self, fn, *args):
        if self.backend == "torch":
            return None
        res = fn(*args)
        if res is None and self.backend == "native":
            raise RuntimeError("backend='native': the compiled soft-TRI kernel is unavailable (no C compiler, "
                               "compilation failed, or a caption longer than 64 content words)")
        self.last_backend = "native" if res is not None else "torch"
        return res

    def _native_threads(self) -> int:
        return int(self.native_threads) if self.native_threads else default_threads()

    def _soft_gram(self) -> np.ndarray:
        scale = self._train_scale()
        if self._rows_on_cluster():
            self.last_backend = "native"
            return gram_on_executor(self, self.executor, self.cache)
        K = self._native(native.soft_gram_native, self.weighted_word_kernel(), self.docs, scale,
                         self.item_of, self.n_items, self.max_len, self._native_threads(), self.show_progress)
        if K is not None:
            return K
        self.last_backend = "torch"
        return self._soft_cross(self.docs, scale, self.docs, scale, self.item_of, self.n_items, symmetric=True,
                                row_item=self.item_of, n_row_items=self.n_items, desc="soft TRI Gram")

    def _soft_queries(self, qdocs, per_caption: bool = False, captions: np.ndarray | None = None,
                      col_item: np.ndarray | None = None, n_cols: int | None = None) -> np.ndarray:
        """Sums of normalised soft-TRI sentence kernels of each query over each training item's captions,
        or (``per_caption``) each training caption's own normalised kernel.  ``captions``, ``col_item``,
        ``n_cols``: only those training captions, summed into ``n_cols`` columns by ``col_item``."""
        if col_item is None:
            col_item = np.arange(len(self.docs)) if per_caption else self.item_of
            n_cols = len(self.docs) if per_caption else self.n_items
        qscale = self._query_scales(qdocs)
        Q = self._native(self._soft_cross_rows, qdocs, qscale, captions, col_item, n_cols)
        if Q is not None:
            return Q
        self.last_backend = "torch"
        scale = self._train_scale()
        docs = self.docs if captions is None else [self.docs[int(c)] for c in captions]
        if captions is not None:
            scale = scale[captions]
        return self._soft_cross(qdocs, qscale, docs, scale, col_item, n_cols, symmetric=False,
                                desc="soft TRI queries")

    def _query_scales(self, qdocs) -> np.ndarray:
        """``1 / sqrt(k(q, q))`` of each query caption (0 for a caption without words), Eq. 21's
        normalisation (:meth:`_self_kernels`)."""
        qs = self._self_kernels(qdocs)
        return np.where(qs > 0, 1.0 / np.sqrt(np.maximum(qs, 1e-300)), 0.0)

    def _soft_cross_rows(self, qdocs, qscale, captions, col_item, n_cols) -> np.ndarray | None:
        """Queries x columns with the compiled kernel (:func:`~kernels.text.native.soft_cross_native`;
        each row summed on its own, in caption order), or ``None`` when it is unavailable."""
        scale = self._train_scale()
        docs = self.docs if captions is None else [self.docs[int(c)] for c in captions]
        if captions is not None:
            scale = scale[captions]
        return native.soft_cross_native(self.weighted_word_kernel(), qdocs, qscale, docs, scale, col_item,
                                        n_cols, self.max_len, self._native_threads())

    # ------------------------------------------------------------------ helpers
    def nearest_words(self, word: str, k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` words with the largest word-kernel value kappa(word, .) (excluding ``word``)."""
        self._check()
        if self.word_kernel is None:
            raise ValueError("nearest_words needs a similarity (e.g. similarity='A')")
        return self.word_kernel.nearest(word, k)

    def __repr__(self) -> str:
        return f"TextKernel({self.name!r})"
