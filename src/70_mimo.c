
/* --- >>mimo (implementation) ------------------------------------------------------------------ */

/* Tags of transfers outside a pipeline step: the stage field holds one of these codes, so they
 * never meet a pipeline transfer's tag between the same two ranks. */
#define PP__MIMO_BRIDGE_STAGE 0xFFFF00   /* + encoder index: colocated bridge exchanges */
#define PP__MIMO_SUM_STAGE    0xFFFFF0   /* + id: pp_mimo_group_sum */

const char *pp_mimo_layout_name(pp_mimo_layout layout)
{
    switch (layout) {
    case PP_MIMO_COLOCATED: return "colocated";
    case PP_MIMO_NON_COLOCATED: return "non-colocated";
    case PP_MIMO_MIXED: return "mixed";
    default: return "?";
    }
}

/* "ranks 2-5" or "rank 2", into buf. */
static const char *pp__mimo_ranks(char *buf, size_t size, int first, int count)
{
    if (count == 1) snprintf(buf, size, "rank %d", first);
    else snprintf(buf, size, "ranks %d-%d", first, first + count - 1);
    return buf;
}

static int pp__mimo_name_ok(const char *name)
{
    size_t i, n;
    const char *end = (const char *)memchr(name, '\0', PP_MIMO_NAME_SIZE);
    if (!end) return 0;
    n = (size_t)(end - name);
    if (n == 0) return 0;
    for (i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

int pp_mimo_find(const pp_mimo *m, const char *name)
{
    int i;
    if (!m || !name) return -1;
    for (i = 0; i < m->num_modules; i++)
        if (strcmp(m->modules[i].name, name) == 0) return i;
    return -1;
}

pp_status pp_mimo_init(const pp_mimo_config *cfg, pp_mimo *m, pp_error *err)
{
    const char *lang;
    int i, j, end = 0, all_coincide = 1, all_disjoint = 1, cover;
    char a[48], b[48];
    if (!cfg || !m) return pp__fail(err, PP_EINVAL, "pp_mimo_init: cfg and m must not be NULL");
    memset(m, 0, sizeof *m);
    if (cfg->num_modules < 1 || cfg->num_modules > PP_MIMO_MAX_MODULES)
        return pp__fail(err, PP_EINVAL, "num_modules=%d: must be between 1 and PP_MIMO_MAX_MODULES=%d",
                        cfg->num_modules, PP_MIMO_MAX_MODULES);
    if (!cfg->modules) return pp__fail(err, PP_EINVAL, "modules: must not be NULL (num_modules=%d)", cfg->num_modules);
    if (cfg->world < 0) return pp__fail(err, PP_EINVAL, "world=%d: must be >= 1 (0 means the end of the last grid)", cfg->world);
    for (i = 0; i < cfg->num_modules; i++) {
        const pp_mimo_module_config *mc = &cfg->modules[i];
        pp_mimo_module *mod = &m->modules[i];
        pp_grid_config gc;
        pp_error inner;
        long long size;
        int tp, cp, dp, pp, ep;
        if (!pp__mimo_name_ok(mc->name))
            return pp__fail(err, PP_EINVAL, "modules[%d].name='%.*s': must be 1 to %d characters of A-Z a-z 0-9 _ .", i,
                            PP_MIMO_NAME_SIZE - 1, mc->name, PP_MIMO_NAME_SIZE - 1);
        for (j = 0; j < i; j++)
            if (strcmp(m->modules[j].name, mc->name) == 0)
                return pp__fail(err, PP_EINVAL, "module %s: the name is used twice (modules[%d] and modules[%d])",
                                mc->name, j, i);
        if (!memchr(mc->order, '\0', PP_MIMO_ORDER_SIZE))
            return pp__fail(err, PP_EINVAL, "module %s: order: not NUL-terminated within %d characters", mc->name,
                            PP_MIMO_ORDER_SIZE);
        if (mc->offset < 0)
            return pp__fail(err, PP_EINVAL, "module %s: offset=%d: must be >= 0", mc->name, mc->offset);
        if (mc->tp < 0 || mc->cp < 0 || mc->dp < 0 || mc->pp < 0 || mc->ep < 0) {
            const char *k = mc->tp < 0 ? "tp" : mc->cp < 0 ? "cp" : mc->dp < 0 ? "dp" : mc->pp < 0 ? "pp" : "ep";
            int v = mc->tp < 0 ? mc->tp : mc->cp < 0 ? mc->cp : mc->dp < 0 ? mc->dp : mc->pp < 0 ? mc->pp : mc->ep;
            return pp__fail(err, PP_EINVAL, "module %s: %s=%d: must be >= 1 (0 means 1)", mc->name, k, v);
        }
        tp = mc->tp ? mc->tp : 1; cp = mc->cp ? mc->cp : 1; dp = mc->dp ? mc->dp : 1;
        pp = mc->pp ? mc->pp : 1; ep = mc->ep ? mc->ep : 1;
        size = tp;   /* factor by factor: stops past the limit before a product can overflow */
        if (size <= (1 << 24)) size *= cp;
        if (size <= (1 << 24)) size *= dp;
        if (size <= (1 << 24)) size *= pp;
        if (size > (1 << 24) || (long long)mc->offset + size > (1 << 24))
            return pp__fail(err, PP_EINVAL, "module %s: offset=%d + tp*cp*dp*pp = %lld ranks: past the limit of %d ranks",
                            mc->name, mc->offset, size, 1 << 24);
        memset(&gc, 0, sizeof gc);
        gc.world = (int)size; gc.tp = tp; gc.cp = cp; gc.dp = dp; gc.pp = pp;
        gc.order = mc->order[0] ? mc->order : NULL;
        if (pp_grid_init(&gc, &mod->grid, &inner) != PP_OK)
            return pp__fail(err, inner.status, "module %s: %s", mc->name, inner.message);
        if ((cp * dp) % ep != 0)
            return pp__fail(err, PP_EINVAL, "module %s: ep=%d: must divide cp*dp = %d (experts are sharded over the "
                            "cp x dp ranks of a stage)", mc->name, ep, cp * dp);
        memcpy(mod->name, mc->name, PP_MIMO_NAME_SIZE);
        mod->offset = mc->offset;
        mod->size = (int)size;
        mod->ep = ep;
        if (mod->offset + mod->size > end) end = mod->offset + mod->size;
    }
    m->num_modules = cfg->num_modules;
    lang = cfg->language ? cfg->language : "language";
    m->language = pp_mimo_find(m, lang);
    if (m->language < 0) {
        pp__text t;
        memset(&t, 0, sizeof t);
        for (i = 0; i < m->num_modules; i++) pp__text_printf(&t, "%s%s", i ? ", " : "", m->modules[i].name);
        pp__fail(err, PP_EINVAL, "no module named '%.31s' (the language model): name one so, or set language to the "
                 "language model's name (modules: %s)", lang, t.data ? t.data : "");
        pp__text_free(&t);
        return PP_EINVAL;
    }
    if (cfg->world > 0) {
        for (i = 0; i < m->num_modules; i++) {
            const pp_mimo_module *mod = &m->modules[i];
            if (mod->offset + mod->size > cfg->world)
                return pp__fail(err, PP_EINVAL, "module %s: %s (offset %d + tp*cp*dp*pp %d) go past world=%d", mod->name,
                                pp__mimo_ranks(a, sizeof a, mod->offset, mod->size), mod->offset, mod->size,
                                cfg->world);
        }
        m->world = cfg->world;
    } else {
        m->world = end;
    }
    /* Two grids: the same ranks, or none in common. */
    for (i = 0; i < m->num_modules; i++)
        for (j = i + 1; j < m->num_modules; j++) {
            const pp_mimo_module *x = &m->modules[i], *y = &m->modules[j];
            int lo = x->offset > y->offset ? x->offset : y->offset;
            int hi = x->offset + x->size < y->offset + y->size ? x->offset + x->size : y->offset + y->size;
            if (lo >= hi) { all_coincide = 0; continue; }
            if (x->offset == y->offset && x->size == y->size) { all_disjoint = 0; continue; }
            {
                char c[48];
                return pp__fail(err, PP_EINVAL, "modules %s (%s) and %s (%s) share %s but do not coincide: two grids "
                                "must cover the same ranks (colocated) or none in common (non-colocated)", x->name,
                                pp__mimo_ranks(a, sizeof a, x->offset, x->size), y->name,
                                pp__mimo_ranks(b, sizeof b, y->offset, y->size), pp__mimo_ranks(c, sizeof c, lo, hi - lo));
            }
        }
    /* Every rank in some grid: walk up from rank 0 over the grids that start at or before it. */
    for (cover = 0; cover < m->world;) {
        int next = -1, gap_end = m->world;
        for (i = 0; i < m->num_modules; i++) {
            const pp_mimo_module *mod = &m->modules[i];
            if (mod->offset <= cover && mod->offset + mod->size > cover && mod->offset + mod->size > next)
                next = mod->offset + mod->size;
            if (mod->offset > cover && mod->offset < gap_end) gap_end = mod->offset;
        }
        if (next < 0) {
            pp__text t;
            memset(&t, 0, sizeof t);
            for (i = 0; i < m->num_modules; i++)
                pp__text_printf(&t, "%s%s: %s", i ? ", " : "", m->modules[i].name,
                                pp__mimo_ranks(a, sizeof a, m->modules[i].offset, m->modules[i].size));
            pp__fail(err, PP_EINVAL, "%s of world=%d belong%s to no module grid (%s): every rank must run at least one "
                     "module", pp__mimo_ranks(b, sizeof b, cover, gap_end - cover), m->world,
                     gap_end - cover == 1 ? "s" : "", t.data ? t.data : "");
            pp__text_free(&t);
            return PP_EINVAL;
        }
        cover = next;
    }
    m->layout = all_coincide ? PP_MIMO_COLOCATED : all_disjoint ? PP_MIMO_NON_COLOCATED : PP_MIMO_MIXED;
    return pp__ok(err);
}

pp_status pp_mimo_module_parse(const char *text, pp_mimo_module_config *out, pp_error *err)
{
    const char *colon, *p;
    unsigned seen = 0;
    static const char *const keys[] = { "offset", "tp", "cp", "dp", "pp", "ep", "order" };
    if (!text || !out) return pp__fail(err, PP_EINVAL, "pp_mimo_module_parse: text and out must not be NULL");
    memset(out, 0, sizeof *out);
    colon = strchr(text, ':');
    if (!colon || colon == text)
        return pp__fail(err, PP_EINVAL, "'%.80s': expected NAME:key=value,... e.g. vision:offset=0,tp=1,pp=1,dp=2", text);
    if ((size_t)(colon - text) >= PP_MIMO_NAME_SIZE)
        return pp__fail(err, PP_EINVAL, "'%.80s': the name is longer than %d characters", text, PP_MIMO_NAME_SIZE - 1);
    memcpy(out->name, text, (size_t)(colon - text));
    out->name[colon - text] = '\0';
    if (!pp__mimo_name_ok(out->name))
        return pp__fail(err, PP_EINVAL, "'%.80s': name '%s' must be characters of A-Z a-z 0-9 _ .", text, out->name);
    p = colon + 1;
    while (*p) {
        const char *eq = strchr(p, '='), *comma = strchr(p, ',');
        const char *vend = comma ? comma : p + strlen(p);
        size_t klen, vlen;
        int k, nkeys = (int)(sizeof keys / sizeof keys[0]);
        if (!eq || eq > vend)
            return pp__fail(err, PP_EINVAL, "'%.80s': '%.*s' is not key=value", text, (int)(vend - p > 24 ? 24 : vend - p), p);
        klen = (size_t)(eq - p);
        vlen = (size_t)(vend - eq - 1);
        for (k = 0; k < nkeys; k++)
            if (strlen(keys[k]) == klen && strncmp(p, keys[k], klen) == 0) break;
        if (k == nkeys)
            return pp__fail(err, PP_EINVAL, "'%.80s': '%.*s' is not a key (offset, tp, cp, dp, pp, ep, order)", text,
                            (int)(klen > 24 ? 24 : klen), p);
        if (seen & (1u << k)) return pp__fail(err, PP_EINVAL, "'%.80s': %s appears twice", text, keys[k]);
        seen |= 1u << k;
        if (vlen == 0) return pp__fail(err, PP_EINVAL, "'%.80s': %s has no value", text, keys[k]);
        if (k == 6) {
            if (vlen >= PP_MIMO_ORDER_SIZE)
                return pp__fail(err, PP_EINVAL, "'%.80s': order is longer than %d characters", text, PP_MIMO_ORDER_SIZE - 1);
            memcpy(out->order, eq + 1, vlen);
            out->order[vlen] = '\0';
        } else {
            long v = 0;
            size_t d;
            for (d = 0; d < vlen; d++) {
                char c = eq[1 + d];
                if (c < '0' || c > '9' || v > (1L << 24))
                    return pp__fail(err, PP_EINVAL, "'%.80s': %s=%.*s: expected a whole number from %d to %d", text,
                                    keys[k], (int)(vlen > 16 ? 16 : vlen), eq + 1, k == 0 ? 0 : 1, 1 << 24);
                v = v * 10 + (c - '0');
            }
            if (v > (1L << 24) || (k > 0 && v < 1))
                return pp__fail(err, PP_EINVAL, "'%.80s': %s=%ld: must be from %d to %d", text, keys[k], v, k == 0 ? 0 : 1,
                                1 << 24);
            switch (k) {
            case 0: out->offset = (int)v; break;
            case 1: out->tp = (int)v; break;
            case 2: out->cp = (int)v; break;
            case 3: out->dp = (int)v; break;
            case 4: out->pp = (int)v; break;
            default: out->ep = (int)v; break;
            }
        }
        p = comma ? comma + 1 : vend;
        if (comma && !*p) return pp__fail(err, PP_EINVAL, "'%.80s': ends with ','", text);
    }
    return pp__ok(err);
}

int pp_mimo_rank(const pp_mimo *m, int module, const int coord[PP_DIM_COUNT])
{
    int local;
    if (!m || module < 0 || module >= m->num_modules) return -1;
    local = pp_grid_rank(&m->modules[module].grid, coord);
    return local < 0 ? -1 : local + m->modules[module].offset;
}

pp_status pp_mimo_group_color(const pp_mimo *m, int module, int rank, unsigned dims, int *color, int *key,
                              pp_error *err)
{
    const pp_mimo_module *mod;
    pp_grid_group_info info;
    pp_status st;
    if (!m || !color || !key) return pp__fail(err, PP_EINVAL, "pp_mimo_group_color: m, color and key must not be NULL");
    *color = -1;
    *key = 0;
    if (module < 0 || module >= m->num_modules)
        return pp__fail(err, PP_EINVAL, "module=%d: must be a module index 0..%d", module, m->num_modules - 1);
    if (rank < 0 || rank >= m->world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1 = %d", rank, m->world - 1);
    if ((long long)m->num_modules * m->world > INT_MAX)
        return pp__fail(err, PP_EINVAL, "world=%d: too large for unique colors", m->world);
    mod = &m->modules[module];
    if (rank < mod->offset || rank >= mod->offset + mod->size) {
        if (dims == 0 || (dims & ~PP_GROUP_ALL))
            return pp__fail(err, PP_EINVAL, "dims=0x%x: must be a non-empty subset of PP_GROUP_ALL", dims);
        return pp__ok(err);
    }
    st = pp_grid_group(&mod->grid, rank - mod->offset, dims, &info, err);
    if (st != PP_OK) return st;
    *color = module * m->world + info.color;
    *key = info.index;
    return pp__ok(err);
}

/* The rank's coordinates in a module; 0 when the rank is not in it. */
static int pp__mimo_coords(const pp_mimo *m, int module, int rank, int coord[PP_DIM_COUNT])
{
    const pp_mimo_module *mod = &m->modules[module];
    if (rank < mod->offset || rank >= mod->offset + mod->size) return 0;
    pp_grid_coords(&mod->grid, rank - mod->offset, coord, NULL);
    return 1;
}

pp_status pp_mimo_rank_role(const pp_mimo *m, int rank, pp_mimo_role *role, pp_error *err)
{
    int i;
    if (!m || !role) return pp__fail(err, PP_EINVAL, "pp_mimo_rank_role: m and role must not be NULL");
    memset(role, 0, sizeof *role);
    if (rank < 0 || rank >= m->world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1 = %d", rank, m->world - 1);
    role->rank = rank;
    for (i = 0; i < m->num_modules; i++) {
        pp_mimo_stage_info *si = &role->modules[role->num_modules];
        const pp_mimo_module *mod = &m->modules[i];
        int q;
        if (!pp__mimo_coords(m, i, rank, si->coord)) continue;
        si->module = i;
        si->local_rank = rank - mod->offset;
        si->stage = si->coord[PP_DIM_PP];
        si->num_stages = mod->grid.size[PP_DIM_PP];
        si->is_first_stage = si->stage == 0;
        si->is_last_stage = si->stage == si->num_stages - 1;
        q = si->coord[PP_DIM_CP] + mod->grid.size[PP_DIM_CP] * si->coord[PP_DIM_DP];
        si->ep_rank = q % mod->ep;
        si->expert_dp_rank = q / mod->ep;
        role->num_modules++;
        if (i == m->language) role->has_language = 1; else role->has_encoder = 1;
    }
    role->path = role->has_language && role->has_encoder ? PP_MIMO_PATH_BOTH
               : role->has_language ? PP_MIMO_PATH_LANGUAGE : PP_MIMO_PATH_ENCODER;
    return pp__ok(err);
}

const pp_mimo_stage_info *pp_mimo_role_module(const pp_mimo_role *role, int module)
{
    int i;
    if (!role) return NULL;
    for (i = 0; i < role->num_modules; i++)
        if (role->modules[i].module == module) return &role->modules[i];
    return NULL;
}

/* --- bridges --- */

static pp_status pp__mimo_bridge_check(const pp_mimo *m, int enc, pp_error *err)
{
    const pp_mimo_module *e, *l;
    int a, b;
    if (enc < 0 || enc >= m->num_modules)
        return pp__fail(err, PP_EINVAL, "encoder=%d: must be a module index 0..%d", enc, m->num_modules - 1);
    if (enc == m->language)
        return pp__fail(err, PP_EINVAL, "encoder=%d: is the language model %s; a bridge runs from an encoder to it", enc,
                        m->modules[enc].name);
    e = &m->modules[enc];
    l = &m->modules[m->language];
    if (e->grid.size[PP_DIM_CP] != 1 || l->grid.size[PP_DIM_CP] != 1)
        return pp__fail(err, PP_EUNSUPPORTED, "bridge %s -> %s: cp=%d on %s: the bridge does not split sequences (cp "
                        "must be 1 on both sides, as in Megatron's BridgeCommunicator)", e->name, l->name,
                        e->grid.size[PP_DIM_CP] != 1 ? e->grid.size[PP_DIM_CP] : l->grid.size[PP_DIM_CP],
                        e->grid.size[PP_DIM_CP] != 1 ? e->name : l->name);
    a = e->grid.size[PP_DIM_DP];
    b = l->grid.size[PP_DIM_DP];
    if (a % b != 0 && b % a != 0)
        return pp__fail(err, PP_EINVAL, "bridge %s -> %s: dp=%d and dp=%d: one must be a multiple of the other (fan-in "
                        "or fan-out along the batch)", e->name, l->name, a, b);
    return PP_OK;
}

/* Fills links[0 .. cap-1] and returns how many links there are (see pp_mimo_bridge_links). */
static int pp__mimo_links(const pp_mimo *m, int enc, int rank, int op, pp_mimo_link *links, int cap)
{
    const pp_mimo_module *e = &m->modules[enc], *l = &m->modules[m->language];
    int a = e->grid.size[PP_DIM_DP], b = l->grid.size[PP_DIM_DP];
    int fanin = a >= b, k = fanin ? a / b : b / a;
    int tpe = e->grid.size[PP_DIM_TP], tpl = l->grid.size[PP_DIM_TP];
    int laste = e->grid.size[PP_DIM_PP] - 1;
    int c[PP_DIM_COUNT], pc[PP_DIM_COUNT], n = 0, j, t;
    memset(pc, 0, sizeof pc);
#define PP__LINK(peer_, part_, parts_) \
    do { if (n < cap) { links[n].peer = (peer_); links[n].part = (part_); links[n].parts = (parts_); } n++; } while (0)
    switch (op) {
    case PP_OP_SEND_F:      /* encoder's last stage -> language replicas, every matching tp rank */
    case PP_OP_RECV_B:
        if (!pp__mimo_coords(m, enc, rank, c) || c[PP_DIM_PP] != laste) return 0;
        for (j = 0; j < (fanin ? 1 : k); j++) {
            int dl = fanin ? c[PP_DIM_DP] / k : c[PP_DIM_DP] * k + j;
            int part = fanin ? 0 : j, parts = fanin ? 1 : k;
            pc[PP_DIM_DP] = dl; pc[PP_DIM_PP] = 0;
            if (op == PP_OP_SEND_F) {
                for (t = 0; t < tpl; t++)
                    if (t % tpe == c[PP_DIM_TP]) { pc[PP_DIM_TP] = t; PP__LINK(pp_mimo_rank(m, m->language, pc), part, parts); }
            } else {
                pc[PP_DIM_TP] = c[PP_DIM_TP] % tpl;
                PP__LINK(pp_mimo_rank(m, m->language, pc), part, parts);
            }
        }
        break;
    case PP_OP_RECV_F:      /* language's first stage <- encoder replicas */
    case PP_OP_SEND_B:
        if (!pp__mimo_coords(m, m->language, rank, c) || c[PP_DIM_PP] != 0) return 0;
        for (j = 0; j < (fanin ? k : 1); j++) {
            int de = fanin ? c[PP_DIM_DP] * k + j : c[PP_DIM_DP] / k;
            int part = fanin ? j : 0, parts = fanin ? k : 1;
            pc[PP_DIM_DP] = de; pc[PP_DIM_PP] = laste;
            if (op == PP_OP_RECV_F) {
                pc[PP_DIM_TP] = c[PP_DIM_TP] % tpe;
                PP__LINK(pp_mimo_rank(m, enc, pc), part, parts);
            } else {
                for (t = 0; t < tpe; t++)
                    if (t % tpl == c[PP_DIM_TP]) { pc[PP_DIM_TP] = t; PP__LINK(pp_mimo_rank(m, enc, pc), part, parts); }
            }
        }
        break;
    default: break;
    }
#undef PP__LINK
    return n;
}

pp_status pp_mimo_bridge_links(const pp_mimo *m, int encoder, int rank, int op, pp_mimo_link *links, int capacity,
                               int *count, pp_error *err)
{
    pp_status st;
    int n;
    if (!m || !count) return pp__fail(err, PP_EINVAL, "pp_mimo_bridge_links: m and count must not be NULL");
    *count = 0;
    if ((st = pp__mimo_bridge_check(m, encoder, err)) != PP_OK) return st;
    if (rank < 0 || rank >= m->world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1 = %d", rank, m->world - 1);
    if (op != PP_OP_SEND_F && op != PP_OP_RECV_F && op != PP_OP_SEND_B && op != PP_OP_RECV_B)
        return pp__fail(err, PP_EINVAL, "op=%d: must be PP_OP_SEND_F, PP_OP_RECV_F, PP_OP_SEND_B or PP_OP_RECV_B", op);
    if (capacity < 0) return pp__fail(err, PP_EINVAL, "capacity=%d: must be >= 0", capacity);
    n = pp__mimo_links(m, encoder, rank, op, links, links ? capacity : 0);
    *count = n;
    if (links && n > capacity)
        return pp__fail(err, PP_EINVAL, "capacity=%d: rank %d has %d %s links on the bridge %s -> %s", capacity, rank, n,
                        pp_op_name((pp_op)op), m->modules[encoder].name, m->modules[m->language].name);
    return pp__ok(err);
}

/* --- physical programs and their check --- */

void pp_mimo_programs_free(pp_mimo_programs *p)
{
    int r;
    if (!p) return;
    if (p->ops) for (r = 0; r < p->world; r++) PIPEPAR_FREE(p->ops[r]);
    PIPEPAR_FREE(p->ops);
    PIPEPAR_FREE(p->length);
    PIPEPAR_FREE(p);
}

int pp_mimo_op_format(const pp_mimo *m, pp_mimo_op op, char *buf, size_t size)
{
    char mod[PP_MIMO_NAME_SIZE + 16];
    if (m && op.module >= 0 && op.module < m->num_modules) snprintf(mod, sizeof mod, "%s", m->modules[op.module].name);
    else snprintf(mod, sizeof mod, "module%d", (int)op.module);
    if (op.peer < 0)
        return snprintf(buf, size, "%s %s.%d mb%d", pp_op_name((pp_op)op.op), mod, (int)op.stage, (int)op.mb);
    {
        int send = op.op == PP_OP_SEND_F || op.op == PP_OP_SEND_B;
        char part[32] = "";
        if (op.parts > 1) snprintf(part, sizeof part, " [part %d of %d]", (int)op.part, (int)op.parts);
        return snprintf(buf, size, "%s %s.%d mb%d %s rank %d%s", pp_op_name((pp_op)op.op), mod, (int)op.stage,
                        (int)op.mb, send ? "to" : "from", (int)op.peer, part);
    }
}

static int pp__mimo_is_comm(int op) { return op >= PP_OP_SEND_F && op <= PP_OP_RECV_B; }
static int pp__mimo_is_send(int op) { return op == PP_OP_SEND_F || op == PP_OP_SEND_B; }

typedef struct pp__mimo_ref { int src, dst; uint64_t tag; int gi; } pp__mimo_ref;

static int pp__mimo_ref_cmp(const void *pa, const void *pb)
{
    const pp__mimo_ref *a = (const pp__mimo_ref *)pa, *b = (const pp__mimo_ref *)pb;
    if (a->src != b->src) return a->src < b->src ? -1 : 1;
    if (a->dst != b->dst) return a->dst < b->dst ? -1 : 1;
    if (a->tag != b->tag) return a->tag < b->tag ? -1 : 1;
    return a->gi < b->gi ? -1 : a->gi > b->gi;    /* program order: all of one key are on one rank */
}

pp_status pp_mimo_check(const pp_mimo_programs *p, pp_error *err)
{
    int *off = NULL, *partner = NULL, *gstart = NULL, *gend = NULL, *pos = NULL, *owner = NULL;
    unsigned char *done = NULL;
    pp__mimo_ref *sends = NULL, *recvs = NULL;
    int r, i, total = 0, ns = 0, nr = 0, a, b, finished;
    pp_status st = PP_OK;
    char txt[160], txt2[160];
    if (!p || p->world < 1 || !p->length || !p->ops)
        return pp__fail(err, PP_EINVAL, "pp_mimo_check: programs must not be NULL and world >= 1");
    for (r = 0; r < p->world; r++) {
        if (p->length[r] < 0 || (p->length[r] > 0 && !p->ops[r]))
            return pp__fail(err, PP_EINVAL, "rank %d: length=%d with ops=%p", r, p->length[r], (void *)p->ops[r]);
        if (total > INT_MAX - p->length[r]) return pp__fail(err, PP_EINVAL, "programs: too many actions");
        total += p->length[r];
    }
    off = (int *)pp__calloc((size_t)p->world + 1, sizeof(int));
    pos = (int *)pp__calloc((size_t)p->world, sizeof(int));
    partner = (int *)pp__calloc((size_t)total + 1, sizeof(int));
    gstart = (int *)pp__calloc((size_t)total + 1, sizeof(int));
    gend = (int *)pp__calloc((size_t)total + 1, sizeof(int));
    owner = (int *)pp__calloc((size_t)total + 1, sizeof(int));
    done = (unsigned char *)pp__calloc((size_t)total + 1, 1);
    sends = (pp__mimo_ref *)pp__calloc((size_t)total + 1, sizeof(pp__mimo_ref));
    recvs = (pp__mimo_ref *)pp__calloc((size_t)total + 1, sizeof(pp__mimo_ref));
    if (!off || !pos || !partner || !gstart || !gend || !owner || !done || !sends || !recvs) {
        st = pp__fail(err, PP_ENOMEM, "pp_mimo_check: out of memory for %d actions", total);
        goto out;
    }
    for (r = 0; r < p->world; r++) off[r + 1] = off[r] + p->length[r];
    /* groups and the transfer lists */
    for (r = 0; r < p->world; r++) {
        const pp_mimo_op *ops = p->ops[r];
        for (i = 0; i < p->length[r]; i++) {
            int gi = off[r] + i;
            owner[gi] = r;
            partner[gi] = -1;
            if (ops[i].op < 0 || ops[i].op >= PP_OP_COUNT) {
                st = pp__fail(err, PP_EINVAL, "rank %d position %d: op=%d is not a pp_op", r, i, (int)ops[i].op);
                goto out;
            }
            if (!pp__mimo_is_comm(ops[i].op)) { gstart[gi] = gend[gi] = -1; continue; }
            if (ops[i].peer < 0 || ops[i].peer >= p->world) {
                pp_mimo_op_format(NULL, ops[i], txt, sizeof txt);
                st = pp__fail(err, PP_EINVAL, "rank %d position %d (%s): peer=%d is not a rank of world=%d", r, i, txt,
                              (int)ops[i].peer, p->world);
                goto out;
            }
            gstart[gi] = (i > 0 && pp__mimo_is_comm(ops[i - 1].op) && ops[i - 1].group == ops[i].group)
                       ? gstart[gi - 1] : i;
            if (pp__mimo_is_send(ops[i].op)) {
                sends[ns].src = r; sends[ns].dst = ops[i].peer; sends[ns].tag = ops[i].tag; sends[ns].gi = gi; ns++;
            } else {
                recvs[nr].src = ops[i].peer; recvs[nr].dst = r; recvs[nr].tag = ops[i].tag; recvs[nr].gi = gi; nr++;
            }
        }
        for (i = p->length[r] - 1; i >= 0; i--) {
            int gi = off[r] + i;
            if (gstart[gi] < 0) continue;
            gend[gi] = (i + 1 < p->length[r] && gstart[gi + 1] == gstart[gi]) ? gend[gi + 1] : i + 1;
        }
    }
    /* every send meets exactly one receive: the k-th of a (source, destination, tag) the k-th */
    qsort(sends, (size_t)ns, sizeof *sends, pp__mimo_ref_cmp);
    qsort(recvs, (size_t)nr, sizeof *recvs, pp__mimo_ref_cmp);
    for (a = 0, b = 0; a < ns || b < nr;) {
        int c;
        /* compare the keys only (not the positions) */
        if (a < ns && b < nr) {
            if (sends[a].src != recvs[b].src) c = sends[a].src < recvs[b].src ? -1 : 1;
            else if (sends[a].dst != recvs[b].dst) c = sends[a].dst < recvs[b].dst ? -1 : 1;
            else if (sends[a].tag != recvs[b].tag) c = sends[a].tag < recvs[b].tag ? -1 : 1;
            else c = 0;
        } else c = a < ns ? -1 : 1;
        if (c == 0) { partner[sends[a].gi] = recvs[b].gi; partner[recvs[b].gi] = sends[a].gi; a++; b++; continue; }
        {
            const pp__mimo_ref *x = c < 0 ? &sends[a] : &recvs[b];
            int rr = owner[x->gi];
            pp_mimo_op_format(NULL, p->ops[rr][x->gi - off[rr]], txt, sizeof txt);
            st = pp__fail(err, PP_EINVALID_SCHEDULE, "rank %d position %d (%s): no matching %s on rank %d", rr,
                          x->gi - off[rr], txt, c < 0 ? "receive" : "send", c < 0 ? x->dst : x->src);
            goto out;
        }
    }
    /* rendezvous: a group finishes once every transfer of it met its partner's posted group */
    for (;;) {
        int progress = 0;
        finished = 0;
        for (r = 0; r < p->world; r++) {
            while (pos[r] < p->length[r]) {
                int gi = off[r] + pos[r], k, all = 1;
                if (gstart[gi] < 0) { pos[r]++; progress = 1; continue; }
                for (k = gi; k < off[r] + gend[gi]; k++) {
                    int q, qi;
                    if (done[k]) continue;
                    q = owner[partner[k]];
                    qi = partner[k] - off[q];
                    if (pos[q] < p->length[q] && gstart[off[q] + pos[q]] >= 0 && gstart[partner[k]] == pos[q]) {
                        done[k] = done[partner[k]] = 1;
                    } else all = 0;
                    (void)qi;
                }
                if (!all) break;
                pos[r] = gend[gi];
                progress = 1;
            }
            if (pos[r] >= p->length[r]) finished++;
        }
        if (finished == p->world) break;
        if (!progress) {
            pp__text t;
            int shown = 0;
            memset(&t, 0, sizeof t);
            for (r = 0; r < p->world && shown < 3; r++) {
                int gi, k;
                if (pos[r] >= p->length[r]) continue;
                gi = off[r] + pos[r];
                for (k = gi; k < off[r] + gend[gi] && done[k]; k++) {}
                pp_mimo_op_format(NULL, p->ops[r][k - off[r]], txt, sizeof txt);
                {
                    int q = owner[partner[k]];
                    if (pos[q] < p->length[q]) pp_mimo_op_format(NULL, p->ops[q][pos[q]], txt2, sizeof txt2);
                    else snprintf(txt2, sizeof txt2, "its end");
                    pp__text_printf(&t, "%srank %d at position %d waits for %s, but rank %d is at position %d (%s)",
                                    shown ? "; " : "", r, k - off[r], txt, q, pos[q], txt2);
                }
                shown++;
            }
            st = pp__fail(err, PP_EDEADLOCK, "the programs deadlock: %s", t.data ? t.data : "");
            pp__text_free(&t);
            goto out;
        }
    }
    st = pp__ok(err);
out:
    PIPEPAR_FREE(off); PIPEPAR_FREE(pos); PIPEPAR_FREE(partner); PIPEPAR_FREE(gstart); PIPEPAR_FREE(gend);
    PIPEPAR_FREE(owner); PIPEPAR_FREE(done); PIPEPAR_FREE(sends); PIPEPAR_FREE(recvs);
    return st;
}

/* --- the pipeline --- */

/* The module a rank plays in the pipeline: the language model (colocated), else its own. */
static int pp__mimo_pipe_module(const pp_mimo_pipeline *pl, int rank)
{
    const pp_mimo *m = &pl->mimo;
    int i;
    if (pl->encoder < 0) return m->language;
    for (i = 0; i < m->num_modules; i++)
        if (pl->base[i] >= 0 && rank >= m->modules[i].offset && rank < m->modules[i].offset + m->modules[i].size)
            return i;
    return -1;
}

int pp_mimo_pipeline_rank(const pp_mimo_pipeline *pl, int rank)
{
    int mod, c[PP_DIM_COUNT];
    if (!pl || rank < 0 || rank >= pl->mimo.world) return -1;
    mod = pp__mimo_pipe_module(pl, rank);
    if (mod < 0 || !pp__mimo_coords(&pl->mimo, mod, rank, c)) return -1;
    return pl->base[mod] + c[PP_DIM_PP];
}

pp_status pp_mimo_pipeline_stage(const pp_mimo_pipeline *pl, int stage, int *module, int *module_stage, pp_error *err)
{
    int i;
    if (!pl) return pp__fail(err, PP_EINVAL, "pipeline: must not be NULL");
    for (i = 0; i < pl->mimo.num_modules; i++) {
        int b = pl->base[i], n = pl->mimo.modules[i].grid.size[PP_DIM_PP];
        if (b >= 0 && stage >= b && stage < b + n) {
            if (module) *module = i;
            if (module_stage) *module_stage = stage - b;
            return pp__ok(err);
        }
    }
    return pp__fail(err, PP_EINVAL, "stage=%d: must be between 0 and %d (the pipeline's stages)", stage,
                    pl->schedule ? pl->schedule->pp - 1 : -1);
}

/* The physical transfers of one pipeline transfer of `rank` (pipeline peer lpeer): into
 * links[0..cap-1]; returns the count. */
static int pp__mimo_expand(const pp_mimo_pipeline *pl, int rank, int is_send, int lpeer, pp_mimo_link *links, int cap)
{
    const pp_mimo *m = &pl->mimo;
    int mod = pp__mimo_pipe_module(pl, rank), pmod = -1, pstage = 0, c[PP_DIM_COUNT];
    if (mod < 0 || !pp__mimo_coords(m, mod, rank, c)) return 0;
    if (pp_mimo_pipeline_stage(pl, lpeer, &pmod, &pstage, NULL) != PP_OK) return 0;
    if (pmod == mod) {
        c[PP_DIM_PP] = pstage;
        if (cap > 0) { links[0].peer = pp_mimo_rank(m, mod, c); links[0].part = 0; links[0].parts = 1; }
        return 1;
    }
    if (mod == pl->encoder) return pp__mimo_links(m, mod, rank, is_send ? PP_OP_SEND_F : PP_OP_RECV_B, links, cap);
    return pp__mimo_links(m, pmod, rank, is_send ? PP_OP_SEND_B : PP_OP_RECV_F, links, cap);
}

/* One transfer of a colocated bridge exchange. */
typedef struct pp__mimo_xitem { int op, mb, encoder_side; pp_mimo_link link; } pp__mimo_xitem;

/* Every transfer of the exchange of encoder enc on rank, for all microbatches, in posting
 * order (per microbatch: sends, then receives). Returns the count or -1 (out of memory). */
static int pp__mimo_exchange_items(const pp_mimo_pipeline *pl, int enc, int rank, int backward, pp__mimo_xitem **out)
{
    const pp_mimo *m = &pl->mimo;
    int ops[2], side[2], n = 0, cap = 0, mb, s, k, cnt;
    pp__mimo_xitem *items = NULL;
    pp_mimo_link *links;
    ops[0] = backward ? PP_OP_SEND_B : PP_OP_SEND_F;  side[0] = !backward;   /* sends */
    ops[1] = backward ? PP_OP_RECV_B : PP_OP_RECV_F;  side[1] = backward;    /* receives */
    cnt = pp__mimo_links(m, enc, rank, ops[0], NULL, 0) + pp__mimo_links(m, enc, rank, ops[1], NULL, 0);
    *out = NULL;
    if (cnt == 0) return 0;
    links = (pp_mimo_link *)pp__calloc((size_t)cnt, sizeof *links);
    cap = cnt * pl->mb;
    items = (pp__mimo_xitem *)pp__calloc((size_t)cap, sizeof *items);
    if (!links || !items) { PIPEPAR_FREE(links); PIPEPAR_FREE(items); return -1; }
    for (mb = 0; mb < pl->mb; mb++)
        for (s = 0; s < 2; s++) {
            int nl = pp__mimo_links(m, enc, rank, ops[s], links, cnt);
            for (k = 0; k < nl; k++) {
                items[n].op = ops[s]; items[n].mb = mb; items[n].encoder_side = side[s];
                items[n].link = links[k];
                n++;
            }
        }
    PIPEPAR_FREE(links);
    *out = items;
    return n;
}

typedef struct pp__mimo_prog { pp_mimo_op *ops; int len, cap; } pp__mimo_prog;

static int pp__mimo_push(pp__mimo_prog *p, pp_mimo_op op)
{
    if (p->len == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        pp_mimo_op *n = (pp_mimo_op *)PIPEPAR_REALLOC(p->ops, (size_t)cap * sizeof(pp_mimo_op));
        if (!n) return 0;
        p->ops = n; p->cap = cap;
    }
    p->ops[p->len++] = op;
    return 1;
}

static pp_mimo_op pp__mimo_compute(int op, int module, int stage, int mb)
{
    pp_mimo_op o;
    memset(&o, 0, sizeof o);
    o.op = op; o.module = module; o.stage = stage; o.mb = mb; o.peer = -1; o.group = -1; o.parts = 1;
    return o;
}

/* Appends the rank's pipeline program (compute, and every transfer expanded). */
static int pp__mimo_prog_pipeline(const pp_mimo_pipeline *pl, int rank, pp__mimo_prog *p, int *group)
{
    const pp_schedule *s = pl->schedule;
    int lr = pp_mimo_pipeline_rank(pl, rank), i, k, cap = 0, mod = -1, mst = 0;
    pp_mimo_link *links = NULL;
    int ok = 1;
    if (lr < 0) return 1;
    for (i = 0; i < s->length[lr] && ok; i++) {
        pp_action a = s->actions[lr][i];
        if (!pp__mimo_is_comm(a.op)) {
            pp_mimo_pipeline_stage(pl, a.stage, &mod, &mst, NULL);
            ok = pp__mimo_push(p, pp__mimo_compute(a.op, mod, mst, a.mb));
            continue;
        }
        if (i == 0 || !pp__mimo_is_comm(s->actions[lr][i - 1].op) || s->actions[lr][i - 1].group != a.group) (*group)++;
        {
            int send = pp__mimo_is_send(a.op);
            int lpeer = (a.op == PP_OP_SEND_F || a.op == PP_OP_RECV_B) ? a.stage + 1 : a.stage - 1;
            int n = pp__mimo_expand(pl, rank, send, lpeer, NULL, 0);
            uint64_t tag = a.op == PP_OP_SEND_F ? pp_transfer_tag(PP_OP_SEND_F, a.stage, a.mb, 0)
                         : a.op == PP_OP_SEND_B ? pp_transfer_tag(PP_OP_SEND_B, a.stage, a.mb, 0)
                         : a.op == PP_OP_RECV_F ? pp_transfer_tag(PP_OP_SEND_F, a.stage - 1, a.mb, 0)
                         : pp_transfer_tag(PP_OP_SEND_B, a.stage + 1, a.mb, 0);
            if (n > cap) {
                PIPEPAR_FREE(links);
                cap = n;
                links = (pp_mimo_link *)pp__calloc((size_t)cap, sizeof *links);
                if (!links) return 0;
            }
            n = pp__mimo_expand(pl, rank, send, lpeer, links, cap);
            pp_mimo_pipeline_stage(pl, a.stage, &mod, &mst, NULL);
            for (k = 0; k < n && ok; k++) {
                pp_mimo_op o;
                memset(&o, 0, sizeof o);
                o.op = a.op; o.module = mod; o.stage = mst; o.mb = a.mb;
                o.peer = links[k].peer; o.part = links[k].part; o.parts = links[k].parts;
                o.group = *group; o.tag = tag;
                ok = pp__mimo_push(p, o);
            }
        }
    }
    PIPEPAR_FREE(links);
    return ok;
}

static int pp__mimo_prog_exchange(const pp_mimo_pipeline *pl, int enc, int rank, int backward, pp__mimo_prog *p,
                                  int *group)
{
    pp__mimo_xitem *items = NULL;
    int n = pp__mimo_exchange_items(pl, enc, rank, backward, &items), k, ok = 1;
    if (n < 0) return 0;
    if (n > 0) (*group)++;
    for (k = 0; k < n && ok; k++) {
        pp_mimo_op o;
        int send = pp__mimo_is_send(items[k].op);
        memset(&o, 0, sizeof o);
        o.op = items[k].op;
        o.module = items[k].encoder_side ? enc : pl->mimo.language;
        o.stage = items[k].encoder_side ? pl->mimo.modules[enc].grid.size[PP_DIM_PP] - 1 : 0;
        o.mb = items[k].mb;
        o.peer = items[k].link.peer; o.part = items[k].link.part; o.parts = items[k].link.parts;
        o.group = *group;
        o.tag = pp_transfer_tag(backward ? PP_OP_SEND_B : PP_OP_SEND_F, PP__MIMO_BRIDGE_STAGE + enc, items[k].mb, 0);
        (void)send;
        ok = pp__mimo_push(p, o);
    }
    PIPEPAR_FREE(items);
    return ok;
}

static pp_status pp__mimo_build_programs(const pp_mimo_pipeline *pl, pp_mimo_programs **out, pp_error *err)
{
    const pp_mimo *m = &pl->mimo;
    pp_mimo_programs *p;
    int r, e, mb, ok = 1;
    p = (pp_mimo_programs *)pp__calloc(1, sizeof *p);
    if (!p) return pp__fail(err, PP_ENOMEM, "out of memory");
    p->world = m->world;
    p->length = (int *)pp__calloc((size_t)m->world, sizeof(int));
    p->ops = (pp_mimo_op **)pp__calloc((size_t)m->world, sizeof(pp_mimo_op *));
    if (!p->length || !p->ops) { pp_mimo_programs_free(p); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    for (r = 0; r < m->world && ok; r++) {
        pp__mimo_prog prog;
        int group = -1;
        memset(&prog, 0, sizeof prog);
        /* colocated: encoders forward, bridge, the language pipeline, bridge back, encoders backward */
        for (e = 0; e < pl->num_bridged && ok; e++)
            for (mb = 0; mb < pl->mb && ok; mb++)
                ok = pp__mimo_push(&prog, pp__mimo_compute(PP_OP_F, pl->bridged[e], 0, mb));
        for (e = 0; e < pl->num_bridged && ok; e++) ok = pp__mimo_prog_exchange(pl, pl->bridged[e], r, 0, &prog, &group);
        if (ok) ok = pp__mimo_prog_pipeline(pl, r, &prog, &group);
        for (e = 0; e < pl->num_bridged && ok; e++) ok = pp__mimo_prog_exchange(pl, pl->bridged[e], r, 1, &prog, &group);
        for (e = 0; e < pl->num_bridged && ok; e++)
            for (mb = 0; mb < pl->mb && ok; mb++)
                ok = pp__mimo_push(&prog, pp__mimo_compute(PP_OP_B, pl->bridged[e], 0, mb));
        p->ops[r] = prog.ops;
        p->length[r] = prog.len;
    }
    if (!ok) { pp_mimo_programs_free(p); return pp__fail(err, PP_ENOMEM, "out of memory (physical programs)"); }
    *out = p;
    return PP_OK;
}

void pp_mimo_pipeline_free(pp_mimo_pipeline *pl)
{
    if (!pl) return;
    pp_schedule_free(pl->schedule);
    pp_mimo_programs_free(pl->programs);
    PIPEPAR_FREE(pl);
}

pp_status pp_mimo_pipeline_create(const pp_mimo *m, const pp_mimo_pipeline_config *cfg, pp_mimo_pipeline **out,
                                  pp_error *err)
{
    pp_mimo_pipeline *pl;
    pp_schedule_config sc;
    pp_status st;
    pp_error inner;
    int i, total = 0;
    char desc[256];
    pp__text t;
    if (!m || !cfg || !out) return pp__fail(err, PP_EINVAL, "pp_mimo_pipeline_create: m, cfg and out must not be NULL");
    *out = NULL;
    if (cfg->mb < 1) return pp__fail(err, PP_EINVAL, "mb=%d: must be at least 1", cfg->mb);
    if (m->layout == PP_MIMO_MIXED)
        return pp__fail(err, PP_EUNSUPPORTED, "layout mixed: some grids coincide and some are disjoint; a step runs "
                        "either colocated (all grids the same ranks) or non-colocated (all disjoint)");
    if (m->layout == PP_MIMO_NON_COLOCATED && m->num_modules != 2) {
        memset(&t, 0, sizeof t);
        for (i = 0; i < m->num_modules; i++) pp__text_printf(&t, "%s%s", i ? ", " : "", m->modules[i].name);
        pp__fail(err, PP_EUNSUPPORTED, "non-colocated with %d modules (%s): a pipeline holds one encoder and the "
                 "language model", m->num_modules, t.data ? t.data : "");
        pp__text_free(&t);
        return PP_EUNSUPPORTED;
    }
    pl = (pp_mimo_pipeline *)pp__calloc(1, sizeof *pl);
    if (!pl) return pp__fail(err, PP_ENOMEM, "out of memory");
    pl->mimo = *m;
    pl->mb = cfg->mb;
    pl->encoder = -1;
    for (i = 0; i < PP_MIMO_MAX_MODULES; i++) pl->base[i] = -1;
    for (i = 0; i < m->num_modules; i++) {
        if (i == m->language) continue;
        if ((st = pp__mimo_bridge_check(m, i, err)) != PP_OK) { pp_mimo_pipeline_free(pl); return st; }
        if (m->layout == PP_MIMO_NON_COLOCATED) {
            pl->encoder = i;
        } else {
            if (m->modules[i].grid.size[PP_DIM_PP] != 1) {
                st = pp__fail(err, PP_EUNSUPPORTED, "module %s: pp=%d: a colocated encoder runs outside the language "
                              "model's pipeline and needs pp=1 (as in Megatron's colocated schedule)", m->modules[i].name,
                              m->modules[i].grid.size[PP_DIM_PP]);
                pp_mimo_pipeline_free(pl);
                return st;
            }
            pl->bridged[pl->num_bridged++] = i;
        }
    }
    if (pl->encoder >= 0) { pl->base[pl->encoder] = 0; total = m->modules[pl->encoder].grid.size[PP_DIM_PP]; }
    pl->base[m->language] = total;
    total += m->modules[m->language].grid.size[PP_DIM_PP];
    if (pl->encoder >= 0)
        snprintf(desc, sizeof desc, "pipeline of %d stages (%s %d, %s %d)", total, m->modules[pl->encoder].name,
                 m->modules[pl->encoder].grid.size[PP_DIM_PP], m->modules[m->language].name,
                 m->modules[m->language].grid.size[PP_DIM_PP]);
    else
        snprintf(desc, sizeof desc, "pipeline of %d stages (%s)", total, m->modules[m->language].name);
    memset(&sc, 0, sizeof sc);
    sc.kind = cfg->kind ? cfg->kind : PP_1F1B;
    sc.pp = total;
    sc.vpp = 1;
    sc.mb = cfg->mb;
    if (sc.kind == PP_ZBV || sc.kind == PP_DUALPIPEV) {
        st = pp__fail(err, PP_EUNSUPPORTED, "kind=%s: a V-shaped schedule puts two stages on a rank; a MIMO pipeline "
                      "runs one stage per rank (gpipe, 1f1b, zb-h1, zb-h2)", pp_schedule_kind_name(sc.kind));
        pp_mimo_pipeline_free(pl);
        return st;
    }
    if (sc.kind == PP_DUALPIPE) {
        st = pp__fail(err, PP_EUNSUPPORTED, "kind=%s: DualPipe runs two copies of every stage, one per direction, "
                      "two stages on a rank; a MIMO pipeline runs one stage per rank (gpipe, 1f1b, zb-h1, zb-h2)",
                      pp_schedule_kind_name(sc.kind));
        pp_mimo_pipeline_free(pl);
        return st;
    }
    st = pp_schedule_build(&sc, &pl->schedule, &inner);
    if (st == PP_OK && total > 1) st = pp_schedule_lower(pl->schedule, &inner);
    if (st == PP_OK) st = pp_schedule_validate(pl->schedule, &inner);
    if (st != PP_OK) {
        pp__fail(err, st, "%s: %s", desc, inner.message);
        pp_mimo_pipeline_free(pl);
        return st;
    }
    st = pp__mimo_build_programs(pl, &pl->programs, err);
    if (st == PP_OK) {
        st = pp_mimo_check(pl->programs, &inner);
        if (st != PP_OK) pp__fail(err, st, "%s, physical programs: %s", desc, inner.message);
    }
    if (st != PP_OK) { pp_mimo_pipeline_free(pl); return st; }
    *out = pl;
    return pp__ok(err);
}

/* --- the transport of a pipeline rank --- */

struct pp_mimo_transport {
    const pp_mimo_pipeline *pl;
    pp_transport base;
    int rank;               /* in the job */
    float scale;            /* copies_lcm / copies of this rank's stage */
    double denom;           /* copies_lcm */
    pp_transfer *xf;
    int cap_xf;
    pp_mimo_link *links;
    int cap_links;
};

static pp_status pp__mimo_t_post(void *user, const pp_transfer *xf, int count, void **handle, pp_error *err)
{
    pp_mimo_transport *mt = (pp_mimo_transport *)user;
    int i, k, n = 0;
    if (count < 0 || (count > 0 && !xf) || !handle)
        return pp__fail(err, PP_EINVAL, "rank %d: post: count=%d, transfers and handle must not be NULL", mt->rank, count);
    for (i = 0; i < count; i++) {
        int nl;
        if (xf[i].peer < 0 || xf[i].peer >= mt->pl->schedule->pp)
            return pp__fail(err, PP_EINVAL, "rank %d: transfer to pipeline stage %d: must be between 0 and %d", mt->rank,
                            xf[i].peer, mt->pl->schedule->pp - 1);
        nl = pp__mimo_expand(mt->pl, mt->rank, xf[i].is_send, xf[i].peer, mt->links, mt->cap_links);
        if (nl > mt->cap_links) {
            pp_mimo_link *nlk = (pp_mimo_link *)PIPEPAR_REALLOC(mt->links, (size_t)nl * sizeof(pp_mimo_link));
            if (!nlk) return pp__fail(err, PP_ENOMEM, "rank %d: out of memory (bridge links)", mt->rank);
            mt->links = nlk; mt->cap_links = nl;
            nl = pp__mimo_expand(mt->pl, mt->rank, xf[i].is_send, xf[i].peer, mt->links, mt->cap_links);
        }
        if (n + nl > mt->cap_xf) {
            int cap = mt->cap_xf ? mt->cap_xf : 8;
            pp_transfer *nx;
            while (cap < n + nl) cap *= 2;
            nx = (pp_transfer *)PIPEPAR_REALLOC(mt->xf, (size_t)cap * sizeof(pp_transfer));
            if (!nx) return pp__fail(err, PP_ENOMEM, "rank %d: out of memory (transfers)", mt->rank);
            mt->xf = nx; mt->cap_xf = cap;
        }
        for (k = 0; k < nl; k++) {
            const pp_mimo_link *l = &mt->links[k];
            size_t part = xf[i].bytes / (size_t)l->parts;
            if (xf[i].bytes % (size_t)l->parts != 0) {
                char tagtxt[64];
                pp_transfer_tag_format(xf[i].tag, tagtxt, sizeof tagtxt);
                return pp__fail(err, PP_EINVAL, "rank %d: bridge transfer %s of %zu bytes: does not split into %d equal "
                                "parts along the batch (the batch must be the outermost dimension and a multiple of "
                                "%d)", mt->rank, tagtxt, xf[i].bytes, l->parts, l->parts);
            }
            mt->xf[n].is_send = xf[i].is_send;
            mt->xf[n].peer = l->peer;
            mt->xf[n].tag = xf[i].tag;
            mt->xf[n].buf = (char *)xf[i].buf + part * (size_t)l->part;
            mt->xf[n].bytes = part;
            n++;
        }
    }
    return mt->base.post(mt->base.user, mt->xf, n, handle, err);
}

static pp_status pp__mimo_t_wait(void *user, void *handle, double timeout_s, pp_error *err)
{
    pp_mimo_transport *mt = (pp_mimo_transport *)user;
    return mt->base.wait(mt->base.user, handle, timeout_s, err);
}

static pp_status pp__mimo_t_test(void *user, void *handle, int *done, pp_error *err)
{
    pp_mimo_transport *mt = (pp_mimo_transport *)user;
    return mt->base.test(mt->base.user, handle, done, err);
}

/* Weighted so each pipeline stage counts once: rank r adds value * L / copies(r), then all is
 * divided by L, where L is the lcm of the copies of every stage. Integers stay exact (the
 * executor's schedule check compares sums exactly). */
static pp_status pp__mimo_t_all_reduce(void *user, float *values, int count, double timeout_s, pp_error *err)
{
    pp_mimo_transport *mt = (pp_mimo_transport *)user;
    pp_status st;
    int i;
    if (count < 0 || (count > 0 && !values))
        return pp__fail(err, PP_EINVAL, "rank %d: all_reduce: count=%d with values=%p", mt->rank, count, (void *)values);
    for (i = 0; i < count; i++) values[i] *= mt->scale;
    st = mt->base.all_reduce(mt->base.user, values, count, timeout_s, err);
    if (st != PP_OK) return st;
    for (i = 0; i < count; i++) values[i] = (float)((double)values[i] / mt->denom);
    return PP_OK;
}

static void pp__mimo_t_abort(void *user, pp_status status, const char *reason)
{
    pp_mimo_transport *mt = (pp_mimo_transport *)user;
    mt->base.abort(mt->base.user, status, reason);
}

static long long pp__mimo_gcd(long long a, long long b) { while (b) { long long t = a % b; a = b; b = t; } return a; }

pp_status pp_mimo_transport_create(const pp_mimo_pipeline *pl, int rank, const pp_transport *base,
                                   pp_mimo_transport **state, pp_transport *out, pp_error *err)
{
    pp_mimo_transport *mt;
    long long lcm = 1;
    int i, mod;
    if (!pl || !base || !state || !out)
        return pp__fail(err, PP_EINVAL, "pp_mimo_transport_create: pl, base, state and out must not be NULL");
    *state = NULL;
    if (base->world != pl->mimo.world)
        return pp__fail(err, PP_EINVAL, "base.world=%d: must span the whole job (world=%d)", base->world, pl->mimo.world);
    if (rank < 0 || rank >= pl->mimo.world)
        return pp__fail(err, PP_EINVAL, "rank=%d: must be between 0 and world-1 = %d", rank, pl->mimo.world - 1);
    if (base->rank != rank)
        return pp__fail(err, PP_EINVAL, "base.rank=%d: must be the rank itself (%d)", base->rank, rank);
    if (!base->post || !base->wait || !base->all_reduce || !base->abort)
        return pp__fail(err, PP_EINVAL, "base.%s: must not be NULL", !base->post ? "post" : !base->wait ? "wait" :
                        !base->all_reduce ? "all_reduce" : "abort");
    mod = pp__mimo_pipe_module(pl, rank);
    if (mod < 0) return pp__fail(err, PP_EINVAL, "rank %d: runs no stage of the pipeline", rank);
    for (i = 0; i < pl->mimo.num_modules; i++) {
        long long copies;
        if (pl->base[i] < 0) continue;
        copies = pl->mimo.modules[i].size / pl->mimo.modules[i].grid.size[PP_DIM_PP];
        lcm = lcm / pp__mimo_gcd(lcm, copies) * copies;
        if (lcm > (1 << 20))
            return pp__fail(err, PP_EUNSUPPORTED, "the stages' copies (tp*cp*dp of each module) have a common multiple "
                            "%lld over 2^20: the weighted all-reduce would lose exactness", lcm);
    }
    mt = (pp_mimo_transport *)pp__calloc(1, sizeof *mt);
    if (!mt) return pp__fail(err, PP_ENOMEM, "out of memory");
    mt->pl = pl;
    mt->base = *base;
    mt->rank = rank;
    mt->denom = (double)lcm;
    mt->scale = (float)(lcm / (pl->mimo.modules[mod].size / pl->mimo.modules[mod].grid.size[PP_DIM_PP]));
    memset(out, 0, sizeof *out);
    out->user = mt;
    out->rank = pp_mimo_pipeline_rank(pl, rank);
    out->world = pl->schedule->pp;
    out->post = pp__mimo_t_post;
    out->wait = pp__mimo_t_wait;
    out->test = base->test ? pp__mimo_t_test : NULL;
    out->all_reduce = pp__mimo_t_all_reduce;
    out->abort = pp__mimo_t_abort;
    *state = mt;
    return pp__ok(err);
}

void pp_mimo_transport_free(pp_mimo_transport *state)
{
    if (!state) return;
    PIPEPAR_FREE(state->xf);
    PIPEPAR_FREE(state->links);
    PIPEPAR_FREE(state);
}

pp_status pp_mimo_bridge_exchange(const pp_mimo_pipeline *pl, int encoder, int rank, const pp_transport *world,
                                  int backward, const pp_mimo_bridge_io *io, int step, double timeout_s, pp_error *err)
{
    pp__mimo_xitem *items = NULL;
    pp_transfer *xf = NULL;
    void *handle = NULL;
    pp_status st;
    int i, n, e;
    if (!pl || !world || !io) return pp__fail(err, PP_EINVAL, "pp_mimo_bridge_exchange: pl, world and io must not be NULL");
    for (e = 0; e < pl->num_bridged && pl->bridged[e] != encoder; e++) {}
    if (e == pl->num_bridged)
        return pp__fail(err, PP_EINVAL, "encoder=%d: not bridged around the pipeline (only colocated encoders are; a "
                        "non-colocated pipeline carries its bridge itself)", encoder);
    if (rank < 0 || rank >= pl->mimo.world || world->rank != rank || world->world != pl->mimo.world)
        return pp__fail(err, PP_EINVAL, "rank=%d, world.rank=%d, world.world=%d: the transport must span the job (%d "
                        "ranks) and be this rank's", rank, world->rank, world->world, pl->mimo.world);
    if (!(timeout_s >= 0)) return pp__fail(err, PP_EINVAL, "timeout_s=%g: must be >= 0 (0 means 60 s)", timeout_s);
    n = pp__mimo_exchange_items(pl, encoder, rank, backward, &items);
    if (n < 0) return pp__fail(err, PP_ENOMEM, "out of memory");
    if (n == 0) return pp__ok(err);
    xf = (pp_transfer *)pp__calloc((size_t)n, sizeof *xf);
    if (!xf) { PIPEPAR_FREE(items); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    for (i = 0; i < n; i++) {
        const pp__mimo_xitem *it = &items[i];
        void *const *bufs = it->encoder_side ? io->encoder_out : io->language_in;
        const size_t *bytes = it->encoder_side ? io->encoder_bytes : io->language_bytes;
        const char *what = it->encoder_side ? "encoder_out" : "language_in";
        size_t part;
        if (!bufs || !bytes || (!bufs[it->mb] && bytes[it->mb] > 0)) {
            st = pp__fail(err, PP_EINVAL, "rank %d: io.%s%s: NULL, but this rank %s %s's %s of microbatch %d", rank, what,
                          !bufs || !bytes ? "" : "[mb]", pp__mimo_is_send(it->op) ? "sends" : "receives",
                          pl->mimo.modules[encoder].name, backward ? "gradient" : "output", it->mb);
            goto out;
        }
        if (bytes[it->mb] % (size_t)it->link.parts != 0) {
            st = pp__fail(err, PP_EINVAL, "rank %d: io.%s_bytes[%d]=%zu: does not split into %d equal parts along the "
                          "batch", rank, it->encoder_side ? "encoder" : "language", it->mb, bytes[it->mb], it->link.parts);
            goto out;
        }
        part = bytes[it->mb] / (size_t)it->link.parts;
        xf[i].is_send = pp__mimo_is_send(it->op);
        xf[i].peer = it->link.peer;
        xf[i].tag = pp_transfer_tag(backward ? PP_OP_SEND_B : PP_OP_SEND_F, PP__MIMO_BRIDGE_STAGE + encoder, it->mb, step);
        xf[i].buf = (char *)bufs[it->mb] + part * (size_t)it->link.part;
        xf[i].bytes = part;
    }
    st = world->post(world->user, xf, n, &handle, err);
    if (st == PP_OK) st = world->wait(world->user, handle, timeout_s > 0 ? timeout_s : 60.0, err);
    if (st == PP_OK) st = pp__ok(err);
out:
    PIPEPAR_FREE(items);
    PIPEPAR_FREE(xf);
    return st;
}

/* --- gradients --- */

int pp_mimo_grad_counted(const pp_mimo *m, int module, int rank, unsigned flags)
{
    int c[PP_DIM_COUNT], q;
    const pp_mimo_module *mod;
    if (!m || module < 0 || module >= m->num_modules || !pp__mimo_coords(m, module, rank, c)) return -1;
    mod = &m->modules[module];
    if (flags & PP_MIMO_GRAD_SHARED) return 0;
    if ((flags & PP_MIMO_GRAD_TP_REPLICATED) && c[PP_DIM_TP] != 0) return 0;
    q = c[PP_DIM_CP] + mod->grid.size[PP_DIM_CP] * c[PP_DIM_DP];
    if (flags & PP_MIMO_GRAD_EXPERT) return q / mod->ep == 0;
    return q == 0;
}

pp_status pp_mimo_grad_sumsq(const pp_mimo *m, int rank, const pp_mimo_grad *grads, int count,
                             double sumsq[PP_MIMO_MAX_MODULES], pp_error *err)
{
    int i;
    char a[48];
    if (!m || !sumsq || (count > 0 && !grads))
        return pp__fail(err, PP_EINVAL, "pp_mimo_grad_sumsq: m, sumsq and grads must not be NULL");
    if (count < 0) return pp__fail(err, PP_EINVAL, "count=%d: must be >= 0", count);
    for (i = 0; i < count; i++) {
        const pp_mimo_grad *g = &grads[i];
        int counted;
        size_t k;
        double s = 0;
        if (g->module < 0 || g->module >= m->num_modules)
            return pp__fail(err, PP_EINVAL, "grads[%d].module=%d: must be a module index 0..%d", i, g->module,
                            m->num_modules - 1);
        if (g->flags & ~(PP_MIMO_GRAD_TP_REPLICATED | PP_MIMO_GRAD_EXPERT | PP_MIMO_GRAD_SHARED))
            return pp__fail(err, PP_EINVAL, "grads[%d].flags=0x%x: unknown bits (PP_MIMO_GRAD_TP_REPLICATED, _EXPERT, "
                            "_SHARED)", i, g->flags);
        if (g->count > 0 && !g->grad) return pp__fail(err, PP_EINVAL, "grads[%d].grad: NULL for %zu values", i, g->count);
        counted = pp_mimo_grad_counted(m, g->module, rank, g->flags);
        if (counted < 0)
            return pp__fail(err, PP_EINVAL, "grads[%d]: rank %d does not run module %s (%s)", i, rank,
                            m->modules[g->module].name,
                            pp__mimo_ranks(a, sizeof a, m->modules[g->module].offset, m->modules[g->module].size));
        if (!counted) continue;
        for (k = 0; k < g->count; k++) s += (double)g->grad[k] * (double)g->grad[k];
        sumsq[g->module] += s;
    }
    return pp__ok(err);
}

pp_status pp_mimo_grad_norm(const pp_mimo *m, const pp_transport *world, const double sumsq[PP_MIMO_MAX_MODULES],
                            double max_norm, double timeout_s, pp_mimo_norm *out, pp_error *err)
{
    float v[PP_MIMO_MAX_MODULES];
    double total = 0;
    pp_status st;
    int i;
    if (!m || !world || !sumsq || !out)
        return pp__fail(err, PP_EINVAL, "pp_mimo_grad_norm: m, world, sumsq and out must not be NULL");
    memset(out, 0, sizeof *out);
    if (world->world != m->world || !world->all_reduce)
        return pp__fail(err, PP_EINVAL, "world.world=%d: the transport must span the job (%d ranks) and have all_reduce",
                        world->world, m->world);
    if (!(timeout_s >= 0)) return pp__fail(err, PP_EINVAL, "timeout_s=%g: must be >= 0 (0 means 60 s)", timeout_s);
    if (max_norm != max_norm) return pp__fail(err, PP_EINVAL, "max_norm=nan: must be a number (<= 0: no clipping)");
    for (i = 0; i < m->num_modules; i++) v[i] = (float)sumsq[i];
    st = world->all_reduce(world->user, v, m->num_modules, timeout_s > 0 ? timeout_s : 60.0, err);
    if (st != PP_OK) return st;
    out->finite = 1;
    for (i = 0; i < m->num_modules; i++) {
        double s = (double)v[i];
        if (!(s <= DBL_MAX) || s < 0) out->finite = 0;
        out->module_norm[i] = s >= 0 ? sqrt(s) : s;
        total += s;
    }
    out->norm = out->finite ? sqrt(total) : (double)INFINITY;
    if (!(out->norm <= DBL_MAX)) out->finite = 0;
    out->clip = 1.0;
    if (out->finite && max_norm > 0) {
        double c = max_norm / (out->norm + 1e-6);
        if (c < 1.0) out->clip = c;
    }
    return pp__ok(err);
}

pp_status pp_mimo_group_sum(const pp_transport *world, const int *members, int n, float *values, int count, int id,
                            double timeout_s, pp_error *err)
{
    float *all = NULL;
    pp_transfer *xf = NULL;
    void *handle = NULL;
    pp_status st;
    int i, j, me = -1, k = 0;
    uint64_t tag;
    if (!world || !members || (count > 0 && !values))
        return pp__fail(err, PP_EINVAL, "pp_mimo_group_sum: world, members and values must not be NULL");
    if (n < 1 || count < 0) return pp__fail(err, PP_EINVAL, "n=%d, count=%d: n must be >= 1 and count >= 0", n, count);
    if (id < 0 || id > 15) return pp__fail(err, PP_EINVAL, "id=%d: must be between 0 and 15", id);
    if (!(timeout_s >= 0)) return pp__fail(err, PP_EINVAL, "timeout_s=%g: must be >= 0 (0 means 60 s)", timeout_s);
    for (i = 0; i < n; i++) {
        if (members[i] < 0 || members[i] >= world->world)
            return pp__fail(err, PP_EINVAL, "members[%d]=%d: must be a rank 0..%d", i, members[i], world->world - 1);
        for (j = 0; j < i; j++)
            if (members[j] == members[i]) return pp__fail(err, PP_EINVAL, "members[%d]=%d: appears twice", i, members[i]);
        if (members[i] == world->rank) me = i;
    }
    if (me < 0) return pp__fail(err, PP_EINVAL, "members: this rank (%d) is not among them", world->rank);
    if (n == 1 || count == 0) return pp__ok(err);
    all = (float *)pp__calloc((size_t)n * (size_t)count, sizeof(float));
    xf = (pp_transfer *)pp__calloc((size_t)(2 * (n - 1)), sizeof *xf);
    if (!all || !xf) { PIPEPAR_FREE(all); PIPEPAR_FREE(xf); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    memcpy(all + (size_t)me * (size_t)count, values, (size_t)count * sizeof(float));
    tag = pp_transfer_tag(PP_OP_SEND_F, PP__MIMO_SUM_STAGE + id, 0, 0);
    for (i = 0; i < n; i++) {
        if (i == me) continue;
        xf[k].is_send = 1; xf[k].peer = members[i]; xf[k].tag = tag;
        xf[k].buf = all + (size_t)me * (size_t)count; xf[k].bytes = (size_t)count * sizeof(float); k++;
        xf[k].is_send = 0; xf[k].peer = members[i]; xf[k].tag = tag;
        xf[k].buf = all + (size_t)i * (size_t)count; xf[k].bytes = (size_t)count * sizeof(float); k++;
    }
    st = world->post(world->user, xf, k, &handle, err);
    if (st == PP_OK) st = world->wait(world->user, handle, timeout_s > 0 ? timeout_s : 60.0, err);
    if (st == PP_OK) {
        for (j = 0; j < count; j++) {
            float s = 0.0f;
            for (i = 0; i < n; i++) s += all[(size_t)i * (size_t)count + (size_t)j];
            values[j] = s;
        }
        st = pp__ok(err);
    }
    PIPEPAR_FREE(all);
    PIPEPAR_FREE(xf);
    return st;
}
