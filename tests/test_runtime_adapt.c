/* test_runtime_adapt.c — >>adapt: speeds measured from timelines, re-planning, owners, layer moves,
 * and the whole protocol on CPU threads with one rank slowed on purpose.
 *
 * The model of the end-to-end test: 24 residual blocks y = x + W2 gelu(W1 x) (width D, hidden H),
 * trained with SGD and momentum, on 2 ranks under ZB-V. Each block's F, I and W also take a fixed
 * time, as a GPU's kernels would (the rank's thread waits), and rank 1 waits 1.35x as long: a
 * slow GPU. Weights, momentum and gradients live only on the rank that holds the block, so a move
 * that lost or mixed up a tensor would show in the comparison with the unsplit model run on one
 * thread, which must match bit for bit (same operations, same order). A second run does the same
 * under a searched order, which pp_plan_replan searches again (order and split) for the measured
 * speeds. The test's name puts it in CI's TSan run (tests/run_all.sh runs the suites
 * test_runtime* there). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include "pp_test.h"

/* --- speeds from hand-made timelines ------------------------------------------------------------ */

/* A rank's timeline of F, I, W actions on stages of `work` layers each: every action of kind k
 * takes per_layer[k] * work, except action `odd` (if >= 0), which takes 100 (a straggler). */
typedef struct ta_tl {
    pp_action actions[32];
    double start[32], ready[32], end[32];
} ta_tl;

static pp_timeline ta_timeline(ta_tl *t, int rank, int n, const int *stages, const double *work, const double *per_layer,
                               int odd, int whole_b)
{
    pp_timeline tl;
    double clock = 0;
    int i;
    for (i = 0; i < n; i++) {
        int op = whole_b ? (i % 2 ? PP_OP_B : PP_OP_F) : (i % 3 == 0 ? PP_OP_F : i % 3 == 1 ? PP_OP_I : PP_OP_W);
        int k = op == PP_OP_F ? 0 : op == PP_OP_I ? 1 : op == PP_OP_W ? 2 : 3;
        double d = i == odd ? 100 : per_layer[k] * work[stages[i]];
        t->actions[i].op = op; t->actions[i].stage = stages[i]; t->actions[i].mb = i;
        t->start[i] = clock; t->ready[i] = clock + 0.5; t->end[i] = clock + 0.5 + d;
        clock = t->end[i];
    }
    memset(&tl, 0, sizeof tl);
    tl.rank = rank; tl.length = n; tl.actions = t->actions;
    tl.start = t->start; tl.ready = t->ready; tl.end = t->end;
    return tl;
}

/* Rank 0 computes a layer's F, I, W in 1, 1, 0.5; rank 1 in 1.35x that, with one straggling
 * action of 100 (the median ignores it). Per layer: rank 0 takes 2.5, rank 1 3.375, so speeds 1 and
 * 1/1.35, and at speed 1 a layer's F, I, W cost 1, 1, 0.5 (each rank's median times its speed).
 * Stages of 2 and 4 layers divide out. A schedule of whole backwards (B = 3 a layer) gives
 * I = W = 1.5. */
static void speeds_are_medians_per_layer_of_each_kind(void)
{
    static const int stages[12] = { 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1 };
    static const double work[2] = { 2, 4 }, fast[4] = { 1, 1, 0.5, 0 }, slow[4] = { 1.35, 1.35, 0.675, 0 };
    static const double whole[4] = { 1, 0, 0, 3 };
    ta_tl t0, t1;
    pp_timeline tl[2];
    double speed[2];
    pp_layer_costs layer;
    pp_error err;
    tl[0] = ta_timeline(&t0, 0, 12, stages, work, fast, -1, 0);
    tl[1] = ta_timeline(&t1, 1, 12, stages, work, slow, 4, 0);
    PP_CHECK_OK(pp_speed_from_timelines(tl, 2, work, 2, speed, &layer, &err), &err);
    PP_CHECK_NEAR(speed[0], 1, 0);
    PP_CHECK_NEAR(speed[1], 1 / 1.35, 1e-6);
    PP_CHECK_NEAR(layer.f, 1, 1e-6);
    PP_CHECK_NEAR(layer.i, 1, 1e-6);
    PP_CHECK_NEAR(layer.w, 0.5, 1e-6);
    PP_CHECK_NEAR(layer.memory, 1, 0);
    tl[0] = ta_timeline(&t0, 0, 12, stages, work, whole, -1, 1);
    tl[1] = ta_timeline(&t1, 1, 12, stages, work, whole, -1, 1);
    PP_CHECK_OK(pp_speed_from_timelines(tl, 2, work, 2, speed, &layer, &err), &err);
    PP_CHECK_NEAR(speed[1], 1, 0);
    PP_CHECK_NEAR(layer.i, 1.5, 1e-6);
    PP_CHECK_NEAR(layer.w, 1.5, 1e-6);
    /* what is refused, named */
    tl[1].length = 0;
    PP_CHECK_FAILS(pp_speed_from_timelines(tl, 2, work, 2, speed, &layer, &err), &err, PP_EINVAL,
                   "rank 1 ran no forward");
    tl[1].length = 12;
    tl[1].rank = 0;
    PP_CHECK_FAILS(pp_speed_from_timelines(tl, 2, work, 2, speed, &layer, &err), &err, PP_EINVAL,
                   "ranks[1] is rank 0's timeline");
    tl[1].rank = 1;
    PP_CHECK_FAILS(pp_speed_from_timelines(tl, 2, work, 1, speed, &layer, &err), &err, PP_EINVAL,
                   "rank 0 action 3: stage 1 of 1 stages");
    {
        double bad[2] = { 2, -1 };
        PP_CHECK_FAILS(pp_speed_from_timelines(tl, 2, bad, 2, speed, &layer, &err), &err, PP_EINVAL,
                       "stage_work[1]=-1: must be a finite number >= 0");
    }
}

/* 16 equal layers, pp 2, rank 1 1.35x slower: 8 / 8 takes max(8, 10.8) = 10.8 a microbatch, 9 / 7
 * takes 9.45, a gain of 12.5%: switched at min_gain 0.1, kept at 0.2. Speeds 2% apart are noise:
 * the balance keeps 8 / 8 itself. With the V placement and 24 layers the ranks end up with 14 and
 * 10 (14 against 13.5; 13 / 11 would take 14.85). */
