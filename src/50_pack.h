
/* ============================================================================================
 * >>pack
 * Sequence packing: variable-length sequences go into bins of at most `capacity` tokens; each
 * bin becomes one microbatch, and every data-parallel rank gets the same number of them.
 *
 * Algorithms. The names and the outcomes are NeMo RL's (nemo_rl/data/packing/algorithms.py) and,
 * for the two knapsacks, Megatron-LM's (examples/multimodal/data_loading/knapsacks.py): for the
 * same lengths each returns the same bins, in the same order, holding the same sequences in the
 * same order as the Python it reproduces, but in O(n log n) instead of a scan over open bins:
 *   first_fit_decreasing    longest first (ties: the higher index first, as Python's sort of
 *                           (length, index) pairs with reverse=True), each into the first bin with
 *                           room; a tournament tree over the bins' room finds it in O(log bins).
 *   best_fit_decreasing     the same order, each into the bin it fills most tightly (least room
 *                           left that still fits; ties: the earliest bin); a balanced tree.
 *   first_fit_shuffle       the order Python's random.seed(seed); random.shuffle(...) gives a list
 *                           of n items (a Mersenne Twister identical to CPython's), then first fit.
 *   modified_first_fit_decreasing   Johnson & Garey's MFFD in NeMo RL's five phases, including its
 *                           last phase as written there: each leftover goes into the least-filled
 *                           leftover bin when it fits, else into a new one (and, as NeMo RL's
 *                           current version does, no empty bin when nothing is left over).
 *   concatenative           input order, a new bin whenever the next sequence does not fit.
 *   greedy_knapsack         one bin at a time, always adding the largest sequence that still fits
 *                           (ties: the higher index).
 *   balanced_greedy_knapsack  longest first (ties: the lower index), each into the least-filled of
 *                           ceil(sum / capacity) + delta bins (ties: the earliest), or into a new
 *                           bin when it does not fit there; bins left empty are dropped.
 * max_sequences_per_bin caps the sequences of a bin as NeMo RL does (MFFD then runs first fit
 * decreasing, as NeMo RL does); for the knapsacks a full bin simply stops taking sequences.
 * Differences from the Python, all deliberate: a length that is zero or negative is an error
 * (NeMo RL only rejects it in MFFD), so is one longer than the capacity (Megatron's balanced
 * knapsack prints a warning and drops the sequence).
 *
 * Bin-count constraints, exactly NeMo RL's SequencePacker._adjust_bin_count: the target is
 * max(bins, min_bin_count) rounded up to a multiple of bin_count_multiple. Extra bins are never
 * added empty: bins are visited from the most sequences to the fewest (ties: the higher bin index
 * first), and each new bin receives the last sequence of the current source bin, which is drained
 * down to one sequence before the next source is used. Fewer sequences than target bins is an
 * error. NeMo RL sets both to the data-parallel size so every rank runs the same number of
 * microbatches (a rank with fewer would leave its pipeline waiting at the first collective).
 *
 * The distributed plan (pp_pack_plan_build) does what NeMo RL's shard_by_batch_size and Megatron
 * policy worker do for one global batch:
 *   1. pad each sequence to a multiple of seq_multiple (tp*cp*2 when cp > 1, else tp) and pack
 *      the padded lengths;
 *   2. constraints: min_bin_count = bin_count_multiple = dp, or dp*pp with virtual pipelining
 *      (Megatron's interleaved schedule runs microbatches in groups of pp);
 *   3. bins to (dp rank, microbatch): round robin, bin b -> rank b % dp, microbatch b / dp (NeMo
 *      RL's), or balanced by tokens or by attention cost (sum of squared padded lengths);
 *   4. padding of each microbatch: its padded total rounded up to bin_multiple; with pp > 1 (and
 *      no variable_shapes) every microbatch of a rank is padded to the rank's largest, because the
 *      pipeline's send/receive buffers have one shape. The tail padding belongs to the bin's last
 *      sequence, whose padded length grows (as NeMo RL's _pack_sequences_for_megatron does), so
 *      cu_seqlens_padded ends at the microbatch's token count and a CP split stays exact.
 *
 * Index arrays are plain int32 (tokens within one microbatch) and int64 (rows of whole-batch
 * tensors), laid out as documented at each field, so pipepar_cuda.cu can move bytes by them.
 * ============================================================================================ */

