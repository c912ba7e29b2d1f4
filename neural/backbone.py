# Size (~730 lines): the Backbone (encoders, caching, provenance) and load_backbone, the one way scorers get a CLIP.
"""CLIP backbones: loading open_clip models (by name + pretrained tag, or from local files), batched
L2-normalised encoding, and an on-disk cache of corpus image features.

Every neural scorer of the toolkit (CLIP-S, PAC-S, L-CLIPScore, BRIDGE, SPECS) runs on a
:class:`Backbone`.  Two ways to get one:

* :func:`load_backbone` — an open_clip architecture (``"ViT-B-32"``, ``"ViT-L-14"`` …) with weights from a
  pretrained tag (``"openai"``, ``"laion2b_s32b_b82k"`` …; downloaded only on a networked machine) or a
  local file (OpenAI ``.pt``, open_clip ``.pt`` / ``.safetensors``, the PAC-S release; see
  :mod:`neural.checkpoints`).
* :func:`neural.tiny_clip.train_tiny_clip` — the small CLIP trained here on the teaching set (the offline
  default).

Numbers depend on precision and library versions (Hessel et al. 2021 warn about fp16/fp32 and numpy):
:meth:`Backbone.provenance` records both and every report should include it.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import platform
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from corpora.cache import NO_CACHE
from kernels.threads import torch_threads
from neural.cluster import active_executor, encode_on_cluster, encode_texts_on_cluster, text_executor
from neural.architectures import (  # noqa: F401  (CUSTOM_MODEL_CONFIGS … re-exported: the backbone API)
    CUSTOM_MODEL_CONFIGS,
    activation_hint,
    check_architecture,
    create_architecture,
    file_context_length,
    hf_text_requirements,
    infer_openai_arch,
    load_weights_into,
    preprocess_for,
    require_architecture_dependencies,
)
from neural.checkpoints import (  # noqa: F401  (the error types are re-exported: the backbone API)
    MissingDependencyError,
    MissingWeightsError,
    WeightsError,
    WeightsLayoutError,
    file_sha256,
    read_state_dict,
    state_dict_sha256,
    torchscript_trusted,
)
from neural.names import DEVICE_ENV, auto_device_setting
from neural.names import TINY_MODEL_NAMES, is_teaching_model, is_tiny_model  # noqa: F401  (re-exported)
from neural.prefetch import loader_threads_for, prefetched
from neural.pretrained import (  # noqa: F401  (PACS_CHECKPOINTS … re-exported: the backbone API)
    OFFLINE_ENV,
    PACS_CHECKPOINTS,
    WEIGHTS_SUFFIXES,
    check_pretrained_tag,
    looks_like_weights_file,
    missing_weights_message,
    offline,
    tag_torchscript_sha256,
)
from neural.text_tower import encode_text_to_eot
from neural.token_memo import token_ids
from neural.token_memo import tokenize as memo_tokenize
from neural.training import progress

log = logging.getLogger(__name__)

#: Version of the image-feature cache-key layout (2: images named by their signatures, as the image
#: kernels' ``_KEY_VERSION``).
_FEATURE_KEY_VERSION = 2


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """The torch device a ``device`` option names.

    ``"auto"`` (or ``None``) is ``$ITR_DEVICE`` when that is set (``cpu``, ``cuda``, ``cuda:1`` …: one
    setting for every ``--device auto`` and ``device="auto"`` default, as ``ITR_NUM_THREADS`` is for
    threads; the test suite sets ``cpu``), else CUDA when torch sees it, else the CPU.  Anything else is
    passed to :class:`torch.device`.

    Raises
    ------
    RuntimeError
        A CUDA device is asked for (directly or through ``$ITR_DEVICE``) and torch sees none; the message
        says what to do, instead of torch's driver message at the first tensor moved there.
    """
    if device in (None, "auto"):
        chosen = auto_device_setting()
        if chosen is None:
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        device, named, fix = chosen, f"${DEVICE_ENV}={chosen!r}", f"set {DEVICE_ENV}=cpu, or unset it"
    else:
        named, fix = f"device {str(device)!r}", "use --device cpu, or auto"
    try:
        dev = device if isinstance(device, torch.device) else torch.device(device)
    except RuntimeError:
        raise RuntimeError(f"{named} is not a torch device name; {fix} (or name cuda, cuda:N)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"{named} was requested but torch finds no CUDA device on this "
                           f"machine (torch.cuda.is_available() is False); {fix}")
    return dev


def to_pil(img) -> Image.Image:
    """An RGB PIL image from a PIL image (converted to RGB) or an array: ``(H, W)`` grey, ``(H, W, 3)`` RGB or
    ``(H, W, 4)`` RGBA (alpha dropped); uint8, or floats in [0, 1] (scaled by 255) or [0, 255] (clipped)."""
    if isinstance(img, Image.Image):
        return img.convert("RGB") if img.mode != "RGB" else img
    a = np.asarray(img)
    if a.ndim == 2:
        a = np.stack([a] * 3, axis=-1)
    if a.ndim != 3 or a.shape[2] not in (3, 4):
        raise ValueError(f"expected an (H, W, 3) RGB image array, got shape {a.shape}")
    if a.dtype != np.uint8:
        if np.issubdtype(a.dtype, np.floating) and a.max(initial=0) <= 1.0:
            a = a * 255.0
        a = np.clip(a, 0, 255).astype(np.uint8)
    if a.shape[2] == 4:
        a = a[:, :, :3]
    return Image.fromarray(np.ascontiguousarray(a), mode="RGB")



#: Distinct texts kept per backbone by :meth:`Backbone.encode_texts` before the table is restarted.
_TEXT_MEMO_MAX = 200_000
#: Text tables shared by backbones with identical weights (keyed by weights_id, architecture, precision…).
_SHARED_TEXT_MEMO: dict = {}
#: Corpus images whose features are kept per backbone by :meth:`Backbone.encode_corpus_images`.
_IMAGE_MEMO_MAX = 100_000
#: Image tables shared by backbones with identical weights and preprocessing (:meth:`Backbone.cache_identity`).
_SHARED_IMAGE_MEMO: dict = {}


@dataclass
class Backbone:
    """A CLIP dual encoder with its preprocessing, tokenizer and provenance.

    Attributes
    ----------
    model : torch.nn.Module
        An open_clip ``CLIP`` (``encode_image`` / ``encode_text``), in eval mode.
    preprocess : callable
        open_clip's eval transform for the model (PIL image -> (3, S, S) tensor).
    tokenizer : callable
        open_clip tokenizer: ``list[str] -> LongTensor (B, context_length)``; longer texts are truncated
        (the end-of-text token is kept at the last position, as ``clip.tokenize(truncate=True)``).
    name : str
        Human-readable identity, e.g. ``"ViT-B-32/openai"`` or ``"tiny-clip(teaching, seed=0)"``.
    weights_id : str
        SHA-256 prefix (16 hex) of the weights file, or of the state dict for weights trained here.
    device : torch.device
    precision : str
        ``"fp32"`` or ``"fp16"`` (CUDA only).
    context_length : int
    arch : str
        open_clip architecture name (``"ViT-B-32"``, ``"itr-tiny-clip"`` …).
    source : str
        Where the weights came from (tag, file path and detected format, or ``"trained here"``).
    weights_format : str
        The weights file's format (:data:`neural.checkpoints.FORMATS`, e.g. ``"pacs"`` for a PAC-S
        release file); ``""`` for weights made here or no file.
    show_progress : bool
        tqdm bars for encodes of more than ``progress_min`` items.
    loader_threads : int or None
        On CUDA, threads that load and preprocess image batches ahead of the encoder; on the CPU, threads
        that each load, preprocess and encode whole batches, side by side, every batch on one torch thread
        (:mod:`neural.prefetch`; ``0``: one batch after the other in the caller's thread, still on one torch
        thread).  ``None``: :func:`neural.prefetch.loader_threads_for` the device (on CUDA up to 4, on the
        CPU one per usable core).  The features do not depend on it.
    """

    model: torch.nn.Module
    preprocess: Callable
    tokenizer: Callable
    name: str
    weights_id: str
    device: torch.device
    precision: str
    context_length: int
    arch: str = ""
    source: str = ""
    weights_format: str = ""
    show_progress: bool = True
    progress_min: int = 512
    loader_threads: int | None = None
    #: counters (for the overhead benchmark and cache tests)
    n_image_encodes: int = field(default=0, repr=False)
    n_text_encodes: int = field(default=0, repr=False)

    # ------------------------------------------------------------------ properties
    @property
    def dtype(self) -> torch.dtype:
        return torch.float16 if self.precision == "fp16" else torch.float32

    @property
    def image_size(self) -> int:
        s = getattr(self.model.visual, "image_size", 224)
        return int(s[0] if isinstance(s, (tuple, list)) else s)

    @property
    def model_config_id(self) -> str:
        """Hash of the network's structure (``repr`` of the module tree: layer types and sizes, the
        activation — GELU or QuickGELU —, attention settings).  Two backbones with the same weights but a
        different structure encode differently, so this enters every cache key (:meth:`cache_identity`)
        and the shared text table.  Computed once per model object."""
        memo = self.__dict__.get("_config_id")
        if memo is None or memo[0] is not self.model:
            memo = (self.model, hashlib.sha256(repr(self.model).encode()).hexdigest()[:16])
            self.__dict__["_config_id"] = memo
        return memo[1]

    @property
    def embed_dim(self) -> int:
        proj = getattr(self.model, "text_projection", None)
        if isinstance(proj, torch.Tensor):
            return int(proj.shape[1])
        return int(self.encode_texts(["a"]).shape[1])

    # ------------------------------------------------------------------ encoding
    def preprocess_images(self, images: Sequence) -> torch.Tensor:
        """Apply the model's eval transform to a batch: ``(N, 3, S, S)`` float32 CPU tensor."""
        return torch.stack([self.preprocess(to_pil(im)) for im in images])

    def _encode_image_batch(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device, dtype=self.dtype, non_blocking=True)
        f = self.model.encode_image(x)
        return F.normalize(f.float(), dim=-1).cpu()

    def _encode_text_batch(self, tokens: torch.Tensor) -> torch.Tensor:
        # cut after the batch's last end-of-text token where exact (encode_texts batches by length)
        f = encode_text_to_eot(self.model, tokens.to(self.device))
        return F.normalize(f.float(), dim=-1).cpu()

    def encode_images(self, images: Sequence[np.ndarray], batch_size: int = 64) -> torch.Tensor:
        """Encode images (``(H, W, 3)`` uint8 RGB arrays or PIL images): ``(N, D)`` float32 CPU,
        L2-normalised, in input order."""
        if isinstance(images, np.ndarray) and images.ndim == 3:
            images = [images]
        return self.encode_images_from(lambda i: images[i], len(images), batch_size)

    def encode_images_from(self, load: Callable[[int], object], n: int, batch_size: int = 64) -> torch.Tensor:
        """Encode images ``load(0), …, load(n − 1)`` (arrays or PIL images, e.g. a corpus' images read from
        disk): ``(n, D)`` float32 CPU, L2-normalised, in order, in batches of ``batch_size``.

        On CUDA each batch is loaded and preprocessed on :attr:`loader_threads` threads ahead of the
        encoder (:mod:`neural.prefetch`; pinned for the copy), so decoding overlaps encoding.  On the CPU
        whole batches are loaded, preprocessed and encoded side by side on :attr:`loader_threads`
        threads, each on one torch thread (:func:`kernels.threads.torch_threads`): a batch's features are
        then the same whatever the number of threads or cores (torch's own threads split a product's sums
        between them, which changes the last bits), as on a Dask worker."""
        if n == 0:
            raise ValueError("encode_images: no images given")
        starts = range(0, n, batch_size)

        def batch(b: int) -> torch.Tensor:
            lo = starts[b]
            return self.preprocess_images([load(i) for i in range(lo, min(n, lo + batch_size))])

        out = []
        with self._batches(batch, len(starts), self._encode_image_batch) as batches:
            for f in progress(batches, total=len(starts), desc=f"encode images ({self.name})",
                              enabled=self.show_progress and n > self.progress_min):
                out.append(f)
        self.n_image_encodes += n
        return torch.cat(out)

    @contextlib.contextmanager
    def _batches(self, make: Callable[[int], torch.Tensor], n_batches: int,
                 encode: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[Iterator[torch.Tensor]]:
        """``encode(make(0)), …, encode(make(n_batches − 1))`` in order, in inference mode: on CUDA the
        batches made on :attr:`loader_threads` threads ahead of the encoder (pinned), on the CPU made and
        encoded on those threads side by side, on one torch thread (:meth:`encode_images_from`)."""
        threads = loader_threads_for(self.device) if self.loader_threads is None else self.loader_threads
        self.model.eval()
        if self.device.type != "cpu":
            with torch.inference_mode():
                yield (encode(x) for x in prefetched(make, n_batches, threads, pin=True))
            return

        def job(b: int) -> torch.Tensor:
            with torch.inference_mode():   # per thread: the loader threads run the forward pass here
                return encode(make(b))

        with torch_threads(1):
            yield prefetched(job, n_batches, threads)

    def tokenize(self, texts: Sequence[str]) -> torch.Tensor:
        """Tokenise with truncation to ``context_length``: ``(N, context_length)`` LongTensor.  The ids of
        texts seen before by a tokenizer with the same vocabulary come from memory
        (:func:`neural.token_memo.tokenize`; open_clip's BPE tokenizer only)."""
        return memo_tokenize(self.tokenizer, texts)

    def token_lengths(self, texts: Sequence[str]) -> list[int] | None:
        """Untruncated token counts, start and end-of-text tokens included.

        A text whose count exceeds ``context_length`` is cut by :meth:`tokenize`.

        Parameters
        ----------
        texts : sequence of str
            The texts as tokenised (prompt included).

        Returns
        -------
        list of int or None
            One count per text; ``None`` when the tokenizer cannot say (only open_clip's BPE tokenizer,
            the one with ``encode`` and ``sot_token_id``, is counted; Hugging Face tokenizers are not).
        """
        tok = self.tokenizer
        if not (callable(getattr(tok, "encode", None)) and hasattr(tok, "sot_token_id")):
            return None
        rows = token_ids(tok, [str(t) for t in texts])       # memoised ids, start and end-of-text included
        if rows is not None:
            return [len(r) for r in rows]
        return [len(tok.encode(str(t))) + 2 for t in texts]   # + start and end-of-text, as tok() adds

    def __post_init__(self) -> None:
        # the weights as created (what ``weights_id`` describes); see _text_table
        self.__dict__["_created_state"] = self.weights_state()

    def weights_state(self) -> tuple:
        """Identity of the current weights: the model object and the sum of its parameters' in-place
        version counters (every optimiser step or ``copy_`` bumps them)."""
        return id(self.model), sum(int(p._version) for p in self.model.parameters())

    def _as_created(self, state: tuple) -> bool:
        """Whether ``state`` (:meth:`weights_state`) is still the weights ``weights_id`` describes."""
        return bool(self.weights_id) and state == self.__dict__.get("_created_state")

    def _weights_table(self, attr: str, shared: dict, shared_key, max_size: int) -> dict:
        """A memo table for the current weights.  While the weights are those the backbone was created
        with, the table is shared (in ``shared`` under ``shared_key``) by every backbone whose key is the
        same, e.g. a PAC-S fine-tune that kept the initial weights; after any in-place update it is
        private to this object (``self.<attr>``) and restarted whenever the weights change again.  A
        table is restarted when it outgrows ``max_size``; at most 8 shared tables are kept."""
        state = self.weights_state()
        if self._as_created(state):
            table = shared.get(shared_key)
            if table is None or len(table) > max_size:
                if len(shared) >= 8:
                    shared.pop(next(iter(shared)))
                table = shared[shared_key] = {}
            return table
        memo = self.__dict__.get(attr)
        if memo is None or memo[0] != state or len(memo[1]) > max_size:
            memo = (state, {})
            self.__dict__[attr] = memo
        return memo[1]

    def _text_table(self) -> dict:
        """The texts already encoded for the current weights (:meth:`_weights_table`), shared by backbones
        with the same ``weights_id``, architecture, precision, device and tokenizer."""
        key = ("weights", self.weights_id, self.arch, self.model_config_id, self.precision, str(self.device),
               self.context_length, type(self.tokenizer).__name__)
        return self._weights_table("_text_memo", _SHARED_TEXT_MEMO, key, _TEXT_MEMO_MAX)

    def _image_table(self, identity: dict | None = None) -> dict:
        """The corpus-image features already computed in this process for the current weights and
        preprocessing, keyed by ``(image id, image signature)`` (:meth:`_weights_table`), shared by
        backbones with the same :meth:`cache_identity` (the disk cache's key; pass it if already built)."""
        key = json.dumps(identity if identity is not None else self.cache_identity(), sort_keys=True)
        return self._weights_table("_image_memo", _SHARED_IMAGE_MEMO, key, _IMAGE_MEMO_MAX)

    def clear_image_memo(self) -> None:
        """Forget the corpus-image features kept in memory for the current weights (the next
        :meth:`encode_corpus_images` reads the disk cache or encodes again)."""
        self._image_table().clear()

    def clear_text_memo(self) -> None:
        """Forget the texts encoded so far for the current weights (the next :meth:`encode_texts` runs
        the text tower on all of them again), e.g. to time the encoder itself."""
        self._text_table().clear()

    def encode_texts(self, texts: Sequence[str], batch_size: int = 256) -> torch.Tensor:
        """Encode texts: ``(N, D)`` float32 CPU, L2-normalised (truncated to the context length).

        The texts not encoded yet are tokenised and ordered by token length, then encoded in batches of
        ``batch_size`` (:meth:`encode_token_rows`; on the CPU side by side, each on one torch thread).
        Inside :func:`neural.cluster.clip_encoding_on` a Dask cluster, more than
        :data:`neural.cluster.TEXT_BLOCK` of them go to its workers in blocks of whole batches
        (:func:`neural.cluster.encode_texts_on_cluster`: the same batches, the same features bit for bit).
        Each distinct text is encoded once per set of weights: repeated texts (a caption's references
        repeat across judgment rows; candidates across protocols and scorers sharing these weights) are
        served from an in-memory table (:meth:`_text_table`), which is dropped as soon as the weights
        change (any in-place parameter update).  ``n_text_encodes`` counts texts encoded in this process.
        """
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if not texts:
            raise ValueError("encode_texts: no texts given")
        table = self._text_table()
        todo = [t for t in dict.fromkeys(texts) if t not in table]
        if todo:
            tokens = self.tokenize(todo)
            # batches of similar token length, so each batch is cut at its own last end-of-text token
            order = torch.argsort(tokens.argmax(dim=1), stable=True)
            executor = text_executor(len(todo))
            if executor is not None:
                feats = torch.from_numpy(encode_texts_on_cluster(executor, self, tokens[order], batch_size))
            else:
                feats = self.encode_token_rows(tokens[order], batch_size)
            table.update(zip((todo[int(i)] for i in order), feats))
        return torch.stack([table[t] for t in texts])

    def encode_token_rows(self, tokens: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
        """Encode token rows ``(N, context_length)`` in their order, in consecutive batches of
        ``batch_size`` (each cut after its last end-of-text token, :func:`neural.text_tower.encode_text_to_eot`):
        ``(N, D)`` float32 CPU, L2-normalised.  Batches run as in :meth:`encode_images_from`."""
        starts = range(0, len(tokens), batch_size)
        out = []
        with self._batches(lambda b: tokens[starts[b]:starts[b] + batch_size], len(starts),
                           self._encode_text_batch) as batches:
            for emb in progress(batches, total=len(starts), desc=f"encode texts ({self.name})",
                                enabled=self.show_progress and len(tokens) > self.progress_min * 4):
                out.append(emb)
        self.n_text_encodes += len(tokens)
        return torch.cat(out)

    # ------------------------------------------------------------------ corpus cache
    def current_weights_id(self) -> str:
        """``weights_id`` while the weights are those the backbone was created with; after an in-place
        update (an optimiser step, ``load_state_dict``, ``copy_``; :meth:`weights_state`) — or when no
        ``weights_id`` was given — the SHA-256 prefix of the current state dict, computed once per state,
        so disk caches keyed by :meth:`cache_identity` never serve features of the old weights."""
        state = self.weights_state()
        if self._as_created(state):
            return self.weights_id
        memo = self.__dict__.get("_current_id")
        if memo is None or memo[0] != state:
            memo = (state, state_dict_sha256(self.model.state_dict())[:16])
            self.__dict__["_current_id"] = memo
        return memo[1]

    def cache_identity(self) -> dict:
        """Everything about the encoder that changes its image or text features (part of every cache
        key: image features, affinity matrices, fine-tunes); the weights enter as
        :meth:`current_weights_id`, the text side as the tokenizer and its context length."""
        return {
            "arch": self.arch,
            "name": self.name,
            "weights": self.current_weights_id(),
            "config": self.model_config_id,
            "precision": self.precision,
            "preprocess": repr(self.preprocess),
            "tokenizer": (f"{type(self.tokenizer).__module__}.{type(self.tokenizer).__name__}"
                          f"/{int(self.context_length)}"),
        }

    def encode_corpus_images(self, corpus, image_ids: Sequence[str], cache=None,
                             batch_size: int = 64, chunk: int = 256) -> np.ndarray:
        """L2-normalised features of corpus images, ``(len(image_ids), D)`` float32, cached on disk.

        The cache (``corpora.cache.DiskCache``, namespace ``"neural_image_features"``) is keyed by the
        model identity (:meth:`cache_identity`: architecture, weights hash, precision, preprocessing),
        the image ids and their signatures (:meth:`corpora.base.Corpus.image_signature`: what the pixels
        are made from, not the captions).  To keep the number of (atomically written,
        fsync'ed) files small, ids are stored in chunks of ``chunk`` consecutive requested ids; a rerun
        with the same ids reads every chunk and encodes nothing.

        Inside :func:`neural.cluster.clip_encoding_on` a Dask cluster the chunks are encoded by its workers
        (:func:`neural.cluster.encode_on_cluster`: the same cache entries, the same features bit for bit).

        Within a process, each image's features are also kept in memory for these weights and this
        preprocessing (:meth:`_image_table`, keyed by id and signature, like the text table), so a later
        request in another order or grouping (the human-correlation protocols after the test pool) reads
        them from there instead of missing the disk chunks and encoding the images again.
        """
        cache = cache if cache is not None else NO_CACHE
        ids = list(image_ids)
        if not ids:
            return np.zeros((0, self.embed_dim), np.float32)
        missing = corpus.missing_images(ids) if hasattr(corpus, "missing_images") else []
        if missing:
            raise FileNotFoundError(
                f"{len(missing)} of {len(ids)} images of corpus {corpus.name!r} are not available "
                f"(first: {missing[:3]})")
        ident = self.cache_identity()
        table = self._image_table(ident)
        keys = [(i, corpus.image_signature(i)) for i in ids]
        todo = [k for k in dict.fromkeys(keys) if k not in table]
        chunks = [todo[s:s + chunk] for s in range(0, len(todo), chunk)]
        chunk_ids = [[i for i, _ in sub_keys] for sub_keys in chunks]
        cache_keys = [{"what": "clip-image-features", "keys": _FEATURE_KEY_VERSION, "model": ident,
                       "image_ids": sub, "images": corpus.images_fingerprint(sub)} for sub in chunk_ids]
        executor = active_executor()
        if executor is not None and chunks:
            for sub_keys, feats in zip(chunks, encode_on_cluster(executor, self, corpus, chunk_ids, cache_keys,
                                                                 cache, batch_size)):
                table.update(zip(sub_keys, feats.astype(np.float32, copy=False)))
            return np.stack([table[k] for k in keys])
        for sub_keys, sub, key in zip(chunks, chunk_ids, cache_keys):
            arr = cache.get_or_compute(
                "neural_image_features", key,
                lambda sub=sub: {"features": self.encode_images_from(
                    lambda k, sub=sub: corpus.load_image(sub[k]), len(sub), batch_size=batch_size).numpy()})
            table.update(zip(sub_keys, arr["features"].astype(np.float32, copy=False)))
        return np.stack([table[k] for k in keys])

    # ------------------------------------------------------------------ provenance
    def provenance(self) -> dict:
        """Versions, device, precision and weights identity — include this in every result."""
        import open_clip  # lazy: seconds to import (torchvision, timm); already loaded with any open_clip model

        return {
            "backbone": self.name,
            "arch": self.arch,
            "weights_id": self.weights_id,
            "weights_source": self.source,
            "device": str(self.device),
            "device_name": (torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else
                            platform.processor() or platform.machine()),
            "precision": self.precision,
            "context_length": int(self.context_length),
            "image_size": self.image_size,
            "torch": torch.__version__,
            "open_clip": getattr(open_clip, "__version__", "unknown"),
            "numpy": np.__version__,
            "python": platform.python_version(),
        }


def load_backbone(model: str = "ViT-B-32", pretrained: str | Path | None = "openai", *,
                  device: str | torch.device = "auto", precision: str = "fp32",
                  quick_gelu: bool | None = None, allow_download: bool | None = None,
                  cache_dir: str | None = None, show_progress: bool = True,
                  trust_torchscript: bool | None = None) -> Backbone:
    """Load an open_clip CLIP backbone.

    Parameters
    ----------
    model : str
        open_clip architecture (``"ViT-B-32"``, ``"ViT-L-14"``, ``"ViT-B-32-quickgelu"`` …), a custom
        one (``"itr-tiny-clip"``), or ``"auto"`` to infer the architecture from an OpenAI-layout state
        dict file.  (``"tiny"`` — the CLIP trained here — is handled by
        :func:`neural.tiny_clip.train_tiny_clip`, which needs a corpus.)
    pretrained : str, path or None
        A pretrained tag (``"openai"``, ``"laion2b_s32b_b82k"`` …) or a weights file (any format of
        :mod:`neural.checkpoints`, Long-CLIP / SPECS included).  ``None``: random initialisation (for
        tests).  A file sets the text context (rows of its positional table: 248 for Long-CLIP).
    device : ``"auto"`` | ``"cpu"`` | ``"cuda"`` | torch.device
        ``"auto"``: CUDA when available, else CPU.
    precision : ``"fp32"`` | ``"fp16"``
        fp16 only on CUDA; on CPU it falls back to fp32 with a warning (recorded in provenance).
    quick_gelu : bool, optional
        Force QuickGELU (OpenAI-trained weights) on / off.  Default: from the tag's config; for files,
        True for OpenAI TorchScript archives, Long-CLIP / SPECS files and the PAC-S ViT-B/32 release (see
        :data:`PACS_CHECKPOINTS`), else the architecture's own default.
    allow_download : bool, optional
        Whether a missing tagged checkpoint may be downloaded.  Default: yes unless ``$ITR_OFFLINE`` or
        ``$HF_HUB_OFFLINE`` is set.  When not allowed, missing weights raise
        :class:`~neural.checkpoints.MissingWeightsError` before open_clip touches the network.
    trust_torchscript : bool, optional
        Whether a weights *file* that is a TorchScript archive (an OpenAI release ``.pt``) may be loaded
        with :func:`torch.jit.load`.  Default: from ``$ITR_TRUST_TORCHSCRIPT`` (no unless set); see
        :mod:`neural.checkpoints`.  The TorchScript file of a pretrained *tag* is trusted only when it is
        the file of the tag's OpenAI URL and the bytes loaded have the full SHA-256 that URL names (open_clip
        checks the same when it downloads it).

    Raises
    ------
    MissingWeightsError
        Weights not on disk (offline), or the download failed; the message says how to supply a file.
    UnsafeCheckpointError
        The file would need unpickling of arbitrary objects, or is an untrusted TorchScript archive.
    WeightsLayoutError
        The weights do not fit the architecture exactly (missing / unexpected keys, other shapes): refused,
        never resized or dropped.
    WeightsError
        Otherwise unusable weights.
    """
    dev = resolve_device(device)
    if precision not in ("fp32", "fp16"):
        raise ValueError(f"precision={precision!r}: expected 'fp32' or 'fp16'")
    if precision == "fp16" and dev.type != "cuda":
        warnings.warn("fp16 is only used on CUDA; running fp32 on CPU", stacklevel=2)
        precision = "fp32"
    if is_tiny_model(model):
        raise ValueError("model='tiny' is the CLIP trained here on the teaching set: use "
                         "neural.tiny_clip.train_tiny_clip(corpus) (or --clip-model tiny on the command line)")
    if is_teaching_model(model):
        raise ValueError("model='teaching' is the shipped pretrained teaching CLIP: use "
                         "neural.teaching_clip.load_teaching_clip() (or neural.factory.backbone_for)")
    allow = (not offline()) if allow_download is None else allow_download
    if model != "auto":
        check_architecture(model.replace("/", "-"))
        require_architecture_dependencies(model.replace("/", "-"))
    file_path, tag_cfg = _weights_file(model, pretrained, allow, cache_dir)
    state_dict, fmt, weights_id = _read_weights(file_path, tag_cfg, trust_torchscript)
    if quick_gelu is None:
        quick_gelu = _default_quick_gelu(model, tag_cfg, fmt, file_path)
    net, preprocess, tokenizer, arch = _build_network(model, state_dict, quick_gelu, tag_cfg, allow,
                                                      source=f"{file_path} ({fmt})")
    net = net.to(dev)
    if precision == "fp16":
        net = net.half()
    net.eval()
    name, source, weights_id = _identity(net, arch, pretrained, tag_cfg, file_path, fmt, weights_id)
    ctx = int(getattr(net, "context_length", getattr(tokenizer, "context_length", 77)))
    return Backbone(model=net, preprocess=preprocess, tokenizer=tokenizer, name=name, weights_id=weights_id,
                    device=dev, precision=precision, context_length=ctx, arch=arch, source=source,
                    weights_format=fmt or "", show_progress=show_progress)


def _identity(net, arch: str, pretrained, tag_cfg: dict, file_path: Path | None, fmt: str | None,
              weights_id: str) -> tuple[str, str, str]:
    """``(name, source, weights_id)`` of a loaded backbone: from the tag, the file, or (random
    initialisation) the network's own weights."""
    if pretrained is None:
        name = f"{arch}/random-init"
        source = "random initialisation"
        weights_id = state_dict_sha256(net.state_dict())[:16]
    elif tag_cfg:
        name = f"{arch}/{pretrained}"
        source = f"tag {pretrained} ({file_path})"
    else:
        name = f"{arch}/{file_path.name}"
        source = f"file {file_path} ({fmt})"
    return name, source, weights_id


def _weights_file(model: str, pretrained, allow: bool, cache_dir: str | None) -> tuple[Path | None, dict]:
    """:func:`load_backbone`, step 1: the weights file — given by path, or the pretrained tag's file from
    the local cache or downloaded — and the tag's open_clip config (``{}`` for a file or no weights)."""
    if pretrained is None:
        return None, {}
    as_path = Path(str(pretrained)).expanduser()
    if as_path.is_file():
        return as_path, {}
    if looks_like_weights_file(pretrained):
        raise MissingWeightsError(f"weights file not found: {as_path} (--clip-pretrained)")
    tag_cfg, local = check_pretrained_tag(model, str(pretrained), allow_download=allow, cache_dir=cache_dir)
    if local is None:
        try:
            # lazy: open_clip takes seconds to import (torchvision, timm)
            from open_clip.pretrained import download_pretrained

            local = download_pretrained(tag_cfg, cache_dir=cache_dir)
        except Exception as exc:
            raise MissingWeightsError(missing_weights_message(
                model, str(pretrained), f"download failed: {exc}")) from exc
        if not local:
            raise MissingWeightsError(missing_weights_message(model, str(pretrained), "no download source"))
    return Path(local), tag_cfg


def _read_weights(file_path: Path | None, tag_cfg: dict, trust_torchscript: bool | None):
    """:func:`load_backbone`, step 2: ``(state dict, format, weights_id)`` of the file (``None, None, ""``
    without one).  A tag's TorchScript file is trusted when the bytes loaded carry the checksum its
    official URL names; its ``weights_id`` is then that checksum's prefix, else the file's SHA-256 prefix."""
    if file_path is None:
        return None, None, ""
    expected = tag_torchscript_sha256(tag_cfg, file_path) if tag_cfg else None
    state_dict, fmt = read_state_dict(file_path, trust_torchscript=trust_torchscript, torchscript_sha256=expected)
    weights_id = (expected if fmt == "torchscript" and expected and not torchscript_trusted(trust_torchscript)
                  else file_sha256(file_path))[:16]
    return state_dict, fmt, weights_id


def _default_quick_gelu(model: str, tag_cfg: dict, fmt: str | None, file_path: Path | None) -> bool | None:
    """:func:`load_backbone`, step 3: QuickGELU or not when the caller did not say — the tag's config;
    True for OpenAI TorchScript archives and per :data:`PACS_CHECKPOINTS`; else ``None`` (the
    architecture's own), with a warning when the file's activation is in doubt (:func:`activation_hint`)."""
    if tag_cfg:
        return bool(tag_cfg.get("quick_gelu", False))
    if fmt in ("torchscript", "longclip", "specs"):   # Long-CLIP's model code hard-wires QuickGELU
        return True
    if file_path is not None and file_path.name in PACS_CHECKPOINTS:
        return PACS_CHECKPOINTS[file_path.name]["quick_gelu"]
    if file_path is not None and model != "auto":
        hint = activation_hint(model.replace("/", "-"))
        if hint:
            warnings.warn(f"{file_path}: {hint}", UserWarning, stacklevel=3)
    return None


def _build_network(model: str, state_dict, quick_gelu: bool | None, tag_cfg: dict, allow: bool, *, source: str):
    """:func:`load_backbone`, step 4: ``(network, preprocess, tokenizer, arch)`` with the weights loaded —
    inferred from an OpenAI-layout state dict for ``model="auto"``, else :func:`create_architecture` +
    :func:`load_weights_into`; the tag's preprocessing overrides (mean, std, interpolation, resize) apply.
    The text context (positional rows, causal mask, tokenizer) is the file's (:func:`file_context_length`:
    248 for Long-CLIP / SPECS), never the architecture's table resized to it."""
    preprocess_overrides = {k: tag_cfg[k] for k in ("mean", "std", "interpolation", "resize_mode")
                            if k in tag_cfg}
    if model == "auto":
        if state_dict is None:
            raise ValueError("model='auto' needs a weights file to infer the architecture from")
        net = infer_openai_arch(state_dict, quick_gelu=True if quick_gelu is None else quick_gelu, source=source)
        preprocess = preprocess_for(net, preprocess_overrides)
        # lazy: open_clip takes seconds to import (torchvision, timm)
        from open_clip.tokenizer import SimpleTokenizer

        return net, preprocess, SimpleTokenizer(context_length=int(net.context_length)), "auto(openai-layout)"
    arch = model.replace("/", "-")
    net, preprocess, tokenizer = create_architecture(arch, quick_gelu=quick_gelu,
                                                     preprocess_overrides=preprocess_overrides,
                                                     allow_download=allow,
                                                     context_length=file_context_length(state_dict))
    if state_dict is not None:
        load_weights_into(net, state_dict, source=source)
    return net, preprocess, tokenizer, arch


def backbone_from_model(net: torch.nn.Module, preprocess: Callable, tokenizer: Callable, *, name: str,
                        arch: str, source: str = "trained here", device: str | torch.device = "auto",
                        precision: str = "fp32", show_progress: bool = True) -> Backbone:
    """Wrap an in-memory open_clip model (e.g. one trained or fine-tuned here) as a :class:`Backbone`;
    ``weights_id`` is the SHA-256 prefix of its state dict."""
    dev = resolve_device(device)
    if precision == "fp16" and dev.type != "cuda":
        precision = "fp32"
    net = net.to(dev)
    if precision == "fp16":
        net = net.half()
    net.eval()
    wid = state_dict_sha256(net.state_dict())[:16]
    ctx = int(getattr(net, "context_length", getattr(tokenizer, "context_length", 77)))
    return Backbone(model=net, preprocess=preprocess, tokenizer=tokenizer, name=name, weights_id=wid,
                    device=dev, precision=precision, context_length=ctx, arch=arch, source=source,
                    show_progress=show_progress)


__all__ = [
    "Backbone", "load_backbone", "backbone_from_model", "to_pil", "create_architecture", "load_weights_into",
    "hf_text_requirements", "require_architecture_dependencies", "activation_hint", "check_architecture",
    "check_pretrained_tag", "looks_like_weights_file", "WEIGHTS_SUFFIXES",
    "resolve_device", "CUSTOM_MODEL_CONFIGS", "PACS_CHECKPOINTS", "OFFLINE_ENV",
    "WeightsError", "WeightsLayoutError", "MissingWeightsError", "MissingDependencyError",
]
