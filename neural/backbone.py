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

import hashlib
import json
import logging
import os
import platform
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from neural.checkpoints import (
    MissingDependencyError,
    MissingWeightsError,
    WeightsError,
    file_sha256,
    read_state_dict,
    state_dict_sha256,
    torchscript_trusted,
)
from neural.names import TINY_MODEL_NAMES, is_tiny_model  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)

#: Environment variable: set to ``1`` to forbid any weight download (also honoured: ``HF_HUB_OFFLINE``).
OFFLINE_ENV = "ITR_OFFLINE"
#: Version of the image-feature cache-key layout (2: images named by their signatures, as the image
#: kernels' ``_KEY_VERSION``).
_FEATURE_KEY_VERSION = 2

#: Architectures defined by this toolkit (not in open_clip's registry).  ``itr-tiny-clip`` is the
#: small CLIP trained on the teaching set (:mod:`neural.tiny_clip`).  Heads are ``width // 64`` so that
#: OpenAI-format files of it can also be rebuilt by ``open_clip.build_model_from_openai_state_dict``.
CUSTOM_MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    "itr-tiny-clip": {
        "embed_dim": 128,
        "quick_gelu": True,
        "vision_cfg": {"image_size": 48, "layers": 4, "width": 128, "patch_size": 8, "head_width": 64},
        "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 128, "heads": 2, "layers": 3},
    },
}
#: Preprocessing overrides for custom architectures (the teaching images are 4:3; "squash" keeps the
#: whole scene, including what is left / right of centre).
CUSTOM_PREPROCESS: dict[str, dict[str, Any]] = {"itr-tiny-clip": {"resize_mode": "squash"}}

