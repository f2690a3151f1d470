
/* --- >>grid (implementation) -------------------------------------------------------------- */

static const char *const pp__dim_names[PP_DIM_COUNT] = { "tp", "cp", "dp", "pp" };

const char *pp_dim_name(pp_dim dim)
{
    return (int)dim >= 0 && dim < PP_DIM_COUNT ? pp__dim_names[dim] : "?";
}

/* Reads one dimension name from text[0 .. len-1]; -1 when it is none of tp, cp, dp, pp. */
static int pp__dim_lookup(const char *text, size_t len)
{
    int d;
    for (d = 0; d < PP_DIM_COUNT; d++)
        if (len == 2 && strncmp(text, pp__dim_names[d], 2) == 0) return d;
    return -1;
}

/* Splits "tp-cp-dp" into dimensions; dims[] gets them in text order. Duplicates and unknown
 * names fail, with `what` ("order" or "group") naming the parameter. */
static pp_status pp__dims_split(const char *text, const char *what, int dims[PP_DIM_COUNT],
                                int *count, pp_error *err)
{
    const char *p = text;
    unsigned seen = 0;
    *count = 0;
    if (!text || !*text) return pp__fail(err, PP_EINVAL, "%s='': needs dimension names (tp, cp, dp, pp) joined by '-'", what);
    for (;;) {
        const char *dash = strchr(p, '-');
        size_t len = dash ? (size_t)(dash - p) : strlen(p);
        int d = pp__dim_lookup(p, len);
        if (d < 0)
            return pp__fail(err, PP_EINVAL, "%s='%s': '%.*s' is not a dimension (tp, cp, dp, pp)",
                            what, text, (int)(len > 16 ? 16 : len), p);
        if (seen & (1u << d))
            return pp__fail(err, PP_EINVAL, "%s='%s': '%s' appears twice", what, text, pp__dim_names[d]);
        seen |= 1u << d;
        dims[(*count)++] = d;
        if (!dash) break;
        p = dash + 1;
    }
    return PP_OK;
}

pp_status pp_grid_init(const pp_grid_config *cfg, pp_grid *grid, pp_error *err)
{
    int size[PP_DIM_COUNT], order[PP_DIM_COUNT], n = 0, d, i;
    long long prod;
    unsigned placed = 0;
    if (!cfg || !grid) return pp__fail(err, PP_EINVAL, "pp_grid_init: cfg and grid must not be NULL");
    if (cfg->world < 1) return pp__fail(err, PP_EINVAL, "world=%d: must be at least 1", cfg->world);
    if (cfg->tp < 0) return pp__fail(err, PP_EINVAL, "tp=%d: must be at least 1 (0 means 1)", cfg->tp);
    if (cfg->cp < 0) return pp__fail(err, PP_EINVAL, "cp=%d: must be at least 1 (0 means 1)", cfg->cp);
    if (cfg->pp < 0) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1 (0 means 1)", cfg->pp);
    if (cfg->dp < 0)
        return pp__fail(err, PP_EINVAL, "dp=%d: must be at least 1 (0 means world / (tp*cp*pp))", cfg->dp);
    size[PP_DIM_TP] = cfg->tp ? cfg->tp : 1;
    size[PP_DIM_CP] = cfg->cp ? cfg->cp : 1;
    size[PP_DIM_PP] = cfg->pp ? cfg->pp : 1;
    /* each size is an int, so tp*cp fits 64 bits, and so does its product with pp or dp while it is
     * at most INT_MAX; past that it is past any world, and multiplying on could overflow */
    prod = (long long)size[PP_DIM_TP] * size[PP_DIM_CP];
    if (prod <= INT_MAX) prod *= size[PP_DIM_PP];
    if (prod > INT_MAX)
        return pp__fail(err, PP_EINVAL, "world=%d: smaller than tp*cp*pp (tp=%d, cp=%d, pp=%d)", cfg->world,
                        size[PP_DIM_TP], size[PP_DIM_CP], size[PP_DIM_PP]);
    if (cfg->dp == 0) {
        if (prod > cfg->world || cfg->world % prod != 0)
            return pp__fail(err, PP_EINVAL,
                            "world=%d: must be a multiple of tp*cp*pp = %lld (tp=%d, cp=%d, pp=%d)",
                            cfg->world, prod, size[PP_DIM_TP], size[PP_DIM_CP], size[PP_DIM_PP]);
        size[PP_DIM_DP] = (int)(cfg->world / prod);
    } else {
        size[PP_DIM_DP] = cfg->dp;
        if (prod * cfg->dp != cfg->world)
            return pp__fail(err, PP_EINVAL,
                            "world=%d: must equal tp*cp*dp*pp = %lld (tp=%d, cp=%d, dp=%d, pp=%d)",
                            cfg->world, prod * cfg->dp, size[PP_DIM_TP], size[PP_DIM_CP], cfg->dp,
                            size[PP_DIM_PP]);
    }
    if (cfg->order && cfg->order[0]) {
        pp_status st = pp__dims_split(cfg->order, "order", order, &n, err);
        if (st != PP_OK) return st;
        for (i = 0; i < n; i++) placed |= 1u << order[i];
    }
    /* Dimensions the order leaves out go slowest, in the default order; only size 1 may. */
    for (d = 0; d < PP_DIM_COUNT; d++) {
        if (placed & (1u << d)) continue;
        if (cfg->order && cfg->order[0] && size[d] != 1)
            return pp__fail(err, PP_EINVAL, "order='%s': leaves out %s, whose size is %d (only size 1 may be left out)",
                            cfg->order, pp__dim_names[d], size[d]);
        order[n++] = d;
    }
    grid->world = cfg->world;
    {
        int stride = 1;
        for (i = 0; i < PP_DIM_COUNT; i++) {
            grid->order[i] = order[i];
            grid->stride[order[i]] = stride;
            stride *= size[order[i]];
        }
    }
    for (d = 0; d < PP_DIM_COUNT; d++) grid->size[d] = size[d];
    return pp__ok(err);
}

