# Size (~700 lines): BRIDGE (Sarto et al. 2024): the mapping module, its three losses, its training and its score.
"""BRIDGE (Sarto et al., ECCV 2024): caption evaluation with pseudo-captions built from visual cues.

The authors' repository (aimagelab/bridge-score) held no training code in the copy we could read (its
README only); this follows the paper (Sec. 3 and the supplementary Eqs. 5–6) on top of any frozen CLIP
:class:`Backbone`.

1. **Template captions** (Sec. 3.2).  For each image a caption of it is needed: on the teaching set the
   generator's own description (``corpus.describe(image_id)``, a stand-in for a captioner's output); on
   real data a captions file the user supplies (``{image_id: caption}``, e.g. from BLIP); otherwise the
   **fallback**: the training caption nearest to the image under the backbone (``cos(v, c)`` over the
   training captions; at fit time the image's own captions are excluded so the template is not its
   ground truth).  Its noun chunks (NLTK ``RegexpParser`` NP grammar, :mod:`neural.text_units`) give one
   *replica* per chunk with the chunk replaced by ``US = 3`` mask slots; the chunk's determiner stays
   outside the mask ("A [MASK] running with a [MASK]", Fig. 2).
2. **Mapping module ψ** (:class:`MappingModule`): the template's (frozen) token embeddings plus the
   text positional embeddings, with a learnable ``[MASK]`` vector in the slots, go through 2 transformer
   layers, each = self-attention over the template + cross-attention to the image's grid features (ViT
   patch tokens after ``ln_post``, linearly projected to the text width) + MLP.  A final LayerNorm +
   linear map outputs vectors in the token-embedding space; those at the slots are the pseudo-tokens.
3. **Pseudo-caption**: the template's token embeddings with the pseudo-tokens inserted go through the
   FROZEN text encoder (:func:`encode_text_from_embeddings`; pooling at the end-of-text token, found from
   the token ids — the slots carry the id of ``*``, so ``argmax`` pooling still finds EOT).
4. **Losses** (Sec. 3.3 and the supplementary Eqs. 5–6), ``L = λ1 L1 + λ2 L2 + λ3 L3`` with
   λ1 = λ3 = 0.01, λ2 = 1, backbone frozen.  Each step takes B images and **two** noun chunks of each
   image's template (one when it has a single chunk), so image i has N_i ∈ {1, 2} pseudo-captions
   ``p_{i,k}`` in the batch.  With ``z = cos / τ``:

   * ``L1`` (:func:`bridge_pair_loss`) — pseudo-captions against the global image embeddings ``v``,
     with ``M = Σ_i N_i`` the pseudo-captions in the batch::

         L1 = −1/M Σ_i Σ_k [ log( e^{z(p_ik, v_i)} / Σ_{j≠i} N_j e^{z(p_ik, v_j)} )
                             + N_i log( e^{z(v_i, p_ik)} / Σ_{(j,l): j≠i} e^{z(v_i, p_jl)} ) ]

     the negatives of the first term weighted by their chunk counts, the second term by ``N_i``, so an
     image whose caption has more noun chunks weighs more (the supplementary: "captions having more noun
     chunks … we therefore assign them a higher weight"); the positive is left out of the denominators;
   * ``L2`` — the same with the embedding of a ground-truth caption of image i in place of ``v_i``;
   * ``L3`` — ``C(x) = Linear(ReLU(Linear(x)))`` on ``p_{i,k}`` contrasted (InfoNCE) with the embeddings
     of the prompt ``"a photo of a <noun chunk>"`` of the masked chunk (leading article dropped from the
     chunk; identical prompts in a batch count as positives of each other):
     :func:`neural.losses.info_nce` with ``targets`` and ``reduction="mean"``.

   The temperature is the backbone's own (``1 / exp(logit_scale)``, at least 0.01).
5. **Score** (Eq. 4)::

       BRIDGE(I, T) = ½ [ CLIP-S(I, T) + w · max(cos(t*, t), 0) ],   w = 2.5

   (``w`` is ours: the paper gives no value) with ``t*`` the mean of the L2-normalised pseudo-caption
   embeddings over all noun chunks of the image's template, CLIP-S = ``w · max(cos(v, c), 0)`` on "A photo depicts"-prefixed candidates (as
   :mod:`neural.clipscore`), and ``t`` the candidate's embedding without the prompt (pseudo-captions are
   plain captions).  BRIDGE is reference-free: ``references`` are ignored.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpora.base import GeneratedCorpus
from corpora.cache import NO_CACHE
from neural.base import PROMPT, clip_s, is_embedding_matrix, l2_normalize, with_prompt
from neural.bridge_templates import TemplateBatch, build_template_tokens, l3_targets
from neural.checkpoints import state_dict_sha256
from neural.losses import contrastive_logits, info_nce
from neural.recipes import Recipe
from neural.text_tower import encode_text_from_embeddings, text_tower_parts, token_embedding
from neural.text_units import MaskTemplate, mask_templates
from neural.training import (
    MixedPrecision,
    adamw,
    deterministic,
    load_state_arrays,
    lr_schedule,
    progress,
    state_dict_arrays,
    tick,
)

__all__ = ["BridgeConfig", "MappingModule", "BRIDGE", "BridgePairScorer", "image_global_and_grid",
           "bridge_pair_loss", "sample_replicas"]


# ============================================================================ frozen-encoder plumbing
def image_global_and_grid(model: nn.Module, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(global embedding (B, D), grid features (B, P, width_v))`` of a ViT image tower in one pass:
    grid = patch tokens after the final LayerNorm (``ln_post``), global = the pooled, projected output."""
    if hasattr(model, "image_tokens"):
        return model.image_tokens(pixels)
    vis = model.visual
    if not (hasattr(vis, "_embeds") and hasattr(vis, "_pool")):
        raise NotImplementedError(f"BRIDGE needs a ViT image tower with patch tokens; got {type(vis).__name__}")
    x = vis._embeds(pixels)
    x = vis.transformer(x)
    if getattr(vis, "final_ln_after_pool", False) or getattr(vis, "attn_pool", None) is not None:
        raise NotImplementedError("BRIDGE: towers with attentional pooling / final LN after pooling are not supported")
    x = vis.ln_post(x)
    pooled = x[:, 1:].mean(dim=1) if vis.pool_type == "avg" else x[:, 0]
    if vis.proj is not None:
        pooled = pooled @ vis.proj
    return pooled, x[:, 1:]


