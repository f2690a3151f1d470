
/* --- >>replay (implementation) ------------------------------------------------------------ */

static pp_status pp__moe_check(const pp_moe_layout *m, pp_error *err)
{
    int moe, i;
    if (!m) return pp__fail(err, PP_EINVAL, "model: must not be NULL");
    if (m->num_layers < 1) return pp__fail(err, PP_EINVAL, "num_layers=%d: must be at least 1", m->num_layers);
    if (m->first_k_dense < 0 || m->first_k_dense > m->num_layers)
        return pp__fail(err, PP_EINVAL, "first_k_dense=%d: must be in 0 .. num_layers (%d)", m->first_k_dense,
                        m->num_layers);
    if (m->moe_freq < 0) return pp__fail(err, PP_EINVAL, "moe_freq=%d: must be positive (0 means 1)", m->moe_freq);
    for (moe = 0, i = 0; i < m->num_layers; i++) moe += pp_moe_is_moe(m, i) == 1;
    if (m->payload_layers != 0 && m->payload_layers != moe && m->payload_layers != m->num_layers)
        return pp__fail(err, PP_EINVAL, "payload_layers=%d: the recording's layer axis must hold one slot per MoE "
                        "layer (%d) or per decoder layer (%d)", m->payload_layers, moe, m->num_layers);
    return PP_OK;
}

int pp_moe_is_moe(const pp_moe_layout *m, int layer)
{
    int freq;
    if (!m || m->num_layers < 1 || layer < 0 || layer >= m->num_layers) return -1;
    if (m->pattern) return m->pattern[layer] != 0;
    freq = m->moe_freq > 0 ? m->moe_freq : 1;
    return layer >= m->first_k_dense && layer % freq == 0;
}

int pp_moe_count(const pp_moe_layout *m)
{
    int i, n = 0;
    if (pp__moe_check(m, NULL) != PP_OK) return -1;
    for (i = 0; i < m->num_layers; i++) n += pp_moe_is_moe(m, i) == 1;
    return n;
}

pp_status pp_moe_stage_layers(const pp_moe_layout *m, int first_layer, int last_layer, int32_t *layers,
                              int32_t *payload, int *count, pp_error *err)
{
    pp_status st = pp__moe_check(m, err);
    int i, k = 0, ordinal = 0, full;
    if (st != PP_OK) return st;
    if (!count) return pp__fail(err, PP_EINVAL, "count: must not be NULL");
    if (first_layer < 0 || last_layer > m->num_layers || first_layer > last_layer)
        return pp__fail(err, PP_EINVAL, "layers [%d, %d): must lie within [0, num_layers=%d) with first <= last",
                        first_layer, last_layer, m->num_layers);
    full = m->payload_layers == m->num_layers && m->payload_layers != pp_moe_count(m);
    for (i = 0; i < last_layer; i++) {
        if (pp_moe_is_moe(m, i) != 1) continue;
        if (i >= first_layer) {
            if (layers) layers[k] = i;
            if (payload) payload[k] = full ? i : ordinal;
            k++;
        }
        ordinal++;
    }
    *count = k;
    return pp__ok(err);
}

pp_status pp_replay_config_from_layers(const pp_layers *l, int pp_rank, int chunk, pp_replay_config *cfg, pp_error *err)
{
    int stage, first, count;
    pp_status st;
    if (!l || !cfg) return pp__fail(err, PP_EINVAL, "pp_replay_config_from_layers: l and cfg must not be NULL");
    stage = pp_layers_stage(l, pp_rank, chunk);
    if (stage < 0)
        return pp__fail(err, PP_EINVAL, "pp_rank=%d, chunk=%d: the split has pp=%d ranks of vpp=%d chunks", pp_rank, chunk,
                        l->pp, l->vpp);
    if ((st = pp_layers_stage_range(l, stage, &first, &count, err)) != PP_OK) return st;
    cfg->model.num_layers = l->num_layers;
    cfg->model.first_k_dense = 0;
    cfg->model.moe_freq = 0;
    cfg->model.pattern = l->is_moe;
    cfg->first_layer = first;
    cfg->last_layer = first + count;
    return pp__ok(err);
}

void pp_replay_map_free(pp_replay_map *m)
{
    if (!m) return;
    PIPEPAR_FREE(m->layers);
    PIPEPAR_FREE(m->payload);
    PIPEPAR_FREE(m->rows);
    PIPEPAR_FREE(m);
}

