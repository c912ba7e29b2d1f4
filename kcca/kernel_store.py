"""The fitted kernels of one corpus and training split, shared by every system of a run.

Hodosh et al. (2013) train 30 systems (Appendix B) on the same data; most share an image kernel (the
spatial pyramid, or the global histograms of the ``^Histo`` systems) and many a text kernel.  A
:class:`KernelStore` fits each kernel once and keeps what later systems reuse:

* per image kernel kind (:class:`ImageKernelEntry`): the fitted :class:`~kernels.image.ImageKernel`,
  its per-feature Gram matrices (training Gram, rows of a pool against the training images), the
  combined kernel of Eq. 6 ``K = [(K_C + K_T + K_S) / 3]^p`` per power ``p``, the κ-independent KCCA
  decomposition (:func:`kcca.solver.decompose`) per ``(p, solver settings)``, and per-image feature
  rows for caption metrics;  with the low-rank solver the decomposition reads only the training
  kernel's diagonal and the pivot columns incomplete Cholesky asks for (:meth:`ImageKernelEntry.column_source`),
  never the ``N × N`` training Gram;
* per text kernel name (:class:`TextKernelEntry`): the fitted :class:`~kernels.text.TextKernel`, query
  rows of a pool's captions, the decomposition of the training Gram with diagonal factor ``d`` per
  ``(d, solver settings)`` (low-rank: from the pivot columns, :meth:`TextKernelEntry.column_source`,
  for BoW, TRI and TagRank kernels; ``psd="clip"`` kernels still build the Gram), and per-text rows
  for caption metrics.

Everything expensive is also cached on disk by the kernels themselves (their ``DiskCache``).  A store
is shared by systems that run side by side on threads (:func:`kcca.runner.run_systems`): each kernel is
fitted once (the second thread waits for the first), and each entry serialises the calls that touch its
kernel (a re-entrant lock per entry; a text kernel's diagonal factor is state of the kernel object); an
image kernel guards its own visual words and kept histograms, so two systems' Gram rows of one image
kernel are computed side by side.  Decompositions are made under a second
lock per entry (``views_lock``), not the kernel's: an eigendecomposition of the training Gram (seconds on
one thread) then runs beside another system's Gram rows of the same kernel instead of holding them up.  A store
holds one training split; asking it for a kernel of another split is an error.  A caller that no longer
needs a text kernel drops it (:meth:`KernelStore.drop_text`) to free its Grams and decompositions.
"""
from __future__ import annotations

import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from corpora.parallel import BlockExecutor, Shared
from kcca.lowrank import KernelSource
from kcca.solver import decompose
from kernels.image.gram import combine_kernels
from kernels.image.kernel import ImageKernel
from kernels.text.kernel import TextKernel

__all__ = ["ImageKernelEntry", "RowsKey", "TextKernelEntry", "KernelStore", "view_key"]


def _entry_lock():
    return field(default_factory=threading.RLock, repr=False, compare=False)


def view_key(solver: str, decompose_kwargs: Mapping) -> tuple:
    """The part of a decomposition's key that is not the kernel: the solver and its settings."""
    return solver, tuple(sorted(decompose_kwargs.items()))


class RowsKey(NamedTuple):
    """The memo key of a pool's image-kernel rows (:meth:`ImageKernelEntry.rows`): the images ``ids`` of
    ``split`` against every training image (``columns=None``), or against those at positions
    ``columns`` only (a low-rank view's pivots)."""

    split: str
    ids: tuple[str, ...]
    columns: tuple[int, ...] | None = None


