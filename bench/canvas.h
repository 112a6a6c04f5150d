/*
 * canvas.h: an RGB raster to draw the benchmarks' plots on: filled
 * rectangles, straight lines and text in a 5x7 bitmap font (digits, the
 * letters, which print as capitals, and a little punctuation).
 */
#ifndef BENCH_CANVAS_H
#define BENCH_CANVAS_H

#include <stdint.h>

typedef struct canvas {
	int width, height;
	uint8_t *rgb;  /* width * height * 3 bytes, rows top to bottom */
} canvas;

typedef struct canvas_colour {
	uint8_t r, g, b;
} canvas_colour;

/* Text is 5 pixels wide plus 1 of spacing per character, 7 high. */
#define CANVAS_GLYPH_W 6
#define CANVAS_GLYPH_H 7

/* A "width" x "height" canvas filled with "background"; returns 0 or
 * -ENOMEM. */
int canvas_init(canvas *c, int width, int height, canvas_colour background);
void canvas_release(canvas *c);

/* Draws on "c"; whatever falls outside it is clipped. */
void canvas_fill(canvas *c, int x, int y, int w, int h, canvas_colour colour);
void canvas_line(canvas *c, int x0, int y0, int x1, int y1, canvas_colour colour);
/* "text" with its top left corner at (x, y), one pixel per font dot;
 * characters without a glyph print as blanks. */
void canvas_text(canvas *c, int x, int y, const char *text, canvas_colour colour);

#endif
