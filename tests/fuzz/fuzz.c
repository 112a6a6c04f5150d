/*
 * fuzz.c: the fuzz harness (fuzz.h): corpus, mutators and the timed loop.
 */
#define _GNU_SOURCE
#include "fuzz.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LIVE_MAX 512	/* accepted mutants kept beside the seeds */
#define WORD_MAX 256	/* longer strings are not drawn as words */
#define TEXT_MAX (1 << 20) /* mutants grow no longer */
#define DUPLICATE_MARK "__fuzz_duplicate__"
#define MIN_MUTANTS 500

typedef struct entry {
	char *text;
	json_t *tree; /* NULL: not JSON */
} entry;

/* A set of words (a JSON object's keys) with an array to draw from. */
typedef struct words {
	json_t *set;
	const char **list;
	size_t n, cap;
} words;

struct fuzz_corpus {
	entry *entries;
	size_t n, cap, seeds;
	words strings, keys, idents;
};

/* The random source: rand_r's state, so that a run is its seed's alone. */
typedef struct fuzz_rng {
	unsigned state;
} fuzz_rng;

/* A number in [0, n); n > 0. */
static size_t fuzz_below(fuzz_rng *rng, size_t n)
{
	return (size_t)rand_r(&rng->state) % n;
}

static void *must(void *p)
{
	cr_assert_not_null(p, "out of memory");
	return p;
}

static void words_add(words *w, const char *word)
{
	if (!w->set)
		w->set = must(json_object());
	if (!*word || strlen(word) > WORD_MAX || json_object_get(w->set, word) ||
	    json_object_set_new(w->set, word, json_null()) < 0)
		return;
	if (w->n == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 64;
		w->list = must(realloc(w->list, w->cap * sizeof(*w->list)));
	}
	/* the set owns the key; it lives as long as the set */
	w->list[w->n++] = json_object_iter_key(json_object_iter_at(w->set, word));
}

static const char *words_draw(const words *w, fuzz_rng *rng, const char *otherwise)
{
	return w->n ? w->list[fuzz_below(rng, w->n)] : otherwise;
}

static void words_release(words *w)
{
	json_decref(w->set);
	free(w->list);
}

/* Tokens of expressions: identifiers, numbers, operators, other bytes. */
enum token_kind { TOKEN_SPACE, TOKEN_IDENT, TOKEN_NUMBER, TOKEN_OTHER };

static size_t token_length(const char *s, enum token_kind *kind)
{
	static const char *const pairs[] = {"<=", ">=", "==", "!=", "&&", "||"};
	size_t n = 1;

	if (isspace((unsigned char)*s)) {
		*kind = TOKEN_SPACE;
	} else if (isalpha((unsigned char)*s) || *s == '_') {
		*kind = TOKEN_IDENT;
		while (isalnum((unsigned char)s[n]) || s[n] == '_')
			n++;
	} else if (isdigit((unsigned char)*s) || (*s == '.' && isdigit((unsigned char)s[1]))) {
		*kind = TOKEN_NUMBER;
		while (isalnum((unsigned char)s[n]) || s[n] == '.' ||
		       ((s[n] == '+' || s[n] == '-') && (s[n - 1] | 0x20) == 'e'))
			n++;
	} else {
		*kind = TOKEN_OTHER;
		for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
			if (!strncmp(s, pairs[i], 2))
				n = 2;
	}
	return n;
}

static void harvest_identifiers(fuzz_corpus *c, const char *s)
{
	enum token_kind kind;
	char ident[WORD_MAX + 1];

	while (*s) {
		size_t n = token_length(s, &kind);

		if (kind == TOKEN_IDENT && n <= WORD_MAX) {
			memcpy(ident, s, n);
			ident[n] = 0;
			words_add(&c->idents, ident);
		}
		s += n;
	}
}

/* The strings, keys and identifiers of "tree" join the words. */
static void harvest(fuzz_corpus *c, json_t *tree)
{
	const char *key;
	json_t *value;
	size_t i;

	if (json_is_string(tree) && strlen(json_string_value(tree)) ==
	    json_string_length(tree)) {
		words_add(&c->strings, json_string_value(tree));
		harvest_identifiers(c, json_string_value(tree));
	} else if (json_is_object(tree)) {
		json_object_foreach(tree, key, value) {
			words_add(&c->keys, key);
			harvest(c, value);
		}
	} else if (json_is_array(tree)) {
		json_array_foreach(tree, i, value)
			harvest(c, value);
	}
}

