
/* ============================================================================================
 * >>search
 * Which schedule is fastest for my model? Given per-action costs (F, I, W per stage, p2p time)
 * and a cap on activation memory, pp_search builds every schedule kind with every parameter
 * worth trying (vpp, microbatch group, zb-h2's cap), plus greedy zero-bubble schedules of its
 * own, proves each one (pp_schedule_validate), times it (pp_simulate) and ranks them: those
 * within the cap first, then by step time (makespan), mean bubble and peak memory.
 *
 *     pp_search_config cfg = { .pp = 4, .mb = 16, .max_memory = 4 };   // 1F1B's memory
 *     cfg.costs.f = 1; cfg.costs.i = 1; cfg.costs.w = 0.8; cfg.costs.p2p_latency = 0.05;
 *     pp_search_result *res;
 *     if (pp_search(&cfg, &res, &err) != PP_OK) ...
 *     printf("%s: %.2f\n", res->entries[0].name, res->entries[0].makespan);
 *     pp_schedule_write_csv(res->best, stdout, &err);               // the winner, lowered
 *     pp_search_result_free(res);
 *
 * Memory is counted as pp_simulate counts it: a rank's peak of live (stage, microbatch)
 * activations divided by vpp, i.e. in microbatches through the rank's whole layer set. 1F1B's
 * first rank peaks at pp, ZB-V at pp, ZB-H2 at 2*pp-1, DualPipeV at pp + 1/2, DualPipe at pp + 1
 * (whose chunks are whole model stages; it also holds 2x parameters, which this cap does not
 * count). With costs.memory_stage, a live activation weighs its stage's memory instead, so
 * stages of unequal size (a layout) are capped by what they hold. DualPipe is tried with vpp = 2
 * when pp and mb are even and no per-stage costs are given. DualPipeV and DualPipe are tried
 * twice: as built, and split ("dualpipev split", entry.split_overlaps = 1), each FB as F then B
 * (pp_schedule_split_overlaps: what a runtime without an overlapped F&B callback should run; the
 * simulator costs an FB as F + B either way, so the split one is never slower). A split winner
 * comes back split.
 *
 * Uneven stages. A V schedule's bubble is the last rank's wait for the first chunk's forward
 * and its mirror at the end, so a smaller first and last chunk shrinks it: with F = I = W per
 * layer, pp = 2, mb = 8 and stages of 2, 6, 2, 6 layers (ranks hold 2 + 6 each), the greedy V
 * schedule is simulated at 98.9% against ZB-V's 97.96% on even stages (`pipepar search --layout
 * 'Et*2|t*6|t*2|t*6L'`; on 2 H200s 0.6-0.9 points over ZB-V, bench/RESULTS.md). ZB-V's fixed
 * order on the same stages is worse than on even ones: the order must come from the costs.
 *
 * Choosing the layout too (cfg.layers). Give the model's layer count and per-layer costs (the same
 * for every layer, or each layer's own in cfg.layer_costs; and, if they cost anything, the
 * embedding on the first stage and the loss on the last: cfg.embedding, cfg.loss), and the search
 * also splits the layers into stages. It tries every split into pp*vpp
 * stages of even - layout_spread to even + layout_spread layers (at least 1), each schedule on
 * each; where a vpp has more than max_layouts such splits (pp = 4 with 12 stages already has
 * over 4096), it descends from the even split instead, one layer moved per round. Each entry
 * reports its schedule's fastest split (entry.stage_layers; a tie keeps the split nearest the
 * even one), and a kind asked for (cfg.kind) spends splits only on the vpps it runs at.
 *
 * This is how Megatron's interleaved 1F1B gets its last points. On even 2-layer stages (pp = 2,
 * vpp = 4, mb = 8, 16 layers, F = 1 and B = 2 per layer) rank 1 waits for rank 0's first 2-layer
 * F at the start, and rank 0 runs stage 0's last 2-layer B alone at the end. A 1-layer first
 * stage halves both, but with Megatron's default group of pp microbatches per chunk round the
 * order then stalls elsewhere; with a group of 4 it does not. Stages 1,2,2,2,2,2,3,2 with group 4
 * take 195 time units against 198 for even stages at any group (`pipepar search --pp 2 --mb 8
 * --vpp 4 --layers 16 --kind interleaved`), for 1.6x the activation memory. On 2 H200s that ran
 * 0.9-1.5 points of efficiency above Megatron's defaults, and 96.4% on average with the heavier
 * rank on the faster GPU (pp_place_by_speed; bench/RESULTS.md, session 9). The microbatch groups
 * tried are pp, 2pp, 4pp, ... below mb, PyTorch's mb / max(1, mb/pp), and mb. A trainer with both
 * backward halves gets the rest with cfg.split_backward: each B run as its I then its W sends its
 * gradient before the weight gradients, and the same order takes 193 units, 1 over its compute,
 * tying the greedy zero-bubble schedules (96.9-97.2% on one lease of 2 H200s, session 10).
 *
 * Greedy schedules (pp_schedule_build_greedy). The paper's automatic scheduler (Qi et al., ICLR
 * 2024, section 3.1) in our words: play the pipeline forward in time with the given costs; when
 * a rank is free, run the most urgent ready work: an I (another rank waits for it) or an F if
 * the cap allows (both ready: alternate, as 1F1B does), else a pending W, which fills idle gaps
 * and frees memory (the cap forces one before an F when the rank is full). It handles looped
 * placements with any vpp and the V placement, and cannot deadlock: a rank admits a new
 * microbatch (its F on the rank's first chunk) only while its live plus reserved activations
 * leave room for all vpp chunks of that microbatch, so the oldest unfinished microbatch can
 * always move. (With vpp = 2, PP_GREEDY_EAGER_ADMIT keeps just one spare slot, which is enough:
 * a chunk's F's run in microbatch order, so the spare goes to the oldest one's second chunk.) The policy switches
 * below are the paper's grid-searched hyperparameters in spirit; pp_search tries them all.
 * ============================================================================================ */