static void replan_switches_only_when_it_gains_more_than_min_gain(void)
{
    static const double slow[2] = { 1, 1 / 1.35 }, near[2] = { 1, 1 / 1.02 };
    static const int even[2] = { 8, 8 }, even4[4] = { 6, 6, 6, 6 }, wrong[4] = { 8, 8, 8, 6 };
    pp_replan_config rc;
    pp_error err;
    int next[4], owner[24];
    double gain = -1;
    memset(&rc, 0, sizeof rc);
    rc.balance.num_layers = 16; rc.balance.pp = 2; rc.balance.rank_speed = slow;
    rc.current = even; rc.min_gain = 0.1;
    PP_CHECK_OK(pp_layers_replan(&rc, next, &gain, &err), &err);
    PP_CHECK_INT(next[0], 9);
    PP_CHECK_INT(next[1], 7);
    PP_CHECK_NEAR(gain, (10.8 - 9.45) / 10.8, 1e-12);
    rc.min_gain = 0.2;
    PP_CHECK_OK(pp_layers_replan(&rc, next, &gain, &err), &err);
    PP_CHECK_INT(next[0], 8);
    PP_CHECK_NEAR(gain, 0, 0);
    rc.min_gain = 0; rc.balance.rank_speed = near;
    PP_CHECK_OK(pp_layers_replan(&rc, next, &gain, &err), &err);
    PP_CHECK_INT(next[0], 8);
    PP_CHECK_NEAR(gain, 0, 0);
    rc.balance.rank_speed = slow; rc.balance.num_layers = 24; rc.balance.vpp = 2; rc.balance.v_placement = 1;
    rc.current = even4; rc.min_gain = 0.02;
    PP_CHECK_OK(pp_layers_replan(&rc, next, &gain, &err), &err);
    PP_CHECK_INT(next[0] + next[3], 14);
    PP_CHECK_NEAR(gain, (12 * 1.35 - 14) / (12 * 1.35), 1e-12);
    PP_CHECK_OK(pp_layers_owners(next, 2, 2, 1, 24, owner, &err), &err);
    PP_CHECK_INT(owner[0], 0);
    PP_CHECK_INT(owner[next[0]], 1);
    PP_CHECK_INT(owner[23], 0);
    /* what is refused, named */
    rc.balance.rank_speed = NULL;
    PP_CHECK_FAILS(pp_layers_replan(&rc, next, &gain, &err), &err, PP_EINVAL, "balance.rank_speed: NULL");
    rc.balance.rank_speed = slow; rc.min_gain = 1;
    PP_CHECK_FAILS(pp_layers_replan(&rc, next, &gain, &err), &err, PP_EINVAL, "min_gain=1: must be at least 0 and below 1");
    rc.min_gain = 0; rc.current = wrong;
    PP_CHECK_FAILS(pp_layers_replan(&rc, next, &gain, &err), &err, PP_EINVAL,
                   "current: its 4 stages hold 30 layers, but num_layers=24");
}

/* Rounds of measure, plan, switch on GPUs whose measured speed depends on the split: a GPU that
 * waits for part of a step clocks higher while it computes, so the even split overstates the fast
 * rank's lead and the first new split overshoots. The speeds below are what ZB-V measured on two
 * GPUs, one slowed 1.35x, 24 blocks (bench/gpu_adapt.sh): on 6,6,6,6 rank 1 ran at 0.724 of rank
 * 0; on 7,5,5,7 at 0.829; on 6,6,5,7 at 0.808. The second round steps back by a block, and the
 * third keeps the split: the rounds settle rather than swing between two splits. */
static void replan_rounds_settle_when_the_measured_speeds_follow_the_split(void)
{
    static const double round1[2] = { 1, 0.724 }, round2[2] = { 1, 0.829 }, round3[2] = { 1, 0.808 };
    static const int even[4] = { 6, 6, 6, 6 };
    pp_replan_config rc;
    pp_error err;
    int next1[4], next2[4], next3[4];
    double gain = -1;
    memset(&rc, 0, sizeof rc);
    rc.balance.num_layers = 24; rc.balance.pp = 2; rc.balance.vpp = 2; rc.balance.v_placement = 1;
    rc.min_gain = 0.02;
    rc.balance.rank_speed = round1; rc.current = even;
    PP_CHECK_OK(pp_layers_replan(&rc, next1, &gain, &err), &err);
    PP_CHECK_INT(next1[0] + next1[3], 14);
    PP_CHECK(gain > 0.1);
    rc.balance.rank_speed = round2; rc.current = next1;
    PP_CHECK_OK(pp_layers_replan(&rc, next2, &gain, &err), &err);
    PP_CHECK_INT(next2[0] + next2[3], 13);
    PP_CHECK_NEAR(gain, (14 - 11 / 0.829) / 14, 1e-9);
    rc.balance.rank_speed = round3; rc.current = next2;
    PP_CHECK_OK(pp_layers_replan(&rc, next3, &gain, &err), &err);
    PP_CHECK(!memcmp(next3, next2, sizeof next2));
    PP_CHECK_NEAR(gain, 0, 0);
}

/* The layers a plan's rank holds under its split (each schedule stage s runs model stage s). */
static int rp_rank_layers(const pp_plan *p, int rank)
{
    int s, n = 0;
    for (s = 0; s < p->schedule->num_stages; s++)
        if (pp_stage_rank(p->schedule, s) == rank) n += p->layers->count[s];
    return n;
}

/* A searched order (greedy, its split searched too) re-planned for a slow rank: 24 layers of F, I,
 * W = 1, 1, 0.5 on 2 ranks, 8 microbatches, planned for equal speeds; rank 1 then measures 1.35x
 * slower. The new plan moves layers off rank 1 and its simulated step (speeds counted) comes
 * within 3% of the bound the speeds allow, 8 x 60 / (1 + 1/1.35) = 275.7; the same speeds again
 * keep it (the search's own best), as do equal speeds on the first plan, and a min_gain above
 * the gain. */
