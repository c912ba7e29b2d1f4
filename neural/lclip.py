# Size (~700 lines): the multiplexed student, its two-stage distillation and its score: one paper's method.
"""L-CLIPScore (Li et al.): a lightweight CLIP student distilled from a teacher :class:`Backbone`, and its score.

Architecture (:class:`MultiplexedCLIP`) — *weight multiplexing* + *matrix decomposition*:

* vision transformer: ``n_shared`` shared blocks (default 3), each applied ``repeats`` times (default 2)
  → 6 layers; text transformer: 2 shared blocks applied twice → 4 layers.  The shared weights (QKV,
  output projection, MLP) are ONE tensor per shared block, used by every repeat; each repeat ("layer")
  has its own LayerNorms and two small per-layer transformations: 1×1 head-mixing matrices (H × H)
  applied to the attention logits before the softmax and to the attention probabilities after it
  (the "weight transformation" of MiniViT / DistillCLIP; initialised to the identity).  MiniViT's
  depth-wise-convolution MLP transformation is not used.
* token embedding: ``vocab × r`` then ``r × width`` (``r = 256`` for widths above 256; for narrower
  teachers — the tiny CLIP of width 128 — ``r = width // 2`` so the factorisation actually compresses),
  initialised from the teacher's embedding by truncated SVD.
* the student keeps the teacher's widths (so the patch embedding, class token and positional
  embeddings are copied from the teacher; the patch convolution stays frozen in both stages (Sec. IV-B),
  everything else of the student trains in stage 1); shared blocks are initialised from evenly spaced teacher layers, final LayerNorms and
  projections from the teacher.

Training (:func:`train_lclip`), two stages:

* Stage 1, single-modal distillation on the global (projected, un-normalised) embeddings, for the image
  and the text encoder (Eq. 1)::

      L_D = ½ |r^T − r^S|₁ + ½ (1 − cos(r^T, r^S))

  with ``|·|₁`` the L1 norm **averaged over the embedding dimensions** (mean absolute error; the sum
  would scale with D and swamp the cosine term) and the loss averaged over the batch.
* Stage 2 adds the Similarity Regulator (Eq. 2) on the cosine-similarity matrices ``S^T`` (teacher) and
  ``S^S`` (student) of a batch of n matching image–text pairs, with the text encoder frozen (the paper's
  ``S_ij`` is "the inner product of the global [CLS] tokens"; we take the cosine, the quantity the score
  of Eq. 3 uses, so that the regulator orders the cosines the score reads and the embeddings' norms,
  already matched by Eq. 1's L1 term, do not scale its hinges)::

      L_SR = 1/n Σ_i max(0, S^T_ii − S^S_ii) + 1/(n(n−1)) Σ_{i≠j} max(0, S^S_ij − S^T_ij)

  (each sum normalised by its number of terms), total ``L = L_D(image) + λ_SR · L_SR`` (λ_SR = 1).
  Only the image tower trains in stage 2 (Sec. IV-B), its patch convolution excepted.  Stage 1 runs at
  ``lr`` and ``batch_size``, stage 2 at ``stage2_lr`` and ``stage2_batch_size`` (Sec. IV-B: 5e-3 / 4,096,
  then 1e-4 / 2,048, :data:`neural.recipes.LCLIP_PAPER`).  The paper's random image enhancement with
  Eq. 2 is not applied: the distillation images are encoded by the teacher once (the student sees the
  same pixels the teacher's targets were computed on), which keeps a CPU run to seconds.
* Every batch is drawn from a generator seeded by ``(seed, stage, step)`` and the run checkpoints every
  :data:`CHECKPOINT_EVERY` steps (:mod:`neural.train_checkpoint`), so a killed distillation resumes to
  the student an uninterrupted run gives.  The teaching CLIP's student distils on its own pretraining
  stream (:mod:`neural.lclip_stream`, recipe ``lclip-teaching``).

Score (:class:`LCLIPScore`, Eqs. 3–4)::

    L-CLIPS(c, v)      = w · max(cos(c, v), 0),                      w = 2.5
    RefL-CLIPS(c, R, v) = H(L-CLIPS(c, v), max(max_{r∈R} cos(c, r), 0))

with H the harmonic mean; candidates and references are prefixed with "A photo depicts" (as CLIP-S).
Unlike RefCLIP-S' reference code, the reference term IS clipped at 0 here (Eq. 4 of L-CLIPScore).
"""
from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from neural.architectures import token_embedding_matrix
from neural.backbone import backbone_from_model
from neural.base import (
    PROMPT,
    clip_s,
    flatten_references,
    harmonic_mean,
    image_embeddings,
    max_reference_cosine,
    with_prompt,
)
from neural.recipes import Recipe
from neural.text_tower import encode_text_bucketed, pool_text, text_tower_parts
from neural.train_checkpoint import read_checkpoint, remove_checkpoint, restore_optimizer, save_checkpoint
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

__all__ = [
    "MultiplexedCLIP", "SharedBlock", "RepeatAdapter", "LCLIPConfig", "distill_loss",
    "similarity_regulator", "train_lclip", "train_lclip_on_corpus", "LCLIPScore", "count_parameters", "encode_speed",
]


