"""Reading CLIP weight files safely, in every format the toolkit accepts.

Formats (detected from the file, not from its name):

``"safetensors"``
    A safetensors file (open_clip's ``open_clip_model.safetensors``, or what :func:`save_state_dict`
    writes), recognised by its header (:func:`is_safetensors_file`) whatever its name.  Read with
    :func:`safetensors.torch.load_file` — no code runs.
``"torchscript"``
    An OpenAI release ``.pt`` (``ViT-B-32.pt`` …) is a TorchScript archive, read with
    :func:`torch.jit.load` **only when trusted**: a TorchScript archive carries code that the loader
    deserialises and may run (``__setstate__`` methods), which is why PyTorch ≥ 2.6 refuses such archives
    under ``torch.load(..., weights_only=True)`` (CVE-2025-32434).  A file given by path is trusted only
    with ``trust_torchscript=True`` or ``$ITR_TRUST_TORCHSCRIPT=1`` (:data:`TRUST_TORCHSCRIPT_ENV`);
    otherwise it is refused with :class:`UnsafeCheckpointError`, which says how to convert it once to
    ``.safetensors``.  (:func:`neural.backbone.load_backbone` trusts the file of a pretrained *tag* when it is
    the file of the tag's OpenAI URL and the bytes loaded have the full SHA-256 that URL names:
    ``read_state_dict(..., torchscript_sha256=...)``.)  The extra entries ``input_resolution``,
    ``context_length`` and ``vocab_size`` that OpenAI's archives keep in their state dict are dropped.
``"state_dict"``
    A plain ``torch.save``'d state dict (OpenAI key names == open_clip key names for the standard CLIP
    class), read with ``torch.load(..., weights_only=True)``.
``"open_clip-checkpoint"``
    An open_clip training checkpoint ``{"epoch", "name", "state_dict": {"module.…": …}, "optimizer"…}``;
    the ``module.`` prefix of DistributedDataParallel is stripped.
``"pacs"``
    The PAC-S release format (Sarto et al. 2023, aimagelab/pacscore): a dict whose ``'state_dict'`` entry is
    a full CLIP state dict in OpenAI key names.  Read with ``weights_only=True``.
``"longclip"``
    The Long-CLIP release layout (Zhang et al. 2024, beichenzbc/Long-CLIP: ``longclip-B.pt`` (ViT-B/16),
    ``longclip-L.pt`` (ViT-L/14)), recognised by its key ``positional_embedding_res``, in any of the
    containers above (the release is a plain ``torch.save(model.state_dict())``, no ``module.`` prefix).
    It is an OpenAI-layout CLIP state dict whose text tower has **two** ``(248, width)`` tables,
    ``positional_embedding`` and ``positional_embedding_res``; the released forward
    (``model/model_longclip.py``, ``CLIP.encode_text``) adds
    ``P = positional_embedding ⊙ m₁ + positional_embedding_res ⊙ m₂`` to the token embeddings, with the
    ``(248, 1)`` masks ``m₁ = 1`` on positions 0–19 and ``m₂ = 1`` on positions 20–247 (zero elsewhere).
    :func:`read_state_dict` returns that effective table ``P`` (:func:`longclip_positional_table`) as the
    open_clip ``positional_embedding`` and drops ``positional_embedding_res``: nothing the released forward
    uses is lost, and the file loads into an open_clip CLIP with a 248-token context.
``"specs"``
    SPECS's release (Chen et al. 2025, mbzuai-nlp/SPECS: ``spec.pt``, a Long-CLIP fine-tuned from
    ViT-B/32).  Its training script saves ``torch.save(model.module.state_dict())`` of the Long-CLIP
    class, so its layout *is* ``"longclip"``; the content cannot tell them apart, and the label
    ``"specs"`` is given by the release's file name (:data:`SPECS_RELEASE_FILES`) for provenance only.

Security: nothing is ever unpickled beyond tensors and plain containers, and no TorchScript archive is
loaded unless trusted (above).  A file whose unpickling needs arbitrary Python objects makes
``torch.load(..., weights_only=True)`` fail; that failure is re-raised as :class:`UnsafeCheckpointError`
with an explanation and a conversion recipe.
"""
from __future__ import annotations