# ============================================================================ ψ
class _MapLayer(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.self_attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(width)
        self.cross_attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln_3 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x, grid, pad_mask):
        h = self.ln_1(x)
        x = x + self.self_attn(h, h, h, key_padding_mask=pad_mask, need_weights=False)[0]
        h = self.ln_2(x)
        x = x + self.cross_attn(h, grid, grid, need_weights=False)[0]
        return x + self.mlp(self.ln_3(x))


class MappingModule(nn.Module):
    """ψ: template token embeddings (slots = learnable ``[MASK]``) + grid features → pseudo-tokens.

    Parameters
    ----------
    text_width : int
        Width of the text tower's token embeddings (output space of ψ).
    vision_width : int
        Width of the grid features (projected linearly to ``text_width``).
    layers : int
        Transformer layers (2 in BRIDGE).
    heads : int
    """

    def __init__(self, text_width: int, vision_width: int, layers: int = 2, heads: int = 4):
        super().__init__()
        self.mask_token = nn.Parameter(torch.randn(text_width) * 0.02)
        self.grid_proj = nn.Linear(vision_width, text_width)
        self.grid_ln = nn.LayerNorm(text_width)
        self.layers = nn.ModuleList(_MapLayer(text_width, heads) for _ in range(layers))
        self.ln_out = nn.LayerNorm(text_width)
        self.out = nn.Linear(text_width, text_width)

    def forward(self, tok_emb: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor, pad: torch.Tensor,
                grid: torch.Tensor) -> torch.Tensor:
        """``tok_emb`` (B, L, W) frozen token embeddings, ``pos`` (L, W) positional embeddings, ``slots``
        (B, L) bool, ``pad`` (B, L) bool (True = padding), ``grid`` (B, P, W_v).  Returns the token
        embeddings of the pseudo-caption (B, L, W): the template's own outside the slots, ψ's output
        inside."""
        x = torch.where(slots[..., None], self.mask_token.to(tok_emb.dtype), tok_emb) + pos
        g = self.grid_ln(self.grid_proj(grid))
        for layer in self.layers:
            x = layer(x, g, pad)
        pseudo = self.out(self.ln_out(x))
        return torch.where(slots[..., None], pseudo, tok_emb)


# ============================================================================ losses
def bridge_pair_loss(p: torch.Tensor, owner: torch.Tensor, q: torch.Tensor, temperature: float) -> torch.Tensor:
    """BRIDGE L1 / L2 (supplementary Eqs. 5–6): pseudo-captions against one target per image.

    With image ``i``'s ``N_i`` pseudo-captions ``p_ik`` in the batch, ``M = Σ_i N_i`` and
    ``z = cos / τ``::

        L = −1/M Σ_i Σ_k [ log( e^{z(p_ik, q_i)} / Σ_{j≠i} N_j e^{z(p_ik, q_j)} )
                           + N_i log( e^{z(q_i, p_ik)} / Σ_{j≠i} Σ_l e^{z(q_i, p_jl)} ) ]

    normalised by ``1/M``, the negative images in the first term's denominator weighted by their chunk
    counts ``N_j``, the second term multiplied by ``N_i``: captions with more noun chunks get a higher
    weight ("captions having more noun chunks … we therefore assign them a higher weight").  The
    positive is left out of both denominators.

    Parameters
    ----------
    p : Tensor, shape (P, D)
        L2-normalised pseudo-caption embeddings; ``p[r]`` belongs to image ``owner[r]``.
    owner : Tensor, shape (P,), int64
        Row of ``q`` (the image in the batch) of each pseudo-caption; image i has ``N_i ≥ 1`` of them.
    q : Tensor, shape (B, D)
        L2-normalised targets, one per image: the global image embeddings (L1) or the embeddings of a
        ground-truth caption (L2).
    temperature : float

    Returns
    -------
    Tensor
        The scalar ``L`` above (``M = P``).
    """
    B = q.shape[0]
    z = contrastive_logits(p, q, temperature=temperature)                 # (P, B)
    pos = F.one_hot(owner, B).bool()                                      # (P, B)
    n_i = torch.bincount(owner, minlength=B).to(z.dtype)                  # N_i
    if bool((n_i == 0).any()) or B < 2:
        raise ValueError("bridge_pair_loss: every image needs a pseudo-caption, and B ≥ 2")
    z_pos = z[pos]                                                        # (P,) in row order
    weighted = (z + torch.log(n_i)[None, :]).masked_fill(pos, float("-inf"))
    p_to_q = torch.logsumexp(weighted, dim=1) - z_pos                     # log Σ_{j≠i} N_j e^{z(p, q_j)}
    neg_cols = torch.logsumexp(z.masked_fill(pos, float("-inf")), dim=0)  # Σ over other images' p
    q_to_p = n_i[owner] * (neg_cols[owner] - z_pos)
    return (p_to_q + q_to_p).sum() / p.shape[0]