typedef enum pp_pack_algo {
    PP_PACK_FFD = 0,                    /* "first_fit_decreasing" (the default) */
    PP_PACK_BFD,                        /* "best_fit_decreasing" */
    PP_PACK_FIRST_FIT_SHUFFLE,          /* "first_fit_shuffle" */
    PP_PACK_MFFD,                       /* "modified_first_fit_decreasing" */
    PP_PACK_CONCATENATIVE,              /* "concatenative" */
    PP_PACK_GREEDY_KNAPSACK,            /* "greedy_knapsack" */
    PP_PACK_BALANCED_GREEDY_KNAPSACK,   /* "balanced_greedy_knapsack" */
    PP_PACK_ALGO_COUNT
} pp_pack_algo;

typedef struct pp_pack_config {
    int32_t capacity;           /* tokens a bin holds, >= 1 (NeMo RL's max_tokens_per_microbatch) */
    pp_pack_algo algo;          /* 0 means first_fit_decreasing */
    int min_bin_count;          /* at least this many bins; 0 means no minimum */
    int bin_count_multiple;     /* the bin count is a multiple of this; 0 means 1 */
    int max_sequences_per_bin;  /* 0 means unlimited */
    uint64_t seed;              /* first_fit_shuffle: as Python's random.seed(seed) */
    int knapsack_delta;         /* balanced_greedy_knapsack: bins beyond ceil(sum/capacity) to
                                   start with; 0 means 20 (Megatron's default), negative means 0 */
} pp_pack_config;

/* Bins in compressed-row form: bin b holds seqs[bin_offsets[b] .. bin_offsets[b+1]-1], indices
 * into the caller's length array, in the order the algorithm placed them. */
typedef struct pp_packing {
    int num_seqs;
    int num_bins;
    int32_t capacity;
    int32_t *bin_offsets;   /* [num_bins + 1] */
    int32_t *seqs;          /* [num_seqs] */
    int32_t *bin_tokens;    /* [num_bins] sum of the packed lengths of each bin (<= capacity) */
    int64_t total_tokens;   /* sum of all lengths */
} pp_packing;

PIPEPAR_API const char *pp_pack_algo_name(pp_pack_algo algo);   /* "first_fit_decreasing" */
/* Accepts the names above in any case and the short forms ffd, bfd, ffs, mffd, concat, knapsack,
 * balanced_knapsack. */
PIPEPAR_API pp_status pp_pack_algo_parse(const char *name, pp_pack_algo *algo, pp_error *err);

/* Packs n lengths (each 1 .. capacity) and applies the bin-count constraints. n may be 0 (no
 * bins, unless min_bin_count asks for some: then the too-few-sequences error). */
PIPEPAR_API pp_status pp_pack(const int32_t *lengths, int n, const pp_pack_config *cfg,
                              pp_packing **out, pp_error *err);
PIPEPAR_API void pp_packing_free(pp_packing *p);
/* ceil(sum of lengths / capacity): no packing can use fewer bins. 0 for bad arguments. */
PIPEPAR_API int64_t pp_pack_lower_bound(const int32_t *lengths, int n, int32_t capacity);

typedef enum pp_pack_assign {
    PP_ASSIGN_ROUND_ROBIN = 0,  /* bin b -> dp rank b % dp, microbatch b / dp (NeMo RL) */
    PP_ASSIGN_TOKENS,           /* balance padded tokens per rank, largest bin first */
    PP_ASSIGN_ATTENTION         /* balance the sum of squared padded sequence lengths per rank */
} pp_pack_assign;