import hashlib
import io
import os
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from corpora.cache import array_bytes
from neural.weights_check import may_hold_infinity, tensor_problem

#: Entries that OpenAI TorchScript archives keep in their state dict but that are not parameters.
OPENAI_EXTRA_KEYS = ("input_resolution", "context_length", "vocab_size")

FORMATS = ("safetensors", "torchscript", "state_dict", "open_clip-checkpoint", "pacs", "longclip", "specs")

#: Long-CLIP's text context and the number of leading positions taken from its first table
#: (beichenzbc/Long-CLIP, ``model/model_longclip.py``: ``CLIP.context_length = 248``, ``mask1[:20] = 1``).
LONGCLIP_CONTEXT, LONGCLIP_KEEP = 248, 20
#: The key that marks the Long-CLIP layout: the second positional table (positions 20–247 are read from it).
LONGCLIP_RES_KEY = "positional_embedding_res"
#: File names of SPECS's released checkpoints (huggingface.co/Xiaohud/SPECS): labelled ``"specs"``.
SPECS_RELEASE_FILES = ("spec.pt",)


class WeightsError(RuntimeError):
    """A weights file is missing, unreadable or incompatible with the requested model."""


class MissingWeightsError(WeightsError, FileNotFoundError):
    """Pretrained weights are not on this machine (and may not be downloaded)."""


class MissingDependencyError(MissingWeightsError):
    """The requested architecture needs a package (or tokenizer files) that this machine lacks, e.g.
    ``transformers`` and the Hugging Face tokenizer of SigLIP / NLLB / XLM-R text towers."""


class WeightsLayoutError(WeightsError):
    """The file's keys or shapes do not fit the model exactly: using it would need tensors resized
    (e.g. positional embeddings interpolated), keys dropped or keys left at their initial values — none
    of which this toolkit does silently.  The message names the file and the offending keys and shapes."""


class UnsafeCheckpointError(WeightsError):
    """The file needs unpickling of arbitrary Python objects, which this toolkit refuses to do."""


class NotWeightsFileError(WeightsError):
    """The file is none of the weights formats: its first bytes are neither a safetensors header, a zip
    archive (``torch.save`` / TorchScript) nor a pickle header (legacy ``torch.save``)."""


def file_sha256(path: str | Path, chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file's bytes (streamed; never remembered: a trust decision needs the bytes on disk
    now)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def state_dict_sha256(state_dict: Mapping[str, torch.Tensor]) -> str:
    """Hex SHA-256 of a state dict: key names, dtypes, shapes and raw bytes in sorted key order."""
    h = hashlib.sha256()
    for k in sorted(state_dict):
        t = state_dict[k].detach().to("cpu").contiguous()
        h.update(k.encode())
        h.update(str(t.dtype).encode())
        h.update(repr(tuple(t.shape)).encode())
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        h.update(array_bytes(t.numpy()))   # no copy of the tensor while it is hashed
    return h.hexdigest()


#: Environment variable: ``1`` trusts TorchScript archives given by path (see the module docstring).
TRUST_TORCHSCRIPT_ENV = "ITR_TRUST_TORCHSCRIPT"


def torchscript_trusted(trust: bool | None = None) -> bool:
    """``trust`` if given, else whether ``$ITR_TRUST_TORCHSCRIPT`` is set to a true value (``1``, ``true``,
    ``yes``)."""
    if trust is not None:
        return bool(trust)
    return os.environ.get(TRUST_TORCHSCRIPT_ENV, "").strip().lower() in ("1", "true", "yes")


def torchscript_refused(p: Path) -> str:
    """The message that refuses an untrusted TorchScript archive ``p`` (names the file and the two ways out)."""
    return (
        f"{p}: refused — this is a TorchScript archive (e.g. an OpenAI release .pt). Loading one runs the "
        "TorchScript deserialiser on code stored in the file, which PyTorch does not consider safe for "
        "untrusted files (torch.load(..., weights_only=True) refuses them since PyTorch 2.6, CVE-2025-32434). "
        "If you trust the file and its source (e.g. OpenAI's own download), either set "
        f"{TRUST_TORCHSCRIPT_ENV}=1 (or pass trust_torchscript=True), or convert it once to .safetensors in "
        "a separate session — torch.jit.load(path).state_dict() written with safetensors.torch.save_file — "
        "and pass that file instead (see docs/neural.md, 'Backbones').")