def sample_replicas(rows_of: list[np.ndarray], images: np.ndarray, per_image: int,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``per_image`` distinct template replicas (noun chunks) of each image in ``images`` (all of them
    when it has fewer), drawn with ``rng``.  Returns ``(replica rows, position of its image in images)``."""
    rows, pos = [], []
    for b, i in enumerate(images):
        own = rows_of[i]
        pick = rng.choice(len(own), size=min(per_image, len(own)), replace=False)
        rows.extend(own[pick].tolist())
        pos.extend([b] * len(pick))
    return np.asarray(rows, dtype=np.int64), np.asarray(pos, dtype=np.int64)


# ============================================================================ training + scoring
@dataclass
class BridgeConfig:
    """BRIDGE recipe.  Defaults sized for the tiny CLIP on the teaching set (seconds on 2 CPU cores):
    16 images × ``chunks_per_image`` = 2 noun chunks = 32 pseudo-captions per step; for a real backbone
    use more steps (thousands), larger batches and ``heads = text_width // 64``.  These defaults' learning
    rate, steps and batch are ours (the paper's AdamW, lr 1e-4, batch 256 of Sec. 4.1 are the
    ``bridge-paper`` recipe's); ``w = 2.5`` in Eq. 4 is ours too (the paper gives no value; CLIP-S's)."""

    n_pseudo: int = 3
    chunks_per_image: int = 2
    layers: int = 2
    heads: int = 4
    steps: int = 60
    batch_size: int = 16
    lr: float = 1e-3
    weight_decay: float = 1e-2
    lambda1: float = 0.01
    lambda2: float = 1.0
    lambda3: float = 0.01
    w: float = 2.5
    max_templates_per_image: int = 8
    max_images: int = 512
    seed: int = 0
    #: passes over the training images instead of ``steps`` (``None``: ``steps``); learning-rate schedule,
    #: warm-up steps, ``"fp32"`` or ``"amp"`` (autocast on CUDA): :class:`neural.recipes.Recipe`
    epochs: int | None = None
    schedule: str = "constant"
    warmup_steps: int = 0
    precision: str = "fp32"

    @classmethod
    def from_recipe(cls, recipe: Recipe, **overrides) -> "BridgeConfig":
        """The config of a BRIDGE :class:`~neural.recipes.Recipe` (steps or epochs, batch of images, lr,
        weight decay, schedule, precision, image cap — ``None``: the whole split); ``overrides`` (e.g.
        ``seed``) replace single fields."""
        fields = {**recipe.optimiser_fields("BRIDGE"), "steps": recipe.steps, "epochs": recipe.epochs,
                  "max_images": recipe.max_images or 10 ** 9}
        return cls(**{**fields, **overrides})

    def total_steps(self, n_images: int) -> int:
        """Optimiser steps on ``n_images`` training images: ``steps``, or ``epochs × ⌈n / batch⌉``."""
        if self.epochs is None:
            return self.steps
        return self.epochs * max(1, -(-min(n_images, self.max_images) // self.batch_size))


def _captions_file_digest(captions_file: Mapping[str, str] | None) -> str | None:
    """SHA-256 of a captions file's content (``None`` for none): what the templates depend on.  Keyed by
    content, not by object: two files never share a key, the same content always does."""
    if captions_file is None:
        return None
    return hashlib.sha256(json.dumps(sorted(captions_file.items())).encode("utf-8")).hexdigest()

class BRIDGE:
    """BRIDGE scorer on a frozen CLIP :class:`Backbone` (see the module docstring).

    Scikit-learn style: ``BRIDGE(backbone, config).fit(corpus)`` trains ψ (and the L3 MLP) on the
    training split; ``score`` / ``score_matrix`` evaluate captions.  The backbone is stored as ``clip``
    (not ``backbone``): ψ needs raw images (the grid features).  :func:`neural.base.affinity_for_pool`
    calls :meth:`affinity` (``pool_affinity_from_corpus``), whose templates come from the source chosen in
    :meth:`fit`.
    """

    #: :func:`neural.base.affinity_for_pool` asks :meth:`affinity` (templates from the corpus)
    pool_affinity_from_corpus = True

    def __init__(self, backbone, config: BridgeConfig | None = None, name: str = "BRIDGE"):
        self.clip = backbone
        self.config = BridgeConfig.from_recipe(config) if isinstance(config, Recipe) else (config or BridgeConfig())
        self.name = name
        self.psi: MappingModule | None = None
        self.mlp: nn.Module | None = None
        self.bank_texts: list[str] = []
        self._bank_emb: np.ndarray | None = None
        self.bank_tags: list = []
        self.captions_file: dict[str, str] | None = None   # fit()'s template captions, if any
        self.log: list = []
        self._init_modules()

    @property
    def bank_emb(self) -> np.ndarray | None:
        """CLIP embeddings of the caption bank (the training captions), encoded on first access."""
        if self._bank_emb is None and self.bank_texts:
            self._bank_emb = self.clip.encode_texts(self.bank_texts).numpy()
        return self._bank_emb

    @bank_emb.setter
    def bank_emb(self, value) -> None:
        self._bank_emb = None if value is None else np.asarray(value, np.float32)

    # ------------------------------------------------------------------ modules
    def _init_modules(self) -> None:
        cfg = self.config
        torch.manual_seed(cfg.seed)
        m = self.clip.model
        tok = token_embedding(m)
        tw = tok.weight.shape[1] if hasattr(tok, "weight") else tok.up.weight.shape[0]
        with torch.no_grad():
            px = torch.zeros(1, 3, self.clip.image_size, self.clip.image_size, device=self.clip.device,
                             dtype=self.clip.dtype)
            g, grid = image_global_and_grid(m, px)
        self.text_width, self.vision_width, self.embed_dim = tw, grid.shape[-1], g.shape[-1]
        heads = cfg.heads if tw % cfg.heads == 0 else 1
        self.psi = MappingModule(tw, grid.shape[-1], cfg.layers, heads).to(self.clip.device)
        D = g.shape[-1]
        # C(x) = Linear(ReLU(Linear(x))), the L3 head
        self.mlp = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, D)).to(self.clip.device)

    def trainable_modules(self) -> nn.ModuleDict:
        return nn.ModuleDict({"psi": self.psi, "mlp": self.mlp})

    def cache_identity(self) -> dict:
        return {"scorer": "BRIDGE", "config": asdict(self.config), "backbone": self.clip.cache_identity(),
                "psi": getattr(self, "_psi_id", "untrained"),
                "template_source": getattr(self, "template_source", None),
                "captions_file": _captions_file_digest(getattr(self, "captions_file", None))}

    @property
    def _temperature(self) -> float:
        ls = getattr(self.clip.model, "logit_scale", None)
        t = 0.07 if ls is None else float(1.0 / torch.exp(ls.detach().float()).item())
        return max(t, 0.01)

    # ------------------------------------------------------------------ features
    @torch.no_grad()
    def _image_features(self, images, batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
        if is_embedding_matrix(images):
            raise ValueError("BRIDGE needs the images themselves (grid features), not embeddings")
        gs, grids = [], []
        m = self.clip.model.eval()
        for s in range(0, len(images), batch_size):
            px = self.clip.preprocess_images(list(images[s:s + batch_size])).to(self.clip.device, self.clip.dtype)
            g, grid = image_global_and_grid(m, px)
            gs.append(F.normalize(g.float(), dim=-1))
            grids.append(grid.float())
        return torch.cat(gs), torch.cat(grids)

    def _pseudo(self, tb: TemplateBatch, grid: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        """Normalised pseudo-caption embeddings of replicas ``rows`` (grid indexed by their owners)."""
        m = self.clip.model
        tokens = tb.tokens[rows].to(self.clip.device)
        slots = tb.slots[rows].to(self.clip.device)
        L = int(tokens.argmax(dim=1).max().item()) + 1  # cut trailing padding (exact under a causal mask)
        tokens, slots = tokens[:, :L], slots[:, :L]
        emb = token_embedding(m)(tokens).detach()
        pos = text_tower_parts(m)[1][:L].detach()
        eot = tokens.argmax(dim=1, keepdim=True)
        pad = torch.arange(L, device=tokens.device)[None, :] > eot
        x = self.psi(emb.float(), pos.float(), slots, pad,
                     grid[torch.as_tensor(tb.owner[rows], device=grid.device)])
        return F.normalize(encode_text_from_embeddings(m, x.to(emb.dtype), tokens).float(), dim=-1)

    def templates_for(self, captions: Sequence[str], tags: Sequence | None = None) -> list[list[MaskTemplate]]:
        tags = tags if tags is not None else [None] * len(captions)
        return [mask_templates(c, t, self.config.n_pseudo) for c, t in zip(captions, tags)]

    # ------------------------------------------------------------------ template captions
    def nearest_captions(self, image_emb: np.ndarray, exclude: Sequence[set[int]] | None = None) -> list[int]:
        """Index into the caption bank of the caption nearest to each image (the template fallback)."""
        if self.bank_emb is None:
            raise RuntimeError("BRIDGE: no caption bank (call fit first, or pass template_captions)")
        S = np.asarray(image_emb, np.float32) @ self.bank_emb.T
        if exclude is not None:
            for i, ex in enumerate(exclude):
                if ex:
                    S[i, list(ex)] = -np.inf
        return S.argmax(1).tolist()

    @staticmethod
    def corpus_templates(corpus, image_ids: Sequence[str], captions_file: Mapping[str, str] | None = None,
                         template_source: str = "auto"):
        """Template captions and their POS tags for ``image_ids``, or ``(None, None)`` for the
        nearest-training-caption fallback.

        ``template_source``: ``"captions_file"`` (the user's ``{image_id: caption}``), ``"describe"``
        (the teaching set's generator description — an *oracle* captioner: it states only true facts),
        ``"nearest"`` (fallback), or ``"auto"``: captions file if given, else ``describe`` when the corpus
        has it, else the fallback.
        """
        src = BRIDGE.resolve_source(corpus, captions_file, template_source)
        if src == "captions_file":
            missing = [i for i in image_ids if i not in captions_file]
            if missing:
                raise KeyError(f"template captions file has no caption for {len(missing)} image(s), "
                               f"e.g. {missing[:3]}")
            return [captions_file[i] for i in image_ids], None
        if src == "describe":
            caps = [corpus.describe(i)[0] for i in image_ids]
            return [c.text for c in caps], [c.pos for c in caps]
        return None, None

    @staticmethod
    def resolve_source(corpus, captions_file, template_source: str = "auto") -> str:
        if template_source not in ("auto", "captions_file", "describe", "nearest"):
            raise ValueError(f"template_source={template_source!r}: expected auto, captions_file, describe "
                             "or nearest")
        if template_source == "auto":
            if captions_file is not None:
                return "captions_file"
            return "describe" if isinstance(corpus, GeneratedCorpus) else "nearest"
        if template_source == "captions_file" and captions_file is None:
            raise ValueError("template_source='captions_file' needs captions_file={image_id: caption}")
        if template_source == "describe" and not isinstance(corpus, GeneratedCorpus):
            raise ValueError(f"corpus {getattr(corpus, 'name', corpus)!r} has no generator (describe()): use "
                             "template_source='nearest' or a captions file")
        return template_source

    def source_for(self, corpus, template_source: str | None = None) -> str:
        """The template source when scoring ``corpus``: ``template_source`` if given; else the source
        chosen at fit time (:meth:`fit`, :meth:`restore`) where ``corpus`` can provide it; else what
        ``"auto"`` picks for ``corpus`` (:meth:`resolve_source`).  A BRIDGE fitted on generator
        descriptions — the teaching set's, as the shipped BRIDGE — scoring a corpus without a generator
        (real Flickr8k) with no captions file therefore uses the nearest caption of its bank, the
        documented fallback for a missing captioner."""
        if template_source is not None:
            return template_source
        src = getattr(self, "template_source", None) or "auto"
        if src == "describe" and not isinstance(corpus, GeneratedCorpus):
            return self.resolve_source(corpus, getattr(self, "captions_file", None), "auto")
        return src

    # ------------------------------------------------------------------ fit
    def fit(self, corpus, split: str = "train", *, captions_file: Mapping[str, str] | None = None,
            template_source: str = "auto", cache=None, show_progress: bool = True,
            num_threads: int | None = None, image_ids: Sequence[str] | None = None) -> "BRIDGE":
        """Train ψ and the L3 MLP on ``corpus``' ``split`` (backbone frozen).

        ``captions_file``: ``{image_id: caption}`` template captions (e.g. a captioner's output);
        ``template_source``: see :meth:`corpus_templates` (the fallback excludes each training image's
        own captions).
        ``image_ids``: the training images to use instead of the whole split (e.g. only those on disk,
        ``--skip-missing-images``).
        The trained weights are cached in ``cache`` (namespace ``"bridge"``) under the backbone identity,
        corpus fingerprint, split, training image ids, config and template source.  Every fit trains from
        the seed's initial ψ and MLP, so fitting the same object again gives what a fresh object gives.
        """
        cfg = self.config
        cache = cache if cache is not None else NO_CACHE
        ids = list(corpus.split(split) if image_ids is None else image_ids)[: cfg.max_images]
        caps = [c for i in ids for c in corpus.captions_of(i)]
        if not caps:
            raise ValueError(f"BRIDGE.fit: split {split!r} of {corpus.name!r} has no captions")
        self.bank_texts = [c.text for c in caps]
        self.bank_tags = [c.pos for c in caps]
        self._bank_emb = None   # encoded on first use (a run served from the caches never needs it)
        source = self.resolve_source(corpus, captions_file, template_source)
        if source == "captions_file":
            self.corpus_templates(corpus, ids, captions_file, source)  # says which ids the file lacks
        self.template_source = source
        self.fit_data = {"corpus": corpus.name, "fingerprint": corpus.fingerprint, "split": split,
                         "n_images": len(ids), "image_ids": ids, "n_captions": len(caps)}
        # the fit's template captions serve affinity() / corpus_pseudo_embeddings() by default
        self.captions_file = dict(captions_file) if captions_file is not None else None
        key = {"what": "bridge", "l3_positives": "same-prompt",
               "recipe": "supp-eqs-5-6 as printed (1/M, N_j-weighted negatives, N_i x second term), 2 chunks, "
                         "relu C, det kept",
               "backbone": self.clip.cache_identity(),
               "corpus": corpus.name,
               "fingerprint": corpus.fingerprint, "split": split, "ids": ids, "config": asdict(cfg),
               "images": corpus.images_fingerprint(ids), "template_source": source,
               "captions_file": None if captions_file is None else sorted((k, captions_file[k]) for k in ids)}

        def run() -> dict[str, np.ndarray]:
            with deterministic(num_threads):
                return self._train(corpus, ids, caps, captions_file, source, show_progress)

        arrays = cache.get_or_compute("bridge", key, run)
        load_state_arrays(self.trainable_modules(), {k: v for k, v in arrays.items() if k != "losses"})
        self.log = arrays["losses"].tolist() if "losses" in arrays else []
        self._psi_id = state_dict_sha256(self.trainable_modules().state_dict())[:16]
        self.trainable_modules().eval()
        return self

    def restore(self, state: Mapping[str, torch.Tensor], *, template_source: str | None,
                captions_file: Mapping[str, str] | None, bank_texts: Sequence[str], bank_tags: Sequence,
                log: Sequence | None = None, fit_data: dict | None = None) -> "BRIDGE":
        """Put back what :meth:`fit` produced (:func:`neural.saved.load_scorer`): ψ and the L3 head's
        ``state`` (every entry of :meth:`trainable_modules`), the template source and captions file, the
        caption bank (texts and POS tags: the fallback templates) and the loss log."""
        self.trainable_modules().load_state_dict(dict(state), strict=True)
        self.template_source = template_source
        self.captions_file = dict(captions_file) if captions_file is not None else None
        self.bank_texts = list(bank_texts)
        self.bank_tags = [None if t is None else tuple(t) for t in bank_tags]
        self._bank_emb = None
        self.log = list(log or [])
        self.fit_data = fit_data
        self._psi_id = state_dict_sha256(self.trainable_modules().state_dict())[:16]
        self.trainable_modules().eval()
        return self

    def _train(self, corpus, ids, caps, captions_file, source, show_progress) -> dict[str, np.ndarray]:
        cfg = self.config
        self._init_modules()   # every fit starts from the seed's ψ and MLP, not from an earlier fit's
        rng = np.random.default_rng(cfg.seed)
        torch.manual_seed(cfg.seed)
        images = [corpus.load_image(i) for i in ids]
        v, grid = self._image_features(images)
        texts, tags = self.corpus_templates(corpus, ids, captions_file, source)
        if texts is None:  # fallback: nearest training caption that is not one of the image's own
            own = {}
            for k, c in enumerate(caps):
                own.setdefault(c.image_id, set()).add(k)
            nn_idx = self.nearest_captions(v.numpy(), [own.get(i, set()) for i in ids])
            texts = [self.bank_texts[k] for k in nn_idx]
            tags = [self.bank_tags[k] for k in nn_idx]
        tb = build_template_tokens(self.clip.tokenizer, self.templates_for(texts, tags), cfg.n_pseudo,
                                   cfg.max_templates_per_image)
        # ground-truth caption embeddings per image, chunk-prompt embeddings per replica
        gt_rows = {}
        for k, c in enumerate(caps):
            gt_rows.setdefault(c.image_id, []).append(k)
        gt_emb = torch.from_numpy(self.bank_emb).to(self.clip.device)
        uniq, chunk_idx = l3_targets(tb.chunks)
        prompt_emb = self.clip.encode_texts(uniq).to(self.clip.device)
        rows_of = [np.flatnonzero(tb.owner == i) for i in range(len(ids))]
        params = list(self.trainable_modules().parameters())
        opt = adamw(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        n_steps = cfg.total_steps(len(ids))
        amp, sched = MixedPrecision(self.clip.device, cfg.precision), lr_schedule(opt, cfg.schedule, cfg.warmup_steps,
                                                                                  n_steps)
        self.trainable_modules().train()
        losses = []
        bar = progress(total=n_steps, desc="BRIDGE ψ", enabled=show_progress)
        B = min(cfg.batch_size, len(ids))
        for step in range(n_steps):
            img = rng.choice(len(ids), size=B, replace=False)
            rows, pos = sample_replicas(rows_of, img, cfg.chunks_per_image, rng)
            gts = np.array([gt_rows[ids[i]][rng.integers(len(gt_rows[ids[i]]))] for i in img])
            with amp.autocast():
                p = self._pseudo(tb, grid, rows).float()
                l1, l2, l3 = self._losses(p, torch.from_numpy(pos).to(p.device), v[torch.from_numpy(img).to(v.device)],
                                          gt_emb[torch.from_numpy(gts).to(gt_emb.device)], prompt_emb, chunk_idx[rows])
                loss = cfg.lambda1 * l1 + cfg.lambda2 * l2 + cfg.lambda3 * l3
            amp.step(loss, opt, sched)
            losses.append([float(loss.detach()), float(l1.detach()), float(l2.detach()), float(l3.detach())])
            tick(bar, None, "bridge", step, loss)
        if bar is not None:
            bar.close()
        self.trainable_modules().eval()
        out = state_dict_arrays(self.trainable_modules())
        out["losses"] = np.asarray(losses, np.float32)
        return out

    def _losses(self, p: torch.Tensor, owner: torch.Tensor, v: torch.Tensor, gt: torch.Tensor,
                prompt_emb: torch.Tensor, ci: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(L1, L2, L3)`` of pseudo-captions ``p`` owned by the batch images ``owner`` (rows of ``v`` and
        ``gt``), with L3 targets ``prompt_emb[ci]`` (same prompt = positives)."""
        temp = self._temperature
        same = torch.from_numpy(ci[:, None] == ci[None, :]).to(p.device)
        l3 = info_nce(F.normalize(self.mlp(p), dim=-1), prompt_emb[torch.from_numpy(ci).to(prompt_emb.device)],
                      temperature=temp, targets=same)
        return bridge_pair_loss(p, owner, v, temp), bridge_pair_loss(p, owner, gt, temp), l3

    def loss_on(self, corpus, image_ids: Sequence[str]) -> float:
        """The training objective on ``image_ids`` (the first ``chunks_per_image`` replicas of each image,
        GT = each image's first caption)."""
        cfg = self.config
        with torch.no_grad():
            images = [corpus.load_image(i) for i in image_ids]
            v, grid = self._image_features(images)
            texts, tags = self.corpus_templates(corpus, image_ids)
            if texts is None:
                texts, tags = [corpus.captions_of(i)[0].text for i in image_ids], None
            tb = build_template_tokens(self.clip.tokenizer, self.templates_for(texts, tags), cfg.n_pseudo,
                                       cfg.chunks_per_image)
            rows = np.arange(len(tb.owner))
            p = self._pseudo(tb, grid, rows)
            gt = self.clip.encode_texts([corpus.captions_of(i)[0].text for i in image_ids]).to(p.device)
            uniq, idx = l3_targets(tb.chunks)
            pe = self.clip.encode_texts(uniq).to(p.device)
            l1, l2, l3 = self._losses(p, torch.from_numpy(tb.owner).to(p.device), v.to(p.device), gt, pe, idx)
            return float(cfg.lambda1 * l1 + cfg.lambda2 * l2 + cfg.lambda3 * l3)

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def pseudo_embeddings(self, images, template_captions: Sequence[str] | None = None,
                          template_tags: Sequence | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(v, t*)``: normalised global image embeddings and ``t*`` = mean of the normalised
        pseudo-caption embeddings over every noun chunk of each image's template (Eq. 4)."""
        self.trainable_modules().eval()
        v, grid = self._image_features(images)
        if template_captions is None:
            nn_idx = self.nearest_captions(v.numpy())
            template_captions = [self.bank_texts[k] for k in nn_idx]
            template_tags = [self.bank_tags[k] for k in nn_idx]
        if len(template_captions) != v.shape[0]:
            raise ValueError(f"template_captions: {len(template_captions)} captions for {v.shape[0]} images")
        tb = build_template_tokens(self.clip.tokenizer, self.templates_for(template_captions, template_tags),
                                   self.config.n_pseudo)
        ps = []
        for s in range(0, len(tb.owner), 256):
            ps.append(self._pseudo(tb, grid, np.arange(s, min(s + 256, len(tb.owner)))).cpu())
        p = torch.cat(ps).numpy()
        t_star = np.zeros((v.shape[0], p.shape[1]), np.float32)
        np.add.at(t_star, tb.owner, p)
        t_star /= np.bincount(tb.owner, minlength=v.shape[0])[:, None]
        return v.cpu().numpy(), t_star

    def score_matrix(self, images, captions: Sequence[str], template_captions: Sequence[str] | None = None,
                     template_tags: Sequence | None = None) -> np.ndarray:
        """``(n_images, n_captions)`` float32 BRIDGE scores (Eq. 4).  ``template_captions[i]``: a caption
        of image i to build its templates from (default: nearest training caption)."""
        v, t_star = self.pseudo_embeddings(images, template_captions, template_tags)
        c_prompt = self.clip.encode_texts(with_prompt(list(captions), PROMPT)).numpy()
        c_plain = self.clip.encode_texts(list(captions)).numpy()
        clips = clip_s(v @ c_prompt.T, self.config.w)
        pseudo = clip_s(l2_normalize(t_star) @ c_plain.T, self.config.w)
        return (0.5 * (clips + pseudo)).astype(np.float32)

    def score(self, images, candidates: Sequence[str], references=None,
              template_captions: Sequence[str] | None = None, template_tags: Sequence | None = None) -> np.ndarray:
        """Per-instance BRIDGE(I_i, T_i) (reference-free: ``references`` is ignored)."""
        v, t_star = self.pseudo_embeddings(images, template_captions, template_tags)
        if v.shape[0] != len(candidates):
            raise ValueError(f"BRIDGE.score: {v.shape[0]} images but {len(candidates)} candidates")
        c_prompt = self.clip.encode_texts(with_prompt(list(candidates), PROMPT)).numpy()
        c_plain = self.clip.encode_texts(list(candidates)).numpy()
        a = clip_s(np.einsum("nd,nd->n", v, c_prompt), self.config.w)
        b = clip_s(np.einsum("nd,nd->n", l2_normalize(t_star), c_plain), self.config.w)
        return (0.5 * (a + b)).astype(np.float32)

    def corpus_pseudo_embeddings(self, corpus, image_ids: Sequence[str],
                                 captions_file: Mapping[str, str] | None = None,
                                 template_source: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`pseudo_embeddings` of corpus images with the corpus' template captions, kept per image
        (in memory, for the current mapping module) so that retrieval and the human-correlation tables
        compute each image's ``(v, t*)`` once."""
        src = self.source_for(corpus, template_source)
        if captions_file is None and src in ("captions_file", "auto"):
            captions_file = getattr(self, "captions_file", None)   # the file given to fit()
        memo_key = (getattr(corpus, "name", None), getattr(corpus, "fingerprint", None), src,
                    _captions_file_digest(captions_file), getattr(self, "_psi_id", None))
        memo = self.__dict__.setdefault("_corpus_pseudo", {})
        if set(memo) - {memo_key}:
            memo.clear()
        table = memo.setdefault(memo_key, {})
        todo = [i for i in dict.fromkeys(image_ids) if i not in table]
        if todo:
            texts, tags = self.corpus_templates(corpus, todo, captions_file, src)
            v, t_star = self.pseudo_embeddings([corpus.load_image(i) for i in todo], texts, tags)
            table.update((i, (v[k], t_star[k])) for k, i in enumerate(todo))
        return (np.stack([table[i][0] for i in image_ids]).astype(np.float32),
                np.stack([table[i][1] for i in image_ids]).astype(np.float32))

    def affinity(self, corpus, pool, captions_file: Mapping[str, str] | None = None,
                 template_source: str | None = None) -> np.ndarray:
        """Score matrix over a :class:`~corpora.base.RankingPool` with the corpus' template captions
        (default: the source used in :meth:`fit`)."""
        v, t_star = self.corpus_pseudo_embeddings(corpus, pool.image_ids, captions_file, template_source)
        captions = [c.text for c in pool.captions]
        c_prompt = self.clip.encode_texts(with_prompt(captions, PROMPT)).numpy()
        c_plain = self.clip.encode_texts(captions).numpy()
        clips = clip_s(v @ c_prompt.T, self.config.w)
        pseudo = clip_s(l2_normalize(t_star) @ c_plain.T, self.config.w)
        return (0.5 * (clips + pseudo)).astype(np.float32)

    def score_corpus_pairs(self, corpus, image_ids: Sequence[str], candidates: Sequence[str],
                           captions_file: Mapping[str, str] | None = None,
                           template_source: str | None = None) -> np.ndarray:
        """Per-pair BRIDGE scores for corpus images (human-correlation tables)."""
        v, t_star = self.corpus_pseudo_embeddings(corpus, list(image_ids), captions_file, template_source)
        c_prompt = self.clip.encode_texts(with_prompt(list(candidates), PROMPT)).numpy()
        c_plain = self.clip.encode_texts(list(candidates)).numpy()
        a = clip_s(np.einsum("nd,nd->n", v, c_prompt), self.config.w)
        b = clip_s(np.einsum("nd,nd->n", l2_normalize(t_star), c_plain), self.config.w)
        return (0.5 * (a + b)).astype(np.float32)


class BridgePairScorer:
    """BRIDGE as a :class:`corpora.scoring.PairScorer` over corpus images (the human-correlation
    protocols): ``scorer(image_ids, candidates, references)`` is :meth:`BRIDGE.score_corpus_pairs`
    (templates from :meth:`BRIDGE.source_for` the corpus; reference-free, ``references`` are ignored).

    ``identity`` is ``{"scorer": bridge.cache_identity(), "template_source": …}``, taken when the
    pair scorer is made (as the scores' cache key)."""

    def __init__(self, bridge: BRIDGE, corpus):
        self.bridge = bridge
        self.corpus = corpus
        self.name = bridge.name
        self.identity = {"scorer": bridge.cache_identity(), "template_source": bridge.source_for(corpus)}

    def __call__(self, image_ids: Sequence[str], candidates: Sequence[str], references=None) -> np.ndarray:
        return self.bridge.score_corpus_pairs(self.corpus, image_ids, candidates)

    def __repr__(self) -> str:
        return f"BridgePairScorer({self.name!r})"