#: The PAC-S release checkpoints (Sarto et al. 2023, aimagelab/pacscore ``compute_metrics.py``) and the
#: open_clip architecture each loads onto: ViT-B/32 is fine-tuned from OpenAI ViT-B/32 (QuickGELU),
#: ViT-L/14 from open_clip ``ViT-L-14`` / ``laion2b_s32b_b82k`` (GELU).
PACS_CHECKPOINTS = {
    "clip_ViT-B-32.pth": {"model": "ViT-B-32", "quick_gelu": True},
    "openClip_ViT-L-14.pth": {"model": "ViT-L-14", "quick_gelu": False},
}


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` -> CUDA when available else CPU; anything else is passed to :class:`torch.device`.

    Raises ``RuntimeError`` saying what to do when a CUDA device is asked for and torch sees none
    (instead of torch's driver message at the first tensor moved there)."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = device if isinstance(device, torch.device) else torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {str(dev)!r} was requested but torch finds no CUDA device on this "
                           "machine (torch.cuda.is_available() is False); use --device cpu, or auto")
    return dev


def adamw(params, **kwargs) -> torch.optim.AdamW:
    """``torch.optim.AdamW`` with its fused implementation where torch has one for the parameters'
    device (CPU and CUDA, torch ≥ 2.4), else the multi-tensor one.

    Same update rule (Loshchilov & Hutter 2019) as the default single-tensor loop, evaluated in fewer,
    larger kernels: on the tiny CLIP (7.8 M parameters, most in the token embedding) a step costs about
    4 ms fused against 88 ms single-tensor on two CPU cores.  Deterministic for a given machine and torch
    version (the training caches key on the torch version).
    """
    params = list(params)
    tensors = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    devices = {p.device.type for p in tensors}
    fusable = devices <= {"cpu", "cuda"} and all(p.dtype in (torch.float32, torch.float16, torch.bfloat16)
                                                   for p in tensors)
    if fusable:
        try:
            return torch.optim.AdamW(params, fused=True, **kwargs)
        except (RuntimeError, TypeError, ValueError):   # a torch without a fused kernel for this device
            pass
    return torch.optim.AdamW(params, foreach=True, **kwargs)


def _to_pil(img):
    from PIL import Image

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


def _progress(iterable, total: int, desc: str, enabled: bool):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, leave=False)


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
    show_progress : bool
        tqdm bars for encodes of more than ``progress_min`` items.
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
    show_progress: bool = True
    progress_min: int = 512
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
        return torch.stack([self.preprocess(_to_pil(im)) for im in images])

    def _encode_image_batch(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device, dtype=self.dtype, non_blocking=True)
        f = self.model.encode_image(x)
        return F.normalize(f.float(), dim=-1).cpu()

    def _encode_text_batch(self, tokens: torch.Tensor) -> torch.Tensor:
        from neural.bridge import encode_text_to_eot

        # cut after the batch's last end-of-text token where exact (encode_texts batches by length)
        f = encode_text_to_eot(self.model, tokens.to(self.device))
        return F.normalize(f.float(), dim=-1).cpu()

    def encode_images(self, images: Sequence[np.ndarray], batch_size: int = 64) -> torch.Tensor:
        """Encode images (``(H, W, 3)`` uint8 RGB arrays or PIL images): ``(N, D)`` float32 CPU,
        L2-normalised, in input order."""
        if isinstance(images, np.ndarray) and images.ndim == 3:
            images = [images]
        n = len(images)
        if n == 0:
            raise ValueError("encode_images: no images given")
        starts = range(0, n, batch_size)
        out = []
        self.model.eval()
        with torch.inference_mode():
            for s in _progress(starts, len(starts), f"encode images ({self.name})",
                               self.show_progress and n > self.progress_min):
                out.append(self._encode_image_batch(self.preprocess_images(images[s:s + batch_size])))
        self.n_image_encodes += n
        return torch.cat(out)

    def tokenize(self, texts: Sequence[str]) -> torch.Tensor:
        """Tokenise with truncation to ``context_length``: ``(N, context_length)`` LongTensor."""
        return self.tokenizer(list(texts))

    def __post_init__(self) -> None:
        # the weights as created (what ``weights_id`` describes); see _text_table
        self.__dict__["_created_state"] = self._weights_state()

    def _weights_state(self) -> tuple:
        """Identity of the current weights: the model object and the sum of its parameters' in-place
        version counters (every optimiser step or ``copy_`` bumps them)."""
        return id(self.model), sum(int(p._version) for p in self.model.parameters())

    def _as_created(self, state: tuple) -> bool:
        """Whether ``state`` (:meth:`_weights_state`) is still the weights ``weights_id`` describes."""
        return bool(self.weights_id) and state == self.__dict__.get("_created_state")

    def _weights_table(self, attr: str, shared: dict, shared_key, max_size: int) -> dict:
        """A memo table for the current weights.  While the weights are those the backbone was created
        with, the table is shared (in ``shared`` under ``shared_key``) by every backbone whose key is the
        same, e.g. a PAC-S fine-tune that kept the initial weights; after any in-place update it is
        private to this object (``self.<attr>``) and restarted whenever the weights change again.  A
        table is restarted when it outgrows ``max_size``; at most 8 shared tables are kept."""
        state = self._weights_state()
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

        Each distinct text is encoded once per set of weights: repeated texts (a caption's references
        repeat across judgment rows; candidates across protocols and scorers sharing these weights) are
        served from an in-memory table (:meth:`_text_table`), which is dropped as soon as the weights
        change (any in-place parameter update).  ``n_text_encodes`` counts texts actually encoded.
        """
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        n = len(texts)
        if n == 0:
            raise ValueError("encode_texts: no texts given")
        table = self._text_table()
        todo = [t for t in dict.fromkeys(texts) if t not in table]
        if todo:
            tokens = self.tokenize(todo)
            # batches of similar token length, so each batch is cut at its own last end-of-text token
            order = torch.argsort(tokens.argmax(dim=1), stable=True)
            starts = range(0, len(todo), batch_size)
            self.model.eval()
            with torch.inference_mode():
                for s in _progress(starts, len(starts), f"encode texts ({self.name})",
                                   self.show_progress and len(todo) > self.progress_min * 4):
                    idx = order[s:s + batch_size]
                    emb = self._encode_text_batch(tokens[idx])
                    table.update(zip((todo[int(i)] for i in idx), emb))
            self.n_text_encodes += len(todo)
        return torch.stack([table[t] for t in texts])

    # ------------------------------------------------------------------ corpus cache
    def current_weights_id(self) -> str:
        """``weights_id`` while the weights are those the backbone was created with; after an in-place
        update (an optimiser step, ``load_state_dict``, ``copy_``; :meth:`_weights_state`) — or when no
        ``weights_id`` was given — the SHA-256 prefix of the current state dict, computed once per state,
        so disk caches keyed by :meth:`cache_identity` never serve features of the old weights."""
        state = self._weights_state()
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

        Within a process, each image's features are also kept in memory for these weights and this
        preprocessing (:meth:`_image_table`, keyed by id and signature, like the text table), so a later
        request in another order or grouping (the human-correlation protocols after the test pool) reads
        them from there instead of missing the disk chunks and encoding the images again.
        """
        from corpora.cache import NO_CACHE

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
        for s in range(0, len(todo), chunk):
            sub_keys = todo[s:s + chunk]
            sub = [i for i, _ in sub_keys]
            key = {"what": "clip-image-features", "keys": _FEATURE_KEY_VERSION, "model": ident,
                   "image_ids": sub, "images": corpus.images_fingerprint(sub)}
            arr = cache.get_or_compute(
                "neural_image_features", key,
                lambda sub=sub: {"features": self.encode_images(
                    [corpus.load_image(i) for i in sub], batch_size=batch_size).numpy()})
            table.update(zip(sub_keys, arr["features"].astype(np.float32, copy=False)))
        return np.stack([table[k] for k in keys])

    # ------------------------------------------------------------------ provenance
    def provenance(self) -> dict:
        """Versions, device, precision and weights identity — include this in every result."""
        import open_clip

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


# ---------------------------------------------------------------------------- model construction
def _preprocess_for(model, overrides: dict | None = None):
    """open_clip's eval transform from the preprocess config attached to ``model``."""
    from open_clip.model import get_model_preprocess_cfg, set_model_preprocess_cfg
    from open_clip.transform import PreprocessCfg, image_transform_v2, merge_preprocess_dict

    from dataclasses import asdict

    cfg = merge_preprocess_dict(asdict(PreprocessCfg()), get_model_preprocess_cfg(model) or {})
    cfg = merge_preprocess_dict(cfg, overrides or {})
    cfg["size"] = model.visual.image_size
    set_model_preprocess_cfg(model, cfg)
    return image_transform_v2(PreprocessCfg(**cfg), is_train=False)


def hf_text_requirements(arch: str) -> list[str]:
    """Hugging Face names (tokenizer and / or text model) that open_clip architecture ``arch`` loads
    through ``transformers`` (SigLIP, NLLB-CLIP, XLM-R / RoBERTa text towers …); empty for the CLIP BPE
    tokenizer and for this toolkit's own architectures."""
    text_cfg = _text_cfg(arch)
    names = [text_cfg[k] for k in ("hf_tokenizer_name", "hf_model_name") if text_cfg.get(k)]
    return list(dict.fromkeys(names))


def _text_cfg(arch: str) -> dict:
    """open_clip's ``text_cfg`` of built-in architecture ``arch`` (empty for custom or unknown ones)."""
    if arch in CUSTOM_MODEL_CONFIGS:
        return {}
    import open_clip

    return (open_clip.get_model_config(arch) or {}).get("text_cfg", {}) or {}


def activation_hint(arch: str) -> str | None:
    """Why a weights *file* for ``arch`` may need ``quick_gelu=True``, or ``None`` when there is no doubt.

    OpenAI trained CLIP with QuickGELU (x·σ(1.702x)); open_clip's plain ``ViT-B-32`` etc. build GELU.
    For a pretrained tag, the OpenAI TorchScript format and the PAC-S release names the activation is
    known; a renamed or converted file of an architecture that OpenAI released gives no sign of it, and
    the wrong choice changes every embedding without any error.  Returns ``None`` for ``*-quickgelu``
    names and for architectures without an OpenAI release."""
    if arch in CUSTOM_MODEL_CONFIGS or arch.lower().endswith("quickgelu"):
        return None
    import open_clip

    try:
        tags = open_clip.list_pretrained_tags_by_model(arch)
    except Exception:  # noqa: BLE001 - unknown names are reported by create_architecture
        return None
    if "openai" not in tags:
        return None
    return (f"building {arch} with GELU; if these weights are OpenAI's or fine-tuned from them (as PAC-S's "
            f"ViT-B/32), they need QuickGELU: pass quick_gelu=True or use the architecture {arch}-quickgelu "
            f"(command line: --clip-model {arch}-quickgelu); pass quick_gelu=False if they were trained with "
            "GELU (open_clip's LAION / DataComp weights)")


def require_architecture_dependencies(arch: str) -> None:
    """Raise :class:`~neural.checkpoints.MissingDependencyError` naming the package to install when
    ``arch`` needs ``transformers`` and it is not installed.  Called before any weight download, so a
    missing package is reported before hundreds of megabytes are fetched."""
    names = hf_text_requirements(arch)
    if not names:
        return
    try:
        import transformers  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            f"CLIP architecture {arch!r} uses the Hugging Face text components {names}, which need the "
            "'transformers' package: pip install transformers.  Offline, their tokenizer / model files "
            "must also be in the Hugging Face cache (run open_clip.get_tokenizer"
            f"({arch!r}) once on a networked machine and copy ~/.cache/huggingface, or set HF_HOME).  "
            "Architectures with the CLIP tokenizer (ViT-B-32, ViT-L-14 …) need neither.") from exc


@contextmanager
def _hub_offline(active: bool):
    """While ``active``: Hugging Face Hub access off for code that does not take ``local_files_only``
    (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` in the environment and huggingface_hub's constant,
    which it reads at import); everything is restored afterwards."""
    if not active:
        yield
        return
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    saved_env = {k: os.environ.get(k) for k in names}
    try:
        import huggingface_hub.constants as hub_constants
    except ImportError:
        hub_constants = None
    saved_const = getattr(hub_constants, "HF_HUB_OFFLINE", None)
    os.environ.update({k: "1" for k in names})
    if hub_constants is not None:
        hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if hub_constants is not None:
            hub_constants.HF_HUB_OFFLINE = saved_const


#: Suffixes that make a ``pretrained`` value a weights file rather than an open_clip tag.
WEIGHTS_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")


def looks_like_weights_file(pretrained: str | Path) -> bool:
    """Whether ``pretrained`` names a weights file (a known suffix or a path separator) rather than an
    open_clip pretrained tag, so that a missing one is reported as a missing file."""
    return Path(str(pretrained)).suffix in WEIGHTS_SUFFIXES or os.sep in str(pretrained)


def check_architecture(arch: str) -> None:
    """Raise ``ValueError`` naming the valid choices unless ``arch`` is an open_clip model name
    (``open_clip.list_models()``) or a key of :data:`CUSTOM_MODEL_CONFIGS`."""
    import open_clip

    if arch in CUSTOM_MODEL_CONFIGS or arch in open_clip.list_models():
        return
    import difflib

    close = difflib.get_close_matches(arch, open_clip.list_models(), n=3, cutoff=0.6)
    raise ValueError(
        f"unknown CLIP architecture {arch!r}{f' (did you mean {close}?)' if close else ''}: use an open_clip "
        f"model name (e.g. 'ViT-B-32', 'ViT-L-14'; see open_clip.list_models()) or one of "
        f"{sorted(CUSTOM_MODEL_CONFIGS)}; 'tiny' trains the small CLIP here (neural.tiny_clip: on the "
        f"run's training split, or on the teaching set)")


def create_architecture(arch: str, *, quick_gelu: bool | None = None,
                        preprocess_overrides: dict | None = None, allow_download: bool | None = None):
    """Instantiate an (untrained) open_clip CLIP of architecture ``arch`` and its eval transform.

    ``arch``: an open_clip built-in name (``open_clip.list_models()``) or a key of
    :data:`CUSTOM_MODEL_CONFIGS`.  Returns ``(model, preprocess, tokenizer)``; the model is fp32 on CPU.
    ``allow_download``: whether a Hugging Face tokenizer (SigLIP, XLM-R … text towers) may be fetched
    from the Hub when it is not in the local cache.  Default: yes unless ``$ITR_OFFLINE`` or
    ``$HF_HUB_OFFLINE`` is set; when not allowed, it is loaded with ``local_files_only=True``.
    """
    import open_clip
    from open_clip.tokenizer import SimpleTokenizer

    if arch in CUSTOM_MODEL_CONFIGS:
        from copy import deepcopy

        cfg = deepcopy(CUSTOM_MODEL_CONFIGS[arch])
        if quick_gelu is not None:
            cfg["quick_gelu"] = quick_gelu
        model = open_clip.CLIP(**cfg)
        over = dict(CUSTOM_PREPROCESS.get(arch, {}))
        over.update(preprocess_overrides or {})
        preprocess = _preprocess_for(model, over)
        tokenizer = SimpleTokenizer(context_length=cfg["text_cfg"]["context_length"])
        return model.eval(), preprocess, tokenizer
    check_architecture(arch)
    require_architecture_dependencies(arch)
    allow = (not _offline()) if allow_download is None else bool(allow_download)
    text_cfg = _text_cfg(arch)
    try:
        # a Hugging Face text tower reads its config with AutoConfig.from_pretrained, which open_clip
        # calls without our keywords: with downloads off, the Hub is switched off around the call
        with warnings.catch_warnings(), _hub_offline(not allow and bool(text_cfg.get("hf_model_name"))):
            warnings.simplefilter("ignore")
            model = open_clip.create_model(arch, pretrained=None, load_weights=False,
                                           force_quick_gelu=bool(quick_gelu), pretrained_text=False,
                                           device="cpu", precision="fp32")
    except OSError as exc:  # transformers installed, the text tower's config neither cached nor fetchable
        if not text_cfg.get("hf_model_name"):
            raise
        why = ("downloads are off ($ITR_OFFLINE / $HF_HUB_OFFLINE or allow_download=False)" if not allow
               else "could not be downloaded")
        raise MissingDependencyError(
            f"the text-tower configuration of CLIP architecture {arch!r} ({hf_text_requirements(arch)}) is "
            f"not in the Hugging Face cache and {why} ({exc}); run open_clip.create_model({arch!r}) once on "
            "a networked machine and copy ~/.cache/huggingface (or set HF_HOME)") from exc
    preprocess = _preprocess_for(model, preprocess_overrides)
    # open_clip's get_tokenizer forwards extra kwargs to AutoTokenizer.from_pretrained (HFTokenizer);
    # only HF tokenizers take them (SimpleTokenizer would reject local_files_only).
    tok_kwargs = {"local_files_only": True} if (not allow and text_cfg.get("hf_tokenizer_name")) else {}
    try:
        tokenizer = open_clip.get_tokenizer(arch, **tok_kwargs)
    except OSError as exc:  # transformers installed, tokenizer files neither cached nor downloadable
        why = ("downloads are off ($ITR_OFFLINE / $HF_HUB_OFFLINE or allow_download=False)" if not allow
               else "could not be downloaded")
        raise MissingDependencyError(
            f"the tokenizer of CLIP architecture {arch!r} ({hf_text_requirements(arch)}) is not in the "
            f"Hugging Face cache and {why} ({exc}); run open_clip.get_tokenizer({arch!r}) "
            "once on a networked machine and copy ~/.cache/huggingface (or set HF_HOME)") from exc
    return model.eval(), preprocess, tokenizer


def load_weights_into(model: torch.nn.Module, state_dict: dict[str, torch.Tensor], *, source: str = "") -> None:
    """Load a (normalised) CLIP state dict into ``model`` strictly, after open_clip's compatibility
    fixes (custom-text key layout, logit_scale shape, positional-embedding resizing).  Raises
    :class:`WeightsError` naming the source and the mismatching keys."""
    from open_clip.model import convert_to_custom_text_state_dict, resize_pos_embed, resize_text_pos_embed

    sd = dict(state_dict)
    if "positional_embedding" in sd and not hasattr(model, "positional_embedding"):
        sd = convert_to_custom_text_state_dict(sd)
    if "logit_scale" in sd and model.logit_scale.ndim != sd["logit_scale"].ndim:
        sd["logit_scale"] = sd["logit_scale"].reshape(model.logit_scale.shape)
    if getattr(model, "logit_bias", None) is None:
        sd.pop("logit_bias", None)
    try:
        resize_pos_embed(sd, model)
        resize_text_pos_embed(sd, model)
    except Exception as exc:  # shape too different to interpolate
        raise WeightsError(f"{source}: weights do not match the architecture (positional embeddings: "
                           f"{exc or type(exc).__name__}) — pass the matching --clip-model") from exc
    own = model.state_dict()
    # non-persistent buffers (e.g. the text causal ``attn_mask``) appear in TorchScript state dicts
    for name, _ in model.named_buffers():
        if name not in own:
            sd.pop(name, None)
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    bad_shape = sorted(k for k in set(own) & set(sd) if tuple(own[k].shape) != tuple(sd[k].shape))
    if missing or unexpected or bad_shape:
        def few(xs):
            return ", ".join(xs[:5]) + (f" … (+{len(xs) - 5})" if len(xs) > 5 else "")
        raise WeightsError(
            f"{source}: weights do not match the architecture "
            + (f"missing: {few(missing)}; " if missing else "")
            + (f"unexpected: {few(unexpected)}; " if unexpected else "")
            + (f"wrong shape: {few([f'{k} {tuple(sd[k].shape)} vs {tuple(own[k].shape)}' for k in bad_shape])}"
               if bad_shape else "")
            + " — pass the matching --clip-model (e.g. ViT-B-32 for OpenAI / PAC-S ViT-B/32, ViT-L-14 "
              "for PAC-S ViT-L/14), or 'auto' to infer it from an OpenAI-layout state dict")
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in sd.items()}, strict=True)


def _infer_openai_arch(state_dict: dict[str, torch.Tensor], quick_gelu: bool):
    """Rebuild the architecture of an OpenAI-layout state dict (open_clip's
    ``build_model_from_openai_state_dict``), fp32."""
    from open_clip.model import build_model_from_openai_state_dict

    try:
        model = build_model_from_openai_state_dict(dict(state_dict), quick_gelu=quick_gelu, cast_dtype=None)
    except Exception as exc:
        raise WeightsError(f"cannot infer a CLIP architecture from this state dict ({exc}); "
                           "pass --clip-model explicitly") from exc
    model = model.float()
    # open_clip casts to fp16 before loading (OpenAI layout); reload so fp32 files stay bit-exact
    model.load_state_dict({k: v for k, v in state_dict.items() if k in model.state_dict()}, strict=False)
    return model.eval()


def _offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "") not in ("", "0") or os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")


def _url_sha256(url: str) -> str:
    """The SHA-256 (or its prefix) that open_clip expects of the file at a pretrained tag's ``url``, as
    ``open_clip.pretrained.download_pretrained_from_url`` reads it: the folder name of an OpenAI URL, the
    file-name suffix of an mlfoundations release; ``""`` when the URL names none."""
    if "openaipublic" in url:
        return url.rstrip("/").split("/")[-2]
    if "mlfoundations" in url:
        return os.path.splitext(os.path.basename(url))[0].split("-")[-1]
    return ""


def _tag_torchscript_sha256(tag_cfg: dict, path: Path) -> str | None:
    """The full SHA-256 that the tag's OpenAI release URL names when ``path`` is that URL's file, else
    ``None``: a TorchScript archive with exactly these bytes comes from the tag's official source and may
    be loaded (:func:`neural.checkpoints.read_state_dict` checks the bytes it loads).  Only OpenAI's URLs
    carry a full 64-digit checksum, and only OpenAI's releases are TorchScript archives."""
    url = tag_cfg.get("url", "")
    expected = _url_sha256(url)   # an mlfoundations suffix is 8 digits: never taken for a full checksum
    return expected if len(expected) == 64 and path.name == os.path.basename(url) else None