def is_safetensors_file(path: str | Path) -> bool:
    """True for a safetensors file, whatever its name: an 8-byte little-endian header length ``n``
    (at most the rest of the file) followed by a JSON object of ``n`` bytes starting with ``{``."""
    p = Path(path)
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            head = f.read(9)
    except OSError:
        return False
    if len(head) < 9:
        return False
    n = int.from_bytes(head[:8], "little")
    return 2 <= n <= size - 8 and head[8:9] == b"{"


def weights_file_format(path: str | Path) -> str | None:
    """What a weights file looks like from its first bytes, without loading it: ``"safetensors"``,
    ``"zip"`` (``torch.save``'s default format or a TorchScript archive), ``"pickle"`` (the legacy
    ``torch.save`` format: a pickle protocol-2+ header) or ``None`` (none of these: not weights).
    :func:`read_state_dict` still decides whether the content is usable and safe."""
    p = Path(path)
    if is_safetensors_file(p):
        return "safetensors"
    if zipfile.is_zipfile(p):
        return "zip"
    try:
        with open(p, "rb") as f:
            head = f.read(2)
    except OSError:
        return None
    return "pickle" if len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5 else None


def check_weights_file(path: str | Path) -> str:
    """Refuse a file that is not a weights file at all, from its first bytes and without loading it.

    The one check (and message) of every entry point: the main job's ``--clip-pretrained`` option check,
    ``python -m neural.score`` and :func:`read_state_dict`, so random bytes are called "not a weights
    file" everywhere rather than "would need unpickling" in some places.

    Parameters
    ----------
    path : path
        An existing file.

    Returns
    -------
    str
        Its :func:`weights_file_format` (``"safetensors"``, ``"zip"`` or ``"pickle"``).

    Raises
    ------
    NotWeightsFileError
        None of those formats; the message names the file.
    """
    p = Path(path).expanduser()
    fmt = weights_file_format(p)
    if fmt is None:
        raise NotWeightsFileError(f"{p}: not a weights file (neither safetensors, a PyTorch zip archive / "
                                  f"TorchScript nor a legacy torch.save file)")
    return fmt


def _unpickler_reason(msg: str) -> str:
    """The line of a ``torch.load(weights_only=True)`` error that says what was refused (e.g.
    ``Unsupported global: GLOBAL x.Y``), without torch's advice to load with ``weights_only=False``."""
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    for ln in lines:
        if "WeightsUnpickler error:" in ln:
            return ln.split("WeightsUnpickler error:", 1)[1].strip().split(". Please use")[0]
    return "" if not lines or "weights_only" in lines[0] else lines[0]