# ============================================================================ small helpers
def count_parameters(module: nn.Module) -> int:
    """Number of distinct parameter tensors' elements (a shared tensor counts once)."""
    return sum(p.numel() for p in module.parameters())


# ============================================================================ student architecture
class QuickGELU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class SharedBlock(nn.Module):
    """The weights shared by every repeat of one multiplexed transformer block: QKV and output
    projections of multi-head attention, and the MLP."""

    def __init__(self, width: int, heads: int, mlp_ratio: float = 4.0, quick_gelu: bool = False):
        super().__init__()
        self.width, self.heads = width, heads
        self.in_proj = nn.Linear(width, 3 * width)
        self.out_proj = nn.Linear(width, width)
        hidden = int(width * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), QuickGELU() if quick_gelu else nn.GELU(),
                                 nn.Linear(hidden, width))

    @torch.no_grad()
    def copy_from(self, block: nn.Module) -> None:
        """Copy an open_clip ``ResidualAttentionBlock``'s attention and MLP weights."""
        attn = block.attn
        self.in_proj.weight.copy_(attn.in_proj_weight)
        self.in_proj.bias.copy_(attn.in_proj_bias)
        self.out_proj.weight.copy_(attn.out_proj.weight)
        self.out_proj.bias.copy_(attn.out_proj.bias)
        self.mlp[0].weight.copy_(block.mlp.c_fc.weight)
        self.mlp[0].bias.copy_(block.mlp.c_fc.bias)
        self.mlp[2].weight.copy_(block.mlp.c_proj.weight)
        self.mlp[2].bias.copy_(block.mlp.c_proj.bias)


