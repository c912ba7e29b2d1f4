"""Rendering a :class:`~corpora.teaching.scene.Scene` to an RGB uint8 image with OpenCV / numpy.

* **Colours** are well separated in CIELAB (pairwise ΔE*ab ≥ 30 among object colours; see
  ``docs/teaching_set.md``); each object is drawn in its colour with a slight per-image shade jitter.
* **Fill textures** (striped / dotted / checked / plain) alternate the colour with a darker shade
  (black objects: a grey; white objects: a light grey), period ≈ 6 px at 120 px height, at the object's
  pattern orientation, with a per-render phase.
* **Sky**: a smooth band above the horizon in a colour that repeats a ground's (deep blue = water,
  overcast = snow, haze = sand): position, not colour, tells sky from ground (spatial pyramid).
* **Background textures** differ in statistics, not just colour: grass = vertical blade streaks
  (anisotropically blurred noise), sand = fine isotropic grain plus faint ripples, water = horizontal
  sine waves with wobble, snow = smooth low-frequency shading with sparse blue-grey speckles.
* **Shapes** are filled polygons (circle, square, triangle, five-pointed star, cross, diamond) and two
  iconic figures built from primitives (dog: body, head, ear, legs, tail; person: head, body, arms,
  legs), anti-aliased and outlined in a darker shade so dense SIFT sees their contours.
"""
from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

from corpora.teaching.scene import Scene, SceneObject

RGB: dict[str, tuple[int, int, int]] = {
    "red": (222, 30, 36), "blue": (28, 78, 226), "green": (40, 178, 62), "yellow": (246, 222, 40),
    "purple": (150, 40, 170), "orange": (247, 140, 20), "black": (22, 22, 22), "white": (250, 250, 250),
}
BACKGROUND_RGB: dict[str, tuple[int, int, int]] = {
    "grass": (66, 128, 46), "sand": (222, 198, 150), "water": (44, 96, 170), "snow": (236, 239, 246),
}
_SHIFT = 4
_SCALE = 1 << _SHIFT


def _second_shade(colour: str, rgb: np.ndarray) -> np.ndarray:
    if colour == "black":
        return np.array([150.0, 150.0, 150.0])
    if colour == "white":
        return np.array([150.0, 150.0, 160.0])
    return rgb * 0.42


# ------------------------------------------------------------------------------------- backgrounds
@lru_cache(maxsize=8)
def _grid(H: int, W: int) -> tuple[np.ndarray, np.ndarray]:
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float32)
    yy.flags.writeable = False
    xx.flags.writeable = False
    return yy, xx


def _smooth_field(H: int, W: int, cell: float, rng: np.random.Generator) -> np.ndarray:
    """Low-frequency noise (std ≈ 1): white noise on a coarse grid of ``cell`` px, upsampled cubically."""
    h, w = max(2, int(np.ceil(H / cell)) + 1), max(2, int(np.ceil(W / cell)) + 1)
    coarse = rng.standard_normal((h, w), dtype=np.float32)
    return cv2.resize(coarse, (W, H), interpolation=cv2.INTER_CUBIC)


def render_background(bg: str, H: int, W: int, rng: np.random.Generator) -> np.ndarray:
    """A textured background, float32 (H, W, 3) in 0..255."""
    base = np.array(BACKGROUND_RGB[bg], np.float32) * np.float32(rng.uniform(0.94, 1.06))
    s = H / 120.0
    yy, xx = _grid(H, W)
    if bg == "grass":  # vertical blades: noise blurred along y only, plus darker / lighter patches
        n = rng.standard_normal((H, W), dtype=np.float32)
        k = max(3, int(round(9 * s)) | 1)
        blades = cv2.GaussianBlur(n, (1, k), sigmaX=0.6, sigmaY=2.5 * s) * 2.6
        v = 1.0 + 0.22 * blades + 0.05 * _smooth_field(H, W, 24 * s, rng)
        img = base[None, None, :] * v[..., None]
        img[..., 1] += 10 * blades
    elif bg == "sand":  # fine isotropic grain + faint wavy ripples
        grain = rng.standard_normal((H, W), dtype=np.float32)
        phase = rng.uniform(0, 2 * np.pi)
        ripple = np.sin(2 * np.pi * (yy + 4 * np.sin(xx / (17 * s))) / (11 * s) + phase)
        v = 1.0 + 0.07 * grain + 0.035 * ripple
        img = base[None, None, :] * v[..., None]
    elif bg == "water":  # horizontal waves with a slow wobble, light noise, glints on the crests
        phase = rng.uniform(0, 2 * np.pi)
        wob = np.sin(2 * np.pi * xx / (37 * s) + rng.uniform(0, 6.3)) * 1.2
        waves = np.sin(2 * np.pi * yy / (6.5 * s) + wob + phase)
        n = cv2.GaussianBlur(rng.standard_normal((H, W), dtype=np.float32), (0, 0), 1.0)
        v = 1.0 + 0.16 * waves + 0.05 * n
        img = base[None, None, :] * v[..., None]
        img += (np.clip(waves, 0.85, 1.0) - 0.85)[..., None] * 250
    elif bg == "snow":  # smooth shading + sparse blue-grey speckles
        img = base[None, None, :] * (1.0 + 0.025 * _smooth_field(H, W, 32 * s, rng))[..., None]
        speck = rng.random((H, W), dtype=np.float32) < 0.012
        img[speck] = (196, 206, 224)
    else:  # pragma: no cover - validated by Scene
        raise ValueError(f"unknown background {bg!r}")
    return img.astype(np.float32, copy=False)