def is_torchscript_archive(path: str | Path) -> bool:
    """True for a TorchScript zip archive (has ``code/`` and ``constants.pkl`` members)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
    return any("/code/" in n or n.startswith("code/") for n in names) and any(
        n.endswith("constants.pkl") for n in names
    )


def _only_tensors(sd: Mapping, path: Path, what: str) -> dict[str, torch.Tensor]:
    if not isinstance(sd, Mapping) or not sd:
        raise WeightsError(f"{path}: {what} is not a non-empty mapping of parameter names to tensors")
    out = {}
    for k, v in sd.items():
        if not isinstance(k, str):
            raise WeightsError(f"{path}: {what} has a non-string key {k!r}")
        if k in OPENAI_EXTRA_KEYS:
            continue
        if isinstance(v, torch.Tensor):
            out[k] = v
        else:
            raise WeightsError(f"{path}: {what} entry {k!r} is a {type(v).__name__}, not a tensor")
    return out


def _strip_module(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    if sd and all(k.startswith("module.") for k in sd):
        return {k[len("module."):]: v for k, v in sd.items()}
    return sd


def longclip_positional_table(pos: torch.Tensor, pos_res: torch.Tensor, keep: int = LONGCLIP_KEEP) -> torch.Tensor:
    r"""The positional table Long-CLIP's text forward adds to the token embeddings (Zhang et al. 2024,
    Sec. 3.1, knowledge-preserved stretching; beichenzbc/Long-CLIP ``model/model_longclip.py``,
    ``CLIP.encode_text``), computed as that code does:

    .. math:: P = P_{\mathrm{pos}} \odot m_1 + P_{\mathrm{res}} \odot m_2,\qquad
              m_1[i] = [i < 20],\; m_2[i] = [i \ge 20]

    with ``(L, 1)`` float32 masks broadcast over the width.  Rows ``< keep`` are the first table's, the
    others the second's, bit for bit (``x·1 + y·0 = x`` in IEEE arithmetic for finite values).

    Parameters
    ----------
    pos, pos_res : Tensor
        ``positional_embedding`` and ``positional_embedding_res``, both ``(L, width)``.
    keep : int
        Leading positions read from ``pos`` (Long-CLIP: 20).

    Returns
    -------
    Tensor
        ``(L, width)`` float32 (Long-CLIP computes it in float32 after ``model.float()``).
    """
    n = pos.shape[0]
    m1 = torch.zeros(n, 1, device=pos.device)
    m1[:keep] = 1
    m2 = torch.zeros(n, 1, device=pos.device)
    m2[keep:] = 1
    return pos.float() * m1 + pos_res.float() * m2


def longclip_to_open_clip(state_dict: Mapping[str, torch.Tensor], source: str | Path = "") -> dict[str, torch.Tensor]:
    """An open_clip-layout state dict (248-position ``positional_embedding``, no ``positional_embedding_res``)
    from a Long-CLIP-layout one, refusing any other shape of the two tables.

    Parameters
    ----------
    state_dict : mapping of str -> Tensor
        OpenAI key names plus ``positional_embedding_res`` (tensors may be on the ``meta`` device).
    source : str or path
        The file, for the error message.

    Returns
    -------
    dict of str -> Tensor
        The same entries, with ``positional_embedding`` replaced by :func:`longclip_positional_table`.

    Raises
    ------
    WeightsLayoutError
        The two tables are not both ``(248, width)``: the released forward (fixed ``(248, 1)`` masks)
        could not run on them, and any other reading would resize or drop positions.
    """
    pos, res = state_dict.get("positional_embedding"), state_dict.get(LONGCLIP_RES_KEY)
    shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in (pos, res)]
    if res is None or pos is None or shapes[0] != shapes[1] or len(shapes[0]) != 2 \
            or shapes[0][0] != LONGCLIP_CONTEXT:
        raise WeightsLayoutError(
            f"{source}: Long-CLIP layout ('{LONGCLIP_RES_KEY}' present) needs 'positional_embedding' and "
            f"'{LONGCLIP_RES_KEY}' both of shape ({LONGCLIP_CONTEXT}, width); found positional_embedding "
            f"{shapes[0]}, {LONGCLIP_RES_KEY} {shapes[1]} — refused rather than resized")
    out = {k: v for k, v in state_dict.items() if k != LONGCLIP_RES_KEY}
    out["positional_embedding"] = longclip_positional_table(pos, res)
    return out


def _layout(sd: dict[str, torch.Tensor], fmt: str, p: Path) -> tuple[dict[str, torch.Tensor], str]:
    """``(state dict, format)`` with a Long-CLIP / SPECS layout converted (:func:`longclip_to_open_clip`)."""
    if LONGCLIP_RES_KEY not in sd:
        return sd, fmt
    return longclip_to_open_clip(sd, p), ("specs" if p.name in SPECS_RELEASE_FILES else "longclip")


def read_state_dict(path: str | Path, *, trust_torchscript: bool | None = None,
                    torchscript_sha256: str | None = None) -> tuple[dict[str, torch.Tensor], str]:
    """Read a CLIP weights file into a CPU state dict without unpickling arbitrary objects.

    Parameters
    ----------
    path : path
        ``.safetensors``, an OpenAI TorchScript ``.pt``, a ``torch.save``'d state dict, an open_clip
        training checkpoint, a PAC-S checkpoint, or a Long-CLIP / SPECS release (see the module docstring).
    trust_torchscript : bool, optional
        Whether a TorchScript archive may be loaded with :func:`torch.jit.load`.  Default: from
        ``$ITR_TRUST_TORCHSCRIPT`` (:func:`torchscript_trusted`), i.e. no unless set.
    torchscript_sha256 : str, optional
        A TorchScript archive is also trusted when its bytes have this SHA-256 (e.g. the checksum an
        official download URL names): the file is read once, those bytes are hashed and, if they match,
        loaded, so a file replaced between a check and the load is never trusted.

    Returns
    -------
    state_dict : dict of str -> Tensor
        Keys in OpenAI / open_clip naming (``module.`` stripped, OpenAI's non-parameter entries dropped;
        a Long-CLIP layout converted to one 248-row ``positional_embedding``, :func:`longclip_to_open_clip`).
    fmt : str
        One of :data:`FORMATS`.

    Raises
    ------
    MissingWeightsError
        The file does not exist.
    NotWeightsFileError
        The file is none of the weights formats (:func:`check_weights_file`).
    UnsafeCheckpointError
        ``torch.load(..., weights_only=True)`` refused the file (it pickles arbitrary objects), or the file
        is a TorchScript archive that is not trusted.
    WeightsLayoutError
        A Long-CLIP layout whose two positional tables are not both ``(248, width)``.
    WeightsError
        Anything else that makes the file unusable (names the file), including weights that are not
        floating point or hold a NaN / infinity (:func:`check_tensor_values`).
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise MissingWeightsError(f"weights file not found: {p}")
    check_weights_file(p)
    if p.suffix == ".safetensors" or is_safetensors_file(p):
        sd, fmt = _layout(_read_safetensors(p), "safetensors", p)
    elif is_torchscript_archive(p):
        sd, fmt = _layout(_read_torchscript(p, trust_torchscript, torchscript_sha256), "torchscript", p)
    else:
        sd, fmt = _layout(*_from_pickled(_torch_load(p), p), p)
    check_tensor_values(sd, p)
    return sd, fmt