typedef struct pp_pack_plan_config {
    pp_pack_config pack;        /* capacity (required), algo, ...; min_bin_count and
                                   bin_count_multiple 0 mean the distributed default: dp, or
                                   dp*pp when vpp > 1. An explicit bin_count_multiple must be a
                                   multiple of dp. */
    int dp, pp, vpp, tp, cp;    /* parallel sizes; 0 means 1 */
    int seq_multiple;           /* pad each sequence to a multiple of this; 0 means tp*cp*2 when
                                   cp > 1, else tp (NeMo RL's sequence_length_pad_multiple); with
                                   cp > 1 it must be a multiple of 2*cp */
    int bin_multiple;           /* pad each microbatch's token count to a multiple of this (NeMo
                                   RL pads to 16*2cp*tp for FP8); 0 means 1; with cp > 1 a value
                                   above 1 must be a multiple of 2*cp */
    int variable_shapes;        /* pp > 1: nonzero lets microbatches keep their own lengths */
    int same_shape_all_ranks;   /* pp > 1: pad to the largest microbatch over all dp ranks
                                   instead of each rank's own largest (NeMo RL: each rank's) */
    pp_pack_assign assign;      /* 0 means round robin */
} pp_pack_plan_config;

typedef struct pp_pack_plan {
    pp_packing *bins;           /* the bins over padded_lengths (indices into the caller's array) */
    int num_seqs, num_bins;
    int dp, num_microbatches;   /* microbatches per dp rank: num_bins / dp */
    int pp, tp, cp, seq_multiple, bin_multiple;
    int32_t *lengths;           /* [num_seqs] copy of the caller's lengths */
    int32_t *padded_lengths;    /* [num_seqs] lengths rounded up to seq_multiple: what was packed */
    int64_t *seq_starts;        /* [num_seqs] exclusive prefix sums of lengths: where each sequence
                                   starts when the sequences lie back to back in index order */
    int32_t *bin_rank;          /* [num_bins] the dp rank that runs bin b */
    int32_t *bin_microbatch;    /* [num_bins] its microbatch index on that rank */
    int32_t *microbatch_bin;    /* [dp * num_microbatches] bin of (rank, mb) at rank*num_microbatches+mb */
    int32_t *bin_real_tokens;   /* [num_bins] sum of the unpadded lengths */
    int32_t *bin_padded_tokens; /* [num_bins] the microbatch's token count after all padding */
    int32_t *cu_seqlens;        /* [num_seqs + num_bins]: bin b's count_b+1 entries begin at
                                   bins->bin_offsets[b] + b; 0, l0, l0+l1, ... (unpadded) */
    int32_t *cu_seqlens_padded; /* same layout; padded, ending at bin_padded_tokens[b] */
} pp_pack_plan;

PIPEPAR_API pp_status pp_pack_plan_build(const int32_t *lengths, int n, const pp_pack_plan_config *cfg,
                                         pp_pack_plan **out, pp_error *err);
PIPEPAR_API void pp_pack_plan_free(pp_pack_plan *plan);
/* Sequences in bin b; its cu_seqlens and cu_seqlens_padded (count+1 entries each); NULL/-1 for
 * a bin out of range. */
PIPEPAR_API int pp_pack_plan_bin_size(const pp_pack_plan *plan, int bin);
PIPEPAR_API const int32_t *pp_pack_plan_cu_seqlens(const pp_pack_plan *plan, int bin);
PIPEPAR_API const int32_t *pp_pack_plan_cu_seqlens_padded(const pp_pack_plan *plan, int bin);
/* Gather map of one microbatch: rows[t] for t in 0 .. bin_padded_tokens[bin]-1 is the row of the
 * caller's flat token tensor that packed position t takes, or -1 for padding. Sequence s starts
 * at row seq_offsets[s]; NULL means the sequences lie back to back in index order (the exclusive
 * prefix sums of the unpadded lengths); for a padded [batch, seq_len] tensor pass s * seq_len. */
PIPEPAR_API pp_status pp_pack_plan_gather(const pp_pack_plan *plan, int bin, const int64_t *seq_offsets,
                                          int64_t *rows, pp_error *err);