# ------------------------------------------------------------------------------------- silhouettes
def _poly(mask: np.ndarray, pts: np.ndarray) -> None:
    cv2.fillPoly(mask, [np.round(pts * _SCALE).astype(np.int32)], 255, cv2.LINE_AA, _SHIFT)


def _ellipse(mask, c, axes, angle=0.0) -> None:
    cv2.ellipse(mask, (int(round(c[0] * _SCALE)), int(round(c[1] * _SCALE))),
                (int(round(axes[0] * _SCALE)), int(round(axes[1] * _SCALE))), angle, 0, 360, 255,
                -1, cv2.LINE_AA, _SHIFT)


def _rot(pts: np.ndarray, deg: float) -> np.ndarray:
    t = np.deg2rad(deg)
    R = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
    return pts @ R.T


def _regular(n: int, r: float, start: float = -90.0) -> np.ndarray:
    a = np.deg2rad(start + 360.0 * np.arange(n) / n)
    return np.stack([np.cos(a), np.sin(a)], 1) * r


def silhouette(shape: str, cx: float, cy: float, R: float, angle: float, flip: bool,
               H: int, W: int) -> np.ndarray:
    """uint8 anti-aliased mask (H, W) of one object with centre (cx, cy) px and radius R px."""
    m = np.zeros((H, W), np.uint8)
    c = np.array([cx, cy])
    if shape == "circle":
        _ellipse(m, c, (R, R))
    elif shape == "square":
        s = R * 0.86
        _poly(m, c + _rot(np.array([[-s, -s], [s, -s], [s, s], [-s, s]]), angle))
    elif shape == "triangle":
        _poly(m, c + _rot(_regular(3, R * 1.05) + [0, R * 0.18], angle))
    elif shape == "star":
        outer, inner = _regular(5, R), _regular(5, R * 0.42, start=-54.0)
        pts = np.empty((10, 2))
        pts[0::2], pts[1::2] = outer, inner
        _poly(m, c + _rot(pts, angle))
    elif shape == "cross":
        a, b = R * 0.95, R * 0.33
        pts = np.array([[-b, -a], [b, -a], [b, -b], [a, -b], [a, b], [b, b], [b, a], [-b, a],
                        [-b, b], [-a, b], [-a, -b], [-b, -b]])
        _poly(m, c + _rot(pts, angle))
    elif shape == "diamond":
        _poly(m, c + _rot(np.array([[0, -R], [R * 0.68, 0], [0, R], [-R * 0.68, 0]]), angle))
    elif shape == "dog":
        f = -1.0 if flip else 1.0
        _ellipse(m, c + [-0.1 * R * f, 0.0], (0.72 * R, 0.36 * R))                       # body
        _ellipse(m, c + [0.72 * R * f, -0.42 * R], (0.3 * R, 0.25 * R))                   # head
        _ellipse(m, c + [0.98 * R * f, -0.36 * R], (0.16 * R, 0.1 * R))                   # snout
        _poly(m, c + np.array([[0.55 * f, -0.55], [0.62 * f, -0.8], [0.75 * f, -0.58]]) * R)  # ear
        for lx in (-0.6, -0.35, 0.2, 0.45):                                                # legs
            x0 = c[0] + lx * R * f
            _poly(m, np.array([[x0 - 0.09 * R, c[1] + 0.1 * R], [x0 + 0.09 * R, c[1] + 0.1 * R],
                               [x0 + 0.09 * R, c[1] + 0.78 * R], [x0 - 0.09 * R, c[1] + 0.78 * R]]))
        _poly(m, c + np.array([[-0.75 * f, -0.1], [-1.02 * f, -0.6], [-0.92 * f, -0.62],
                               [-0.68 * f, -0.2]]) * R)                                    # tail
    elif shape == "person":
        _ellipse(m, c + [0.0, -0.74 * R], (0.22 * R, 0.22 * R))                           # head
        _poly(m, c + np.array([[-0.26, -0.48], [0.26, -0.48], [0.3, 0.22], [-0.3, 0.22]]) * R)  # body
        _poly(m, c + np.array([[-0.26, -0.46], [-0.6, 0.08], [-0.5, 0.14], [-0.2, -0.3]]) * R)  # arms
        _poly(m, c + np.array([[0.26, -0.46], [0.6, 0.08], [0.5, 0.14], [0.2, -0.3]]) * R)
        _poly(m, c + np.array([[-0.28, 0.2], [-0.05, 0.2], [-0.12, 1.0], [-0.32, 1.0]]) * R)    # legs
        _poly(m, c + np.array([[0.05, 0.2], [0.28, 0.2], [0.32, 1.0], [0.12, 1.0]]) * R)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return m