typedef struct pp_greedy_config {
    int pp;                    /* pipeline ranks, >= 1 */
    int mb;                    /* microbatches, >= 1 */
    int vpp;                   /* chunks per rank; 0 means 1 (2 for the V placement) */
    pp_placement placement;    /* looped (any vpp) or V (vpp = 2) */
    int max_live;              /* cap on live (stage, microbatch) activations per rank, >= vpp;
                                  0 means pp*vpp (1F1B's peak) */
    const pp_sim_costs *costs; /* what pp_simulate takes; NULL means F=1, I=W=1, no p2p time */
    unsigned flags;            /* PP_GREEDY_* or'ed; 0 = the defaults */
} pp_greedy_config;

#define PP_GREEDY_FILL_ANY_GAP  1u /* run a pending W in any idle gap (default: only where it ends
                                      before the next input known to arrive) */
#define PP_GREEDY_SHALLOW_FIRST 2u /* among ready F's take the lowest stage (default: deepest) */
#define PP_GREEDY_LAZY_W        4u /* hold W's while memory allows; run them when the cap or the
                                      end of the rank's F and I work forces them */
#define PP_GREEDY_I_FIRST       8u /* an I before a ready F, always (default: alternate, the other
                                      kind than the rank's last F or I, as 1F1B does) */
#define PP_GREEDY_READY_ORDER  16u /* of a ready I and F, the one ready first (I_FIRST wins) */
#define PP_GREEDY_EAGER_ADMIT  32u /* vpp = 2: admit a new microbatch while one slot stays free for
                                      the oldest one's second chunk (default: while room for both
                                      chunks of every admitted microbatch stays free) */
#define PP_GREEDY_FLAG_LIMIT   64u /* every combination of flags is < this */

/* A compute order (kind PP_CUSTOM, backward split into I and W), not lowered. */
PIPEPAR_API pp_status pp_schedule_build_greedy(const pp_greedy_config *cfg, pp_schedule **out, pp_error *err);

/* What one layer costs, for the layout search's embedding and loss (cfg.layers). */
typedef struct pp_layer_costs {
    double f, i, w;         /* forward, input gradient, weight gradient (a full backward is i + w) */
    double memory;          /* activations one microbatch keeps there, in decoder layers (1 = one) */
} pp_layer_costs;

/* Where a running search is, for pp_search_config.progress. */
typedef struct pp_search_progress {
    long simulated;         /* schedules proven and simulated so far, every vpp and split */
    int vpp;                /* the vpp being searched now */
    long splits_done;       /* with layers: the splits of this vpp searched so far */
    long splits_total;      /*   and the most it will try (0 without layers) */
} pp_search_progress;

