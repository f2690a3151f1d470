/* ============================================================================================
 * >>layers
 * Which layers each (pipeline rank, virtual stage) builds, and what their global indices are.
 *
 * Stages. The decoder is cut into num_stages = pp * vpp contiguous pieces. As in Megatron-LM,
 * stage s = vpp_rank * pp + pp_rank: it lives on rank s % pp as its chunk s / pp, and stage s
 * holds the decoder layers right after those of stage s - 1. (For a V-shaped schedule, map
 * stage -> rank with pp_stage_rank of the schedule; the layers of a stage stay the same. For
 * DualPipe, cut the model into pp pieces, not 2 * pp: its stage s runs model stage
 * pp_stage_model_stage(schedule, s), so every rank holds two pieces and each piece lives on
 * two ranks.)
 * Every form below ends in the same answer, a pp_layers: per stage, the global decoder layers
 * [first, first + count), the items it holds (embedding, decoder layers, MTP, loss), and for
 * each layer type an offset and count in that type's own index space.
 *
 * The ways people describe a split (pp_layers_config; the same rules Megatron-LM applies):
 *   even        num_layers / pp per rank, / vpp per chunk; both must divide.
 *   uneven      first / last = num_layers_in_first/last_pipeline_stage: rank 0 (rank pp-1)
 *               takes that many layers, split evenly over its vpp chunks; the rest divide
 *               evenly over the middle ranks. Moonlight-16B: 27 layers, pp=2, first=13 ->
 *               rank 0 holds [0,13), rank 1 holds [13,27).
 *   accounted   account_for_embedding / account_for_loss_in_pipeline_split: the embedding
 *               (loss) counts as one layer of the first (last) stage in the even split, so that
 *               stage builds one decoder layer less. 30 layers, pp=4, both -> 7, 8, 8, 7.
 *   layout      pipeline_model_parallel_layout: stages separated by '|', one letter per item:
 *               E embedding, t decoder layer, m MTP depth, L loss; "X*N" repeats a letter,
 *               "(...)*N" a group; commas are ignored. "Et*3|(tt|)*29,m|L" is 32 stages;
 *               their number must be a multiple of pp, and vpp = stages / pp. Rules: E exactly
 *               once and first, L exactly once and last, as many t as num_layers, every m after
 *               every t, all m in one stage and that stage the last chunk of its rank.
 *   hybrid      a hybrid (Mamba) layer pattern, one symbol per layer: M Mamba, * attention,
 *               - MLP, E MoE, G gated delta net, D DSA, + MLA, C CSA, H HCA, W sliding window;
 *               '|' between stages ("M*-M*-|M*-M*-": pp*vpp segments), "/..." MTP depths
 *               ("M*M-|M*M-/MM/MM": two MTP depths of "MM", on the last stage). Without '|' and
 *               pp > 1 it is split like the even / uneven forms (no vpp then).
 *   balanced    pp_layers_balance: given per-layer costs (and optionally memory with a
 *               per-stage cap), the contiguous split into pp*vpp stages whose largest stage
 *               cost is the smallest possible (exact), written as a layout string.
 *
 * Type-aware indices. A caller that keeps per-layer data for one kind of layer (router-replay
 * indices of MoE layers, MTP heads, Mamba states) asks pp_layers_type_range(l, s, type, ...):
 * e.g. PP_LAYER_MOE gives stage s's MoE layers as a range of MoE indices (0 = the model's first
 * MoE layer). Which decoder layers are MoE comes from a hybrid pattern's 'E' or, for transformer
 * decoders, from moe_layer_freq as Megatron reads --moe-layer-freq: "N" (layer i is MoE when
 * i % N == 0) or a list expression such as "[0]*3+[1]*58" (DeepSeek-V3: 3 dense, then MoE).
 *
 *     pp_layers_config cfg = { .num_layers = 27, .pp = 2, .first = 13, .moe_layer_freq = "[0]+[1]*26" };
 *     pp_layers *l;
 *     if (pp_layers_build(&cfg, &l, &err) != PP_OK) { puts(err.message); return 1; }
 *     pp_layers_stage_range(l, pp_layers_stage(l, rank, chunk), &first, &count, &err);
 *     for (g = first; g < first + count; g++) if (l->is_moe[g]) ...   // global layer g, MoE
 *     pp_layers_free(l);
 * ============================================================================================ */

