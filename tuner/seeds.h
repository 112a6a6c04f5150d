/*
 * seeds.h: the genomes a search starts from (seeds.c): the seeds of its
 * first population, and a plan of another key made one of this graph's
 * genomes for generation 0 (docs/design/tuning.md).
 */
#ifndef TUNER_SEEDS_H
#define TUNER_SEEDS_H

#include "genome.h"

/* Proposes "genes" into the population of "search" (nothing once it is
 * full); returns how many plans the population holds after. */
typedef int seeds_join(void *search, const int *genes);

/* The seeds of the first population, each joined in turn (the search's
 * best known plans are there before them): the default and the largest
 * fusion with the seed blocking on every matrix product, where library
 * steps are offered every product that can be one as a library step with
 * the rest fused, the largest fusion again blocked with whole rows, on
 * cuda with its products on tensor cores and their epilogues fused, the
 * default schedules with every fusion the planner allows and with one
 * layer of producers kept apart (until half the population is there), and
 * on cuda the default so blocked with every kernel synced to the one
 * before and the default with reductions of few tiles cut in parts. The
 * blocked and library seeds come first: where products dominate they are
 * fast, and once one is measured the slow plans after it stop at their
 * first run (the cutoff, 3 times the best). */
void seeds_propose(__tuner_keep const tuner_genome *g,
		   __tuner_keep const tuner_search_options *o,
		   seeds_join *join, void *search);

/* A graph of at least this many ops measures more than its default plan
 * in generation 0 (seeds_first): its default plan, a kernel per op, takes
 * seconds to compile and often runs slower than fewer, fused kernels. */
#define SEEDS_FIRST_FUSED_OPS 48

/* The plan of generation 0 before the default plan, joined, for a graph
 * of at least SEEDS_FIRST_FUSED_OPS ops (nothing for a smaller one): the
 * largest fusion (each merge the cost model allows), on the cpu with
 * every kernel serial (threads woken for small kernels cost more than
 * they save on a few shared cores; the first population has it in
 * parallel). Fewer kernels to compile: a first version comes before the
 * default plan's compile is over, the faster of the two if both are
 * measured. */
void seeds_first(__tuner_keep const tuner_genome *g,
		 __tuner_keep const tuner_search_options *o, seeds_join *join,
		 void *search);

/* The genes nearest "plan" (JSON, a plan of a graph of the same form,
 * possibly with other shapes) into "genes": each of its values mapped to
 * the nearest in its gene's domain, its grouping as fusion genes, the
 * default elsewhere; false, "genes" untouched, unless its kernels hold
 * each of this graph's ops once. */
bool seeds_nearest(__tuner_keep const tuner_genome *g, __tuner_keep const json_t *plan,
		   int *genes);

#endif