# ------------------------------------------------------------------------------------- fills
def fill_pattern(texture: str, colour: str, y0: int, y1: int, x0: int, x1: int, H: int, W: int,
                 tex_angle: float, rng: np.random.Generator) -> np.ndarray:
    """The object's fill on the box [y0:y1, x0:x1], float32 (h, w, 3)."""
    c1 = np.array(RGB[colour], np.float32) * np.float32(rng.uniform(0.93, 1.05))
    c1 = np.clip(c1, 0, 255)
    c2 = _second_shade(colour, c1).astype(np.float32)
    gy, gx = _grid(H, W)
    yy, xx = gy[y0:y1, x0:x1], gx[y0:y1, x0:x1]
    period = 6.0 * H / 120.0
    t = np.deg2rad(tex_angle)
    u = (xx * np.cos(t) + yy * np.sin(t)) / period + rng.uniform(0, 1)
    v = (-xx * np.sin(t) + yy * np.cos(t)) / period + rng.uniform(0, 1)
    if texture == "plain":
        w = np.zeros_like(u)
    elif texture == "striped":
        w = (np.sin(2 * np.pi * u) > 0).astype(np.float32)
    elif texture == "dotted":
        du, dv = u - np.round(u), v - np.round(v)
        w = ((du * du + dv * dv) < 0.09).astype(np.float32)
    elif texture == "checked":
        w = ((np.floor(u) + np.floor(v)) % 2).astype(np.float32)
    else:
        raise ValueError(f"unknown texture {texture!r}")
    shade = 1.0 + 0.05 * (yy - (y0 + y1) / 2) / max(1.0, (y1 - y0))  # slight vertical shading
    return (c1 * (1 - w[..., None]) + c2 * w[..., None]) * shade[..., None].astype(np.float32)


_ERODE = np.ones((3, 3), np.uint8)


def draw_object(img: np.ndarray, o: SceneObject, rng: np.random.Generator) -> None:
    """Composite one object onto the float image in place."""
    H, W = img.shape[:2]
    cx, cy, R = o.x * W, o.y * H, o.radius * H
    ext = int(np.ceil(R * 1.15)) + 2
    x0, x1 = max(0, int(cx) - ext), min(W, int(cx) + ext + 1)
    y0, y1 = max(0, int(cy) - ext), min(H, int(cy) + ext + 1)
    mask = silhouette(o.shape, cx - x0, cy - y0, R, o.angle, o.flip, y1 - y0, x1 - x0)
    fill = fill_pattern(o.texture, o.colour, y0, y1, x0, x1, H, W, o.tex_angle, rng)
    edge = (mask > 127).astype(np.uint8) - cv2.erode((mask > 127).astype(np.uint8), _ERODE)
    fill[edge.astype(bool)] *= 0.55 if o.colour != "black" else 1.0
    a = (mask.astype(np.float32) / 255.0)[..., None]
    region = img[y0:y1, x0:x1]
    region *= 1 - a
    region += a * fill


#: Sky colours: the same base colours as the water / snow / sand grounds (see ``Scene``).
SKY_RGB: dict[str, tuple[int, int, int]] = {
    "blue": BACKGROUND_RGB["water"], "overcast": BACKGROUND_RGB["snow"], "haze": BACKGROUND_RGB["sand"],
}


def draw_sky(img: np.ndarray, sky: str, horizon: float, rng: np.random.Generator) -> None:
    """Paint a smooth sky band (vertical gradient, faint low-frequency clouds) above ``horizon``, with
    a soft 2-px transition, in place."""
    H, W = img.shape[:2]
    hy = horizon * H
    n = int(np.ceil(hy)) + 2
    if n <= 2:
        return
    yy, _ = _grid(H, W)
    base = np.array(SKY_RGB[sky], np.float32) * np.float32(rng.uniform(0.95, 1.05))
    shade = 0.93 + 0.1 * yy[:n] / max(hy, 1.0) + 0.02 * _smooth_field(n, W, 40 * H / 120.0, rng)
    sky_px = base[None, None, :] * shade[..., None]
    a = np.clip((hy - yy[:n]) / 2.0 + 0.5, 0.0, 1.0)[..., None]
    img[:n] = img[:n] * (1 - a) + sky_px * a


def render_scene(scene: Scene, size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Render ``scene`` at ``size = (width, height)``; returns (H, W, 3) uint8 RGB."""
    W, H = size
    img = render_background(scene.background, H, W, rng)
    if scene.sky is not None:
        draw_sky(img, scene.sky, scene.horizon, rng)
    for o in scene.objects:
        draw_object(img, o, rng)
    return np.clip(img + 0.5, 0, 255).astype(np.uint8)