/* Layer types. The first three are selections used in queries; the others are what an item is. */
typedef enum pp_layer_type {
    PP_LAYER_DECODER = 0,   /* every decoder layer: its index space is the global layer index */
    PP_LAYER_MOE,           /* decoder layers with an MoE MLP (hybrid 'E', or a 't' moe_layer_freq marks) */
    PP_LAYER_DENSE,         /* decoder layers without one */
    PP_LAYER_EMBEDDING,     /* 'E' of a layout: the input embedding (first stage) */
    PP_LAYER_LOSS,          /* 'L' of a layout: output layer and loss (last stage) */
    PP_LAYER_MTP,           /* 'm' of a layout: one multi-token-prediction depth */
    PP_LAYER_TRANSFORMER,   /* 't' of a layout: a transformer decoder layer */
    PP_LAYER_MAMBA,         /* hybrid 'M' */
    PP_LAYER_ATTENTION,     /* hybrid '*' */
    PP_LAYER_MLP,           /* hybrid '-' */
    PP_LAYER_GDN,           /* hybrid 'G' gated delta net */
    PP_LAYER_DSA,           /* hybrid 'D' DeepSeek sparse attention */
    PP_LAYER_MLA,           /* hybrid '+' multi-latent attention */
    PP_LAYER_CSA,           /* hybrid 'C' compressed sparse attention */
    PP_LAYER_HCA,           /* hybrid 'H' heavily compressed attention */
    PP_LAYER_SWA,           /* hybrid 'W' sliding-window attention */
    PP_LAYER_TYPE_COUNT
} pp_layer_type;

typedef enum pp_layers_form {
    PP_LAYERS_EVEN = 0,     /* even split (optionally accounting for embedding / loss) */
    PP_LAYERS_UNEVEN,       /* num_layers_in_first / last_pipeline_stage */
    PP_LAYERS_LAYOUT,       /* a pipeline_model_parallel_layout string */
    PP_LAYERS_HYBRID,       /* a hybrid layer pattern */
    PP_LAYERS_BALANCED,     /* pp_layers_balance */
    PP_LAYERS_FORM_COUNT
} pp_layers_form;

typedef struct pp_layers_config {
    int num_layers;         /* decoder layers (Megatron's num_layers); 0: count them in layout / hybrid */
    int pp;                 /* pipeline ranks; 0 means 1 */
    int vpp;                /* stages (model chunks) per rank; 0 means 1, or what layout / hybrid imply */
    int first;              /* num_layers_in_first_pipeline_stage (rank 0, all chunks); 0: not set */
    int last;               /* num_layers_in_last_pipeline_stage (rank pp-1); 0: not set */
    int account_for_embedding;  /* account_for_embedding_in_pipeline_split (0 / 1) */
    int account_for_loss;       /* account_for_loss_in_pipeline_split (0 / 1) */
    int mtp_layers;         /* mtp_num_layers, built on the last stage; layout / hybrid: 0 = as written */
    const char *layout;     /* pipeline_model_parallel_layout, e.g. "Et*3|(tt|)*29,m|L" */
    const char *hybrid;     /* hybrid layer pattern, e.g. "M*-M*-|M*-M*-" */
    const char *moe_layer_freq; /* --moe-layer-freq for transformer decoders: "N" or "[0]*3+[1]*58";
                                   NULL: no 't' layer is MoE */
} pp_layers_config;

typedef struct pp_layers {
    pp_layers_form form;
    int pp, vpp, num_stages;    /* num_stages = pp * vpp */
    int num_layers;             /* decoder layers of the model */
    int mtp_layers;             /* MTP depths */
    int mtp_standalone;         /* layout: the MTP sits on a rank other than the last (Megatron's
                                   mtp_standalone) */
    int *first;                 /* [num_stages] stage s builds global decoder layers */
    int *count;                 /* [num_stages]   [first[s], first[s] + count[s]) */
    int num_items;              /* embedding, decoder layers, MTP depths and loss, in stage order */
    int *stage_items;           /* [num_stages + 1] stage s holds items [stage_items[s], stage_items[s+1]) */
    unsigned char *item_type;   /* [num_items] pp_layer_type of each item (never DECODER/DENSE) */
    unsigned char *is_moe;      /* [num_layers] 1 when global decoder layer g has an MoE MLP */
    unsigned char *layer_type;  /* [num_layers] pp_layer_type of global decoder layer g */
    int *type_first;            /* [num_stages * PP_LAYER_TYPE_COUNT] stage s, type t at [s * COUNT + t]: */
    int *type_count;            /*   its items of type t are indices [type_first, + type_count) of type t */
    char *layout;               /* the same split as a Megatron layout string (parses back to it);
                                   NULL for hybrid patterns */
    char *pattern;              /* hybrid: the pattern with '|' between every two stages, MTP suffix kept */
    double *stage_cost;         /* balanced only: [num_stages] cost and memory of each stage; else NULL */
    double *stage_memory;
    double max_cost;            /* balanced only: the largest stage cost (the minimised bottleneck) */
} pp_layers;