fuzz_corpus *fuzz_corpus_new(void)
{
	return must(calloc(1, sizeof(fuzz_corpus)));
}

void fuzz_corpus_free(fuzz_corpus *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->entries[i].text);
		json_decref(c->entries[i].tree);
	}
	free(c->entries);
	words_release(&c->strings);
	words_release(&c->keys);
	words_release(&c->idents);
	free(c);
}

static entry *corpus_append(fuzz_corpus *c, const char *text)
{
	entry *e;

	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 64;
		c->entries = must(realloc(c->entries, c->cap * sizeof(entry)));
	}
	e = &c->entries[c->n++];
	e->text = must(strdup(text));
	e->tree = json_loads(text, JSON_ALLOW_NUL, NULL);
	return e;
}

void fuzz_corpus_add(fuzz_corpus *c, const char *text)
{
	entry *e = corpus_append(c, text);

	if (e->tree)
		harvest(c, e->tree);
	c->seeds = c->n;
}

void fuzz_corpus_add_word(fuzz_corpus *c, const char *word)
{
	words_add(&c->strings, word);
	words_add(&c->keys, word);
}

char *fuzz_read_source(const char *path)
{
	char full[1024], *text = NULL;
	size_t len = 0;
	FILE *f, *out;

	snprintf(full, sizeof(full), "%s/%s", getenv("TUNED_SOURCE_ROOT"), path);
	if (!(f = fopen(full, "rb")))
		return NULL;
	out = must(open_memstream(&text, &len));
	for (int ch; (ch = getc(f)) != EOF;)
		putc(ch, out);
	fclose(out);
	fclose(f);
	return text;
}

static int compare_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int fuzz_corpus_add_dir(fuzz_corpus *c, const char *dir, const char *suffix)
{
	char full[1024], *names[1024], path[1024];
	struct dirent *d;
	size_t n = 0;
	int added = 0;
	DIR *folder;

	snprintf(full, sizeof(full), "%s/%s", getenv("TUNED_SOURCE_ROOT"), dir);
	if (!(folder = opendir(full)))
		return 0;
	while ((d = readdir(folder)) && n < 1024) {
		size_t len = strlen(d->d_name), slen = strlen(suffix);

		if (len > slen && !strcmp(d->d_name + len - slen, suffix))
			names[n++] = must(strdup(d->d_name));
	}
	closedir(folder);
	qsort(names, n, sizeof(*names), compare_names); /* reproducible */
	for (size_t i = 0; i < n; i++) {
		char *text;

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if ((text = fuzz_read_source(path))) {
			fuzz_corpus_add(c, text);
			added++;
		}
		free(text);
		free(names[i]);
	}
	return added;
}

/* A growable text. */
typedef struct text {
	char *s;
	size_t len;
} text;

static void text_splice(text *t, size_t at, size_t cut, const char *with, size_t n)
{
	if (t->len - cut + n > TEXT_MAX)
		return;
	if (n > cut)
		t->s = must(realloc(t->s, t->len - cut + n + 1));
	memmove(t->s + at + n, t->s + at + cut, t->len - at - cut + 1);
	memcpy(t->s + at, with, n);
	t->len = t->len - cut + n;
}

static const char *const byte_tokens[] = {
	"{", "}", "[", "]", "\"", ":", ",", "\\", "null", "true", "0", "-1",
	"1e999", "99999999999999999999", "\\u0000", "\\ud800", "\xff", "\xc3",
	"\xe2\x82", "\n", " ", "=", "(", ")", "+", "*", "/", "%", "<", "sum(",
	"select(", "\"version\": 1", "\"shape\": []", "\"kernels\": []",
};

#define NBYTE_TOKENS (sizeof(byte_tokens) / sizeof(byte_tokens[0]))

