
/* --- >>cp (implementation) ---------------------------------------------------------------- */

static pp_status pp__cp_check(const int32_t *cu, int num_seqs, int cp, int rank, int need_rank, pp_error *err)
{
    int i;
    if (cp < 1) return pp__fail(err, PP_EINVAL, "cp=%d: must be at least 1", cp);
    if (need_rank && (rank < 0 || rank >= cp))
        return pp__fail(err, PP_EINVAL, "rank=%d: must be in 0 .. cp-1 = %d", rank, cp - 1);
    if (num_seqs < 0) return pp__fail(err, PP_EINVAL, "num_seqs=%d: must be at least 0", num_seqs);
    if (!cu) return pp__fail(err, PP_EINVAL, "cu_seqlens_padded: must not be NULL");
    if (cu[0] != 0) return pp__fail(err, PP_EINVAL, "cu_seqlens_padded[0]=%d: must be 0", (int)cu[0]);
    for (i = 0; i < num_seqs; i++) {
        int64_t len = (int64_t)cu[i + 1] - cu[i];
        if (len < 0)
            return pp__fail(err, PP_EINVAL, "cu_seqlens_padded[%d]=%d: smaller than the entry before it (%d)", i + 1,
                            (int)cu[i + 1], (int)cu[i]);
        if (cp > 1 && len % (2 * (int64_t)cp))
            return pp__fail(err, PP_EINVAL, "sequence %d: padded length %lld is not a multiple of 2*cp=%d (pad each "
                            "sequence to a multiple of 2*cp before splitting)", i, (long long)len, 2 * cp);
    }
    return PP_OK;
}

/* Rank r's positions, sequence by sequence: chunk r, then chunk 2*cp-1-r. cp = 1 keeps every
 * position in order (no split, so no length rule either). */
static void pp__cp_fill(const int32_t *cu, int num_seqs, int cp, int rank, int32_t *index)
{
    int i, j = 0;
    if (cp == 1) {
        for (j = 0; j < cu[num_seqs]; j++) index[j] = j;
        return;
    }
    for (i = 0; i < num_seqs; i++) {
        int32_t half = (cu[i + 1] - cu[i]) / (2 * cp), t;
        int32_t a = cu[i] + rank * half, b = cu[i] + (2 * cp - 1 - rank) * half;
        for (t = 0; t < half; t++) index[j++] = a + t;
        for (t = 0; t < half; t++) index[j++] = b + t;
    }
}

pp_status pp_cp_thd_indices(const int32_t *cu_seqlens_padded, int num_seqs, int cp, int rank, int32_t *index,
                            pp_error *err)
{
    pp_status st = pp__cp_check(cu_seqlens_padded, num_seqs, cp, rank, 1, err);
    if (st != PP_OK) return st;
    if (!index) return pp__fail(err, PP_EINVAL, "index: must not be NULL");
    pp__cp_fill(cu_seqlens_padded, num_seqs, cp, rank, index);
    return pp__ok(err);
}

pp_status pp_cp_thd_gather(const int32_t *cu_seqlens_padded, int num_seqs, int cp, int32_t *source, pp_error *err)
{
    pp_status st = pp__cp_check(cu_seqlens_padded, num_seqs, cp, 0, 0, err);
    int32_t local;
    int r, i;
    if (st != PP_OK) return st;
    if (!source) return pp__fail(err, PP_EINVAL, "source: must not be NULL");
    local = cu_seqlens_padded[num_seqs] / cp;
    if (cp == 1) {
        for (i = 0; i < local; i++) source[i] = i;
        return pp__ok(err);
    }
    for (r = 0; r < cp; r++) {
        int32_t j = 0;
        for (i = 0; i < num_seqs; i++) {
            const int32_t *cu = cu_seqlens_padded;
            int32_t half = (cu[i + 1] - cu[i]) / (2 * cp), t;
            int32_t a = cu[i] + r * half, b = cu[i] + (2 * cp - 1 - r) * half;
            for (t = 0; t < half; t++) source[a + t] = r * local + j++;
            for (t = 0; t < half; t++) source[b + t] = r * local + j++;
        }
    }
    return pp__ok(err);
}