def _cached_tag_file(tag_cfg: dict, cache_dir: str | None) -> str | None:
    """The local file of an open_clip pretrained tag if it is already on disk, else ``None``
    (never touches the network).  A file at the tag URL's cache path whose SHA-256 differs from the one
    the URL names is ignored with a warning (open_clip would download it again)."""
    if tag_cfg.get("file"):
        return tag_cfg["file"] if os.path.isfile(tag_cfg["file"]) else None
    hf = tag_cfg.get("hf_hub", "")
    if hf:
        try:
            from huggingface_hub import try_to_load_from_cache
            from open_clip.constants import HF_WEIGHTS_NAME
            from open_clip.pretrained import _get_safe_alternatives

            model_id, filename = os.path.split(hf)
            filename = filename or HF_WEIGHTS_NAME
            for fn in [*_get_safe_alternatives(filename), filename]:
                p = try_to_load_from_cache(repo_id=model_id, filename=fn, cache_dir=cache_dir)
                if isinstance(p, str) and os.path.isfile(p):
                    return p
        except ImportError:
            pass
    url = tag_cfg.get("url", "")
    if url:
        p = os.path.join(cache_dir or os.path.expanduser("~/.cache/clip"), os.path.basename(url))
        if os.path.isfile(p):
            expected = _url_sha256(url)
            if not expected or file_sha256(p).startswith(expected):
                return p
            warnings.warn(f"{p}: its SHA-256 does not match the one its download URL names ({expected[:16]}…); "
                          "ignored (delete it; open_clip downloads it again on a networked machine)", stacklevel=3)
    return None


