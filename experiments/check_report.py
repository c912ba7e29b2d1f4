"""Open a ``report.html`` in a real headless browser and save a screenshot.

    python -m experiments.check_report runs/teaching-…/report.html --screenshot report.png

Checks that the page is self-contained (every ``src``/``href`` is a data URI or an in-page anchor,
so it renders with no network) and, when Chromium is installed (Debian: ``apt-get install chromium``),
renders it headless to a PNG.  Exit status 0 when the page passes, 1 otherwise, 3 when no browser is
installed (the static check still ran).
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_REF = re.compile(r"""\b(?:src|href)\s*=\s*(['"])(.*?)\1""", re.IGNORECASE | re.DOTALL)


def external_references(html_text: str) -> list[str]:
    """``src``/``href`` values that would need a file or the network (anything but data: or #anchor)."""
    bad = []
    for _, ref in _REF.findall(html_text):
        ref = ref.strip()
        if ref.startswith("data:") or ref.startswith("#") or ref == "":
            continue
        bad.append(ref[:80])
    return bad


def find_browser() -> str | None:
    for b in BROWSERS:
        path = shutil.which(b)
        if path:
            return path
    return None


def screenshot(html_path: Path, png_path: Path, *, width: int = 1280, height: int = 2400,
               timeout: float = 120.0) -> Path:
    """Render ``html_path`` with headless Chromium (no network, fresh profile) into ``png_path``."""
    browser = find_browser()
    if browser is None:
        raise FileNotFoundError("no Chromium found (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", "--hide-scrollbars", f"--window-size={width},{height}",
               f"--screenshot={png_path.resolve()}", html_path.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or not png_path.is_file() or png_path.stat().st_size == 0:
        raise RuntimeError(f"Chromium failed (exit {proc.returncode}): {proc.stderr[-800:]}")
    return png_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.check_report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("html", type=Path, help="the report.html to check")
    ap.add_argument("--screenshot", type=Path, default=None,
                    help="where to save the PNG (default: next to the report, report.png)")
    ap.add_argument("--width", type=int, default=1280, help="viewport width in px (default 1280)")
    ap.add_argument("--height", type=int, default=2400, help="viewport height in px (default 2400)")
    args = ap.parse_args(argv)
    if not args.html.is_file():
        print(f"error: {args.html}: no such file", file=sys.stderr)
        return 1
    try:
        text = args.html.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        print(f"error: {args.html}: not a UTF-8 text file (byte {exc.start}); give the report.html",
              file=sys.stderr)
        return 1
    if "<html" not in text[:4096].lower():
        print(f"error: {args.html}: not an HTML document (no <html> tag); give the report.html", file=sys.stderr)
        return 1
    bad = external_references(text)
    if bad:
        print(f"{args.html}: not self-contained; external references: {bad[:5]}", file=sys.stderr)
        return 1
    print(f"{args.html}: self-contained (no external references)")
    png = args.screenshot or args.html.with_name("report.png")
    try:
        screenshot(args.html, png, width=args.width, height=args.height)
    except FileNotFoundError as exc:
        print(f"warning: {exc}; skipped the rendering check", file=sys.stderr)
        return 3
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"error: {args.html}: rendering failed: {exc}", file=sys.stderr)
        return 1
    print(f"rendered in headless Chromium: {png} ({png.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