static void replan_of_a_searched_order_searches_order_and_split_together(void)
{
    static const double equal[2] = { 1, 1 }, slow[2] = { 1, 1 / 1.35 };
    pp_plan_config pc;
    pp_plan *first = NULL, *next = NULL, *again = (pp_plan *)1;
    pp_sim_result *sim = NULL;
    pp_error err;
    double gain = -1, bound = 8 * 60.0 / (1 + 1 / 1.35);
    int split[4] = { 6, 6, 6, 6 };
    memset(&pc, 0, sizeof pc);
    pc.search = 1; pc.kind = PP_CUSTOM; pc.pp = 2; pc.mb = 8; pc.vpp = 2; pc.layers = 24; pc.search_layout = 1;
    pc.costs.f = 1; pc.costs.i = 1; pc.costs.w = 0.5; pc.costs.p2p_latency = 0.01; pc.threads = 1;
    PP_CHECK_OK(pp_plan_build(&pc, &first, &err), &err);
    if (!first) return;
    PP_CHECK_INT(rp_rank_layers(first, 1), 12);
    pc.costs.rank_speed = equal;
    PP_CHECK_OK(pp_plan_replan(&pc, first->schedule, first->layers->count, 0.02, &next, &gain, &err), &err);
    PP_CHECK(next == NULL);
    PP_CHECK_NEAR(gain, 0, 0);
    pc.costs.rank_speed = slow;
    PP_CHECK_OK(pp_plan_replan(&pc, first->schedule, first->layers->count, 0.02, &next, &gain, &err), &err);
    PP_CHECK(next != NULL);
    if (!next) { pp_plan_free(first); return; }
    PP_CHECK_MSG(rp_rank_layers(next, 1) <= 10, "the slow rank holds %d layers", rp_rank_layers(next, 1));
    PP_CHECK_OK(pp_simulate(next->schedule, &next->costs, &sim, &err), &err);
    if (sim) {
        PP_CHECK_MSG(sim->makespan < bound / 0.97, "re-planned step %.2f: not within 3%% of the bound %.2f",
                     sim->makespan, bound);
        PP_CHECK_MSG(gain > 0.1, "gain %.4f: expected over 10%% (rank 1 held 12 layers at 1/1.35)", gain);
        pp_sim_result_free(sim);
    }
    PP_CHECK_OK(pp_plan_replan(&pc, next->schedule, next->layers->count, 0.02, &again, &gain, &err), &err);
    PP_CHECK(again == NULL);
    PP_CHECK_NEAR(gain, 0, 0);
    PP_CHECK_OK(pp_plan_replan(&pc, first->schedule, first->layers->count, 0.99, &again, &gain, &err), &err);
    PP_CHECK(again == NULL);
    /* what is refused, named */
    pc.costs.rank_speed = NULL;
    PP_CHECK_FAILS(pp_plan_replan(&pc, first->schedule, split, 0.02, &again, &gain, &err), &err, PP_EINVAL,
                   "cfg->costs.rank_speed: NULL");
    pc.costs.rank_speed = slow; pc.search_layout = 0;
    PP_CHECK_FAILS(pp_plan_replan(&pc, first->schedule, split, 0.02, &again, &gain, &err), &err, PP_EINVAL,
                   "search_layout=0");
    pc.search_layout = 1;
    PP_CHECK_FAILS(pp_plan_replan(&pc, first->schedule, split, 1.5, &again, &gain, &err), &err, PP_EINVAL,
                   "min_gain=1.5: must be at least 0 and below 1");
    split[3] = 7;
    PP_CHECK_FAILS(pp_plan_replan(&pc, first->schedule, split, 0.02, &again, &gain, &err), &err, PP_EINVAL,
                   "current_split: its 4 stages hold 25 layers, but layers=24");
    split[3] = 0;
    PP_CHECK_FAILS(pp_plan_replan(&pc, first->schedule, split, 0.02, &again, &gain, &err), &err, PP_EINVAL,
                   "current_split[3]=0: every stage holds at least one layer");
    pc.mb = 4;
    PP_CHECK_FAILS(pp_plan_replan(&pc, first->schedule, first->layers->count, 0.02, &again, &gain, &err), &err,
                   PP_EINVAL, "current: pp=2 mb=8, but cfg has pp=2 mb=4");
    pp_plan_free(next);
    pp_plan_free(first);
}

/* Stages of 1, 2, 3, 2 layers on 2 ranks: looped, rank 0 holds stages 0 and 2 (layers 0, 3-5);
 * V, rank 0 holds stages 0 and 3 (layers 0, 6-7). */
static void owners_follow_the_placement(void)
{
    static const int split[4] = { 1, 2, 3, 2 };
    static const int looped[8] = { 0, 1, 1, 0, 0, 0, 1, 1 }, v[8] = { 0, 1, 1, 1, 1, 1, 0, 0 };
    int owner[8], g;
    pp_error err;
    PP_CHECK_OK(pp_layers_owners(split, 2, 2, 0, 8, owner, &err), &err);
    for (g = 0; g < 8; g++) PP_CHECK_INT(owner[g], looped[g]);
    PP_CHECK_OK(pp_layers_owners(split, 2, 2, 1, 8, owner, &err), &err);
    for (g = 0; g < 8; g++) PP_CHECK_INT(owner[g], v[g]);
    PP_CHECK_FAILS(pp_layers_owners(split, 2, 2, 0, 9, owner, &err), &err, PP_EINVAL,
                   "stage_layers: the 4 stages hold 8 layers, but num_layers=9");
    PP_CHECK_FAILS(pp_layers_owners(split, 4, 1, 1, 8, owner, &err), &err, PP_EINVAL, "v_placement=1");
}

/* --- the protocol on threads -------------------------------------------------------------------- */

#define TA_D 4
#define TA_H 8
#define TA_ROWS 4
#define TA_LAYERS 24
#define TA_MB 8
#define TA_PP 2
#define TA_STAGES 4
#define TA_STEPS 5            /* steps 0-2 on the first split, measured after step 2, 3-4 adapted */
#define TA_ADAPT_AT 3
#define TA_TENSORS 4          /* W1, W2 and their momentum */
#define TA_SLOW_RANK 1
#define TA_SLOW 1.35          /* the slow rank's time / the others' */
/* Seconds a block's F, I or W takes on the other ranks. Under ThreadSanitizer each action's math
 * and wake-up take several times longer, so a block takes longer too, to keep them a small share
 * of its time and the measured speeds near the ones set. */
#if defined(__SANITIZE_THREAD__)
#define TA_UNIT 3.0e-3
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TA_UNIT 3.0e-3
#endif
#endif
#ifndef TA_UNIT
#define TA_UNIT 1.0e-3
#endif
#define TA_LR 0.05f
#define TA_MOMENTUM 0.9f

typedef struct ta_mb { float x[TA_ROWS * TA_D], t[TA_ROWS * TA_D]; } ta_mb;

/* Everything one rank holds: its blocks' tensors (NULL where another rank holds the block), their
 * gradients, and what its F's keep for the backward, by block and microbatch. */
typedef struct ta_rank {
    int rank;
    const int *split;                             /* the split in force (shared, written between steps) */
    float *tensor[TA_LAYERS][TA_TENSORS];         /* W1 [H*D], W2 [D*H], M1, M2 */
    float *grad[TA_LAYERS][2];                    /* dW1, dW2 */
    float x_in[TA_LAYERS][TA_MB][TA_ROWS * TA_D];   /* each block's input */
    float pre[TA_LAYERS][TA_MB][TA_ROWS * TA_H];    /* W1 x, before gelu */
    float dpre[TA_LAYERS][TA_MB][TA_ROWS * TA_H];   /* the I's, for the W */
    float gy[TA_LAYERS][TA_MB][TA_ROWS * TA_D];     /* each block's output gradient, for the W */
} ta_rank;

typedef struct ta_world {
    ta_mb data[TA_STEPS][TA_MB];
    float init[TA_LAYERS][2][TA_H * TA_D];        /* the initial W1, W2 of every block */
    ta_rank ranks[TA_PP];
    int searched;                                  /* 0: ZB-V; 1: a searched order (pp_plan_build,
                                                      re-planned with pp_plan_replan) */
    int split[TA_STAGES];                          /* the split in force */
    int v_placement;                               /* its placement: 1 V, 0 looped */
    int next[TA_PP][TA_STAGES];                    /* each rank's re-plan */
    int first[TA_PP][TA_STAGES];                   /* searched: each rank's first plan's split */
    int first_v[TA_PP];                            /*   and its placement */
    char plan_name[TA_PP][2][160];                 /* searched: each rank's first plan and its
                                                      re-plan ("" where it kept the first) */
    double speed[TA_PP][TA_PP];                    /* each rank's measured speeds */
    double gain[TA_PP];
    double seconds[TA_PP][TA_STEPS];               /* each rank's step times */
    double busy[TA_PP][TA_STEPS];                  /* each rank's compute in each step (its timeline) */
    pthread_barrier_t barrier;
} ta_world;