class RepeatAdapter(nn.Module):
    """Per-layer (per-repeat) parameters: two LayerNorms and the pre-/post-softmax head-mixing matrices."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.ln_2 = nn.LayerNorm(width)
        self.mix_pre = nn.Parameter(torch.eye(heads))
        self.mix_post = nn.Parameter(torch.eye(heads))

    @torch.no_grad()
    def copy_norms_from(self, block: nn.Module) -> None:
        self.ln_1.load_state_dict(block.ln_1.state_dict())
        self.ln_2.load_state_dict(block.ln_2.state_dict())


def multiplexed_layer(x: torch.Tensor, shared: SharedBlock, ad: RepeatAdapter,
                      attn_mask: torch.Tensor | None = None) -> torch.Tensor:
    """One pre-LN transformer layer with shared weights and per-layer head mixing:

    ``A = M_post · softmax(M_pre · QKᵀ/√d_h + mask)`` (mixing over the head axis), ``x += W_o A V``,
    ``x += MLP(LN_2(x))``.  With identity mixing it equals open_clip's ``ResidualAttentionBlock``.
    """
    B, L, W = x.shape
    H = shared.heads
    dh = W // H
    h = ad.ln_1(x)
    qkv = shared.in_proj(h).view(B, L, 3, H, dh).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    logits = (q * dh ** -0.5) @ k.transpose(-1, -2)  # (B, H, L, L)
    logits = torch.einsum("gh,bhij->bgij", ad.mix_pre, logits)
    if attn_mask is not None:
        logits = logits + attn_mask.to(logits.dtype)
    attn = logits.softmax(dim=-1)
    attn = torch.einsum("gh,bhij->bgij", ad.mix_post, attn)
    out = (attn @ v).transpose(1, 2).reshape(B, L, W)
    x = x + shared.out_proj(out)
    return x + shared.mlp(ad.ln_2(x))


class MultiplexedTransformer(nn.Module):
    """``n_shared`` shared blocks, each applied ``repeats`` times in a row (layer ℓ uses block ℓ // repeats)."""

    def __init__(self, width: int, heads: int, n_shared: int, repeats: int, mlp_ratio: float = 4.0,
                 quick_gelu: bool = False):
        super().__init__()
        self.width, self.heads, self.n_shared, self.repeats = width, heads, n_shared, repeats
        self.blocks = nn.ModuleList(SharedBlock(width, heads, mlp_ratio, quick_gelu) for _ in range(n_shared))
        self.adapters = nn.ModuleList(RepeatAdapter(width, heads) for _ in range(n_shared * repeats))

    @property
    def layers(self) -> int:
        return self.n_shared * self.repeats

    def block_of_layer(self, layer: int) -> SharedBlock:
        return self.blocks[layer // self.repeats]

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer, ad in enumerate(self.adapters):
            x = multiplexed_layer(x, self.block_of_layer(layer), ad, attn_mask)
        return x

    @torch.no_grad()
    def init_from(self, teacher_blocks: Sequence[nn.Module]) -> None:
        """Shared block j ← teacher layer ⌊j·L_T/n_shared⌋; layer ℓ's LayerNorms ← teacher layer
        ⌊ℓ·L_T/L_S⌋."""
        LT = len(teacher_blocks)
        for j, blk in enumerate(self.blocks):
            blk.copy_from(teacher_blocks[min(LT - 1, (j * LT) // self.n_shared)])
        for ell, ad in enumerate(self.adapters):
            ad.copy_norms_from(teacher_blocks[min(LT - 1, (ell * LT) // self.layers)])


class FactorizedEmbedding(nn.Module):
    """Token embedding ``E = A · B`` with ``A: vocab × r`` and ``B: r × width`` (matrix decomposition)."""

    def __init__(self, vocab: int, rank: int, width: int):
        super().__init__()
        self.low = nn.Embedding(vocab, rank)
        self.up = nn.Linear(rank, width, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.up(self.low(tokens))

    @torch.no_grad()
    def init_svd(self, weight: torch.Tensor) -> None:
        """Best rank-r approximation of the teacher's ``vocab × width`` embedding ``E``: with ``V_r`` the
        top-r right singular vectors (eigenvectors of ``EᵀE``), ``A = E V_r`` and ``B = V_rᵀ`` so
        ``A B = E V_r V_rᵀ`` (equal to the truncated SVD, computed on the small width × width matrix)."""
        r = self.low.embedding_dim
        E = weight.detach().double()
        evals, evecs = torch.linalg.eigh(E.t() @ E)  # ascending
        r_eff = min(r, evecs.shape[1])
        V = evecs[:, -r_eff:].flip(1)  # (width, r_eff), largest first
        self.low.weight.zero_()
        self.up.weight.zero_()
        self.low.weight[:, :r_eff] = (E @ V).to(self.low.weight.dtype)
        self.up.weight[:, :r_eff] = V.to(self.up.weight.dtype)


def _check_teacher(model: nn.Module) -> None:
    vis = getattr(model, "visual", None)
    if vis is None or not hasattr(vis, "conv1") or not hasattr(vis, "transformer"):
        raise NotImplementedError("L-CLIPScore distils ViT teachers (open_clip VisionTransformer); "
                                  f"got visual tower {type(vis).__name__}")
    for blk in list(vis.transformer.resblocks) + list(text_tower_parts(model)[2].resblocks):
        if not hasattr(blk, "attn") or not hasattr(blk.attn, "in_proj_weight") or not isinstance(
                getattr(blk, "ls_1", nn.Identity()), nn.Identity):
            raise NotImplementedError("only open_clip's default ResidualAttentionBlock (no layer scale, "
                                      "no custom attention) can be multiplexed")
    if getattr(vis, "attn_pool", None) is not None:
        raise NotImplementedError("attentional pooling towers are not supported")


class MultiplexedCLIP(nn.Module):
    """The L-CLIPScore student: same interface as open_clip's ``CLIP`` (``encode_image``,
    ``encode_text``, ``visual.image_size``, ``text_projection``, ``context_length``, ``logit_scale``), so
    :class:`neural.backbone.Backbone` wraps it unchanged.

    Parameters
    ----------
    teacher : open_clip CLIP
        A ViT CLIP; widths, heads, context length, vocabulary and embedding size are taken from it.
    vision_shared, vision_repeats, text_shared, text_repeats : int
        3 × 2 and 2 × 2 by default (6 vision and 4 text layers).
    embed_rank : int, optional
        Rank of the token-embedding factorisation (default 256, or width // 2 when width ≤ 256; at most
        the teacher's own rank when its embedding is already factorised, as the teaching CLIP's).
    """

    def __init__(self, teacher: nn.Module, vision_shared: int = 3, vision_repeats: int = 2,
                 text_shared: int = 2, text_repeats: int = 2, embed_rank: int | None = None):
        super().__init__()
        _check_teacher(teacher)
        tv = teacher.visual
        tok, pos, ttr, lnf, tproj, mask, pool, eos = text_tower_parts(teacher)
        quick = type(tv.transformer.resblocks[0].mlp.gelu).__name__ == "QuickGELU"
        vw = tv.transformer.width
        vh = tv.transformer.resblocks[0].attn.num_heads
        tw = ttr.width
        th = ttr.resblocks[0].attn.num_heads
        vmlp = tv.transformer.resblocks[0].mlp.c_fc.out_features / vw
        tmlp = ttr.resblocks[0].mlp.c_fc.out_features / tw
        # ---- vision
        self.visual = nn.Module()
        v = self.visual
        v.image_size = tv.image_size
        v.patch_size = tv.patch_size
        v.conv1 = copy.deepcopy(tv.conv1)
        v.class_embedding = nn.Parameter(tv.class_embedding.detach().clone())
        v.positional_embedding = nn.Parameter(tv.positional_embedding.detach().clone())
        v.ln_pre = copy.deepcopy(tv.ln_pre)
        v.transformer = MultiplexedTransformer(vw, vh, vision_shared, vision_repeats, vmlp, quick)
        v.transformer.init_from(tv.transformer.resblocks)
        v.ln_post = copy.deepcopy(tv.ln_post)
        v.proj = nn.Parameter(tv.proj.detach().clone())
        v.output_dim = tv.proj.shape[1]
        self.vision_pool_type = getattr(tv, "pool_type", "tok")
        # ---- text
        rank = embed_rank if embed_rank is not None else (256 if tw > 256 else max(1, tw // 2))
        if embed_rank is None and hasattr(tok, "low"):   # a factorised teacher (the teaching CLIP): no wider
            rank = min(rank, tok.low.embedding_dim)      # than its own rank, which reproduces it exactly
        self.embed_rank = rank
        self.token_embedding = FactorizedEmbedding(tok.num_embeddings, rank, tw)
        self.token_embedding.init_svd(token_embedding_matrix(tok))
        self.positional_embedding = nn.Parameter(pos.detach().clone())
        self.transformer = MultiplexedTransformer(tw, th, text_shared, text_repeats, tmlp, quick)
        self.transformer.init_from(ttr.resblocks)
        self.ln_final = copy.deepcopy(lnf)
        if isinstance(tproj, nn.Linear):
            raise NotImplementedError("text projections with bias (nn.Linear) are not supported")
        self.text_projection = nn.Parameter(tproj.detach().clone())
        self.register_buffer("attn_mask", None if mask is None else mask.detach().clone(), persistent=False)
        self.text_pool_type = pool
        self.text_eos_id = eos
        self.context_length = int(pos.shape[0])
        self.vocab_size = int(tok.num_embeddings)
        self.logit_scale = nn.Parameter(teacher.logit_scale.detach().clone())
        self.config = {"vision_shared": vision_shared, "vision_repeats": vision_repeats,
                       "text_shared": text_shared, "text_repeats": text_repeats, "embed_rank": rank}

    # ------------------------------------------------------------------ image side
    def image_tokens(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pooled projected embedding (B, D), grid tokens after ln_post (B, P, width))``."""
        v = self.visual
        x = v.conv1(image)
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
        cls = v.class_embedding.view(1, 1, -1).expand(x.shape[0], -1, -1).to(x.dtype)
        x = torch.cat([cls, x], dim=1) + v.positional_embedding.to(x.dtype)
        x = v.ln_pre(x)
        x = v.transformer(x)
        x = v.ln_post(x)
        pooled = x[:, 1:].mean(dim=1) if self.vision_pool_type == "avg" else x[:, 0]
        return pooled @ v.proj, x[:, 1:]

    def encode_image(self, image: torch.Tensor, normalize: bool = False) -> torch.Tensor:
        f = self.image_tokens(image)[0]
        return F.normalize(f, dim=-1) if normalize else f

    # ------------------------------------------------------------------ text side
    def encode_text_from_embeddings(self, x: torch.Tensor, tokens: torch.Tensor,
                                    normalize: bool = False) -> torch.Tensor:
        """Text features from token embeddings ``x`` (B, L, width); ``tokens`` locate the pooling
        (end-of-text) position."""
        L = x.shape[1]
        x = x + self.positional_embedding[:L].to(x.dtype)
        mask = None if self.attn_mask is None else self.attn_mask[:L, :L]
        x = self.ln_final(self.transformer(x, mask))
        x = pool_text(x, tokens, self.text_pool_type, self.text_eos_id) @ self.text_projection
        return F.normalize(x, dim=-1) if normalize else x

    def encode_text(self, text: torch.Tensor, normalize: bool = False) -> torch.Tensor:
        return self.encode_text_from_embeddings(self.token_embedding(text), text, normalize)

    def text_parameters(self):
        for mod in (self.token_embedding, self.transformer, self.ln_final):
            yield from mod.parameters()
        yield self.positional_embedding
        yield self.text_projection

    def image_parameters(self):
        yield from self.visual.parameters()


# ============================================================================ losses
def distill_loss(r_t: torch.Tensor, r_s: torch.Tensor) -> torch.Tensor:
    """Eq. 1: ``½ mean_d |r^T − r^S| + ½ (1 − cos(r^T, r^S))``, averaged over the batch (L1 averaged
    over the embedding dimensions)."""
    l1 = (r_t - r_s).abs().mean(dim=-1)
    cos = F.cosine_similarity(r_t, r_s, dim=-1)
    return (0.5 * l1 + 0.5 * (1.0 - cos)).mean()


def similarity_regulator(S_t: torch.Tensor, S_s: torch.Tensor) -> torch.Tensor:
    """Eq. 2 on n × n cosine matrices (rows images, columns texts, diagonal = matching pairs)::

        1/n Σ_i max(0, S^T_ii − S^S_ii) + 1/(n(n−1)) Σ_{i≠j} max(0, S^S_ij − S^T_ij)

    The student must keep matching pairs at least as similar as the teacher does and non-matching
    pairs at most as similar.
    """
    n = S_t.shape[0]
    if S_t.shape != S_s.shape or S_t.shape[0] != S_t.shape[1]:
        raise ValueError(f"similarity_regulator: need equal square matrices, got {tuple(S_t.shape)} / {tuple(S_s.shape)}")
    eye = torch.eye(n, dtype=torch.bool, device=S_t.device)
    pos = F.relu(S_t.diagonal() - S_s.diagonal()).mean()
    if n < 2:
        return pos
    neg = F.relu(S_s - S_t)[~eye].sum() / (n * (n - 1))
    return pos + neg


# ============================================================================ training
#: Optimiser steps between :func:`train_lclip`'s checkpoints.
CHECKPOINT_EVERY = 100


@dataclass
class LCLIPConfig:
    """Training recipe (defaults sized for the tiny CLIP on the teaching set: a few seconds on 2 CPU
    cores; for a real teacher raise the steps, e.g. 20k / 5k, and use real image / text collections)."""

    vision_shared: int = 3
    vision_repeats: int = 2
    text_shared: int = 2
    text_repeats: int = 2
    embed_rank: int | None = None
    stage1_steps: int = 30
    stage2_steps: int = 15
    batch_size: int = 16
    lr: float = 5e-4
    #: stage 2's learning rate and batch (``None``: stage 1's ``lr`` / ``batch_size``)
    stage2_lr: float | None = None
    stage2_batch_size: int | None = None
    weight_decay: float = 1e-2
    lambda_sr: float = 1.0
    seed: int = 0
    max_images: int = 256
    max_texts: int = 2048
    #: per-stage learning-rate schedule and warm-up, ``"fp32"`` or ``"amp"`` (autocast on CUDA)
    schedule: str = "constant"
    warmup_steps: int = 0
    precision: str = "fp32"

    @classmethod
    def from_recipe(cls, recipe: Recipe, **overrides) -> "LCLIPConfig":
        """The config of an L-CLIPScore :class:`~neural.recipes.Recipe` (stage steps, batch, lr, weight
        decay, schedule, precision, image / text caps — ``None`` caps: the whole split); ``overrides``
        (e.g. ``seed``) replace single fields."""
        fields = {**recipe.optimiser_fields("L-CLIPScore"), "stage1_steps": recipe.steps,
                  "stage2_steps": recipe.stage2_steps, "stage2_lr": recipe.stage2_lr,
                  "stage2_batch_size": recipe.stage2_batch_size, "max_images": recipe.max_images or 10 ** 9,
                  "max_texts": recipe.max_texts or 10 ** 9}
        return cls(**{**fields, **overrides})


def _preprocessed(backbone, images) -> torch.Tensor:
    return backbone.preprocess_images(images)


def train_lclip(teacher, images: Sequence[np.ndarray], texts: Sequence[str], pairs: Sequence[tuple[int, int]],
                config: LCLIPConfig | None = None, *, cache=None, cache_key: dict | None = None,
                show_progress: bool = True, log: list | None = None, num_threads: int | None = None,
                checkpoint_dir: str | Path | None = None, checkpoint_every: int = CHECKPOINT_EVERY):
    """Distil an L-CLIPScore student from ``teacher`` (a :class:`~neural.backbone.Backbone`).

    Parameters
    ----------
    teacher : Backbone
    images : sequence of (H, W, 3) uint8 arrays
        Distillation images (e.g. the training split).
    texts : sequence of str
        Distillation texts (e.g. the training captions).
    pairs : sequence of (image index, text index)
        Matching pairs for stage 2's Similarity Regulator.
    config : LCLIPConfig or Recipe
        An L-CLIPScore :class:`~neural.recipes.Recipe` (``lclip-small``, ``lclip-teaching``,
        ``lclip-paper``) or its config.
    cache : corpora.cache.DiskCache, optional
        With ``cache_key`` (a description of the data, e.g. corpus fingerprint + ids), the trained
        student's weights are cached under namespace ``"lclip_student"``, and the run checkpoints into
        the folder ``<entry>.run`` beside the entry (its checkpoint removed once the student is cached).
    log : list, optional
        Receives ``{"stage", "step", "loss"}`` dicts (those of a resumed run's earlier steps too).
    num_threads : int, optional
        torch CPU threads while training (deterministic algorithms are switched on meanwhile).
    checkpoint_dir : path, optional
        Resumable checkpoints (:mod:`neural.train_checkpoint`) every ``checkpoint_every`` optimiser
        steps; a run started again with the same teacher, data and config continues from the last one
        and ends with the weights of an uninterrupted run (every batch is drawn from a generator seeded
        by ``(seed, stage, step)``).  Default: beside the cache entry, when cached.

    Returns
    -------
    Backbone
        The student, wrapped with the teacher's preprocessing and tokenizer; ``.parent`` is the teacher,
        ``.training`` the config and a description of the data (``cache_key`` and the counts).
    """
    cfg = config or LCLIPConfig()
    if isinstance(cfg, Recipe):
        cfg = LCLIPConfig.from_recipe(cfg)
    torch.manual_seed(cfg.seed)
    student = MultiplexedCLIP(teacher.model.float().cpu() if teacher.device.type == "cpu" else teacher.model,
                              cfg.vision_shared, cfg.vision_repeats, cfg.text_shared, cfg.text_repeats,
                              cfg.embed_rank).to(teacher.device).float()
    key = {"what": "lclip-student", "teacher": teacher.cache_identity(), "data": cache_key,
           # 3: stage 2 keeps the patch convolution frozen (Sec. IV-B); batches seeded per (stage, step)
           "recipe": 3,
           "config": asdict(cfg), "n_images": len(images), "n_texts": len(texts), "n_pairs": len(pairs)}
    cached = cache is not None and cache_key is not None
    if checkpoint_dir is None and cached and getattr(cache, "enabled", True):
        checkpoint_dir = cache.path("lclip_student", key).with_suffix(".run")
    run = _RunFolder(Path(checkpoint_dir), key, checkpoint_every) if checkpoint_dir is not None else None

    def run_det() -> dict[str, np.ndarray]:
        with deterministic(num_threads):
            return _distil(student, teacher, images, texts, pairs, cfg, show_progress, log, run)

    if cached:
        arrays = cache.get_or_compute("lclip_student", key, run_det)
        if log is not None and not any(e.get("stage") for e in log):
            log.append({"cached": True})
    else:
        arrays = run_det()
    if run is not None:
        run.remove()
    load_state_arrays(student, arrays)
    student.eval()
    out = backbone_from_model(student, teacher.preprocess, teacher.tokenizer,
                              name=f"L-CLIP student of {teacher.name}", arch="lclip-multiplexed",
                              source=f"distilled here from {teacher.name} ({teacher.weights_id})",
                              device=teacher.device, show_progress=teacher.show_progress)
    out.parent = teacher  # type: ignore[attr-defined]  (recorded by neural.saved.save_scorer)
    out.training = {"config": asdict(cfg),  # type: ignore[attr-defined]
                    "data": {"description": cache_key, "n_images": len(images), "n_texts": len(texts),
                             "n_pairs": len(pairs)}}
    return out


class _RunFolder:
    """Where :func:`train_lclip` checkpoints: the folder, the run's identity (``key``: teacher, data,
    config — a checkpoint of another run is refused) and the interval."""

    def __init__(self, folder: Path, key: dict, every: int):
        if every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {every}")
        self.folder, self.key, self.every = folder, key, every
        self.checkpoint = None

    def resume(self, student: MultiplexedCLIP) -> tuple[int, int, list]:
        """Load the last checkpoint into ``student``: ``(global step, stage, log)``; ``(0, 1, [])`` when
        there is none."""
        self.checkpoint = read_checkpoint(self.folder, self.key)
        if self.checkpoint is None:
            return 0, 1, []
        student.load_state_dict(self.checkpoint.model_state())
        return self.checkpoint.step, int(self.checkpoint.record["state"]["stage"]), list(self.checkpoint.log or [])

    def restore(self, opt: torch.optim.Optimizer, stage: int, sched, local_step: int,
                amp: MixedPrecision) -> None:
        """Continue stage ``stage`` at ``local_step``: its optimiser state, schedule and float16 gradient
        scale from the checkpoint (nothing when the checkpoint is of the other stage or at its start)."""
        ck = self.checkpoint
        if ck is None or local_step == 0 or int(ck.record["state"]["stage"]) != stage:
            return
        restore_optimizer(opt, ck)
        amp.load_state_dict(ck.record["state"].get("scaler", {}))
        if sched is not None:   # LambdaLR: lr = base · factor(last_epoch); the restored lr is that already
            sched.last_epoch = local_step

    def save(self, student: MultiplexedCLIP, opt: torch.optim.Optimizer, amp: MixedPrecision, done: int,
             stage: int, trace: list) -> None:
        """A checkpoint after ``done`` global steps (stage ``stage``, with the gradient scaler's state) when
        ``done`` is a multiple of the interval."""
        if done % self.every == 0:
            save_checkpoint(self.folder, student, opt, done, self.key, trace,
                            state={"stage": stage, "scaler": amp.state_dict()})

    def remove(self) -> None:
        """Delete the checkpoint (the student is complete); the folder too when that empties it."""
        remove_checkpoint(self.folder)


@dataclass
class _DistillationData:
    """The distillation set on the teacher's device: preprocessed images ``X``, tokens ``T``, the
    teacher's global embeddings ``rv_t`` / ``rt_t`` and the matching pairs ``P`` (image row, text row)."""

    X: torch.Tensor
    T: torch.Tensor
    rv_t: torch.Tensor
    rt_t: torch.Tensor
    P: np.ndarray


def _distillation_data(teacher, images, texts, pairs, cfg: LCLIPConfig) -> _DistillationData:
    """:func:`train_lclip`, step 1: the first ``max_images`` images and ``max_texts`` texts, encoded once
    by the teacher; the pairs among them."""
    n_img, n_txt = min(len(images), cfg.max_images), min(len(texts), cfg.max_texts)
    X = _preprocessed(teacher, list(images[:n_img])).to(teacher.device)
    T = teacher.tokenize(list(texts[:n_txt])).to(teacher.device)
    tm = teacher.model
    with torch.no_grad():
        rv_t = torch.cat([tm.encode_image(X[s:s + 128].to(teacher.dtype)).float() for s in range(0, n_img, 128)])
        rt_t = torch.cat([encode_text_bucketed(tm, T[s:s + 256]).float() for s in range(0, n_txt, 256)])
    P = np.array([(i, j) for i, j in pairs if i < n_img and j < n_txt], dtype=np.int64)
    return _DistillationData(X, T, rv_t, rt_t, P)


def _distil(student: MultiplexedCLIP, teacher, images, texts, pairs, cfg: LCLIPConfig, show_progress: bool,
            log: list | None, run: _RunFolder | None) -> dict[str, np.ndarray]:
    """:func:`train_lclip`'s training run (stage 1, then stage 2), resumed from ``run``'s checkpoint when
    there is one: returns the student's weights as arrays."""
    start, stage, trace = run.resume(student) if run is not None else (0, 1, [])
    d = _distillation_data(teacher, images, texts, pairs, cfg)
    student.train()
    bar = progress(total=cfg.stage1_steps + cfg.stage2_steps, desc="L-CLIP distillation", enabled=show_progress)
    if bar is not None:
        bar.update(start)
    if stage == 1:
        _stage1(student, d, cfg, bar, trace, start, run)
    _stage2(student, d, cfg, bar, trace, start - cfg.stage1_steps if stage == 2 else 0, run)
    if bar is not None:
        bar.close()
    if log is not None:
        log.extend(trace)
    for p in student.parameters():
        p.requires_grad_(True)
    student.eval()
    return state_dict_arrays(student)


def _batch_rng(cfg: LCLIPConfig, stage: int, step: int) -> np.random.Generator:
    """The generator of one batch, seeded by ``(seed, stage, step)``: a resumed run draws the batches of an
    uninterrupted one."""
    return np.random.default_rng([cfg.seed, stage, step])


def _stage1(student: MultiplexedCLIP, d: _DistillationData, cfg: LCLIPConfig, bar, trace: list, start: int,
            run: _RunFolder | None) -> None:
    """Stage 1 (Eq. 1 on both towers): the patch convolution frozen (Sec. IV-B), everything else trains;
    random image and text batches of ``batch_size``, from step ``start`` on."""
    n_img, n_txt = len(d.X), len(d.T)
    for p in student.visual.conv1.parameters():
        p.requires_grad_(False)
    params = [p for p in student.parameters() if p.requires_grad]
    opt = adamw(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    amp = MixedPrecision(d.X.device, cfg.precision)
    sched = lr_schedule(opt, cfg.schedule, min(cfg.warmup_steps, cfg.stage1_steps), cfg.stage1_steps)
    if run is not None:
        run.restore(opt, 1, sched, start, amp)
    for step in range(start, cfg.stage1_steps):
        rng = _batch_rng(cfg, 1, step)
        bi = torch.from_numpy(rng.choice(n_img, size=min(cfg.batch_size, n_img), replace=False))
        bt = torch.from_numpy(rng.choice(n_txt, size=min(cfg.batch_size, n_txt), replace=False))
        with amp.autocast():
            loss = distill_loss(d.rv_t[bi], student.encode_image(d.X[bi]).float()) + \
                distill_loss(d.rt_t[bt], encode_text_bucketed(student, d.T[bt]).float())
        amp.step(loss, opt, sched)
        tick(bar, trace, "stage1", step, loss)
        if run is not None:
            run.save(student, opt, amp, step + 1, 1, trace)


def _distinct_pairs(P: np.ndarray, rng, batch_size: int) -> list[int]:
    """Rows of ``P`` in a seeded random order, keeping one pair per distinct image and text (so the
    off-diagonal entries of the batch's similarity matrices are true negatives), at most ``batch_size``."""
    order = rng.permutation(len(P))
    seen_i, seen_t, sel = set(), set(), []
    for k in order:
        i, j = P[k]
        if i not in seen_i and j not in seen_t:
            seen_i.add(i), seen_t.add(j), sel.append(k)
            if len(sel) == batch_size:
                break
    return sel


def _stage2(student: MultiplexedCLIP, d: _DistillationData, cfg: LCLIPConfig, bar, trace: list, start: int,
            run: _RunFolder | None) -> None:
    """Stage 2 (Li et al., Sec. IV-B: Eq. 1 on the image tower + λ_SR · Eq. 2): the whole text encoder
    frozen, the image tower trained except its patch convolution (``visual.conv1``), which stays frozen
    throughout both stages; batches of ``stage2_batch_size`` distinct matching pairs at ``stage2_lr``
    (none when fewer than two pairs), from stage-2 step ``start`` on."""
    for p in student.parameters():
        p.requires_grad_(False)
    for p in student.image_parameters():
        p.requires_grad_(True)
    for p in student.visual.conv1.parameters():
        p.requires_grad_(False)
    lr = cfg.lr if cfg.stage2_lr is None else cfg.stage2_lr
    batch = cfg.batch_size if cfg.stage2_batch_size is None else cfg.stage2_batch_size
    opt = adamw([p for p in student.parameters() if p.requires_grad], lr=lr, weight_decay=cfg.weight_decay)
    if len(d.P) < 2:
        return
    amp = MixedPrecision(d.X.device, cfg.precision)
    sched = lr_schedule(opt, cfg.schedule, min(cfg.warmup_steps, cfg.stage2_steps), cfg.stage2_steps)
    if run is not None:
        run.restore(opt, 2, sched, start, amp)
    for step in range(start, cfg.stage2_steps):
        sel = _distinct_pairs(d.P, _batch_rng(cfg, 2, step), batch)
        bi = torch.from_numpy(d.P[sel, 0])
        bt = torch.from_numpy(d.P[sel, 1])
        with amp.autocast():
            rv_s = student.encode_image(d.X[bi]).float()
            with torch.no_grad():
                rt_s = encode_text_bucketed(student, d.T[bt]).float()
            S_t = F.normalize(d.rv_t[bi], dim=-1) @ F.normalize(d.rt_t[bt], dim=-1).t()
            S_s = F.normalize(rv_s, dim=-1) @ F.normalize(rt_s, dim=-1).t()
            loss = distill_loss(d.rv_t[bi], rv_s) + cfg.lambda_sr * similarity_regulator(S_t, S_s)
        amp.step(loss, opt, sched)
        tick(bar, trace, "stage2", step, loss)
        if run is not None:
            run.save(student, opt, amp, cfg.stage1_steps + step + 1, 2, trace)


def train_lclip_on_corpus(teacher, corpus, split: str = "train", config: LCLIPConfig | None = None, *,
                          cache=None, show_progress: bool = True, num_threads: int | None = None,
                          log: list | None = None, image_ids: Sequence[str] | None = None):
    """:func:`train_lclip` on a corpus split: its images, all their captions, and the (image, caption)
    pairs for stage 2.  Only the first ``config.max_images`` images (and their captions, up to
    ``config.max_texts``) are used; cached under the corpus fingerprint and ids.

    ``image_ids``: the training images to use instead of the whole split (e.g. only those on disk,
    ``--skip-missing-images``); they enter the cache key."""
    cfg = config or LCLIPConfig()
    if isinstance(cfg, Recipe):
        cfg = LCLIPConfig.from_recipe(cfg)
    ids = list(corpus.split(split) if image_ids is None else image_ids)[: cfg.max_images]
    images = [corpus.load_image(i) for i in ids]
    caps = [c for i in ids for c in corpus.captions_of(i)][: cfg.max_texts]
    row = {i: k for k, i in enumerate(ids)}
    pairs = [(row[c.image_id], j) for j, c in enumerate(caps)]
    key = {"corpus": corpus.name, "fingerprint": corpus.fingerprint, "split": split, "ids": ids,
           "images": corpus.images_fingerprint(ids)}   # the pixels (the fingerprint covers the captions)
    return train_lclip(teacher, images, [c.text for c in caps], pairs, cfg, cache=cache, cache_key=key,
                       show_progress=show_progress, log=log, num_threads=num_threads)


def encode_speed(backbone, images: Sequence[np.ndarray], texts: Sequence[str], repeats: int = 3) -> dict:
    """Images / s and texts / s of a backbone's raw ``encode_image`` / ``encode_text`` (best of
    ``repeats``, preprocessing and tokenisation excluded)."""
    X = backbone.preprocess_images(list(images)).to(backbone.device, backbone.dtype)
    T = backbone.tokenize(list(texts)).to(backbone.device)
    m = backbone.model.eval()
    best_i = best_t = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            t0 = time.perf_counter()
            m.encode_image(X)
            t1 = time.perf_counter()
            m.encode_text(T)
            t2 = time.perf_counter()
            best_i, best_t = min(best_i, t1 - t0), min(best_t, t2 - t1)
    return {"images_per_s": len(images) / best_i, "texts_per_s": len(texts) / best_t,
            "params": count_parameters(m)}


# ============================================================================ the score
class LCLIPScore:
    """L-CLIPScore and RefL-CLIPScore (Li et al., Eqs. 3–4) on a (student) :class:`Backbone`.

    ``score`` gives ``w · max(cos(c, v), 0)`` per (image, candidate), or with references
    ``H(L-CLIPS, max(max_r cos(c, r), 0))``; ``score_matrix`` the ``(n_images, n_captions)`` L-CLIPS
    affinities.  Texts are prefixed with ``prompt`` (default "A photo depicts"; ``None`` or ``""``: no
    prefix, as in :class:`~neural.clipscore.CLIPScore`).
    """

    def __init__(self, backbone, w: float = 2.5, prompt: str | None = PROMPT, name: str = "L-CLIPScore"):
        self.backbone = backbone
        self.w = float(w)
        self.prompt = prompt                    # None or "": no prefix, as in CLIPScore
        self.name = name

    def cache_identity(self) -> dict:
        return {"scorer": "L-CLIPScore", "w": self.w, "prompt": self.prompt,
                "backbone": self.backbone.cache_identity()}

    def _texts(self, texts: Sequence[str]) -> np.ndarray:
        return self.backbone.encode_texts(with_prompt(list(texts), self.prompt)).numpy()

    def score(self, images, candidates: Sequence[str],
              references: Sequence[Sequence[str]] | None = None) -> np.ndarray:
        v = image_embeddings(self.backbone, images)
        if v.shape[0] != len(candidates):
            raise ValueError(f"score: {v.shape[0]} images but {len(candidates)} candidates")
        c = self._texts(candidates)
        s = clip_s(np.einsum("nd,nd->n", v, c), self.w)
        if references is None:
            return s
        rt, owner = flatten_references(references, len(candidates))
        ref = np.maximum(max_reference_cosine(c, self._texts(rt), owner, len(candidates)), 0.0)
        return harmonic_mean(s, ref)

    def score_matrix(self, images, captions: Sequence[str]) -> np.ndarray:
        v = image_embeddings(self.backbone, images)
        return clip_s(v @ self._texts(captions).T, self.w)
