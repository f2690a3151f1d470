
/* ============================================================================================
 * >>replay
 * Router replay ("R3", rollout routing replay): an RL trainer makes its MoE routers pick the
 * experts the inference engine picked when it generated the samples, so training follows the
 * routes the samples were drawn with (Megatron-LM's RouterReplay, NeMo RL's and verl's router
 * replay, slime's routing replay). The rollout records, for every token, the top-k expert ids of
 * every MoE layer: a tensor [recorded_tokens, payload_layers, topk] in the rollout's token order
 * (all of sequence 0, then sequence 1, ...). Training runs the tokens packed, CP-split and, with
 * sequence parallelism, TP-split, and each pipeline stage holds only some layers. So the router
 * of a local MoE layer on (pp rank, virtual stage, microbatch, cp rank) needs the rows of the
 * recording for its local tokens, in local order, at that layer's slot. This section computes
 * both: which recorded row each local token takes and which slot each local MoE layer reads.
 *
 * Which layers are MoE (pp_moe_layout), Megatron-LM's rules: with an integer moe_layer_freq N,
 * decoder layer i (0-based) is MoE when i % N == 0; DeepSeek's first_k_dense_replace makes layers
 * 0 .. k-1 dense; a pattern (Megatron's list form, e.g. [0]*3+[1]*58) says it layer by layer.
 * The recording's layer axis is either compressed, one slot per MoE layer in layer order, or
 * full, one slot per decoder layer (vLLM's layout; slot = layer index), as NeMo RL accepts both.
 *
 * The map of one (stage, microbatch, cp rank):
 *     layers[l], payload[l]   for the stage's MoE layers in [first_layer, last_layer), in order:
 *                             the 0-based decoder layer (Megatron's layer_number - 1) and its slot;
 *                             dense layers get none, and a stage with no MoE layer gets an empty map.
 *     rows[t]                 for each local token t (the rank's THD order: pp_cp_plan_rows over
 *                             the recording, then this tp rank's piece): the recorded row, or -1
 *                             for padding. The replay tensor of layer l is
 *                             replay[l][t][k] = rows[t] >= 0 ? recording[rows[t]][payload[l]][k] : -1,
 *                             -1 being the missing-route sentinel NeMo RL's RouterReplay patch
 *                             routes normally (pp_replay_gather does this on the host; the CUDA
 *                             kernel of pipepar_cuda.cu does it on the device).
 * With sequence_parallel and tp > 1 the local tokens are split further into tp contiguous
 * pieces and the map keeps this tp rank's piece (NeMo RL's _split_for_sequence_parallel).
 * ============================================================================================ */

typedef struct pp_moe_layout {
    int num_layers;                 /* decoder layers of the whole model, >= 1 */
    int first_k_dense;              /* layers 0 .. first_k_dense-1 are dense */
    int moe_freq;                   /* 0 means 1: a layer i >= first_k_dense is MoE when
                                       i % moe_freq == 0 (Megatron's integer moe_layer_freq) */
    const unsigned char *pattern;   /* optional [num_layers], nonzero = MoE; overrides the two above */
    int payload_layers;             /* the recording's layer axis: 0 means compressed (one slot per
                                       MoE layer); num_layers means one slot per decoder layer */
} pp_moe_layout;

/* 1 when decoder layer `layer` (0-based) is MoE, 0 when dense, -1 for a bad layout or layer. */
PIPEPAR_API int pp_moe_is_moe(const pp_moe_layout *m, int layer);
/* MoE layers of the model; -1 for a bad layout. */
PIPEPAR_API int pp_moe_count(const pp_moe_layout *m);
/* The MoE layers among decoder layers [first_layer, last_layer): *count of them, their layer
 * indices and their recording slots (either array may be NULL; each needs room for
 * last_layer - first_layer). */
PIPEPAR_API pp_status pp_moe_stage_layers(const pp_moe_layout *m, int first_layer, int last_layer, int32_t *layers,
                                          int32_t *payload, int *count, pp_error *err);

typedef struct pp_replay_config {
    pp_moe_layout model;
    int first_layer, last_layer;    /* this (pp rank, virtual stage)'s decoder layers [first, last) */
    int cp_rank;                    /* which of the plan's cp ranks */
    int tp, tp_rank;                /* 0 means 1, 0 */
    int sequence_parallel;          /* nonzero: the local tokens are split over the tp ranks */
    const int64_t *record_offsets;  /* optional [plan->num_seqs]: the recorded row of each sequence's
                                       first token; NULL: the sequences lie back to back in index
                                       order (plan->seq_starts) */
} pp_replay_config;

typedef struct pp_replay_map {
    int num_layers;         /* MoE layers on the stage */
    int32_t *layers;        /* [num_layers] 0-based decoder layer of each */
    int32_t *payload;       /* [num_layers] its slot on the recording's layer axis */
    int32_t num_tokens;     /* local tokens (0 when num_layers is 0: nothing to replay) */
    int64_t *rows;          /* [num_tokens] recorded row of each local token in local order, -1 = padding */
} pp_replay_map;

/* From a layer split (>>layers): the stage of (pp_rank, chunk) gives cfg->first_layer and
 * cfg->last_layer, and cfg->model takes the split's decoder: num_layers, and the MoE layers it
 * marks (from its moe_layer_freq or a hybrid pattern's 'E'; model.pattern points into
 * l->is_moe, so l must outlive cfg's use). cfg->model.payload_layers and the rest stay. */
PIPEPAR_API pp_status pp_replay_config_from_layers(const pp_layers *l, int pp_rank, int chunk, pp_replay_config *cfg,
                                                   pp_error *err);
/* The map of microbatch `bin` of a pack plan (the plan's cp splits it) for one stage and rank. */
PIPEPAR_API pp_status pp_replay_map_build(const pp_pack_plan *plan, int bin, const pp_replay_config *cfg,
                                          pp_replay_map **out, pp_error *err);
PIPEPAR_API void pp_replay_map_free(pp_replay_map *m);
/* Host reference of the replay gather: recording is [recorded_rows, payload_layers, topk] int32;
 * dst is [map->num_layers, map->num_tokens, topk]. Fails when a row or slot is out of range. */
PIPEPAR_API pp_status pp_replay_gather(const pp_replay_map *map, const int32_t *recording, int64_t recorded_rows,
                                       int payload_layers, int topk, int32_t *dst, pp_error *err);
