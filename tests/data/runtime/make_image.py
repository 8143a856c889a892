#!/usr/bin/env python3
"""make_image.py: writes pattern64.png, the small test image that the
classify example reads in the tests: 64x64 RGB, smooth colour gradients with
a bright disc, so that a resize has something to average.  Only the standard
library (zlib) is used, so the PNG is reproducible byte for byte.

    python3 tests/data/runtime/make_image.py   # rewrites tests/data/runtime/pattern64.png
"""
import math
import os
import struct
import zlib

W = H = 64


def pixel(x, y):
    r = int(255 * x / (W - 1))
    g = int(255 * y / (H - 1))
    b = int(127.5 + 127.5 * math.sin(x * 0.3) * math.cos(y * 0.2))
    if (x - 40) ** 2 + (y - 24) ** 2 < 12 ** 2:  # a bright disc
        r, g, b = 250, 240, 60
    return r, g, b


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def main():
    rows = b"".join(b"\x00" + bytes(c for x in range(W) for c in pixel(x, y)) for y in range(H))
    png = (b"\x89PNG\r\n\x1a\n"
           + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0))  # 8-bit RGB
           + chunk(b"IDAT", zlib.compress(rows, 9))
           + chunk(b"IEND", b""))
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pattern64.png")
    with open(out, "wb") as f:
        f.write(png)
    print(f"wrote {out} ({len(png)} bytes)")


if __name__ == "__main__":
    main()