def check_tensor_values(state_dict: Mapping[str, torch.Tensor], source: str | Path) -> None:
    """Refuse weights that load but cannot score: a weight (two or more dimensions) that is not floating
    point (an int8 copy scores 0 everywhere), or a NaN anywhere or an infinity outside an attention mask
    (every score ``nan``)
    (:func:`neural.weights_check.tensor_problem`, the rule the torch-free file check applies).

    Raises
    ------
    WeightsError
        Naming ``source`` and the tensor.
    """
    for name, t in state_dict.items():
        floating = t.is_floating_point()
        bad = (bool(torch.isnan(t).any()) if may_hold_infinity(name) else not bool(torch.isfinite(t).all())
               ) if floating else False
        problem = tensor_problem(name, str(t.dtype).removeprefix("torch."), floating, t.ndim, bad)
        if problem is not None:
            raise WeightsError(f"{source}: {problem}")


def _read_safetensors(p: Path) -> dict[str, torch.Tensor]:
    """Format ``"safetensors"``: :func:`safetensors.torch.load_file`, no code runs."""
    try:
        sd = load_file(str(p), device="cpu")
    except Exception as exc:  # safetensors raises its own error types
        raise WeightsError(f"{p}: not a readable safetensors file ({exc})") from exc
    return _strip_module(_only_tensors(sd, p, "safetensors file"))


def _read_torchscript(p: Path, trust_torchscript: bool | None,
                      torchscript_sha256: str | None) -> dict[str, torch.Tensor]:
    """Format ``"torchscript"``: :func:`torch.jit.load`, only when trusted (by setting, or by the SHA-256 of
    exactly the bytes loaded)."""
    source: str | io.BytesIO = str(p)
    if not torchscript_trusted(trust_torchscript):
        if not torchscript_sha256:
            raise UnsafeCheckpointError(torchscript_refused(p))
        data = p.read_bytes()
        if hashlib.sha256(data).hexdigest() != torchscript_sha256:
            raise UnsafeCheckpointError(torchscript_refused(p))
        source = io.BytesIO(data)   # exactly the bytes that were hashed
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # "torch.jit.load is deprecated"
            module = torch.jit.load(source, map_location="cpu")
    except Exception as exc:
        raise WeightsError(f"{p}: looks like a TorchScript archive but torch.jit.load failed ({exc})") from exc
    sd = {k: v for k, v in module.state_dict().items() if k not in OPENAI_EXTRA_KEYS}
    return _strip_module(_only_tensors(sd, p, "TorchScript state dict"))


