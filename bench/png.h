/*
 * png.h: a minimal PNG writer for the benchmarks' plots.
 *
 * 8-bit RGB, no interlace, every row unfiltered, the zlib stream made of
 * stored (uncompressed) deflate blocks: no compression library is needed,
 * and the files are as large as the pixels (3 bytes each), which is fine
 * for a plot.
 */
#ifndef BENCH_PNG_H
#define BENCH_PNG_H

#include <stdint.h>

/* Writes the "width" x "height" image "rgb" (rows top to bottom, 3 bytes
 * per pixel: red, green, blue) to the file "path". Returns 0, or a negative
 * errno code: -EINVAL for an empty or too large image, -ENOMEM, or the
 * error of opening or writing the file. */
int png_write(const char *path, int width, int height, const uint8_t *rgb);

#endif