static float ta_gelu(float x)
{
    const float a = 0.7978845608f;
    return 0.5f * x * (1.0f + tanhf(a * (x + 0.044715f * x * x * x)));
}

static float ta_gelu_grad(float x)
{
    const float a = 0.7978845608f;
    float th = tanhf(a * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * a * (1.0f + 3.0f * 0.044715f * x * x);
}

/* The block's math, shared by the pipeline's callbacks and the unsplit reference. */
static void ta_forward(const float *w1, const float *w2, const float *x, float *pre, float *y)
{
    int r, i, j;
    for (r = 0; r < TA_ROWS; r++) {
        float h[TA_H];
        for (i = 0; i < TA_H; i++) {
            float a = 0;
            for (j = 0; j < TA_D; j++) a += w1[i * TA_D + j] * x[r * TA_D + j];
            pre[r * TA_H + i] = a;
            h[i] = ta_gelu(a);
        }
        for (i = 0; i < TA_D; i++) {
            float a = x[r * TA_D + i];
            for (j = 0; j < TA_H; j++) a += w2[i * TA_H + j] * h[j];
            y[r * TA_D + i] = a;
        }
    }
}

/* I: dpre from gy, and gx (NULL: the model's input needs none) */
static void ta_backward_input(const float *w1, const float *w2, const float *pre, const float *gy, float *dpre, float *gx)
{
    int r, i, j;
    for (r = 0; r < TA_ROWS; r++) {
        for (j = 0; j < TA_H; j++) {
            float a = 0;
            for (i = 0; i < TA_D; i++) a += w2[i * TA_H + j] * gy[r * TA_D + i];
            dpre[r * TA_H + j] = a * ta_gelu_grad(pre[r * TA_H + j]);
        }
        if (gx)
            for (i = 0; i < TA_D; i++) {
                float a = gy[r * TA_D + i];
                for (j = 0; j < TA_H; j++) a += w1[j * TA_D + i] * dpre[r * TA_H + j];
                gx[r * TA_D + i] = a;
            }
    }
}

/* W: adds into dw1, dw2 */
static void ta_backward_weight(float *dw1, float *dw2, const float *x, const float *pre, const float *dpre,
                               const float *gy)
{
    int r, i, j;
    for (r = 0; r < TA_ROWS; r++) {
        for (i = 0; i < TA_D; i++)
            for (j = 0; j < TA_H; j++) dw2[i * TA_H + j] += gy[r * TA_D + i] * ta_gelu(pre[r * TA_H + j]);
        for (j = 0; j < TA_H; j++)
            for (i = 0; i < TA_D; i++) dw1[j * TA_D + i] += dpre[r * TA_H + j] * x[r * TA_D + i];
    }
}

static void ta_sgd(float *w, float *m, const float *g, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        m[i] = TA_MOMENTUM * m[i] + g[i];
        w[i] -= TA_LR * m[i];
    }
}

static double ta_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The time `blocks` blocks of work take on this rank, counted from t0: waited out to the end. */
static void ta_spend(const ta_rank *R, double t0, int blocks)
{
    double until = t0 + TA_UNIT * blocks * (R->rank == TA_SLOW_RANK ? TA_SLOW : 1.0), left;
    while ((left = until - ta_now()) > 0) {
        struct timespec ts;
        ts.tv_sec = (time_t)left;
        ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
        nanosleep(&ts, NULL);
    }
}

/* The blocks [*first, *first + *count) of a stage under the split in force. */
static void ta_blocks(const ta_rank *R, int stage, int *first, int *count)
{
    int s;
    *first = 0;
    for (s = 0; s < stage; s++) *first += R->split[s];
    *count = R->split[stage];
}

static size_t ta_bytes(void *user, int boundary, const pp_mb_info *info)
{
    (void)user; (void)boundary; (void)info;
    return TA_ROWS * TA_D * sizeof(float);
}

static int ta_input(void *user, const pp_mb_info *info, void *x)
{
    (void)user;
    memcpy(x, ((const ta_mb *)info->meta)->x, sizeof ((const ta_mb *)info->meta)->x);
    return 0;
}

static int ta_cb_forward(void *user, const pp_mb_info *info, const void *in, void *out)
{
    ta_rank *R = (ta_rank *)user;
    float x[TA_ROWS * TA_D];
    double t0 = ta_now();
    int first, count, g;
    ta_blocks(R, info->stage, &first, &count);
    memcpy(x, in, sizeof x);
    for (g = first; g < first + count; g++) {
        if (!R->tensor[g][0]) return 5;   /* a block this rank does not hold */
        memcpy(R->x_in[g][info->mb], x, sizeof x);
        ta_forward(R->tensor[g][0], R->tensor[g][1], R->x_in[g][info->mb], R->pre[g][info->mb], x);
    }
    memcpy(out, x, sizeof x);
    ta_spend(R, t0, count);
    return 0;
}

static int ta_cb_loss(void *user, const pp_mb_info *info, const void *out, void *grad_out, pp_loss *loss)
{
    const float *y = (const float *)out, *t = ((const ta_mb *)info->meta)->t;
    float *gy = (float *)grad_out, l = 0;
    int i;
    (void)user;
    for (i = 0; i < TA_ROWS * TA_D; i++) {
        float d = y[i] - t[i];
        l += 0.5f * d * d;
        if (gy) gy[i] = d / (float)TA_MB;
    }
    loss->loss = l;
    return 0;
}

static int ta_cb_backward_input(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    ta_rank *R = (ta_rank *)user;
    float gy[TA_ROWS * TA_D], gx[TA_ROWS * TA_D];
    double t0 = ta_now();
    int first, count, g;
    (void)in;
    ta_blocks(R, info->stage, &first, &count);
    memcpy(gy, grad_out, sizeof gy);
    for (g = first + count - 1; g >= first; g--) {
        int need_gx = g > first || grad_in;
        if (!R->tensor[g][0]) return 5;
        memcpy(R->gy[g][info->mb], gy, sizeof gy);
        ta_backward_input(R->tensor[g][0], R->tensor[g][1], R->pre[g][info->mb], gy, R->dpre[g][info->mb],
                          need_gx ? gx : NULL);
        if (need_gx) memcpy(gy, gx, sizeof gy);
    }
    if (grad_in) memcpy(grad_in, gy, sizeof gy);
    ta_spend(R, t0, count);
    return 0;
}

static int ta_cb_backward_weight(void *user, const pp_mb_info *info, const void *in, const void *grad_out)
{
    ta_rank *R = (ta_rank *)user;
    double t0 = ta_now();
    int first, count, g;
    (void)in; (void)grad_out;
    ta_blocks(R, info->stage, &first, &count);
    for (g = first; g < first + count; g++) {
        if (!R->grad[g][0]) return 5;
        ta_backward_weight(R->grad[g][0], R->grad[g][1], R->x_in[g][info->mb], R->pre[g][info->mb],
                           R->dpre[g][info->mb], R->gy[g][info->mb]);
    }
    ta_spend(R, t0, count);
    return 0;
}