typedef struct pp_search_config {
    int pp;                 /* pipeline ranks, >= 1 */
    int mb;                 /* microbatches per step, >= 1 */
    pp_sim_costs costs;     /* as pp_simulate takes them, except that a full backward B costs
                               i + w when only the halves are given (per stage too). Per-stage
                               arrays hold pp*vpp entries, so they need vpp below */
    double max_memory;      /* cap on every rank's peak memory in the units above; 0 = none */
    int vpp;                /* 0: try 1..max_vpp (V kinds when 2 is among them); else only this vpp */
    int max_vpp;            /* largest vpp tried; 0 means 4 */
    pp_schedule_kind kind;  /* PP_KIND_NONE: every kind; else only this one (PP_CUSTOM: the greedy
                               schedules), e.g. PP_INTERLEAVED_1F1B for a trainer with no split backward */
    int layers;             /* > 0: choose the layout too (above). costs.f, b, i, w are then per layer,
                               and no per-stage costs may be given: each split sets them, and
                               memory_stage to its layers. A vpp with more stages than layers is skipped */
    int layout_spread;      /* with layers: how far a stage's layer count may stray from the even
                               split (layers / stages, rounded down or up); 0 means 1 */
    pp_layer_costs embedding; /* with layers: the input layer (Megatron's E), on the first stage: added
                               to stage 0's costs. All 0 (the default): free */
    pp_layer_costs loss;    /* with layers: the output layer and loss (L), on the last stage: added to
                               it. An LLM's vocabulary projection often costs one or two decoder
                               layers, which is why Megatron can count it in the split
                               (account_for_loss_in_pipeline_split); the search then gives the last
                               stage fewer layers */
    const pp_layer_costs *layer_costs; /* with layers, optional: [layers] each layer's own costs, in
                               model order (dense and MoE layers, attention and Mamba); a stage costs
                               the sum of its layers'. NULL: every layer costs costs.f, i, w and
                               keeps 1 layer of memory */
    int split_backward;     /* 1: every schedule with whole backwards runs each B as its I then its W
                               (pp_schedule_split_backward), so a B's output gradient leaves before
                               its weight gradient is computed; for a trainer with backward_input and
                               backward_weight callbacks. Those entries are named "..., B as I then W"
                               (an FB kind entered unsplit keeps its FBs whole: only its plain B's) */
    long max_layouts;       /* with layers: a vpp with at most this many splits has every one tried;
                               one with more is searched by descent from the even split (each round,
                               the one-layer move between two stages that shortens the step most,
                               until none does), trying at most this many; 0 means 4096 (each split
                               costs a whole search of that vpp) */
    void (*progress)(void *user, const pp_search_progress *where);
                            /* optional: called after every schedule simulated (often: a layout
                               search simulates hundreds of thousands), so a caller can show how far
                               a long search is; it must be cheap and may not call pp_search */
    void *progress_user;    /* passed to progress */
    int threads;            /* with layers: the splits of a vpp searched on this many threads at once
                               (pthreads; 0 or 1: the calling thread alone). The result is the same
                               for any count. progress is then called from those threads, one call
                               at a time. Under PIPEPAR_NO_THREADS: one thread */
} pp_search_config;

typedef struct pp_search_entry {
    char name[128];         /* e.g. "zb-h2 max_live=7", "interleaved vpp=2 group=4", "greedy V ..." */
    pp_schedule_kind kind;  /* PP_CUSTOM for the greedy schedules */
    pp_placement placement;
    int vpp, group, max_live; /* the parameters used (0 where the kind takes none) */
    unsigned greedy_flags;
    int split_overlaps;     /* 1: its FBs run as F then B (pp_schedule_split_overlaps), named "... split" */
    int split_backward;     /* 1: its B's run as I then W (cfg.split_backward; the schedule had B's) */
    double makespan;        /* simulated step time */
    double bubble;          /* mean over ranks of 1 - busy / makespan */
    double peak_memory;     /* largest over ranks, units above */
    int peak_live;          /* largest over ranks, (stage, microbatch) activations */
    int fits;               /* 1 when peak_memory <= max_memory (or no cap) */
    const int32_t *stage_layers; /* with cfg.layers: [pp*vpp] layers of each stage of this schedule's
                               fastest split (the result owns them); NULL otherwise */
} pp_search_entry;

typedef struct pp_search_result {
    int count;                /* schedules built, proven and timed */
    pp_search_entry *entries; /* [count], ranked: fitting first; then makespan, bubble, memory */
    pp_schedule *best;        /* entries[0] when it fits, lowered (ready for CSV or the runtime);
                                 NULL when nothing fits the cap */
    long layouts;             /* with cfg.layers: splits tried, over every vpp; else 0 */
    int layouts_local;        /* 1: some vpp had more splits than max_layouts, and was searched by
                                 descent from the even split (so its best may be a local one) */
    int32_t *layout_pool;     /* storage of the entries' stage_layers */
} pp_search_result;

PIPEPAR_API pp_status pp_search(const pp_search_config *cfg, pp_search_result **out, pp_error *err);
PIPEPAR_API void pp_search_result_free(pp_search_result *r);
/* Writes stage_layers[0..stages) as a Megatron layout, 'Et|t*2|t*3L' (E input, L loss), into buf;
 * returns the length it needs (as snprintf does), so a short buf is never silently cut off. */
PIPEPAR_API int pp_search_layout_text(const int32_t *stage_layers, int stages, char *buf, size_t size);