def _unreachable_download_host(tag_cfg: dict, timeout: float = 5.0) -> str | None:
    """Why the download source of an open_clip tag cannot be reached, or ``None`` when it can (or when a
    proxy is configured, which a direct probe cannot judge).

    One TCP connection attempt (``timeout`` seconds) to the host that would serve the file (the Hugging
    Face endpoint, ``$HF_ENDPOINT`` if set, or the tag's URL host).  Without it, an offline machine waits
    through huggingface_hub's retries (about a minute) and prints a warning per retry before failing.
    """
    from urllib.parse import urlsplit

    from corpora.paths import network_problem

    if tag_cfg.get("hf_hub"):
        url = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    else:
        url = tag_cfg.get("url", "")
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return None
    problem = network_problem(host, parts.port or (80 if parts.scheme == "http" else 443), timeout)
    return None if problem is None else (f"no network: {problem}; set {OFFLINE_ENV}=1 to skip this check "
                                         "on an offline machine")


def check_pretrained_tag(model: str, tag: str, *, allow_download: bool | None = None,
                         cache_dir: str | None = None) -> tuple[dict, str | None]:
    """Check, without downloading anything, that open_clip pretrained ``tag`` of ``model`` can be had.

    Returns ``(tag config, local file or None)``: the file when it is already in the local cache, else
    ``None`` (a download is allowed and its host answers).  Raises ``ValueError`` for a tag open_clip
    does not know for ``model`` and :class:`~neural.checkpoints.MissingWeightsError` when the weights are
    not cached and downloads are off or the host cannot be reached — so a job can fail before any work.
    """
    import open_clip

    allow = (not _offline()) if allow_download is None else allow_download
    arch_for_tag = model.replace("/", "-")
    tag_cfg = open_clip.get_pretrained_cfg(arch_for_tag, tag) if model != "auto" else {}
    if not tag_cfg:
        tags = open_clip.list_pretrained_tags_by_model(arch_for_tag) if model != "auto" else []
        raise ValueError(f"pretrained={tag!r} is neither a file nor a known tag for {model!r} "
                         f"(known tags: {tags})")
    local = _cached_tag_file(tag_cfg, cache_dir)
    if local is None:
        if not allow:
            raise MissingWeightsError(_missing_weights_message(model, tag,
                                                               "not in the local cache and downloads are off"))
        unreachable = _unreachable_download_host(tag_cfg)
        if unreachable:
            raise MissingWeightsError(_missing_weights_message(model, tag, unreachable))
    return tag_cfg, local


