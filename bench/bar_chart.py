"""A bar chart as a PNG, with the standard library only (zlib, struct).

One bar per label, its height the value, a line at 1.0 (parity), and the
labels written under the bars in a 5x7 pixel font: enough for
bench/compare's ratios without a plotting package.
"""
import struct
import zlib

WIDTH, HEIGHT, MARGIN, BAR = 900, 420, 40, 0.6
FONT = {  # 5x7, rows top to bottom, bit 4 the leftmost column
    "0": [14, 17, 19, 21, 25, 17, 14], "1": [4, 12, 4, 4, 4, 4, 14],
    "2": [14, 17, 1, 2, 4, 8, 31], "3": [30, 1, 1, 14, 1, 1, 30],
    "4": [2, 6, 10, 18, 31, 2, 2], "5": [31, 16, 30, 1, 1, 17, 14],
    "6": [6, 8, 16, 30, 17, 17, 14], "7": [31, 1, 2, 4, 8, 8, 8],
    "8": [14, 17, 17, 14, 17, 17, 14], "9": [14, 17, 17, 15, 1, 2, 12],
    ".": [0, 0, 0, 0, 0, 12, 12], "_": [0, 0, 0, 0, 0, 0, 31], " ": [0] * 7,
    "/": [1, 1, 2, 4, 8, 16, 16], "(": [2, 4, 8, 8, 8, 4, 2], ")": [8, 4, 2, 2, 2, 4, 8],
    "a": [0, 0, 14, 1, 15, 17, 15], "b": [16, 16, 30, 17, 17, 17, 30],
    "c": [0, 0, 14, 16, 16, 17, 14], "d": [1, 1, 15, 17, 17, 17, 15],
    "e": [0, 0, 14, 17, 31, 16, 14], "f": [6, 9, 8, 28, 8, 8, 8],
    "g": [0, 15, 17, 15, 1, 17, 14], "h": [16, 16, 22, 25, 17, 17, 17],
    "i": [4, 0, 12, 4, 4, 4, 14], "j": [2, 0, 6, 2, 2, 18, 12],
    "k": [16, 16, 18, 20, 24, 20, 18], "l": [12, 4, 4, 4, 4, 4, 14],
    "m": [0, 0, 26, 21, 21, 17, 17], "n": [0, 0, 22, 25, 17, 17, 17],
    "o": [0, 0, 14, 17, 17, 17, 14], "p": [0, 0, 30, 17, 30, 16, 16],
    "q": [0, 0, 15, 17, 15, 1, 1], "r": [0, 0, 22, 25, 16, 16, 16],
    "s": [0, 0, 15, 16, 14, 1, 30], "t": [8, 8, 28, 8, 8, 9, 6],
    "u": [0, 0, 17, 17, 17, 19, 13], "v": [0, 0, 17, 17, 17, 10, 4],
    "w": [0, 0, 17, 17, 21, 21, 10], "x": [0, 0, 17, 10, 4, 10, 17],
    "y": [0, 0, 17, 17, 15, 1, 14], "z": [0, 0, 31, 2, 4, 8, 31],
    "P": [30, 17, 17, 30, 16, 16, 16], "T": [31, 4, 4, 4, 4, 4, 4],
}


class Canvas:
    def __init__(self, width, height):
        self.width, self.height = width, height
        self.rows = [bytearray(b"\xff" * (3 * width)) for _ in range(height)]

    def rect(self, x0, y0, x1, y1, rgb):
        for y in range(max(0, y0), min(self.height, y1)):
            for x in range(max(0, x0), min(self.width, x1)):
                self.rows[y][3 * x:3 * x + 3] = bytes(rgb)

    def text(self, x, y, words, rgb=(0, 0, 0)):
        for ch in words:
            for r, bits in enumerate(FONT.get(ch, FONT[" "])):
                for c in range(5):
                    if bits >> (4 - c) & 1:
                        self.rect(x + c, y + r, x + c + 1, y + r + 1, rgb)
            x += 6

    def png(self):
        raw = b"".join(b"\x00" + bytes(row) for row in self.rows)

        def chunk(kind, data):
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(
                ">I", zlib.crc32(body) & 0xffffffff)
        return (b"\x89PNG\r\n\x1a\n" +
                chunk(b"IHDR", struct.pack(">IIBBBBB", self.width, self.height,
                                           8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def write(path, labels, values, title):
    """Bars of "values" over "labels", a line at 1.0, into PNG "path"."""
    canvas = Canvas(WIDTH, HEIGHT)
    top = max(max(values), 1.0) * 1.15
    plot_h = HEIGHT - 2 * MARGIN - 20
    step = (WIDTH - 2 * MARGIN) / max(len(values), 1)

    def y_of(v):
        return MARGIN + plot_h - int(plot_h * v / top)
    canvas.text(MARGIN, 12, title)
    for i, (label, value) in enumerate(zip(labels, values)):
        x0 = MARGIN + int(i * step + step * (1 - BAR) / 2)
        x1 = x0 + int(step * BAR)
        colour = (60, 140, 60) if value <= 1.0 else (190, 70, 60)
        canvas.rect(x0, y_of(value), x1, y_of(0), colour)
        canvas.text(x0, y_of(value) - 10, "%.2fx" % value)
        canvas.text(x0, y_of(0) + 6 + 10 * (i % 2), label[:int(step / 6) * 2])
    canvas.rect(MARGIN, y_of(1.0), WIDTH - MARGIN, y_of(1.0) + 1, (0, 0, 200))
    canvas.rect(MARGIN, y_of(0), WIDTH - MARGIN, y_of(0) + 1, (0, 0, 0))
    with open(path, "wb") as f:
        f.write(canvas.png())