static int ta_cb_backward(void *user, const pp_mb_info *info, const void *in, const void *grad_out, void *grad_in)
{
    int rc = ta_cb_backward_input(user, info, in, grad_out, grad_in);
    return rc ? rc : ta_cb_backward_weight(user, info, in, grad_out);
}

/* Gives rank R block g's tensors (from the initial weights when fresh) or takes them away. */
static int ta_hold(ta_rank *R, int g, int hold, const ta_world *W, int fresh)
{
    int k;
    for (k = 0; k < TA_TENSORS; k++) {
        if (!hold) { free(R->tensor[g][k]); R->tensor[g][k] = NULL; continue; }
        R->tensor[g][k] = (float *)calloc(TA_H * TA_D, sizeof(float));
        if (!R->tensor[g][k]) return 0;
        if (fresh && k < 2) memcpy(R->tensor[g][k], W->init[g][k], sizeof W->init[g][k]);
    }
    for (k = 0; k < 2; k++) {
        if (!hold) { free(R->grad[g][k]); R->grad[g][k] = NULL; continue; }
        R->grad[g][k] = (float *)calloc(TA_H * TA_D, sizeof(float));
        if (!R->grad[g][k]) return 0;
    }
    return 1;
}

/* The searched plan's config: greedy orders (PP_CUSTOM) searched with the split, for one layer's
 * costs at speed 1 and the ranks' speeds (NULL: equal). The latency between ranks stays a
 * hundredth of a layer's F, whatever unit the costs come in. */
static void ta_plan_config(pp_plan_config *pc, const pp_layer_costs *layer, const double *speed)
{
    memset(pc, 0, sizeof *pc);
    pc->search = 1; pc->kind = PP_CUSTOM; pc->pp = TA_PP; pc->mb = TA_MB; pc->vpp = 2; pc->layers = TA_LAYERS;
    pc->search_layout = 1; pc->threads = 1;
    pc->costs.f = layer->f; pc->costs.i = layer->i; pc->costs.w = layer->w;
    pc->costs.p2p_latency = 0.01 * layer->f;
    pc->costs.rank_speed = speed;
}

/* Steps 1-3 of the protocol (>>adapt) after a timed step: measure, plan, and move the blocks.
 * ZB-V's order suits any split: pp_layers_replan re-splits it. A searched order was made for the
 * costs: pp_plan_replan searches order and split again, and *next gets the new plan (NULL: the
 * running one stays), whose placement may differ from the running one's. */
static pp_status ta_adapt(ta_world *W, ta_rank *R, pp_executor *ex, const pp_schedule *running, pp_transport *t,
                          pp_plan **next, pp_error *err)
{
    pp_timeline tl;
    pp_layer_costs layer;
    double work[TA_STAGES];
    int old_owner[TA_LAYERS], new_owner[TA_LAYERS], s, g, k;
    int old_v = running->placement == PP_PLACEMENT_V, new_v = old_v;
    void *buf[TA_LAYERS * TA_TENSORS];
    size_t bytes[TA_LAYERS * TA_TENSORS];
    pp_status st;
    *next = NULL;
    /* 1. measure: every rank gets every rank's speed, and one layer's costs at speed 1 */
    for (s = 0; s < TA_STAGES; s++) work[s] = W->split[s];
    if ((st = pp_executor_timeline(ex, &tl, err)) != PP_OK) return st;
    if ((st = pp_speed_exchange(t, &tl, work, TA_STAGES, 0, W->speed[R->rank], &layer, err)) != PP_OK) return st;
    /* 2. plan, each rank on its own from the same numbers */
    if (W->searched) {
        pp_plan_config pc;
        ta_plan_config(&pc, &layer, W->speed[R->rank]);
        st = pp_plan_replan(&pc, running, W->split, 0.02, next, &W->gain[R->rank], err);
        if (st != PP_OK) return st;
        memcpy(W->next[R->rank], *next ? (*next)->layers->count : W->split, sizeof W->next[R->rank]);
        if (*next) {
            new_v = (*next)->schedule->placement == PP_PLACEMENT_V;
            snprintf(W->plan_name[R->rank][1], sizeof W->plan_name[R->rank][1], "%s", (*next)->name);
        }
    } else {
        pp_replan_config rc;
        memset(&rc, 0, sizeof rc);
        rc.balance.num_layers = TA_LAYERS; rc.balance.pp = TA_PP; rc.balance.vpp = 2; rc.balance.v_placement = 1;
        rc.balance.rank_speed = W->speed[R->rank];
        rc.current = W->split; rc.min_gain = 0.02;
        if ((st = pp_layers_replan(&rc, W->next[R->rank], &W->gain[R->rank], err)) != PP_OK) return st;
    }
    /* 3. switch: the new owner makes room, the tensors move, the old owner lets go (the owners
     * before under the running placement, after under the new one) */
    if ((st = pp_layers_owners(W->split, TA_PP, 2, old_v, TA_LAYERS, old_owner, err)) != PP_OK) return st;
    if ((st = pp_layers_owners(W->next[R->rank], TA_PP, 2, new_v, TA_LAYERS, new_owner, err)) != PP_OK) return st;
    for (g = 0; g < TA_LAYERS; g++)
        if (new_owner[g] == R->rank && old_owner[g] != R->rank && !ta_hold(R, g, 1, W, 0))
            return pp_error_set(err, PP_ENOMEM, "out of memory");
    for (g = 0; g < TA_LAYERS; g++)
        for (k = 0; k < TA_TENSORS; k++) {
            buf[g * TA_TENSORS + k] = R->tensor[g][k];
            bytes[g * TA_TENSORS + k] = TA_H * TA_D * sizeof(float);
        }
    st = pp_layers_move(t, old_owner, new_owner, TA_LAYERS, TA_TENSORS, buf, bytes, 0, err);
    if (st != PP_OK) return st;
    for (g = 0; g < TA_LAYERS; g++)
        if (old_owner[g] == R->rank && new_owner[g] != R->rank) ta_hold(R, g, 0, W, 0);
    /* every rank has moved its blocks before the split in force changes (one writer: rank 0) */
    pthread_barrier_wait(&W->barrier);
    if (R->rank == 0) { memcpy(W->split, W->next[0], sizeof W->split); W->v_placement = new_v; }
    pthread_barrier_wait(&W->barrier);
    return PP_OK;
}