/* One mutation of the bytes of "t". */
static void mutate_bytes(text *t, fuzz_rng *rng)
{
	size_t at = t->len ? fuzz_below(rng, t->len + 1) : 0;
	size_t span = fuzz_below(rng, 16) + 1;
	const char *token = byte_tokens[fuzz_below(rng, NBYTE_TOKENS)];
	char byte = (char)fuzz_below(rng, 256);

	if (span > t->len - at)
		span = t->len - at;
	switch (fuzz_below(rng, 6)) {
	case 0: /* one byte changed */
		if (at < t->len)
			t->s[at] = byte ? byte : ' ';
		break;
	case 1:
		text_splice(t, at, 0, token, strlen(token));
		break;
	case 2:
		text_splice(t, at, span, "", 0);
		break;
	case 3: { /* a span repeated */
		char copy[16];

		memcpy(copy, t->s + at, span);
		text_splice(t, at, 0, copy, span);
		break;
	}
	case 4:
		t->s[t->len = at] = 0;
		break;
	default: /* a token in place of a span */
		text_splice(t, at, span, token, strlen(token));
	}
}

static const char *const edge_numbers[] = {
	"0", "1", "2", "3", "7", "8", "63", "64", "65", "1000", "65536",
	"2147483647", "2147483648", "4294967296", "9223372036854775807",
	"9223372036854775808", "99999999999999999999", "1e308", "1e-308",
	"0.5", ".5", "1e5", "3.0", "-1",
};

static const char *const operators[] = {
	"+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||",
	"!", "=", ":", ",", "(", ")", "[", "]", " in ", "<",
};