PIPEPAR_API const char *pp_layer_type_name(pp_layer_type type);     /* "moe", "mamba", ... */
PIPEPAR_API pp_status pp_layer_type_parse(const char *name, pp_layer_type *type, pp_error *err);
PIPEPAR_API const char *pp_layers_form_name(pp_layers_form form);   /* "uneven", ... */

/* Validates cfg with Megatron-LM's rules (and a few stricter ones where Megatron would silently
 * build the wrong model, e.g. first + last > num_layers) and computes every stage's layers. */
PIPEPAR_API pp_status pp_layers_build(const pp_layers_config *cfg, pp_layers **out, pp_error *err);
PIPEPAR_API void pp_layers_free(pp_layers *l);

/* Stage of (rank, chunk) = chunk * pp + rank, Megatron's numbering; -1 when out of range. */
PIPEPAR_API int pp_layers_stage(const pp_layers *l, int rank, int chunk);
/* Global decoder layers [*first, *first + *count) of a stage (what Megatron's
 * get_transformer_layer_offset and get_num_layers_to_build return for it). */
PIPEPAR_API pp_status pp_layers_stage_range(const pp_layers *l, int stage, int *first, int *count,
                                            pp_error *err);
/* The same in one type's index space: with PP_LAYER_MOE, the stage's MoE layers are MoE layers
 * [*first, *first + *count) of the model; with PP_LAYER_MTP, its MTP depths. */
PIPEPAR_API pp_status pp_layers_type_range(const pp_layers *l, int stage, pp_layer_type type,
                                           int *first, int *count, pp_error *err);
/* The stage that builds global decoder layer g; -1 when out of range. */
PIPEPAR_API int pp_layers_layer_stage(const pp_layers *l, int layer);
/* Index of global decoder layer g among the decoder layers of `type` (e.g. its MoE index);
 * -1 when g is out of range or not of that type. */
PIPEPAR_API int pp_layers_type_index(const pp_layers *l, int layer, pp_layer_type type);
/* A stage's items as text: layout spelling "Et*13", hybrid symbols "M*-M". Returns the length
 * it needs (like snprintf); -1 when the stage is out of range. */
PIPEPAR_API int pp_layers_stage_text(const pp_layers *l, int stage, char *buf, size_t size);

/* One line per stage: "stage S rank R chunk C layers [a,b) items TEXT" then, for each other
 * type the model has, " TYPE [a,b)" in that type's index space; then "layout STRING" (or
 * "pattern STRING"). JSON: the same as one object. */
PIPEPAR_API pp_status pp_layers_write_text(const pp_layers *l, FILE *out, pp_error *err);
PIPEPAR_API pp_status pp_layers_write_json(const pp_layers *l, FILE *out, pp_error *err);

/* Balanced split. Stage costs add up in layer order: the first stage also carries the
 * embedding, the last the MTP depths and the loss. The result minimises the largest stage cost
 * exactly (dynamic programme over all contiguous splits, O(stages * num_layers^2)); among the
 * splits that reach it, the one with the smallest sum of squared stage costs. Stages may be
 * empty. memory_cap bounds every stage's memory (with vpp > 1 a rank holds vpp stages: give it
 * its budget / vpp); an impossible cap is an error that says how many stages would fit. */
typedef struct pp_balance_config {
    int num_layers;             /* decoder layers, >= 1 */
    int pp;                     /* 0 means 1 */
    int vpp;                    /* 0 means 1 */
    const double *cost;         /* [num_layers] time of each decoder layer, >= 0; NULL: 1 each */
    const double *memory;       /* [num_layers] memory of each decoder layer, >= 0; NULL: none */
    double memory_cap;          /* most memory a stage may hold; 0: no cap (needs memory when set) */
    double embedding_cost, embedding_memory;    /* on the first stage */
    double loss_cost, loss_memory;              /* on the last stage */
    int mtp_layers;             /* MTP depths, on the last stage */
    double mtp_cost, mtp_memory;                /* of each depth */
    const char *moe_layer_freq; /* as in pp_layers_config, for the type-aware indices */
} pp_balance_config;

PIPEPAR_API pp_status pp_layers_balance(const pp_balance_config *cfg, pp_layers **out, pp_error *err);