/* An executor of schedule s for rank R: the blocks' callbacks, each action timed. */
static pp_status ta_executor(ta_rank *R, const pp_schedule *s, const pp_transport *t, pp_executor **ex, pp_error *err)
{
    pp_executor_config ec;
    memset(&ec, 0, sizeof ec);
    ec.schedule = s; ec.transport = *t; ec.record_timeline = 1; ec.timeout_s = 30;
    ec.callbacks.user = R;
    ec.callbacks.tensor_bytes = ta_bytes; ec.callbacks.input = ta_input; ec.callbacks.forward = ta_cb_forward;
    ec.callbacks.loss = ta_cb_loss; ec.callbacks.backward = ta_cb_backward;
    ec.callbacks.backward_input = ta_cb_backward_input; ec.callbacks.backward_weight = ta_cb_backward_weight;
    return pp_executor_create(&ec, ex, err);
}

/* The first searched plan, for equal speeds and the blocks' costs (ta_spend: a unit each for a
 * block's F, I and W). Every rank builds the same one; rank 0 puts its split in force. */
static pp_status ta_first_plan(ta_world *W, int rank, pp_plan **plan, pp_error *err)
{
    static const pp_layer_costs block = { 1, 1, 1, 1 };
    pp_plan_config pc;
    pp_status st;
    ta_plan_config(&pc, &block, NULL);
    st = pp_plan_build(&pc, plan, err);
    if (st == PP_OK && (*plan)->layers->num_stages != TA_STAGES)
        st = pp_error_set(err, PP_EINVAL, "the plan has %d stages, not %d", (*plan)->layers->num_stages, TA_STAGES);
    if (st == PP_OK) {
        memcpy(W->first[rank], (*plan)->layers->count, sizeof W->first[rank]);
        W->first_v[rank] = (*plan)->schedule->placement == PP_PLACEMENT_V;
        snprintf(W->plan_name[rank][0], sizeof W->plan_name[rank][0], "%s", (*plan)->name);
    }
    /* the ranks wait for each other whatever befell: one that failed must not strand the other */
    pthread_barrier_wait(&W->barrier);
    if (st == PP_OK && rank == 0) {
        memcpy(W->split, W->first[0], sizeof W->split);
        W->v_placement = W->first_v[0];
    }
    pthread_barrier_wait(&W->barrier);
    return st;
}

static pp_status ta_rank_main(void *user, int rank, pp_transport *t, pp_error *err)
{
    ta_world *W = (ta_world *)user;
    ta_rank *R = &W->ranks[rank];
    pp_schedule *zbv = NULL;
    pp_plan *plan = NULL, *next = NULL;
    const pp_schedule *running;
    pp_executor *ex = NULL;
    pp_status st;
    int step, g, k, owner[TA_LAYERS];
    if (W->searched) {
        if ((st = ta_first_plan(W, rank, &plan, err)) != PP_OK) goto done;
        running = plan->schedule;
    } else {
        pp_schedule_config sc;
        memset(&sc, 0, sizeof sc);
        sc.kind = PP_ZBV; sc.pp = TA_PP; sc.mb = TA_MB;
        if ((st = pp_schedule_build(&sc, &zbv, err)) != PP_OK) return st;
        if ((st = pp_schedule_lower(zbv, err)) != PP_OK) goto done;
        running = zbv;
    }
    st = pp_layers_owners(W->split, TA_PP, 2, running->placement == PP_PLACEMENT_V, TA_LAYERS, owner, err);
    if (st != PP_OK) goto done;
    for (g = 0; g < TA_LAYERS; g++)
        if (owner[g] == rank && !ta_hold(R, g, 1, W, 1)) { st = pp_error_set(err, PP_ENOMEM, "out of memory"); goto done; }
    if ((st = ta_executor(R, running, t, &ex, err)) != PP_OK) goto done;
    for (step = 0; step < TA_STEPS; step++) {
        void *meta[TA_MB];
        pp_step opts;
        pp_step_result res;
        int m;
        if (step == TA_ADAPT_AT) {
            if ((st = ta_adapt(W, R, ex, running, t, &next, err)) != PP_OK) goto done;
            /* ZB-V's order is the same for any stage sizes: the schedule and executor stay. A new
             * searched plan brings a new order: a new executor runs it */
            if (next) {
                pp_executor_free(ex);
                ex = NULL;
                pp_plan_free(plan);
                plan = next;
                next = NULL;
                running = plan->schedule;
                if ((st = ta_executor(R, running, t, &ex, err)) != PP_OK) goto done;
            }
        }
        for (g = 0; g < TA_LAYERS; g++)
            for (k = 0; k < 2 && R->grad[g][0]; k++) memset(R->grad[g][k], 0, TA_H * TA_D * sizeof(float));
        for (m = 0; m < TA_MB; m++) meta[m] = &W->data[step][m];
        memset(&opts, 0, sizeof opts);
        opts.mb_meta = meta;
        if ((st = pp_run_step(ex, &opts, &res, err)) != PP_OK) goto done;
        W->seconds[rank][step] = res.seconds;
        {
            pp_timeline tl;
            int i;
            if ((st = pp_executor_timeline(ex, &tl, err)) != PP_OK) goto done;
            for (i = 0; i < tl.length; i++)
                if (tl.actions[i].op <= PP_OP_W && tl.ready[i] >= 0) W->busy[rank][step] += tl.end[i] - tl.ready[i];
        }
        for (g = 0; g < TA_LAYERS; g++)
            for (k = 0; k < 2 && R->tensor[g][0]; k++) ta_sgd(R->tensor[g][k], R->tensor[g][2 + k], R->grad[g][k], TA_H * TA_D);
    }
    st = PP_OK;
done:
    pp_executor_free(ex);
    pp_schedule_free(zbv);
    pp_plan_free(next);
    pp_plan_free(plan);
    return st;
}

/* The unsplit model on one thread, the same steps: tensors [layer][W1, W2, M1, M2], last grads. */
static void ta_reference(const ta_world *W, float (*tensor)[TA_TENSORS][TA_H * TA_D], float (*grad)[2][TA_H * TA_D])
{
    static float x[TA_LAYERS + 1][TA_ROWS * TA_D], pre[TA_LAYERS][TA_ROWS * TA_H];
    float gy[TA_ROWS * TA_D], gx[TA_ROWS * TA_D], dpre[TA_ROWS * TA_H];
    int step, m, g, i, k;
    memset(tensor, 0, sizeof(float) * TA_LAYERS * TA_TENSORS * TA_H * TA_D);
    for (g = 0; g < TA_LAYERS; g++) { memcpy(tensor[g][0], W->init[g][0], sizeof tensor[g][0]); memcpy(tensor[g][1], W->init[g][1], sizeof tensor[g][1]); }
    for (step = 0; step < TA_STEPS; step++) {
        memset(grad, 0, sizeof(float) * TA_LAYERS * 2 * TA_H * TA_D);
        for (m = 0; m < TA_MB; m++) {
            const ta_mb *d = &W->data[step][m];
            memcpy(x[0], d->x, sizeof x[0]);
            for (g = 0; g < TA_LAYERS; g++) ta_forward(tensor[g][0], tensor[g][1], x[g], pre[g], x[g + 1]);
            for (i = 0; i < TA_ROWS * TA_D; i++) gy[i] = (x[TA_LAYERS][i] - d->t[i]) / (float)TA_MB;
            for (g = TA_LAYERS - 1; g >= 0; g--) {
                ta_backward_input(tensor[g][0], tensor[g][1], pre[g], gy, dpre, g > 0 ? gx : NULL);
                ta_backward_weight(grad[g][0], grad[g][1], x[g], pre[g], dpre, gy);
                if (g > 0) memcpy(gy, gx, sizeof gy);
            }
        }
        for (g = 0; g < TA_LAYERS; g++)
            for (k = 0; k < 2; k++) ta_sgd(tensor[g][k], tensor[g][2 + k], grad[g][k], TA_H * TA_D);
    }
}