def _torch_load(p: Path):
    """``torch.load(..., weights_only=True)``; a refused unpickling becomes :class:`UnsafeCheckpointError`."""
    try:
        return torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as exc:
        if isinstance(exc, (OSError,)) and not isinstance(exc, EOFError):
            raise WeightsError(f"{p}: cannot read ({exc})") from exc
        msg = str(exc)
        if "weights_only" in msg or "Unsupported global" in msg or "Unpickler" in msg or isinstance(
            exc, getattr(__import__("pickle"), "UnpicklingError")
        ):
            raise UnsafeCheckpointError(
                f"{p}: refused — loading this file would need unpickling of arbitrary Python objects, "
                "which can execute code. Only tensors / plain containers are accepted "
                "(weights_only loading) or .safetensors files. If you trust the file and its source, "
                "convert its state dict once to .safetensors in a separate, sandboxed session and pass "
                "that file instead (see docs/neural.md, 'Backbones'). "
                f"(torch said: {_unpickler_reason(msg) or repr(exc)})"
            ) from exc
        raise WeightsError(f"{p}: not a readable PyTorch weights file ({exc})") from exc


def _from_pickled(obj, p: Path) -> tuple[dict[str, torch.Tensor], str]:
    """Formats ``"open_clip-checkpoint"``, ``"pacs"`` and ``"state_dict"`` from what :func:`torch.load` read."""
    if isinstance(obj, Mapping) and "state_dict" in obj and isinstance(obj["state_dict"], Mapping):
        inner = obj["state_dict"]
        prefixed = bool(inner) and all(str(k).startswith("module.") for k in inner)
        fmt = "open_clip-checkpoint" if (prefixed or "epoch" in obj or "name" in obj) else "pacs"
        return _strip_module(_only_tensors(inner, p, "checkpoint['state_dict']")), fmt
    if isinstance(obj, Mapping):
        return _strip_module(_only_tensors(obj, p, "state dict")), "state_dict"
    raise WeightsError(f"{p}: holds a {type(obj).__name__}, expected a state dict (mapping name -> tensor)")


def save_safetensors_atomic(path: str | Path, tensors: Mapping[str, torch.Tensor],
                            metadata: Mapping[str, str] | None = None) -> Path:
    """Write ``tensors`` (detached, contiguous, on the CPU) as a safetensors file at ``path`` atomically:
    to a temporary file beside it, flushed to disk, then renamed over it, so a killed writer leaves the
    old file or the new one, never half of one."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp),
              metadata=None if metadata is None else dict(metadata))
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def save_state_dict(model_or_sd, path: str | Path, fmt: str = "safetensors") -> Path:
    """Write a model's weights in one of the supported formats (used by tests and by the tiny CLIP).

    ``fmt``: ``"safetensors"``; ``"state_dict"`` (OpenAI-style plain state dict, ``.pt``);
    ``"open_clip-checkpoint"`` (``{"epoch": 0, "name": ..., "state_dict": {"module." + k: v}}``);
    ``"pacs"`` (``{"state_dict": sd}``, as the PAC-S release).
    """
    sd = model_or_sd.state_dict() if isinstance(model_or_sd, torch.nn.Module) else dict(model_or_sd)
    sd = {k: v.detach().to("cpu").contiguous() for k, v in sd.items()}
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "safetensors":
        save_file(sd, str(p))
    elif fmt == "state_dict":
        torch.save(sd, p)
    elif fmt == "open_clip-checkpoint":
        torch.save({"epoch": 0, "name": "itr", "state_dict": {"module." + k: v for k, v in sd.items()}}, p)
    elif fmt == "pacs":
        torch.save({"state_dict": sd}, p)
    else:
        raise ValueError(f"fmt={fmt!r}: expected one of safetensors, state_dict, open_clip-checkpoint, pacs")
    return p
