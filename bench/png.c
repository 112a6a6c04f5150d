/*
 * png.c: a minimal PNG writer (see png.h).
 *
 * The file is the signature and three chunks: IHDR, one IDAT holding the
 * whole zlib stream, IEND. Each chunk is its length, its type, its data
 * and the CRC-32 of type and data; the zlib stream is a two-byte header,
 * stored deflate blocks of at most 65,535 bytes and the Adler-32 of the
 * raw data, which is each row preceded by its filter byte (0, none).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "png.h"

#define STORED_MAX 65535u

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* The CRC-32 of ISO 3309 (polynomial 0xedb88320, reflected), continued
 * from "crc" over "len" bytes; start with 0. */
static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t len)
{
	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0xedb88320u & -(crc & 1));
	}
	return ~crc;
}

static uint32_t adler32(const uint8_t *p, size_t len)
{
	uint32_t a = 1, b = 0;

	while (len--) {
		a = (a + *p++) % 65521;
		b = (b + a) % 65521;
	}
	return b << 16 | a;
}

/* One chunk: length, type, data, CRC of type and data. */
static int write_chunk(FILE *f, const char type[4], const uint8_t *data,
		       uint32_t len)
{
	uint8_t head[8], tail[4];

	put_be32(head, len);
	memcpy(head + 4, type, 4);
	put_be32(tail, crc32_update(crc32_update(0, head + 4, 4), data, len));
	if (fwrite(head, 1, 8, f) != 8 || (len && fwrite(data, 1, len, f) != len) ||
	    fwrite(tail, 1, 4, f) != 4)
		return -EIO;
	return 0;
}

/* The raw image data: each row prefixed by filter type 0. */
static uint8_t *raw_rows(int width, int height, const uint8_t *rgb, size_t *len)
{
	size_t row = (size_t)width * 3;
	uint8_t *raw = malloc((row + 1) * (size_t)height);

	for (int y = 0; raw && y < height; y++) {
		raw[y * (row + 1)] = 0;
		memcpy(raw + y * (row + 1) + 1, rgb + y * row, row);
	}
	*len = (row + 1) * (size_t)height;
	return raw;
}

/* A zlib stream (RFC 1950) of stored deflate blocks (RFC 1951, BTYPE 00)
 * holding "raw" (never empty). */
static uint8_t *zlib_stored(const uint8_t *raw, size_t len, size_t *out_len)
{
	size_t blocks = len / STORED_MAX + 1;
	uint8_t *z = malloc(2 + blocks * 5 + len + 4), *p = z;

	if (!z)
		return NULL;
	*p++ = 0x78;  /* deflate, 32 KiB window */
	*p++ = 0x01;  /* no dictionary, fastest; (0x78 << 8 | 0x01) % 31 == 0 */
	for (size_t done = 0, n; done < len; done += n) {
		n = len - done < STORED_MAX ? len - done : STORED_MAX;
		*p++ = done + n == len;  /* BFINAL on the last block */
		*p++ = (uint8_t)n;
		*p++ = (uint8_t)(n >> 8);
		*p++ = (uint8_t)~n;
		*p++ = (uint8_t)(~n >> 8);
		memcpy(p, raw + done, n);
		p += n;
	}
	put_be32(p, adler32(raw, len));
	*out_len = (size_t)(p + 4 - z);
	return z;
}

static int write_file(const char *path, const uint8_t ihdr[13],
		      const uint8_t *z, size_t zlen)
{
	static const uint8_t signature[8] = {137, 'P', 'N', 'G', '\r', '\n', 26, '\n'};
	FILE *f = fopen(path, "wb");
	int rc;

	if (!f)
		return -errno;
	rc = fwrite(signature, 1, 8, f) == 8 ? 0 : -EIO;
	if (!rc)
		rc = write_chunk(f, "IHDR", ihdr, 13);
	if (!rc)
		rc = write_chunk(f, "IDAT", z, (uint32_t)zlen);
	if (!rc)
		rc = write_chunk(f, "IEND", NULL, 0);
	if (fclose(f) != 0 && !rc)
		rc = -errno;
	return rc;
}

int png_write(const char *path, int width, int height, const uint8_t *rgb)
{
	uint8_t ihdr[13] = {0};
	uint8_t *raw, *z = NULL;
	size_t len, zlen;
	int rc = -ENOMEM;

	if (width <= 0 || height <= 0 || (size_t)width * height > (1u << 28))
		return -EINVAL;
	put_be32(ihdr, (uint32_t)width);
	put_be32(ihdr + 4, (uint32_t)height);
	ihdr[8] = 8;  /* bits per sample */
	ihdr[9] = 2;  /* colour type: RGB */
	raw = raw_rows(width, height, rgb, &len);
	if (raw)
		z = zlib_stored(raw, len, &zlen);
	if (z)
		rc = write_file(path, ihdr, z, zlen);
	free(z);
	free(raw);
	return rc;
}