/* A world for the end-to-end tests: the same data and initial weights for both, on the even split
 * under ZB-V (a searched order puts its first plan's split in force itself). */
static ta_world *ta_world_new(int searched)
{
    ta_world *W = (ta_world *)calloc(1, sizeof *W);
    unsigned seed = 4242u;
    int step, m, i, g, k, r;
    if (!W) return NULL;
#define TA_RND() ((seed = seed * 1103515245u + 12345u), ((float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f))
    for (step = 0; step < TA_STEPS; step++)
        for (m = 0; m < TA_MB; m++)
            for (i = 0; i < TA_ROWS * TA_D; i++) { W->data[step][m].x[i] = TA_RND(); W->data[step][m].t[i] = TA_RND(); }
    for (g = 0; g < TA_LAYERS; g++)
        for (k = 0; k < 2; k++)
            for (i = 0; i < TA_H * TA_D; i++) W->init[g][k][i] = 0.8f * TA_RND();
#undef TA_RND
    W->searched = searched;
    for (i = 0; i < TA_STAGES; i++) W->split[i] = TA_LAYERS / TA_STAGES;
    W->v_placement = 1;
    for (r = 0; r < TA_PP; r++) { W->ranks[r].rank = r; W->ranks[r].split = W->split; }
    if (pthread_barrier_init(&W->barrier, NULL, TA_PP)) { free(W); return NULL; }
    return W;
}

static void ta_world_free(ta_world *W)
{
    int r, g;
    for (r = 0; r < TA_PP; r++)
        for (g = 0; g < TA_LAYERS; g++) ta_hold(&W->ranks[r], g, 0, W, 0);
    pthread_barrier_destroy(&W->barrier);
    free(W);
}

/* Runs every rank's protocol on its thread; each must end well. */
static void ta_world_run(ta_world *W)
{
    pp_status status[TA_PP];
    pp_error errors[TA_PP], err;
    int r;
    PP_CHECK_OK(pp_threads_run(TA_PP, ta_rank_main, W, status, errors, &err), &err);
    for (r = 0; r < TA_PP; r++) PP_CHECK_MSG(status[r] == PP_OK, "rank %d: %s", r, errors[r].message);
}

/* Every block on the rank that holds it under the split and placement in force, as the unsplit
 * model has it: weights, momentum and last gradients, bit for bit. held[r]: the blocks rank r
 * holds (any it should not would count there too). */
static void ta_check_blocks(const ta_world *W, int held[TA_PP])
{
    static float ref_t[TA_LAYERS][TA_TENSORS][TA_H * TA_D], ref_g[TA_LAYERS][2][TA_H * TA_D];
    pp_error err;
    pp_status st;
    int owner[TA_LAYERS], g, k, r;
    for (r = 0; r < TA_PP; r++) held[r] = 0;
    st = pp_layers_owners(W->split, TA_PP, 2, W->v_placement, TA_LAYERS, owner, &err);
    PP_CHECK_OK(st, &err);
    if (st != PP_OK) return;
    ta_reference(W, ref_t, ref_g);
    for (g = 0; g < TA_LAYERS; g++) {
        const ta_rank *R = &W->ranks[owner[g]];
        for (r = 0; r < TA_PP; r++) held[r] += W->ranks[r].tensor[g][0] != NULL;
        if (!R->tensor[g][0]) { PP_CHECK_MSG(0, "block %d: rank %d does not hold it", g, owner[g]); continue; }
        for (k = 0; k < TA_TENSORS; k++)
            PP_CHECK_MSG(!memcmp(R->tensor[g][k], ref_t[g][k], sizeof ref_t[g][k]), "block %d tensor %d differs from "
                         "the unsplit model's", g, k);
        for (k = 0; k < 2; k++)
            PP_CHECK_MSG(!memcmp(R->grad[g][k], ref_g[g][k], sizeof ref_g[g][k]), "block %d gradient %d differs from "
                         "the unsplit model's", g, k);
    }
}

/* The best step before the switch (1-2; step 0 warms up) and after it (3-4), each the slower
 * rank's; the busiest rank's compute likewise. */
static void ta_best_steps(const ta_world *W, double *before, double *after, double *before_busy, double *after_busy)
{
    int step;
    *before = *after = *before_busy = *after_busy = HUGE_VAL;
    for (step = 1; step < TA_STEPS; step++) {
        double t = W->seconds[0][step] > W->seconds[1][step] ? W->seconds[0][step] : W->seconds[1][step];
        double b = W->busy[0][step] > W->busy[1][step] ? W->busy[0][step] : W->busy[1][step];
        if (step < TA_ADAPT_AT && t < *before) *before = t;
        if (step < TA_ADAPT_AT && b < *before_busy) *before_busy = b;
        if (step >= TA_ADAPT_AT && t < *after) *after = t;
        if (step >= TA_ADAPT_AT && b < *after_busy) *after_busy = b;
    }
}

/* After the switch: the busiest rank computes at least 10% less (each action's timing noise adds
 * to both sides alike) and the step is faster (by less than that where the machine is loaded). */
static void ta_check_faster(double before, double after, double before_busy, double after_busy, const char *was)
{
    PP_CHECK_MSG(after_busy < 0.9 * before_busy, "the busiest rank computed %.1f ms after the switch, %.1f ms on %s: "
                 "not 10%% less", after_busy * 1e3, before_busy * 1e3, was);
    PP_CHECK_MSG(after < before, "step %.1f ms after the switch, %.1f ms on %s: not faster", after * 1e3, before * 1e3,
                 was);
}

/* Rank 1 is 1.35x slower. On the even split (6 blocks a stage) it computes 12 x 24 x 1.35 = 388.8
 * units a step (F + I + W of 12 blocks, 8 microbatches), which bounds the step; measured after step
 * 2, re-planned (rank 0 takes 14 blocks, rank 1 10: 336 against 324 on rank 1) and moved, steps 3-4
 * run at ZB-V's simulated 336, 13.6% faster, within 1.6 points of the 330.9 the two speeds allow.
 * The busiest rank's compute must fall by 10% (each action's timing noise adds to both sides
 * alike), the step must be faster (by less than that where the machine is loaded: the new split
 * leaves no slack, so every late wake-up lands on the step), and every block's weights, momentum
 * and last gradients must be the unsplit model's bit for bit. */
