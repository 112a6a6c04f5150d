/*
 * fuzz.h: the harness of the fuzz suites (tests/fuzz, docs/testing.md).
 *
 * A target is a function that runs one input text and asserts what must
 * hold of it (criterion). The harness keeps a corpus of seed texts (files
 * of the repository and texts a suite makes), and for a bounded time feeds
 * the target mutants of them: JSON trees mutated by structure (numbers to
 * edge values, keys dropped, added or given twice, strings swapped for
 * other names of the corpus or mutated token by token as expressions,
 * arrays cut or grown, subtrees spliced from elsewhere), then, at the
 * target's rate, bytes of the text mutated. Accepted mutants join the
 * corpus, so that mutation goes on from inputs that pass the checks.
 *
 * Every run is reproducible from its seed. The input being run is kept in
 * a file (fuzz-NAME.last in the working directory), so that after a crash
 * or a hang it is the reproducer.
 */
#ifndef FUZZ_H
#define FUZZ_H

/* What a target made of one input. */
enum fuzz_outcome { FUZZ_REFUSED, FUZZ_ACCEPTED };

typedef enum fuzz_outcome (*fuzz_check_fn)(const char *text, void *user);

typedef struct fuzz_target {
	const char *name;
	fuzz_check_fn check;
	void *user;
	/* of 16 mutants, how many also get their bytes mutated */
	int byte_rate;
} fuzz_target;

typedef struct fuzz_corpus fuzz_corpus;

fuzz_corpus *fuzz_corpus_new(void);
void fuzz_corpus_free(fuzz_corpus *corpus);
/* Adds "text" (copied); its strings and identifiers join the words that
 * mutations draw from. */
void fuzz_corpus_add(fuzz_corpus *corpus, const char *text);
/* Adds every file of folder "dir" (under the source root) whose name ends
 * in "suffix"; the number added. */
int fuzz_corpus_add_dir(fuzz_corpus *corpus, const char *dir, const char *suffix);
/* The text of file "path" (under the source root), or NULL; caller frees. */
char *fuzz_read_source(const char *path);
/* Adds a word to draw from as a string or a key (a graph's name, a key
 * the seeds lack). */
void fuzz_corpus_add_word(fuzz_corpus *corpus, const char *word);

typedef struct fuzz_stats {
	long executions;
	long accepted;
	double seconds;
	double slowest_ms;
	char slowest[400]; /* its input, cut (fuzz_excerpt) */
} fuzz_stats;

/* Runs every text of the corpus as it is, then mutants of them until
 * TUNED_FUZZ_SECONDS (default 20) have passed and 500 mutants at least
 * ran, from seed TUNED_FUZZ_SEED (default 1); logs and returns the
 * counts. */
fuzz_stats fuzz_run(const fuzz_target *target, fuzz_corpus *corpus);

/* The first bytes of "text" on one line, its spaces and line breaks
 * squeezed, for an assertion's message. */
const char *fuzz_excerpt(const char *text);

#endif