@dataclass
class ImageKernelEntry:
    """A fitted image kernel and what is derived from it.

    Attributes
    ----------
    kernel : fitted :class:`~kernels.image.ImageKernel` (or a test double with ``feature_grams``)
    train_ids : the training image ids it was fitted on
    feature_grams : ``{rows key: {feature: Gram}}``; rows key ``"train"`` (training Gram) or a
        :class:`RowsKey` (a pool's images against all the training images, or against some only)
    combined : ``{(rows key, p): combined kernel}`` (Eq. 6)
    views : ``{(p, view key): decomposition}`` of the combined training Gram (:func:`view_key`)
    pair_feature_rows : ``{image id: {feature: row against the training images}}`` (caption metrics)
    pending : ``{rows key: threading.Event}`` of the feature Grams being computed (:meth:`rows`)
    lock : re-entrant lock held while a memo is read or filled, and around the kernel calls of the
        caption metric and the low-rank columns; Gram rows (:meth:`rows`, :meth:`row_block`) are computed
        outside it (the kernel guards its own visual words and kept rows)
    views_lock : re-entrant lock held while a decomposition is made or :attr:`views` changes (taken
        before ``lock``, never while holding it)
    """

    kernel: object
    train_ids: tuple[str, ...]
    feature_grams: dict = field(default_factory=dict)
    combined: dict = field(default_factory=dict)
    views: dict = field(default_factory=dict)
    pair_feature_rows: dict = field(default_factory=dict)
    lock: threading.RLock = _entry_lock()
    views_lock: threading.RLock = _entry_lock()
    pending: dict = field(default_factory=dict, repr=False, compare=False)

    def rows(self, split: str, ids: Sequence[str] | None, power: int,
             columns: Sequence[int] | None = None) -> np.ndarray:
        """Combined image kernel (Hodosh et al. 2013, Eq. 6, power ``p``) of ``ids`` against the training
        images, or only against the training images at positions ``columns`` (a low-rank view's pivots, in
        their order: what :meth:`kcca.solver.KernelView.features` reads); ``split="train"``: the training
        Gram (``ids`` and ``columns`` ignored).  Memoised by the ids and columns, not the split name.  Each
        entry depends only on its two images, so a column equals the full row's entry."""
        at = None if split == "train" or columns is None else tuple(int(j) for j in columns)
        rows_key = "train" if split == "train" else RowsKey(split, tuple(ids), at)
        ck = (rows_key, int(power))
        with self.lock:
            if ck in self.combined:
                return self.combined[ck]
        if split == "train":
            rows, cols = list(self.train_ids), None
        else:
            rows = list(ids)
            cols = list(self.train_ids) if at is None else [self.train_ids[j] for j in at]
        grams = self._grams_once(rows_key, rows, cols)
        with self.lock:
            if ck not in self.combined:
                self.combined[ck] = combine_kernels(grams, int(power))
            return self.combined[ck]

    def _grams_once(self, rows_key, rows: list, cols: list | None) -> dict:
        """The feature Grams of ``rows_key`` (memoised in :attr:`feature_grams`), computed outside the entry
        lock (the kernel guards its own state), so that another system's rows of this kernel are computed
        meanwhile; a second thread asking for the same rows waits for the first one's."""
        while True:
            with self.lock:
                if rows_key in self.feature_grams:
                    return self.feature_grams[rows_key]
                running = self.pending.get(rows_key)
                if running is None:
                    running = self.pending[rows_key] = threading.Event()
                    break
            running.wait()   # then read its result (or compute it, if that thread failed)
        try:
            grams = self.kernel.feature_grams(rows, cols)
            with self.lock:
                self.feature_grams[rows_key] = grams
            return grams
        finally:
            with self.lock:
                self.pending.pop(rows_key).set()

    def row_block(self, ids: Sequence[str], power: int) -> np.ndarray:
        """Combined image kernel (Eq. 6, power ``p``) of a few images ``ids`` against every training image,
        not memoised (the nearest-neighbour baseline reads a pool this way, a block at a time): computed
        as columns of the training images' kept histograms, stored by bin
        (:meth:`~kernels.image.ImageKernel.feature_grams` with ``by_columns``), the entries of :meth:`rows`."""
        grams = self.kernel.feature_grams(list(ids), list(self.train_ids), by_columns=True)   # see rows()
        return combine_kernels(grams, int(power))

    def release_rows(self) -> None:
        """Free the training histograms :meth:`row_block` and the column source keep between calls."""
        release = getattr(self.kernel, "release_rows", None)   # test doubles have none
        if release is not None:
            with self.lock:
                release()

    def column_source(self, power: int) -> KernelSource:
        """The combined training kernel (Eq. 6, power ``p``) as a :class:`~kcca.lowrank.KernelSource` for
        the low-rank solver: its diagonal and the columns incomplete Cholesky asks for, each computed
        as ``feature_grams(train_ids, [pivot])`` (cached per column and feature, on the executor's
        workers when the kernel has one), never the ``N × N`` Gram.  The training histograms kept for
        the columns are released once the factor is built (:meth:`~kcca.lowrank.KernelSource.release`)."""
        ids = list(self.train_ids)

        def columns(rows, cols) -> np.ndarray:
            if len(rows) != len(ids):
                raise ValueError("the training image kernel's column source gives whole columns only")
            with self.lock:
                grams = self.kernel.feature_grams(ids, [ids[int(j)] for j in cols])
            return combine_kernels(grams, int(power))

        def diagonal(_data) -> np.ndarray:
            with self.lock:
                return combine_kernels(self.kernel.feature_diagonals(ids), int(power))

        release = getattr(self.kernel, "release_rows", None)   # test doubles have none
        return KernelSource(np.arange(len(ids)), columns, diag=diagonal, release=release)

    def image_feature_rows(self, image_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """``{feature: (len(image_ids), n_train)}`` rows of single images against the training images,
        each image computed once and kept (:attr:`pair_feature_rows`).  An image of a pool whose rows are
        already in :attr:`feature_grams` (e.g. the dev and test pools, whose images the human judgments
        grade) takes its row from there: every Gram entry depends only on its two images' histograms, so
        the row is the one computing it alone would give."""
        with self.lock:
            return self._image_feature_rows(image_ids)

    def _image_feature_rows(self, image_ids: Sequence[str]) -> dict[str, np.ndarray]:
        new = [i for i in dict.fromkeys(image_ids) if i not in self.pair_feature_rows]
        for rows_key, grams in list(self.feature_grams.items()) if new else ():
            if rows_key == "train" or rows_key.columns is not None:   # rows at some columns only
                continue
            pos = {i: k for k, i in enumerate(rows_key.ids)}
            for i in [i for i in new if i in pos]:
                self.pair_feature_rows[i] = {f: g[pos[i]] for f, g in grams.items()}
            new = [i for i in new if i not in pos]
        if new:
            grams = self.kernel.feature_grams(new, list(self.train_ids))
            for k, i in enumerate(new):
                self.pair_feature_rows[i] = {f: g[k] for f, g in grams.items()}
        feats = self.pair_feature_rows[image_ids[0]].keys() if len(image_ids) else ()
        return {f: np.stack([self.pair_feature_rows[i][f] for i in image_ids]) for f in feats}

    def codebook_digests(self) -> dict | None:
        """:meth:`~kernels.image.ImageKernel.codebook_digests` of the kernel (``None`` for objects without
        one, e.g. test doubles)."""
        fn = getattr(self.kernel, "codebook_digests", None)
        return fn() if fn is not None else None


@dataclass
class TextKernelEntry:
    """A fitted text kernel and what is derived from it.

    Attributes
    ----------
    kernel : fitted :class:`~kernels.text.TextKernel`
    train_ids : the training image ids (items) it was fitted on
    queries : ``{(split, caption ids): rows}`` of a pool's captions against the training items
    views : ``{(d, view key): decomposition}`` of the training Gram with diagonal factor ``d``
    pair_rows : ``{text: row against the training items}`` (caption metrics)
    lock : re-entrant lock held by every method that calls the kernel (its diagonal factor is kernel
        state) or fills a memo
    views_lock : re-entrant lock held while a decomposition is made or :attr:`views` changes (taken
        before ``lock``, never while holding it)
    """

    kernel: TextKernel
    train_ids: tuple[str, ...]
    queries: dict = field(default_factory=dict)
    views: dict = field(default_factory=dict)
    pair_rows: dict = field(default_factory=dict)
    lock: threading.RLock = _entry_lock()
    views_lock: threading.RLock = _entry_lock()

    def train_gram(self, diag: float) -> np.ndarray:
        """Training Gram with its diagonal multiplied by ``diag`` (:class:`~kernels.text.TextKernel`)."""
        with self.lock:
            self.kernel.diag = float(diag)
            return self.kernel.gram_train()

    def column_source(self, diag: float, executor=None) -> KernelSource | None:
        """The training Gram with diagonal factor ``diag`` as a :class:`~kcca.lowrank.KernelSource` of
        columns (:meth:`~kernels.text.TextKernel.gram_columns`, never the ``N × N`` Gram), computed on
        ``executor``'s Dask workers when given; ``None`` for a kernel without column access
        (:meth:`~kernels.text.TextKernel.columns_supported`).  The kernel goes to the cluster once for all
        the columns, without its captions (:meth:`~kernels.text.TextKernel.column_context`), and is dropped
        there once the factor is built
        (:meth:`~kcca.lowrank.KernelSource.release`)."""
        if not self.kernel.columns_supported():
            return None
        kernel, n = self.kernel, len(self.train_ids)
        context: list[Shared] = []   # sent to a cluster once for all the columns, without the captions

        def columns(rows, cols) -> np.ndarray:
            if len(rows) != n:
                raise ValueError("the training text kernel's column source gives whole columns only")
            with self.lock:
                kernel.diag = float(diag)
                if executor is not None and not context:
                    context.append(Shared(kernel.column_context()))
                return kernel.gram_columns([int(j) for j in cols], executor, context[0] if context else None)

        def diagonal(_data) -> np.ndarray:
            with self.lock:
                kernel.diag = float(diag)
                return kernel.gram_diagonal()

        def release() -> None:   # the cluster may drop the kernel once every column is read
            if executor is not None and context:
                executor.forget(context.pop())
            with self.lock:
                kernel.release_columns()

        return KernelSource(np.arange(n), columns, diag=diagonal, release=release)

    def query_rows(self, split: str, captions: Sequence, items: Sequence[int] | None = None) -> np.ndarray:
        """Rows of ``captions`` against the training items, or only against the items at positions
        ``items`` (a low-rank view's pivots, in their order), memoised by the caption ids and items."""
        item_key = None if items is None else tuple(int(j) for j in items)
        key = (split, tuple(c.id for c in captions), item_key)
        with self.lock:
            if key not in self.queries:
                self.queries[key] = self.kernel.gram_queries(list(captions), items=item_key)
            return self.queries[key]


def _checked_training_set(entry, train_ids: tuple):
    """``entry`` if it was fitted on ``train_ids``; ``ValueError`` otherwise (one store per training set)."""
    if entry.train_ids != train_ids:
        raise ValueError("the kernel store was filled for a different training set; use a fresh "
                         "KernelStore per corpus / training split")
    return entry


class KernelStore:
    """Image kernels by kind and text kernels by name, fitted once on one training split.

    >>> store = KernelStore()
    >>> run_system("BoW5", corpus, store=store)      # fits the pyramid image kernel and BoW5
    >>> run_system("TRI5", corpus, store=store)      # reuses the image kernel and its decompositions

    Methods that fit take the kernels' settings (seed, cache, progress bars, extra constructor
    arguments); they are used only when the kernel is not in the store yet.  ``executor``: where the
    low-rank solver's text-kernel columns run (:class:`~corpora.parallel.BlockExecutor`; the image
    kernels take theirs from ``image_kwargs``); default in this process.  ``park_root``: the folder
    under which :meth:`park_views` makes its scratch folder (default: the system's temporary folder).
    ``park``: each low-rank decomposition writes its factor ``U`` there as it is made and comes back
    parked (read back when a system asks for the view), so that ``U`` is never converted to float32 in
    memory beside the float64 factor it comes from (1.8 GB at COCO size).  ``show_progress``: progress
    bars over the low-rank decompositions' pivots.
    """

    def __init__(self, executor: BlockExecutor | None = None, park_root: str | Path | None = None,
                 show_progress: bool = False, park: bool = False) -> None:
        self.executor = executor if executor is not None and executor.distributed else None
        self.park_root = park_root
        self.park = park
        self.show_progress = show_progress
        self._park_dir: tempfile.TemporaryDirectory | None = None
        self._parked = 0
        self._images: dict[str, ImageKernelEntry] = {}
        self._texts: dict[str, TextKernelEntry] = {}
        self._fit_locks: dict[tuple[str, str], threading.Lock] = {}
        self._fit_locks_lock = threading.Lock()

    def _fitting(self, what: str, name: str) -> threading.Lock:
        """The lock held while the ``what`` (``"image"`` / ``"text"``) kernel ``name`` is fitted: a second
        thread asking for it waits and then takes the fitted entry."""
        with self._fit_locks_lock:
            return self._fit_locks.setdefault((what, name), threading.Lock())

    # ------------------------------------------------------------------------------ get or fit
    def image(self, kind: str, corpus, train_ids: Sequence[str], *, seed: int = 0, cache=None,
              show_progress: bool = False, image_kwargs: Mapping | None = None,
              words_for: Sequence[str] = ()) -> ImageKernelEntry:
        """The ``kind`` image kernel (``"pyramid"`` / ``"histogram"``), fitted on ``train_ids`` if the
        store has none; another kind fitted on the same images lends it its visual words.  A fit also
        computes the visual words of ``words_for`` (e.g. the dev and test pools' images) in the same
        parallel pass as the training images' (:meth:`~kernels.image.ImageKernel.fit`)."""
        train_ids = tuple(train_ids)
        with self._fitting("image", kind):
            if kind not in self._images:
                ik = ImageKernel(kind=kind, power=2, seed=seed, cache=cache, show_progress=show_progress,
                                 **(image_kwargs or {}))
                # another kind on the same corpus (pyramid vs histogram) has the same visual words: reuse them
                peers = [e.kernel for e in self._images.values() if e.train_ids == train_ids]
                ik.fit(corpus, list(train_ids), share_words_with=peers[0] if peers else None, words_for=words_for)
                self._images[kind] = ImageKernelEntry(kernel=ik, train_ids=train_ids)
        return _checked_training_set(self._images[kind], train_ids)

    def text(self, name: str, corpus, train_ids: Sequence[str], *, seed: int = 0, cache=None,
             show_progress: bool = False, text_kwargs: Mapping | None = None) -> TextKernelEntry:
        """The text kernel of paper name ``name`` (:meth:`~kernels.text.TextKernel.from_name`), fitted on
        ``train_ids`` if the store has none."""
        train_ids = tuple(train_ids)
        with self._fitting("text", name):
            if name not in self._texts:
                tk = TextKernel.from_name(name, seed=seed, cache=cache, show_progress=show_progress,
                                          **(text_kwargs or {}))
                tk.fit(corpus, list(train_ids), executor=self.executor)
                self._texts[name] = TextKernelEntry(kernel=tk, train_ids=train_ids)
        return _checked_training_set(self._texts[name], train_ids)

    # ------------------------------------------------------------------------------ lookup
    def has_image(self, kind: str) -> bool:
        return kind in self._images

    def has_text(self, name: str) -> bool:
        return name in self._texts

    def image_kinds(self) -> set[str]:
        return set(self._images)

    def text_names(self) -> set[str]:
        return set(self._texts)

    def image_entry(self, kind: str) -> ImageKernelEntry:
        """The fitted ``kind`` image kernel (``KeyError`` naming it if the store has none)."""
        if kind not in self._images:
            raise KeyError(f"the kernel store has no {kind!r} image kernel")
        return self._images[kind]

    def text_entry(self, name: str) -> TextKernelEntry:
        """The fitted ``name`` text kernel (``KeyError`` naming it if the store has none, e.g. dropped)."""
        if name not in self._texts:
            raise KeyError(f"the kernel store has no {name!r} text kernel")
        return self._texts[name]

    def drop_text(self, name: str) -> None:
        """Forget the ``name`` text kernel with its rows and decompositions (no error if absent)."""
        self._texts.pop(name, None)

    def drop_image(self, kind: str) -> None:
        """Forget the ``kind`` image kernel with its rows and decompositions (no error if absent); its
        training histograms kept for columns are released first (on a cluster too)."""
        entry = self._images.pop(kind, None)
        if entry is not None:
            entry.release_rows()

    # ------------------------------------------------------------------------------ derived
    def image_rows(self, kind: str, split: str, ids: Sequence[str] | None, power: int,
                   columns: Sequence[int] | None = None) -> np.ndarray:
        """Combined image kernel (Eq. 6, power ``p``) of ``ids`` against the training images, or against
        those at positions ``columns`` (:meth:`ImageKernelEntry.rows`)."""
        return self.image_entry(kind).rows(split, ids, power, columns)

    def image_row_block(self, kind: str, ids: Sequence[str], power: int) -> np.ndarray:
        """Combined image kernel (Eq. 6, power ``p``) of a few images against the training images, not
        memoised (:meth:`ImageKernelEntry.row_block`)."""
        return self.image_entry(kind).row_block(ids, power)

    def text_queries(self, name: str, split: str, captions: Sequence,
                     items: Sequence[int] | None = None) -> np.ndarray:
        """Text kernel rows of ``captions`` against the training items, or against those at positions
        ``items`` (:meth:`TextKernelEntry.query_rows`)."""
        return self.text_entry(name).query_rows(split, captions, items)

    def image_view(self, kind: str, power: int, *, solver: str, **decompose_kwargs):
        """The KCCA decomposition (:func:`kcca.solver.decompose`) of the combined training Gram at
        power ``p``, computed once per ``(p, solver settings)`` (read back if parked)."""
        entry = self.image_entry(kind)
        key = (power, view_key(solver, decompose_kwargs))
        with entry.views_lock:   # the Gram's rows / columns take entry.lock themselves
            if key not in entry.views:
                K = entry.column_source(power) if solver == "lowrank" else entry.rows("train", None, power)
                entry.views[key] = decompose(K, solver=solver, label=f"{kind} image kernel (p = {power})",
                                             show_progress=self.show_progress, spill=self._spill(solver, "image"),
                                             **decompose_kwargs)
            return _in_memory(entry.views[key])

    def text_view(self, name: str, diag: float, *, solver: str, **decompose_kwargs):
        """The KCCA decomposition of the training text Gram with diagonal factor ``d``, computed once per
        ``(d, solver settings)``."""
        entry = self.text_entry(name)
        key = (diag, view_key(solver, decompose_kwargs))
        with entry.views_lock:   # the Gram and its columns take entry.lock themselves
            if key not in entry.views:
                K = entry.column_source(diag, self.executor) if solver == "lowrank" else None
                entry.views[key] = decompose(entry.train_gram(diag) if K is None else K, solver=solver,
                                             label=f"{name} text kernel (d = {diag:g})",
                                             show_progress=self.show_progress, spill=self._spill(solver, "text"),
                                             **decompose_kwargs)
            return _in_memory(entry.views[key])

    def has_view(self, what: str, name: str, param: float, *, solver: str, **decompose_kwargs) -> bool:
        """Whether the ``what`` (``"image"`` / ``"text"``) kernel ``name`` has its decomposition at power /
        diagonal factor ``param`` with these solver settings already (made, possibly parked)."""
        entries = self._images if what == "image" else self._texts
        entry = entries.get(name)
        return entry is not None and (param, view_key(solver, decompose_kwargs)) in entry.views

    def park_views(self) -> int:
        """Move the ``N × r`` factor ``U`` of every low-rank decomposition in the store to disk until a
        system asks for that view again (:meth:`image_view` / :meth:`text_view` read it back, bit for
        bit); returns how many were parked.

        At COCO size each view's ``U`` is 1.8 GB (float32, rank 4,000).  Between two systems none is in
        use, and a decomposition that a later system reuses would otherwise sit in memory while the next
        kernel's incomplete Cholesky factor fills (3.6 GB): the main job parks them after every system
        on the low-rank solver.  The files live in one scratch folder (``itr-views-*`` under
        :attr:`park_root`), written once per view and removed when the store is garbage-collected or the
        process exits; a killed run leaves it behind, safe to delete.  Exact views (small ``N``) stay.
        """
        parked = 0
        for what, entries in (("image", self._images), ("text", self._texts)):
            for entry in list(entries.values()):
                with entry.views_lock:
                    for view in entry.views.values():
                        if getattr(view, "kind", None) != "lowrank" or view.U is None:
                            continue
                        view.park(view.parked or self._park_path(what))
                        parked += 1
        return parked

    def _spill(self, solver: str, what: str) -> Path | None:
        """Where a new low-rank decomposition writes its factor (``park``), else ``None``."""
        return self._park_path(what) if self.park and solver == "lowrank" else None

    def _park_path(self, what: str) -> Path:
        """A new file in the scratch folder of :meth:`park_views` (made on first use)."""
        with self._fit_locks_lock:
            if self._park_dir is None:
                self._park_dir = tempfile.TemporaryDirectory(prefix="itr-views-", dir=self.park_root)
            self._parked += 1
            return Path(self._park_dir.name) / f"{what}-view-{self._parked}.npy"

    def codebook_digests(self, kind: str) -> dict | None:
        """The visual-word codebook digests of the ``kind`` image kernel (``None`` if the store has no such
        kernel, or its kernel has no codebooks)."""
        return self._images[kind].codebook_digests() if kind in self._images else None

    def __repr__(self) -> str:
        return f"KernelStore(images={sorted(self._images)}, texts={sorted(self._texts)})"


def _in_memory(view):
    """``view`` with its factor in memory (read back from disk if :meth:`KernelStore.park_views` parked
    it)."""
    if getattr(view, "parked", None) is not None and view.U is None:
        view.unpark()
    return view
