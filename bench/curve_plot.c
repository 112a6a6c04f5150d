/*
 * curve_plot.c: the tuning curves as a PNG (curve.h).
 *
 * A grid of cells, two per row, one per example: its name over two panels,
 * the best time so far divided by the default plan's time against trials
 * (left) and against seconds (right), as step lines; the genetic search in
 * blue, random search in orange. The y axis spans the curves' range in
 * tenths, labelled at both ends; the x axis runs from 0 to the budget (or
 * the longer search's seconds).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "canvas.h"
#include "curve.h"
#include "png.h"

#define CELL_W 480
#define CELL_H 210
#define HEADER_H 28
#define PANEL_W (CELL_W / 2)
#define MARGIN_LEFT 40
#define MARGIN_RIGHT 14
#define MARGIN_TOP 22
#define MARGIN_BOTTOM 26

static const canvas_colour white = {255, 255, 255}, black = {0, 0, 0},
	grey = {200, 200, 200};
static const canvas_colour colours[CURVE_KINDS] = {
	[CURVE_GENETIC] = {31, 119, 180}, [CURVE_RANDOM] = {255, 127, 14},
};

enum axis { BY_TRIALS, BY_SECONDS };

/* A panel's plotting area in pixels and the values at its edges. */
typedef struct frame {
	int x0, y0, x1, y1;  /* left, top, right, bottom */
	double xlo, xhi, ylo, yhi;
} frame;

static int map_x(const frame *f, double x)
{
	return f->x0 + (int)lround((x - f->xlo) / (f->xhi - f->xlo) * (f->x1 - f->x0));
}

static int map_y(const frame *f, double y)
{
	double v = y < f->ylo ? f->ylo : y > f->yhi ? f->yhi : y;

	return f->y1 - (int)lround((v - f->ylo) / (f->yhi - f->ylo) * (f->y1 - f->y0));
}

static double x_value(const curve *c, int i, enum axis axis)
{
	return axis == BY_TRIALS ? i + 1 : c->points[i].seconds;
}

/* The y range: the normalized bests of both curves, widened to tenths. */
static void y_range(const curve_example *ex, double *lo, double *hi)
{
	*lo = 1;
	*hi = 1;
	for (int k = 0; k < CURVE_KINDS; k++)
		for (int i = 0; i < ex->curves[k].n; i++) {
			double v = ex->curves[k].points[i].best_ms / ex->default_ms;

			if (isfinite(v)) {
				*lo = fmin(*lo, v);
				*hi = fmax(*hi, v);
			}
		}
	*lo = fmax(0, floor(*lo * 10 - 1e-9) / 10);
	*hi = ceil(*hi * 10 - 1e-9) / 10;
	if (*hi - *lo < 0.1)
		*lo = *hi - 0.1;
}

static double x_max(const curve_example *ex, enum axis axis, int trials)
{
	double max = 1e-3;

	if (axis == BY_TRIALS)
		return trials;
	for (int k = 0; k < CURVE_KINDS; k++)
		if (ex->curves[k].n)
			max = fmax(max, ex->curves[k].points[ex->curves[k].n - 1].seconds);
	return max;
}

/* The best so far as steps: across to each trial, then down to its best. */
static void draw_curve(canvas *c, const frame *f, const curve *cv, double norm,
		       enum axis axis, canvas_colour colour)
{
	int px = -1, py = -1;

	for (int i = 0; i < cv->n; i++) {
		double best = cv->points[i].best_ms / norm;
		int x = map_x(f, x_value(cv, i, axis)), y;

		if (!isfinite(best))
			continue;
		y = map_y(f, best);
		if (px >= 0) {
			canvas_line(c, px, py, x, py, colour);
			canvas_line(c, x, py, x, y, colour);
		}
		px = x;
		py = y;
	}
	if (px >= 0)
		canvas_line(c, px, py, f->x1, py, colour);
}

/* Axes, the line at 1 (the default plan) and the labels of both ends. */
static void draw_axes(canvas *c, const frame *f, enum axis axis)
{
	char label[32];

	canvas_line(c, f->x0, map_y(f, 1), f->x1, map_y(f, 1), grey);
	canvas_line(c, f->x0, f->y0, f->x0, f->y1, black);
	canvas_line(c, f->x0, f->y1, f->x1, f->y1, black);
	snprintf(label, sizeof(label), "%.1f", f->yhi);
	canvas_text(c, f->x0 - 4 - 6 * 3, f->y0, label, black);
	snprintf(label, sizeof(label), "%.1f", f->ylo);
	canvas_text(c, f->x0 - 4 - 6 * 3, f->y1 - CANVAS_GLYPH_H, label, black);
	canvas_text(c, f->x0, f->y1 + 4, "0", black);
	snprintf(label, sizeof(label), axis == BY_TRIALS ? "%.0f" : "%.1f", f->xhi);
	canvas_text(c, f->x1 - CANVAS_GLYPH_W * (int)strlen(label),
		    f->y1 + 4, label, black);
	canvas_text(c, (f->x0 + f->x1) / 2 - 20, f->y1 + 4,
		    axis == BY_TRIALS ? "trials" : "seconds", black);
}

static void draw_panel(canvas *c, int x, int y, const curve_example *ex,
		       enum axis axis, int trials)
{
	frame f = {x + MARGIN_LEFT, y + MARGIN_TOP, x + PANEL_W - MARGIN_RIGHT,
		   y + CELL_H - MARGIN_BOTTOM, 0, x_max(ex, axis, trials), 0, 1};

	y_range(ex, &f.ylo, &f.yhi);
	draw_axes(c, &f, axis);
	for (int k = CURVE_KINDS - 1; k >= 0; k--)
		draw_curve(c, &f, &ex->curves[k], ex->default_ms, axis, colours[k]);
}

static void draw_example(canvas *c, int x, int y, const curve_example *ex,
			 int trials)
{
	char title[192];

	snprintf(title, sizeof(title), "%s  default %.4g ms", ex->name, ex->default_ms);
	canvas_text(c, x + MARGIN_LEFT, y + 6, title, black);
	if (!isfinite(ex->default_ms))
		return;
	draw_panel(c, x, y, ex, BY_TRIALS, trials);
	draw_panel(c, x + PANEL_W, y, ex, BY_SECONDS, trials);
}

/* The title and the colour key. */
static void draw_header(canvas *c)
{
	canvas_text(c, 10, 10, "best / default plan:", black);
	canvas_fill(c, 140, 12, 16, 3, colours[CURVE_GENETIC]);
	canvas_text(c, 160, 10, "genetic", black);
	canvas_fill(c, 216, 12, 16, 3, colours[CURVE_RANDOM]);
	canvas_text(c, 236, 10, "random", black);
}

int curve_plot_write(const char *path, const curve_example *examples, int n,
		     int trials)
{
	canvas c;
	int rc = canvas_init(&c, 2 * CELL_W, HEADER_H + (n + 1) / 2 * CELL_H, white);

	if (rc < 0)
		return rc;
	draw_header(&c);
	for (int i = 0; i < n; i++)
		draw_example(&c, i % 2 * CELL_W, HEADER_H + i / 2 * CELL_H,
			     &examples[i], trials);
	rc = png_write(path, c.width, c.height, c.rgb);
	canvas_release(&c);
	return rc;
}