pp_status pp_cp_thd_local_cu_seqlens(const int32_t *cu_seqlens_padded, int num_seqs, int cp, int32_t *local,
                                     pp_error *err)
{
    pp_status st = pp__cp_check(cu_seqlens_padded, num_seqs, cp, 0, 0, err);
    int i;
    if (st != PP_OK) return st;
    if (!local) return pp__fail(err, PP_EINVAL, "local: must not be NULL");
    for (i = 0; i <= num_seqs; i++) local[i] = cu_seqlens_padded[i] / cp;
    return pp__ok(err);
}

pp_status pp_cp_bshd_indices(int32_t seq_len, int cp, int rank, int32_t *index, pp_error *err)
{
    int32_t cu[2];
    pp_status st;
    if (seq_len < 0) return pp__fail(err, PP_EINVAL, "seq_len=%d: must be at least 0", (int)seq_len);
    cu[0] = 0; cu[1] = seq_len;
    if (cp > 1 && seq_len % (2 * (int64_t)cp))
        return pp__fail(err, PP_EINVAL, "seq_len=%d: must be a multiple of 2*cp=%d", (int)seq_len, 2 * cp);
    if ((st = pp__cp_check(cu, 1, cp, rank, 1, err)) != PP_OK) return st;
    if (!index) return pp__fail(err, PP_EINVAL, "index: must not be NULL");
    pp__cp_fill(cu, 1, cp, rank, index);
    return pp__ok(err);
}

pp_status pp_cp_bshd_gather(int32_t seq_len, int cp, int32_t *source, pp_error *err)
{
    int32_t cu[2];
    if (seq_len < 0) return pp__fail(err, PP_EINVAL, "seq_len=%d: must be at least 0", (int)seq_len);
    if (cp > 1 && seq_len % (2 * (int64_t)cp))
        return pp__fail(err, PP_EINVAL, "seq_len=%d: must be a multiple of 2*cp=%d", (int)seq_len, 2 * cp);
    cu[0] = 0; cu[1] = seq_len;
    return pp_cp_thd_gather(cu, 1, cp, source, err);
}

pp_status pp_cp_plan_indices(const pp_pack_plan *plan, int bin, int cp_rank, int32_t *index, pp_error *err)
{
    if (!plan) return pp__fail(err, PP_EINVAL, "pp_cp_plan_indices: plan must not be NULL");
    if (bin < 0 || bin >= plan->num_bins)
        return pp__fail(err, PP_EINVAL, "bin=%d: must be in 0 .. %d", bin, plan->num_bins - 1);
    return pp_cp_thd_indices(pp_pack_plan_cu_seqlens_padded(plan, bin), pp_pack_plan_bin_size(plan, bin), plan->cp,
                             cp_rank, index, err);
}

pp_status pp_cp_plan_rows(const pp_pack_plan *plan, int bin, int cp_rank, const int64_t *seq_offsets, int64_t *rows,
                          pp_error *err)
{
    int32_t *index, total, local, j;
    int64_t *packed;
    pp_status st;
    if (!plan || !rows) return pp__fail(err, PP_EINVAL, "pp_cp_plan_rows: plan and rows must not be NULL");
    if (bin < 0 || bin >= plan->num_bins)
        return pp__fail(err, PP_EINVAL, "bin=%d: must be in 0 .. %d", bin, plan->num_bins - 1);
    total = plan->bin_padded_tokens[bin];
    local = total / plan->cp;
    index = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(local > 0 ? local : 1));
    packed = (int64_t *)PIPEPAR_MALLOC(sizeof(int64_t) * (size_t)(total > 0 ? total : 1));
    if (!index || !packed) {
        PIPEPAR_FREE(index); PIPEPAR_FREE(packed);
        return pp__fail(err, PP_ENOMEM, "pp_cp_plan_rows: out of memory");
    }
    if ((st = pp_cp_plan_indices(plan, bin, cp_rank, index, err)) == PP_OK &&
        (st = pp_pack_plan_gather(plan, bin, seq_offsets, packed, err)) == PP_OK)
        for (j = 0; j < local; j++) rows[j] = packed[index[j]];
    PIPEPAR_FREE(index);
    PIPEPAR_FREE(packed);
    return st == PP_OK ? pp__ok(err) : st;
}