static const char *const insertions[] = {
	" + 1", " - 1", " * 2", " / 2", " % 3", " + 100000", " - 2147483647",
	" * 0", " / 3 * 3", ", ", "[0]", "[]", "(", ")", " ", "-", "!",
	" * 4611686018427387904",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

typedef struct span {
	size_t at, len;
	enum token_kind kind;
} span;

/* A random token of "s" that is not space; false when none. */
static bool pick_token(const char *s, fuzz_rng *rng, span *out)
{
	size_t count = 0, at = 0;
	enum token_kind kind;

	for (size_t n; s[at]; at += n)
		if ((n = token_length(s + at, &kind)), kind != TOKEN_SPACE &&
		    fuzz_below(rng, ++count) == 0)
			*out = (span){at, n, kind};
	return count > 0;
}

/* Wraps the access starting at "tok" (a name followed by '[') in a select
 * guarded by a comparison of an identifier of "t". */
static void guard_access(text *t, span tok, fuzz_rng *rng, const fuzz_corpus *c)
{
	static const char *const guards[] = {" >= 1", " < 2", " + 1 <= 3", " == 0",
					      " % 2 == 0", " / 2 >= 1", " >= 0 && 0"};
	size_t end = tok.at + tok.len, depth = 0;
	char head[WORD_MAX + 64];

	if (t->s[end] != '[')
		return;
	for (; t->s[end]; end++)
		if (t->s[end] == '[')
			depth++;
		else if (t->s[end] == ']' && --depth == 0)
			break;
	if (!t->s[end])
		return;
	text_splice(t, end + 1, 0, ", 0)", 4);
	snprintf(head, sizeof(head), "select(%s%s, ", words_draw(&c->idents, rng, "i"),
		 guards[fuzz_below(rng, COUNT(guards))]);
	text_splice(t, tok.at, 0, head, strlen(head));
}

/* One mutation of "t" read as an expression, token by token. */
static void mutate_expression(text *t, fuzz_rng *rng, const fuzz_corpus *c)
{
	const char *with;
	span tok = {0};

	if (!pick_token(t->s, rng, &tok))
		return;
	switch (fuzz_below(rng, 6)) {
	case 0: /* a token replaced by another of its kind */
		if (tok.kind == TOKEN_IDENT)
			with = words_draw(&c->idents, rng, "x");
		else if (tok.kind == TOKEN_NUMBER)
			with = edge_numbers[fuzz_below(rng, COUNT(edge_numbers))];
		else
			with = operators[fuzz_below(rng, COUNT(operators))];
		text_splice(t, tok.at, tok.len, with, strlen(with));
		break;
	case 1:
		text_splice(t, tok.at, tok.len, "", 0);
		break;
	case 2: { /* repeated */
		char *copy = must(strndup(t->s + tok.at, tok.len));

		text_splice(t, tok.at, 0, copy, tok.len);
		free(copy);
		break;
	}
	case 3:
		with = insertions[fuzz_below(rng, COUNT(insertions))];
		text_splice(t, tok.at + tok.len, 0, with, strlen(with));
		break;
	case 4:
		if (tok.kind == TOKEN_IDENT)
			guard_access(t, tok, rng, c);
		break;
	default: /* an identifier inserted */
		with = words_draw(&c->idents, rng, "x");
		text_splice(t, tok.at, 0, with, strlen(with));
		text_splice(t, tok.at + strlen(with), 0, " ", 1);
	}
}

static json_t *mutate_string(json_t *s, fuzz_rng *rng, const fuzz_corpus *c)
{
	text t = {must(malloc(json_string_length(s) + 1)), json_string_length(s)};
	json_t *out;

	memcpy(t.s, json_string_value(s), t.len + 1); /* NULs included */

	switch (fuzz_below(rng, 8)) {
	case 0:
		free(t.s);
		return json_string(words_draw(&c->strings, rng, ""));
	case 1:
		mutate_bytes(&t, rng);
		break;
	case 2:
		t.s[t.len = 0] = 0;
		break;
	default:
		mutate_expression(&t, rng, c);
	}
	out = json_stringn_nocheck(t.s, t.len); /* bytes may not be UTF-8 */
	free(t.s);
	return out;
}

static json_t *edge_integer(json_t *old, fuzz_rng *rng)
{
	static const json_int_t edges[] = {
		0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 33, 64, 127, 128, 255, 256,
		1000, 1024, 4096, 65535, 65536, 1 << 20, 2147483647, 2147483648LL,
		-2147483647 - 1, 4294967296LL, 1LL << 40, (1LL << 40) + 1,
		1LL << 53, INT64_MAX, INT64_MIN,
	};
	json_int_t v = json_integer_value(old);

	switch (fuzz_below(rng, 4)) {
	case 0:
		return json_integer(v < INT64_MAX ? v + 1 : v);
	case 1:
		return json_integer(v > INT64_MIN ? v - 1 : v);
	case 2:
		return json_integer(v > -(1LL << 40) && v < (1LL << 40) ? 2 * v : v / 2);
	default:
		return json_integer(edges[fuzz_below(rng, COUNT(edges))]);
	}
}

static json_t *edge_real(fuzz_rng *rng)
{
	static const double reals[] = {0.5, -0.0, 1e308, -1e308, 5e-324, 1.5, 3.0,
				       1e20, -2.5};

	return json_real(reals[fuzz_below(rng, COUNT(reals))]);
}

/* Every node of a tree with where it hangs. */
typedef struct node {
	json_t *value, *parent;
	const char *key;
	size_t index;
} node;

typedef struct nodes {
	node *list;
	size_t n, cap;
} nodes;

static void collect(nodes *all, json_t *value, json_t *parent, const char *key,
		    size_t index)
{
	const char *k;
	json_t *v;
	size_t i;

	if (all->n == all->cap) {
		all->cap = all->cap ? 2 * all->cap : 64;
		all->list = must(realloc(all->list, all->cap * sizeof(node)));
	}
	all->list[all->n++] = (node){value, parent, key, index};
	if (json_is_object(value))
		json_object_foreach(value, k, v)
			collect(all, v, value, k, 0);
	else if (json_is_array(value))
		json_array_foreach(value, i, v)
			collect(all, v, value, NULL, i);
}

static json_t *other_type(fuzz_rng *rng)
{
	switch (fuzz_below(rng, 6)) {
	case 0: return json_null();
	case 1: return json_true();
	case 2: return json_string("");
	case 3: return json_array();
	case 4: return json_object();
	default: return json_integer(0);
	}
}

/* A copy of a random node of "tree" or of another entry of the corpus. */
static json_t *donor(json_t *tree, fuzz_rng *rng, const fuzz_corpus *c)
{
	nodes all = {0};
	json_t *copy;

	if (fuzz_below(rng, 2) && c->n) {
		json_t *other = c->entries[fuzz_below(rng, c->n)].tree;

		if (other)
			tree = other;
	}
	collect(&all, tree, NULL, NULL, 0);
	copy = json_deep_copy(all.list[fuzz_below(rng, all.n)].value);
	free(all.list);
	return copy;
}

/* Array "v" cut, cleared or grown; or object "v" with a key dropped,
 * given twice, added or renamed. In place. */
static void mutate_container(json_t *v, json_t *tree, fuzz_rng *rng,
			     const fuzz_corpus *c, char *duplicate)
{
	size_t n = json_is_array(v) ? json_array_size(v) : json_object_size(v);
	size_t i = n ? fuzz_below(rng, n) : 0;
	void *iter = json_object_iter(v);
	const char *key;

	if (json_is_array(v)) {
		switch (fuzz_below(rng, 4)) {
		case 0:
			json_array_remove(v, i);
			break;
		case 1:
			if (n)
				json_array_insert_new(v, i, json_deep_copy(json_array_get(v, i)));
			break;
		case 2:
			json_array_insert_new(v, i, donor(tree, rng, c));
			break;
		default:
			json_array_clear(v);
		}
		return;
	}
	while (i-- && iter)
		iter = json_object_iter_next(v, iter);
	key = iter ? json_object_iter_key(iter) : NULL;
	switch (fuzz_below(rng, 4)) {
	case 0:
		if (key)
			json_object_del(v, key);
		break;
	case 1: /* given twice: the mark becomes the key in the text */
		if (key && !duplicate[0] && strlen(key) < WORD_MAX &&
		    !strpbrk(key, "\"\\")) {
			strcpy(duplicate, key);
			json_object_set_new(v, DUPLICATE_MARK, donor(tree, rng, c));
		}
		break;
	case 2:
		json_object_set_new(v, words_draw(&c->keys, rng, "x"), donor(tree, rng, c));
		break;
	default: /* renamed */
		if (key) {
			json_t *value = json_incref(json_object_iter_value(iter));

			json_object_del(v, key);
			json_object_set_new(v, words_draw(&c->keys, rng, "x"), value);
		}
	}
}

/* One structural mutation of "tree"; the tree, or the new root. */
static json_t *mutate_tree(json_t *tree, fuzz_rng *rng, const fuzz_corpus *c,
			   char *duplicate)
{
	nodes all = {0};
	node at;
	json_t *with = NULL;

	collect(&all, tree, NULL, NULL, 0);
	at = all.list[fuzz_below(rng, all.n)];
	free(all.list);
	switch (fuzz_below(rng, 8)) {
	case 0:
		with = other_type(rng);
		break;
	case 1:
		with = donor(tree, rng, c);
		break;
	default:
		if (json_is_integer(at.value))
			with = edge_integer(at.value, rng);
		else if (json_is_real(at.value))
			with = edge_real(rng);
		else if (json_is_string(at.value))
			with = mutate_string(at.value, rng, c);
		else if (json_is_array(at.value) || json_is_object(at.value))
			mutate_container(at.value, tree, rng, c, duplicate);
	}
	if (!with)
		return tree;
	if (!at.parent) {
		json_decref(tree);
		return with;
	}
	if (json_is_object(at.parent))
		json_object_set_new(at.parent, at.key, with);
	else
		json_array_set_new(at.parent, at.index, with);
	return tree;
}

/* "tree" as text in a random style, the duplicate mark renamed. */
static text dump(json_t *tree, fuzz_rng *rng, const char *duplicate)
{
	static const size_t styles[] = {JSON_COMPACT, JSON_INDENT(2), 0,
					JSON_SORT_KEYS | JSON_ENSURE_ASCII};
	size_t flags = styles[fuzz_below(rng, COUNT(styles))] | JSON_ENCODE_ANY;
	text t;
	char *mark;

	t.s = json_dumps(tree, flags);
	if (!t.s) /* an invalid UTF-8 string */
		t.s = must(strdup("{}"));
	t.len = strlen(t.s);
	if (duplicate[0] && (mark = strstr(t.s, DUPLICATE_MARK)))
		text_splice(&t, (size_t)(mark - t.s), strlen(DUPLICATE_MARK),
			    duplicate, strlen(duplicate));
	return t;
}

/* A mutant of a random entry of the corpus. */
static text make_mutant(const fuzz_target *target, fuzz_corpus *c, fuzz_rng *rng)
{
	const entry *e = &c->entries[fuzz_below(rng, c->n)];
	bool bytes = (int)fuzz_below(rng, 16) < target->byte_rate;
	char duplicate[WORD_MAX + 1] = "";
	text t;

	if (e->tree) {
		json_t *tree = json_deep_copy(e->tree);

		for (int k = 1 + (int)fuzz_below(rng, 3); k > 0; k--)
			tree = mutate_tree(tree, rng, c, duplicate);
		t = dump(tree, rng, duplicate);
		json_decref(tree);
	} else {
		t.s = must(strdup(e->text));
		t.len = strlen(t.s);
		bytes = true;
	}
	for (int k = bytes ? 1 + (int)fuzz_below(rng, 4) : 0; k > 0; k--)
		mutate_bytes(&t, rng);
	return t;
}

/* An accepted mutant joins the corpus, in place of an older one when the
 * live part is full. */
static void keep_live(fuzz_corpus *c, const char *s, fuzz_rng *rng)
{
	entry *e;

	if (c->n - c->seeds < LIVE_MAX) {
		corpus_append(c, s);
		return;
	}
	e = &c->entries[c->seeds + fuzz_below(rng, LIVE_MAX)];
	free(e->text);
	json_decref(e->tree);
	e->text = must(strdup(s));
	e->tree = json_loads(s, JSON_ALLOW_NUL, NULL);
}

const char *fuzz_excerpt(const char *s)
{
	static char out[400];
	size_t n = 0;

	for (; *s && n < sizeof(out) - 4; s++)
		if (!isspace((unsigned char)*s))
			out[n++] = *s;
		else if (n && out[n - 1] != ' ') /* spaces and lines as one space */
			out[n++] = ' ';
	strcpy(out + n, *s ? "..." : "");
	return out;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double env_number(const char *name, double otherwise)
{
	const char *v = getenv(name);

	return v && *v ? strtod(v, NULL) : otherwise;
}

/* Runs one input, kept in "fd" while it runs. */
static enum fuzz_outcome run_one(const fuzz_target *target, const char *s, int fd,
				 fuzz_stats *stats)
{
	size_t len = strlen(s);
	enum fuzz_outcome outcome;
	double start = now(), ms;

	cr_assert(pwrite(fd, s, len, 0) == (ssize_t)len && ftruncate(fd, (off_t)len) == 0);
	outcome = target->check(s, target->user);
	ms = (now() - start) * 1e3;
	if (ms > stats->slowest_ms) {
		stats->slowest_ms = ms;
		snprintf(stats->slowest, sizeof(stats->slowest), "%s", fuzz_excerpt(s));
	}
	stats->executions++;
	stats->accepted += outcome == FUZZ_ACCEPTED;
	return outcome;
}

fuzz_stats fuzz_run(const fuzz_target *target, fuzz_corpus *c)
{
	double seconds = env_number("TUNED_FUZZ_SECONDS", 20);
	fuzz_rng rng = {(unsigned)env_number("TUNED_FUZZ_SEED", 1)};
	fuzz_stats stats = {0};
	char last[256];
	double start = now();
	int fd;

	cr_assert_gt(c->n, 0, "empty corpus");
	snprintf(last, sizeof(last), "fuzz-%s.last", target->name);
	fd = open(last, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_geq(fd, 0, "cannot write %s", last);
	cr_log_info("fuzz %s: %zu seeds, seed %u, %.0f s; the input being run "
		    "is kept in %s", target->name, c->seeds, rng.state,
		    seconds, last);
	for (size_t i = 0; i < c->seeds; i++)
		run_one(target, c->entries[i].text, fd, &stats);
	/* the time, and at least MIN_MUTANTS: slow seeds on a loaded machine
	 * leave mutants to run */
	for (long n = 0; n < MIN_MUTANTS || now() - start < seconds; n++) {
		text t = make_mutant(target, c, &rng);

		if (run_one(target, t.s, fd, &stats) == FUZZ_ACCEPTED)
			keep_live(c, t.s, &rng);
		free(t.s);
	}
	close(fd);
	unlink(last); /* kept only after a crash or a hang */
	stats.seconds = now() - start;
	cr_log_info("fuzz %s: %ld executions clean (%ld accepted) in %.1f s, "
		    "slowest %.1f ms: %s", target->name, stats.executions,
		    stats.accepted, stats.seconds, stats.slowest_ms, stats.slowest);
	return stats;
}