pp_status pp_grid_coords(const pp_grid *grid, int rank, int coord[PP_DIM_COUNT], pp_error *err)
{
    int d;
    if (!grid || !coord) return pp__fail(err, PP_EINVAL, "pp_grid_coords: grid and coord must not be NULL");
    if (rank < 0 || rank >= grid->world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1 = %d", rank, grid->world - 1);
    for (d = 0; d < PP_DIM_COUNT; d++) coord[d] = rank / grid->stride[d] % grid->size[d];
    return pp__ok(err);
}

int pp_grid_rank(const pp_grid *grid, const int coord[PP_DIM_COUNT])
{
    int d, rank = 0;
    if (!grid || !coord) return -1;
    for (d = 0; d < PP_DIM_COUNT; d++) {
        if (coord[d] < 0 || coord[d] >= grid->size[d]) return -1;
        rank += coord[d] * grid->stride[d];
    }
    return rank;
}

int pp_grid_shift(const pp_grid *grid, int rank, pp_dim dim, int delta)
{
    int coord[PP_DIM_COUNT], n;
    if (!grid || (int)dim < 0 || dim >= PP_DIM_COUNT) return -1;
    if (pp_grid_coords(grid, rank, coord, NULL) != PP_OK) return -1;
    n = grid->size[dim];
    coord[dim] = (int)(((long long)coord[dim] + delta % n + n) % n);
    return pp_grid_rank(grid, coord);
}

int pp_grid_group_size(const pp_grid *grid, unsigned dims)
{
    int d, size = 1;
    if (!grid || dims == 0 || (dims & ~PP_GROUP_ALL)) return 0;
    for (d = 0; d < PP_DIM_COUNT; d++)
        if (dims & (1u << d)) size *= grid->size[d];
    return size;
}

static pp_status pp__grid_check_dims(const pp_grid *grid, unsigned dims, pp_error *err)
{
    if (!grid) return pp__fail(err, PP_EINVAL, "grid must not be NULL");
    if (dims == 0 || (dims & ~PP_GROUP_ALL))
        return pp__fail(err, PP_EINVAL, "dims=0x%x: must be a non-empty combination of PP_GROUP_TP, _CP, _DP, _PP", dims);
    return PP_OK;
}

pp_status pp_grid_group(const pp_grid *grid, int rank, unsigned dims, pp_grid_group_info *info, pp_error *err)
{
    int coord[PP_DIM_COUNT], i;
    int color = 0, cstride = 1, index = 0, istride = 1;
    pp_status st = pp__grid_check_dims(grid, dims, err);
    if (st != PP_OK) return st;
    if (!info) return pp__fail(err, PP_EINVAL, "info must not be NULL");
    st = pp_grid_coords(grid, rank, coord, err);
    if (st != PP_OK) return st;
    /* Both numbers count in the grid's order, first dimension fastest (Megatron's decompose). */
    for (i = 0; i < PP_DIM_COUNT; i++) {
        int d = grid->order[i];
        if (dims & (1u << d)) { index += coord[d] * istride; istride *= grid->size[d]; }
        else                  { color += coord[d] * cstride; cstride *= grid->size[d]; }
    }
    info->dims = dims;
    info->size = istride;
    info->count = cstride;
    info->color = color;
    info->index = index;
    return pp__ok(err);
}

pp_status pp_grid_group_members(const pp_grid *grid, unsigned dims, int color, int *members, int capacity,
                                pp_error *err)
{
    int size, count, base = 0, rest, i, k;
    pp_status st = pp__grid_check_dims(grid, dims, err);
    if (st != PP_OK) return st;
    size = pp_grid_group_size(grid, dims);
    count = grid->world / size;
    if (color < 0 || color >= count)
        return pp__fail(err, PP_EINVAL, "color=%d: must be between 0 and %d (groups of this mask)", color, count - 1);
    if (!members || capacity < size)
        return pp__fail(err, PP_EINVAL, "capacity=%d: the group has %d members", members ? capacity : 0, size);
    /* The fixed coordinates: decompose color over the unmasked dimensions. */
    rest = color;
    for (i = 0; i < PP_DIM_COUNT; i++) {
        int d = grid->order[i];
        if (dims & (1u << d)) continue;
        base += rest % grid->size[d] * grid->stride[d];
        rest /= grid->size[d];
    }
    for (k = 0; k < size; k++) {
        int r = base;
        rest = k;
        for (i = 0; i < PP_DIM_COUNT; i++) {
            int d = grid->order[i];
            if (!(dims & (1u << d))) continue;
            r += rest % grid->size[d] * grid->stride[d];
            rest /= grid->size[d];
        }
        members[k] = r;
    }
    return pp__ok(err);
}

int pp_grid_dims_format(unsigned dims, char *buf, size_t size)
{
    pp__text t = { NULL, 0, 0, 0 };
    int d, n = 0, len;
    for (d = 0; d < PP_DIM_COUNT; d++)
        if (dims & (1u << d)) pp__text_printf(&t, "%s%s", n++ ? "-" : "", pp__dim_names[d]);
    if (dims == 0 || (dims & ~PP_GROUP_ALL)) { pp__text_free(&t); pp__text_printf(&t, "?"); }
    if (t.failed) { pp__text_free(&t); if (buf && size) buf[0] = '\0'; return -1; }
    len = (int)t.len;
    if (buf && size) snprintf(buf, size, "%s", t.data ? t.data : "");
    pp__text_free(&t);
    return len;
}

pp_status pp_grid_dims_parse(const char *text, unsigned *dims, pp_error *err)
{
    int list[PP_DIM_COUNT], n, i;
    pp_status st;
    if (!dims) return pp__fail(err, PP_EINVAL, "dims must not be NULL");
    st = pp__dims_split(text, "group", list, &n, err);
    if (st != PP_OK) return st;
    *dims = 0;
    for (i = 0; i < n; i++) *dims |= 1u << list[i];
    return pp__ok(err);
}

int pp_grid_order_format(const pp_grid *grid, char *buf, size_t size)
{
    if (!grid) { if (buf && size) buf[0] = '\0'; return -1; }
    return snprintf(buf, size, "%s-%s-%s-%s", pp__dim_names[grid->order[0]], pp__dim_names[grid->order[1]],
                    pp__dim_names[grid->order[2]], pp__dim_names[grid->order[3]]);
}

/* --- placement by speed ----------------------------------------------------------------------- */

static double pp__placement_bottleneck(int n, const double *rank_load, const double *gpu_time, const int *rank_of)
{
    double worst = 0;
    int g;
    for (g = 0; g < n; g++)
        if (rank_load[rank_of[g]] * gpu_time[g] > worst) worst = rank_load[rank_of[g]] * gpu_time[g];
    return worst;
}

/* Of the assignments whose bottleneck is at most `bound`, one that keeps the most GPUs on their
 * own rank: a least-cost perfect matching (the Hungarian method, O(n^3)) where keeping costs 0,
 * moving 1, and a pair over the bound more than every move together. rank_of holds one such
 * assignment on entry (the sorted pairing), so a matching within the bound exists. */
static pp_status pp__placement_fewest_moves(int n, const double *rank_load, const double *gpu_time, double bound,
                                            int *rank_of, pp_error *err)
{
    long *u, *v, *minv, big = (long)n + 1;
    int *p, *way, *used, i, j;
    u = (long *)pp__calloc((size_t)n + 1, sizeof(long));
    v = (long *)pp__calloc((size_t)n + 1, sizeof(long));
    minv = (long *)pp__calloc((size_t)n + 1, sizeof(long));
    p = (int *)pp__calloc((size_t)n + 1, sizeof(int));
    way = (int *)pp__calloc((size_t)n + 1, sizeof(int));
    used = (int *)pp__calloc((size_t)n + 1, sizeof(int));
    if (!u || !v || !minv || !p || !way || !used) {
        PIPEPAR_FREE(u); PIPEPAR_FREE(v); PIPEPAR_FREE(minv); PIPEPAR_FREE(p); PIPEPAR_FREE(way); PIPEPAR_FREE(used);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
#define PP__PLACE_COST(g, r) (rank_load[r] * gpu_time[g] > bound ? big : (g) == (r) ? 0L : 1L)
    /* rows: GPUs 1..n, columns: ranks 1..n (1-based, column 0 the sentinel) */
    for (i = 1; i <= n; i++) {
        int j0 = 0, j1 = 0;
        p[0] = i;
        for (j = 0; j <= n; j++) { minv[j] = LONG_MAX; used[j] = 0; }
        do {
            int i0 = p[j0];
            long delta = LONG_MAX;
            used[j0] = 1;
            for (j = 1; j <= n; j++)
                if (!used[j]) {
                    long cur = PP__PLACE_COST(i0 - 1, j - 1) - u[i0] - v[j];
                    if (cur < minv[j]) { minv[j] = cur; way[j] = j0; }
                    if (minv[j] < delta) { delta = minv[j]; j1 = j; }
                }
            for (j = 0; j <= n; j++)
                if (used[j]) { u[p[j]] += delta; v[j] -= delta; }
                else minv[j] -= delta;
            j0 = j1;
        } while (p[j0] != 0);
        do { j1 = way[j0]; p[j0] = p[j1]; j0 = j1; } while (j0);
    }
#undef PP__PLACE_COST
    for (j = 1; j <= n; j++) rank_of[p[j] - 1] = j - 1;
    PIPEPAR_FREE(u); PIPEPAR_FREE(v); PIPEPAR_FREE(minv); PIPEPAR_FREE(p); PIPEPAR_FREE(way); PIPEPAR_FREE(used);
    return pp__ok(err);
}

pp_status pp_place_by_speed(int n, const double *rank_load, const double *gpu_time, double min_gain, int *rank_of,
                            double *gain, pp_error *err)
{
    int *by_load, *by_time, i, j;
    double before, after;
    if (gain) *gain = 0;
    if (n < 1) return pp__fail(err, PP_EINVAL, "n=%d: must be at least 1", n);
    if (!rank_load || !gpu_time || !rank_of)
        return pp__fail(err, PP_EINVAL, "rank_load, gpu_time and rank_of must not be NULL");
    if (!(min_gain >= 0 && min_gain < 1))
        return pp__fail(err, PP_EINVAL, "min_gain=%g: must be in [0, 1)", min_gain);
    for (i = 0; i < n; i++) {
        if (!(rank_load[i] >= 0 && rank_load[i] <= DBL_MAX))
            return pp__fail(err, PP_EINVAL, "rank_load[%d]=%g: must be a finite number >= 0", i, rank_load[i]);
        if (!(gpu_time[i] > 0 && gpu_time[i] <= DBL_MAX))
            return pp__fail(err, PP_EINVAL, "gpu_time[%d]=%g: must be a finite number > 0", i, gpu_time[i]);
    }
    by_load = (int *)pp__calloc((size_t)n, sizeof(int));
    by_time = (int *)pp__calloc((size_t)n, sizeof(int));
    if (!by_load || !by_time) {
        PIPEPAR_FREE(by_load); PIPEPAR_FREE(by_time);
        return pp__fail(err, PP_ENOMEM, "out of memory");
    }
    /* insertion sorts, stable (ties keep index order, so equal inputs give the identity): ranks
     * by load, heaviest first; GPUs by time, fastest first */
    for (i = 0; i < n; i++) {
        for (j = i; j > 0 && rank_load[by_load[j - 1]] < rank_load[i]; j--) by_load[j] = by_load[j - 1];
        by_load[j] = i;
        for (j = i; j > 0 && gpu_time[by_time[j - 1]] > gpu_time[i]; j--) by_time[j] = by_time[j - 1];
        by_time[j] = i;
    }
    for (i = 0; i < n; i++) rank_of[i] = i;
    before = pp__placement_bottleneck(n, rank_load, gpu_time, rank_of);
    for (i = 0; i < n; i++) rank_of[by_time[i]] = by_load[i];
    after = pp__placement_bottleneck(n, rank_load, gpu_time, rank_of);
    PIPEPAR_FREE(by_load);
    PIPEPAR_FREE(by_time);
    if (!(before > 0) || !(after < before * (1 - min_gain))) {
        for (i = 0; i < n; i++) rank_of[i] = i;
        return pp__ok(err);
    }
    if (gain) *gain = 1 - after / before;
    /* the same bottleneck with as few ranks moved as possible (pipeline neighbours the launcher
     * placed together stay together where they can); past 512 ranks the O(n^3) costs too much */
    if (n <= 512) return pp__placement_fewest_moves(n, rank_load, gpu_time, after, rank_of, err);
    return pp__ok(err);
}
