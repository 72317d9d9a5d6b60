"""The data: 8x8 digit glyphs drawn here, made into noisy training samples.

Nothing is downloaded: the ten bitmaps below are the whole source, and every
sample is one of them shifted by up to a pixel, with its ink scaled and
Gaussian noise added, so the task is easy to learn but not trivial.
"""
from typing import List, Sequence, Tuple

import numpy as np

SIZE = 8
PIXELS = SIZE * SIZE
INK, BLANK = "#", "."

# '#' is ink, '.' is blank; one 8-character string per row.
BITMAPS = {
    "0": ("..####..", ".##..##.", ".##.###.", ".###.##.",
          ".##..##.", ".##..##.", "..####..", "........"),
    "1": ("...##...", "..###...", ".####...", "...##...",
          "...##...", "...##...", ".######.", "........"),
    "2": ("..####..", ".##..##.", ".....##.", "....##..",
          "...##...", "..##....", ".######.", "........"),
    "3": ("..####..", ".##..##.", ".....##.", "...###..",
          ".....##.", ".##..##.", "..####..", "........"),
    "4": ("....##..", "...###..", "..####..", ".##.##..",
          ".######.", "....##..", "....##..", "........"),
    "5": (".######.", ".##.....", ".#####..", ".....##.",
          ".....##.", ".##..##.", "..####..", "........"),
    "6": ("...###..", "..##....", ".##.....", ".#####..",
          ".##..##.", ".##..##.", "..####..", "........"),
    "7": (".######.", ".....##.", "....##..", "...##...",
          "..##....", "..##....", "..##....", "........"),
    "8": ("..####..", ".##..##.", ".##..##.", "..####..",
          ".##..##.", ".##..##.", "..####..", "........"),
    "9": ("..####..", ".##..##.", ".##..##.", "..#####.",
          ".....##.", "....##..", "..###...", "........"),
}
CLASSES: Tuple[str, ...] = tuple(sorted(BITMAPS))


def rows_to_pixels(rows: Sequence[str]) -> np.ndarray:
    """8 strings of '#'/'.' -> 64 floats (1.0 ink, 0.0 blank). ValueError says what is wrong."""
    if len(rows) != SIZE:
        raise ValueError(f"expected {SIZE} rows, got {len(rows)}")
    out = np.zeros((SIZE, SIZE), dtype=np.float32)
    for r, row in enumerate(rows):
        if not isinstance(row, str) or len(row) != SIZE or set(row) - {INK, BLANK}:
            raise ValueError(f"row {r}: expected {SIZE} characters, each {INK!r} or {BLANK!r}")
        out[r] = [c == INK for c in row]
    return out.reshape(PIXELS)


def templates() -> np.ndarray:
    """(10, 64) float32: the clean glyph of each class, in CLASSES order."""
    return np.stack([rows_to_pixels(BITMAPS[c]) for c in CLASSES])


def shift(image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """Move an 8x8 image by (dy, dx) pixels, filling with blank (no wrap-around)."""
    out = np.zeros_like(image)
    h, w = image.shape
    src = image[max(0, -dy):h - max(0, dy), max(0, -dx):w - max(0, dx)]
    out[max(0, dy):max(0, dy) + src.shape[0], max(0, dx):max(0, dx) + src.shape[1]] = src
    return out


def make_dataset(count: int, seed: int, noise: float = 0.35) -> Tuple[np.ndarray, np.ndarray]:
    """`count` noisy samples: X (count, 64) float32 in roughly [0, 1], y (count,) int64."""
    rng = np.random.default_rng(seed)
    clean = templates().reshape(len(CLASSES), SIZE, SIZE)
    y = rng.integers(0, len(CLASSES), size=count)
    x = np.empty((count, PIXELS), dtype=np.float32)
    for i, label in enumerate(y):
        dy, dx = rng.integers(-1, 2, size=2)
        ink = rng.uniform(0.6, 1.2)
        image = shift(clean[label], int(dy), int(dx)) * ink
        x[i] = image.reshape(PIXELS) + rng.normal(0.0, noise, PIXELS)
    return x, y.astype(np.int64)


def render(pixels: Sequence[float], threshold: float = 0.5) -> List[str]:
    """64 values -> 8 rows of '#'/'.', for printing what the model saw."""
    grid = np.asarray(pixels, dtype=np.float32).reshape(SIZE, SIZE)
    return ["".join(INK if v >= threshold else BLANK for v in row) for row in grid]