static void a_slowed_rank_gets_fewer_blocks_and_the_step_gets_faster(void)
{
    ta_world *W = ta_world_new(0);
    int held[TA_PP];
    double even, adapted, even_busy, adapted_busy, bound;
    if (!W) { PP_CHECK(W != NULL); return; }
    ta_world_run(W);
    /* the same speeds and plan on both ranks: the slow one at about 1/1.35, 14 / 10 blocks */
    PP_CHECK(!memcmp(W->speed[0], W->speed[1], sizeof W->speed[0]));
    PP_CHECK(!memcmp(W->next[0], W->next[1], sizeof W->next[0]));
    PP_CHECK_MSG(W->speed[0][1] > 1 / 1.45 && W->speed[0][1] < 1 / 1.25, "rank 1's speed %g, expected near 1/1.35",
                 W->speed[0][1]);
    PP_CHECK_INT(W->split[0] + W->split[3], 14);
    PP_CHECK(W->gain[0] > 0.1);
    /* every block on its new rank, as the unsplit model has it */
    ta_check_blocks(W, held);
    PP_CHECK_INT(held[0], 14);
    PP_CHECK_INT(held[1], 10);
    /* faster: the best even step (1-2) against the best adapted one (3-4), each the slower rank's;
     * the busiest rank's compute likewise */
    ta_best_steps(W, &even, &adapted, &even_busy, &adapted_busy);
    bound = TA_MB * 3.0 * TA_LAYERS * TA_UNIT / (1 + 1 / TA_SLOW);
    ta_check_faster(even, adapted, even_busy, adapted_busy, "the even split");
    if (getenv("PP_TEST_VERBOSE"))
        printf("     adapt: rank 1 speed %.4f, split %d,%d,%d,%d; even step %.1f ms (%.1f%% of the bound %.1f ms, "
               "busiest rank %.1f ms), adapted %.1f ms (%.1f%%, busiest rank %.1f ms)\n", W->speed[0][1], W->split[0],
               W->split[1], W->split[2], W->split[3], even * 1e3, 100 * bound / even, bound * 1e3, even_busy * 1e3,
               adapted * 1e3, 100 * bound / adapted, adapted_busy * 1e3);
    ta_world_free(W);
}

/* The same model and slow rank under a searched order: every rank plans the first steps with
 * pp_plan_build (greedy orders, the split searched with them) for equal speeds and the blocks'
 * costs, and after step 2 searches order and split again with pp_plan_replan for the measured
 * speeds and layer costs. Planned for equal speeds the ranks hold 12 blocks each, so rank 1's
 * 388.8 units bound the step as on ZB-V's even split; 14 / 10 blocks take max(14, 10 x 1.35) x 24
 * = 336, 13.6% less. The new plan may place its stages otherwise than the first (V or looped):
 * the owners before and after come from each plan's placement, and a new executor runs the new
 * order. Both ranks must plan alike, rank 1 must end with fewer blocks than rank 0, the simulated
 * gain must be well above the 2% that switches, and the checks on the blocks and the times are
 * the ZB-V test's (the searches run before step 0 and between steps 2 and 3, outside the times). */
static void a_searched_order_is_searched_again_for_a_slowed_rank(void)
{
    ta_world *W = ta_world_new(1);
    pp_error err;
    pp_status st;
    int held[TA_PP], owner[TA_LAYERS], g, first_slow = 0;
    double first, adapted, first_busy, adapted_busy, bound;
    if (!W) { PP_CHECK(W != NULL); return; }
    ta_world_run(W);
    /* the same first plan, speeds and new plan on both ranks; the first plan 12 blocks a rank */
    PP_CHECK_STR(W->plan_name[0][0], W->plan_name[1][0]);
    PP_CHECK(!memcmp(W->first[0], W->first[1], sizeof W->first[0]));
    PP_CHECK_INT(W->first_v[0], W->first_v[1]);
    st = pp_layers_owners(W->first[0], TA_PP, 2, W->first_v[0], TA_LAYERS, owner, &err);
    PP_CHECK_OK(st, &err);
    for (g = 0; g < TA_LAYERS && st == PP_OK; g++) first_slow += owner[g] == TA_SLOW_RANK;
    PP_CHECK_INT(first_slow, TA_LAYERS / TA_PP);
    PP_CHECK(!memcmp(W->speed[0], W->speed[1], sizeof W->speed[0]));
    PP_CHECK(!memcmp(W->next[0], W->next[1], sizeof W->next[0]));
    PP_CHECK_STR(W->plan_name[0][1], W->plan_name[1][1]);
    PP_CHECK_MSG(W->speed[0][1] > 1 / 1.45 && W->speed[0][1] < 1 / 1.25, "rank 1's speed %g, expected near 1/1.35",
                 W->speed[0][1]);
    PP_CHECK_MSG(W->plan_name[0][1][0] != '\0', "no new plan: the simulated gain %.4f", W->gain[0]);
    PP_CHECK_MSG(W->gain[0] > 0.05, "gain %.4f: expected over 5%%", W->gain[0]);
    /* every block on its new rank (by the new plan's placement), as the unsplit model has it */
    ta_check_blocks(W, held);
    PP_CHECK_MSG(held[1] < held[0], "the slow rank holds %d blocks, the other %d", held[1], held[0]);
    ta_best_steps(W, &first, &adapted, &first_busy, &adapted_busy);
    bound = TA_MB * 3.0 * TA_LAYERS * TA_UNIT / (1 + 1 / TA_SLOW);
    ta_check_faster(first, adapted, first_busy, adapted_busy, "the first plan");
    if (getenv("PP_TEST_VERBOSE"))
        printf("     searched: rank 1 speed %.4f, gain %.4f; first %s, split %d,%d,%d,%d: step %.1f ms (%.1f%% of the "
               "bound %.1f ms, busiest rank %.1f ms); re-planned %s, split %d,%d,%d,%d (%s): step %.1f ms (%.1f%%, "
               "busiest rank %.1f ms)\n", W->speed[0][1], W->gain[0], W->plan_name[0][0], W->first[0][0],
               W->first[0][1], W->first[0][2], W->first[0][3], first * 1e3, 100 * bound / first, bound * 1e3,
               first_busy * 1e3, W->plan_name[0][1], W->split[0], W->split[1], W->split[2], W->split[3],
               W->v_placement ? "V" : "looped", adapted * 1e3, 100 * bound / adapted, adapted_busy * 1e3);
    ta_world_free(W);
}

const pp_test_case pp_suite_runtime_adapt[] = {
    PP_TEST(speeds_are_medians_per_layer_of_each_kind),
    PP_TEST(replan_switches_only_when_it_gains_more_than_min_gain),
    PP_TEST(replan_rounds_settle_when_the_measured_speeds_follow_the_split),
    PP_TEST(owners_follow_the_placement),
    PP_TEST(replan_of_a_searched_order_searches_order_and_split_together),
    PP_TEST(a_slowed_rank_gets_fewer_blocks_and_the_step_gets_faster),
    PP_TEST(a_searched_order_is_searched_again_for_a_slowed_rank),
    {0}
};
