/*
 * tuner_int.h: the tuner's private pieces, shared by its files.
 */
#ifndef TUNER_INT_H
#define TUNER_INT_H

#include "../kernels/kgen_int.h"
#include "ir.h"
#include "tuner.h"

/* fuse.c: the fusion genes of a graph (docs/design/fusion.md). One gene per
 * legal producer-consumer edge (0: apart, 1: fused) and one per pair of
 * independent sibling ops of the same form (0: apart, 1: one kernel side
 * by side, 2: one kernel, one after the other in the same blocks). Genes
 * are applied in layers, producers nearer the inputs first
 * (FusionStitching's work/span order), again until none merges; a merge
 * that would leave the plan cyclic or the group illegal (a global
 * dependence, overlapping regions, too much block-local memory) is
 * dropped, after trying the root's tile widened to whole rows; with
 * peaks, so is a merge the cost model says cannot pay (NeoFlow's reward:
 * saved bytes, launches and occupancy).
 * Graphs of more than TUNER_FUSION_MAX_OPS ops get no fusion genes: the
 * genes are one per edge and sibling pair, and a decoding's checks scan
 * every op per merge, so the work grows as the square of the ops and more;
 * at 162 ops (an encoder's backward graph) the first decoding of every
 * gene on takes about 2 s of cpu, later ones, with the planner's verdicts
 * remembered, about 0.1 s. */
#define TUNER_FUSION_MAX_OPS 256

typedef struct tuner_fusion tuner_fusion;

__tuner_give tuner_fusion *tuner_fusion_new(__tuner_keep const sched_graph *graph,
					    __tuner_keep const kgen_plan *base,
					    __tuner_keep const kgen_peaks *peaks,
					    int cuda);
void tuner_fusion_free(__tuner_take tuner_fusion *f);
int tuner_fusion_genes(__tuner_keep const tuner_fusion *f);
int tuner_fusion_domain(__tuner_keep const tuner_fusion *f, int gene);
/* The layer of an edge gene's producer (its longest path from the
 * inputs); -1 for a sibling gene. */
int tuner_fusion_edge_layer(__tuner_keep const tuner_fusion *f, int gene);
/* Whether op "op" is one of the two ops fusion gene "gene" joins. */
bool tuner_fusion_gene_touches(__tuner_keep const tuner_fusion *f, int gene, int op);
/* The plan of "genes" (the fusion genes) with "schedules", one per kernel
 * of the base plan (one kernel per op); NULL when out of memory. */
__tuner_give kgen_plan *tuner_fusion_plan(__tuner_keep tuner_fusion *f,
					  const kgen_schedule *schedules,
					  const int *genes);
/* The fusion genes that group ops as "plan" does (its kernels' ops and
 * lanes; schedules are not read). */
void tuner_fusion_encode(__tuner_keep const tuner_fusion *f,
			 __tuner_keep const kgen_plan *plan, int *genes);

/* cost.c: the optimistic time of one kernel (tuner_optimistic_ms). */
double tuner_kernel_ms(__tuner_keep const sched_graph *graph,
		       __tuner_keep const kgen_kernel *kernel,
		       __tuner_keep const kgen_peaks *peaks, int cuda);

#endif