def _missing_weights_message(model: str, pretrained: str, why: str) -> str:
    return (f"CLIP weights {model}/{pretrained} are not available ({why}). On a networked machine they are "
            f"downloaded automatically; offline, download them elsewhere (e.g. open_clip.create_model('{model}', "
            f"pretrained='{pretrained}') fills ~/.cache/huggingface or ~/.cache/clip) and pass the file with "
            f"--clip-pretrained /path/to/file (load_backbone('{model}', '/path/to/file')), or use "
            "--clip-model tiny for the small CLIP trained here on the teaching set.")


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
        :mod:`neural.checkpoints`).  ``None``: random initialisation (for tests).
    device : ``"auto"`` | ``"cpu"`` | ``"cuda"`` | torch.device
        ``"auto"``: CUDA when available, else CPU.
    precision : ``"fp32"`` | ``"fp16"``
        fp16 only on CUDA; on CPU it falls back to fp32 with a warning (recorded in provenance).
    quick_gelu : bool, optional
        Force QuickGELU (OpenAI-trained weights) on / off.  Default: from the tag's config; for files,
        True for OpenAI TorchScript archives and for the PAC-S ViT-B/32 release (see
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
    WeightsError
        The weights do not fit the architecture.
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
    allow = (not _offline()) if allow_download is None else allow_download
    if model != "auto":
        check_architecture(model.replace("/", "-"))
        require_architecture_dependencies(model.replace("/", "-"))

    file_path: Path | None = None
    tag_cfg: dict = {}
    if pretrained is not None:
        as_path = Path(str(pretrained)).expanduser()
        if as_path.is_file():
            file_path = as_path
        elif looks_like_weights_file(pretrained):
            raise MissingWeightsError(f"weights file not found: {as_path} (--clip-pretrained)")
        else:
            tag_cfg, local = check_pretrained_tag(model, str(pretrained), allow_download=allow, cache_dir=cache_dir)
            if local is None:
                try:
                    from open_clip.pretrained import download_pretrained

                    local = download_pretrained(tag_cfg, cache_dir=cache_dir)
                except Exception as exc:
                    raise MissingWeightsError(_missing_weights_message(
                        model, str(pretrained), f"download failed: {exc}")) from exc
                if not local:
                    raise MissingWeightsError(_missing_weights_message(model, str(pretrained), "no download source"))
            file_path = Path(local)

    state_dict = fmt = None
    weights_id = ""
    if file_path is not None:
        # a tag's TorchScript file is trusted when the bytes loaded carry the checksum its official URL names
        expected = _tag_torchscript_sha256(tag_cfg, file_path) if tag_cfg else None
        state_dict, fmt = read_state_dict(file_path, trust_torchscript=trust_torchscript,
                                          torchscript_sha256=expected)
        weights_id = (expected if fmt == "torchscript" and expected and not torchscript_trusted(trust_torchscript)
                      else file_sha256(file_path))[:16]
    if quick_gelu is None:
        if tag_cfg:
            quick_gelu = bool(tag_cfg.get("quick_gelu", False))
        elif fmt == "torchscript":
            quick_gelu = True
        elif file_path is not None and file_path.name in PACS_CHECKPOINTS:
            quick_gelu = PACS_CHECKPOINTS[file_path.name]["quick_gelu"]
        elif file_path is not None and model != "auto":
            hint = activation_hint(model.replace("/", "-"))
            if hint:
                warnings.warn(f"{file_path}: {hint}", UserWarning, stacklevel=2)
    preprocess_overrides = {k: tag_cfg[k] for k in ("mean", "std", "interpolation", "resize_mode")
                            if k in tag_cfg}

    if model == "auto":
        if state_dict is None:
            raise ValueError("model='auto' needs a weights file to infer the architecture from")
        net = _infer_openai_arch(state_dict, quick_gelu=True if quick_gelu is None else quick_gelu)
        preprocess = _preprocess_for(net, preprocess_overrides)
        from open_clip.tokenizer import SimpleTokenizer

        tokenizer = SimpleTokenizer(context_length=int(net.context_length))
        arch = "auto(openai-layout)"
    else:
        arch = model.replace("/", "-")
        net, preprocess, tokenizer = create_architecture(arch, quick_gelu=quick_gelu,
                                                         preprocess_overrides=preprocess_overrides,
                                                         allow_download=allow)
        if state_dict is not None:
            load_weights_into(net, state_dict, source=f"{file_path} ({fmt})")
    net = net.to(dev)
    if precision == "fp16":
        net = net.half()
    net.eval()
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
    ctx = int(getattr(net, "context_length", getattr(tokenizer, "context_length", 77)))
    return Backbone(model=net, preprocess=preprocess, tokenizer=tokenizer, name=name, weights_id=weights_id,
                    device=dev, precision=precision, context_length=ctx, arch=arch, source=source,
                    show_progress=show_progress)


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
    "Backbone", "load_backbone", "backbone_from_model", "create_architecture", "load_weights_into",
    "hf_text_requirements", "require_architecture_dependencies", "activation_hint", "check_architecture",
    "check_pretrained_tag", "looks_like_weights_file", "WEIGHTS_SUFFIXES",
    "resolve_device", "CUSTOM_MODEL_CONFIGS", "PACS_CHECKPOINTS", "OFFLINE_ENV",
    "WeightsError", "MissingWeightsError", "MissingDependencyError",
]