pp_status pp_replay_map_build(const pp_pack_plan *plan, int bin, const pp_replay_config *cfg, pp_replay_map **out,
                              pp_error *err)
{
    pp_replay_map *m;
    int64_t *rows = NULL;
    int tp, span, count;
    pp_status st;
    if (!out) return pp__fail(err, PP_EINVAL, "pp_replay_map_build: out must not be NULL");
    *out = NULL;
    if (!plan || !cfg) return pp__fail(err, PP_EINVAL, "pp_replay_map_build: plan and cfg must not be NULL");
    if (bin < 0 || bin >= plan->num_bins)
        return pp__fail(err, PP_EINVAL, "bin=%d: must be in 0 .. %d", bin, plan->num_bins - 1);
    if (cfg->cp_rank < 0 || cfg->cp_rank >= plan->cp)
        return pp__fail(err, PP_EINVAL, "cp_rank=%d: must be in 0 .. cp-1 = %d", cfg->cp_rank, plan->cp - 1);
    tp = cfg->tp ? cfg->tp : 1;
    if (tp < 1) return pp__fail(err, PP_EINVAL, "tp=%d: must be at least 1 (0 means 1)", cfg->tp);
    if (cfg->tp_rank < 0 || cfg->tp_rank >= tp)
        return pp__fail(err, PP_EINVAL, "tp_rank=%d: must be in 0 .. tp-1 = %d", cfg->tp_rank, tp - 1);
    if ((st = pp_moe_stage_layers(&cfg->model, cfg->first_layer, cfg->last_layer, NULL, NULL, &count, err)) != PP_OK)
        return st;
    m = (pp_replay_map *)pp__calloc(1, sizeof(pp_replay_map));
    if (!m) return pp__fail(err, PP_ENOMEM, "pp_replay_map_build: out of memory");
    span = cfg->last_layer - cfg->first_layer;
    m->layers = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(span > 0 ? span : 1));
    m->payload = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(span > 0 ? span : 1));
    if (!m->layers || !m->payload) goto oom;
    pp_moe_stage_layers(&cfg->model, cfg->first_layer, cfg->last_layer, m->layers, m->payload, &m->num_layers, NULL);
    if (m->num_layers > 0) {
        int32_t local = plan->bin_padded_tokens[bin] / plan->cp;
        if (cfg->sequence_parallel && tp > 1 && local % tp) {
            st = pp__fail(err, PP_EINVAL, "sequence_parallel: the %d tokens of cp rank %d do not split evenly over tp=%d "
                          "(pad sequences to a multiple of tp*cp*2)", (int)local, cfg->cp_rank, tp);
            pp_replay_map_free(m);
            return st;
        }
        rows = (int64_t *)PIPEPAR_MALLOC(sizeof(int64_t) * (size_t)(local > 0 ? local : 1));
        if (!rows) goto oom;
        if ((st = pp_cp_plan_rows(plan, bin, cfg->cp_rank, cfg->record_offsets, rows, err)) != PP_OK) {
            PIPEPAR_FREE(rows);
            pp_replay_map_free(m);
            return st;
        }
        if (cfg->sequence_parallel && tp > 1) {   /* keep this tp rank's contiguous piece */
            m->num_tokens = local / tp;
            memmove(rows, rows + (size_t)cfg->tp_rank * (size_t)m->num_tokens, sizeof(int64_t) * (size_t)m->num_tokens);
        } else {
            m->num_tokens = local;
        }
        m->rows = rows;
        rows = NULL;
    }
    *out = m;
    return pp__ok(err);
oom:
    PIPEPAR_FREE(rows);
    pp_replay_map_free(m);
    return pp__fail(err, PP_ENOMEM, "pp_replay_map_build: out of memory");
}

pp_status pp_replay_gather(const pp_replay_map *map, const int32_t *recording, int64_t recorded_rows, int payload_layers,
                           int topk, int32_t *dst, pp_error *err)
{
    int l, k;
    int32_t t;
    if (!map || !dst || (!recording && recorded_rows > 0))
        return pp__fail(err, PP_EINVAL, "pp_replay_gather: map, recording and dst must not be NULL");
    if (topk < 1) return pp__fail(err, PP_EINVAL, "topk=%d: must be at least 1", topk);
    if (payload_layers < 1) return pp__fail(err, PP_EINVAL, "payload_layers=%d: must be at least 1", payload_layers);
    for (l = 0; l < map->num_layers; l++)
        if (map->payload[l] < 0 || map->payload[l] >= payload_layers)
            return pp__fail(err, PP_EINVAL, "layer %d: slot %d is outside the recording's %d layer slots",
                            (int)map->layers[l], (int)map->payload[l], payload_layers);
    for (t = 0; t < map->num_tokens; t++)
        if (map->rows[t] >= recorded_rows)
            return pp__fail(err, PP_EINVAL, "local token %d: recorded row %lld is past the recording's %lld rows",
                            (int)t, (long long)map->rows[t], (long long)recorded_rows);
    for (l = 0; l < map->num_layers; l++)
        for (t = 0; t < map->num_tokens; t++) {
            int32_t *d = dst + ((size_t)l * (size_t)map->num_tokens + (size_t)t) * (size_t)topk;
            int64_t row = map->rows[t];
            const int32_t *s = row >= 0 ? recording + ((size_t)row * (size_t)payload_layers + (size_t)map->payload[l]) *
                                                          (size_t)topk : NULL;
            for (k = 0; k < topk; k++) d[k] = s ? s[k] : -1;
        }
    return pp__ok(err);
}
