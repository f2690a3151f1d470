
/* ============================================================================================
 * >>layers (implementation)
 * Every form ends in one list of items per stage (embedding, decoder layers, MTP depths, loss);
 * pp__layers_finish turns that list into ranges, type-aware offsets and the layout string.
 * ============================================================================================ */

#define PP__LAYERS_MAX (1 << 20)   /* most decoder layers, items, stages or expanded characters */

static const char *const pp__layer_type_names[PP_LAYER_TYPE_COUNT] = {
    "decoder", "moe", "dense", "embedding", "loss", "mtp", "transformer", "mamba", "attention",
    "mlp", "gdn", "dsa", "mla", "csa", "hca", "swa"
};

/* How an item is written: layout letters for E/L/m/t, hybrid symbols for the rest. */
static const char pp__layer_type_chars[PP_LAYER_TYPE_COUNT] = {
    '?', 'E', '?', 'E', 'L', 'm', 't', 'M', '*', '-', 'G', 'D', '+', 'C', 'H', 'W'
};

static const char *const pp__layers_form_names[PP_LAYERS_FORM_COUNT] = {
    "even", "uneven", "layout", "hybrid", "balanced"
};

const char *pp_layer_type_name(pp_layer_type type)
{
    return ((int)type >= 0 && type < PP_LAYER_TYPE_COUNT) ? pp__layer_type_names[type] : "unknown";
}

pp_status pp_layer_type_parse(const char *name, pp_layer_type *type, pp_error *err)
{
    int t;
    if (!name || !type) return pp__fail(err, PP_EINVAL, "type: missing");
    for (t = 0; t < PP_LAYER_TYPE_COUNT; t++)
        if (strcmp(name, pp__layer_type_names[t]) == 0) { *type = (pp_layer_type)t; return pp__ok(err); }
    return pp__fail(err, PP_EINVAL, "layer type '%.40s': unknown (one of decoder, moe, dense, embedding, "
                    "loss, mtp, transformer, mamba, attention, mlp, gdn, dsa, mla, csa, hca, swa)", name);
}

const char *pp_layers_form_name(pp_layers_form form)
{
    return ((int)form >= 0 && form < PP_LAYERS_FORM_COUNT) ? pp__layers_form_names[form] : "unknown";
}

/* Decoder items are the layers Megatron numbers with layer_number: 't' and every hybrid symbol. */
static int pp__layer_is_decoder(int type)
{
    return type == PP_LAYER_MOE || type == PP_LAYER_TRANSFORMER || type >= PP_LAYER_MAMBA;
}

/* Does an item of `type` (an MoE layer when `moe`) count in the index space of `sel`? */
static int pp__layer_matches(int type, int moe, int sel)
{
    switch (sel) {
    case PP_LAYER_DECODER: return pp__layer_is_decoder(type);
    case PP_LAYER_MOE:     return pp__layer_is_decoder(type) && moe;
    case PP_LAYER_DENSE:   return pp__layer_is_decoder(type) && !moe;
    default:               return type == sel;
    }
}

/* The hybrid symbols (Megatron-LM's hybrid layer allocation) and what they build. */
static int pp__hybrid_symbol_type(char c)
{
    switch (c) {
    case 'M': return PP_LAYER_MAMBA;
    case '*': return PP_LAYER_ATTENTION;
    case '-': return PP_LAYER_MLP;
    case 'E': return PP_LAYER_MOE;
    case 'G': return PP_LAYER_GDN;
    case 'D': return PP_LAYER_DSA;
    case '+': return PP_LAYER_MLA;
    case 'C': return PP_LAYER_CSA;
    case 'H': return PP_LAYER_HCA;
    case 'W': return PP_LAYER_SWA;
    default:  return -1;
    }
}

/* A short, printable echo of user text for messages: at most 48 characters, odd bytes as \xNN. */
static const char *pp__layers_echo(const char *s, char *buf, size_t size)
{
    size_t i, n = 0;
    for (i = 0; s[i] && n + 8 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i >= 48) { memcpy(buf + n, "...", 3); n += 3; break; }
        if (c >= 32 && c < 127 && c != '\'') buf[n++] = (char)c;
        else n += (size_t)snprintf(buf + n, size - n, "\\x%02x", c);
    }
    buf[n] = '\0';
    return buf;
}

static const char *pp__layers_char(char c, char *buf)
{
    unsigned char u = (unsigned char)c;
    if (u >= 33 && u < 127) { buf[0] = c; buf[1] = '\0'; }
    else snprintf(buf, 8, "\\x%02x", u);
    return buf;
}

static void pp__layers_putc(pp__text *t, char c)
{
    if (t->failed) return;
    if (t->len + 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        char *d = (char *)PIPEPAR_REALLOC(t->data, cap);
        if (!d) { t->failed = 1; return; }
        t->data = d; t->cap = cap;
    }
    t->data[t->len++] = c;
    t->data[t->len] = '\0';
}

/* --- result object ------------------------------------------------------------------------ */

void pp_layers_free(pp_layers *l)
{
    if (!l) return;
    PIPEPAR_FREE(l->first); PIPEPAR_FREE(l->count); PIPEPAR_FREE(l->stage_items);
    PIPEPAR_FREE(l->item_type); PIPEPAR_FREE(l->is_moe); PIPEPAR_FREE(l->layer_type);
    PIPEPAR_FREE(l->type_first); PIPEPAR_FREE(l->type_count); PIPEPAR_FREE(l->layout);
    PIPEPAR_FREE(l->pattern); PIPEPAR_FREE(l->stage_cost); PIPEPAR_FREE(l->stage_memory);
    PIPEPAR_FREE(l);
}

/* A result with room for `max_items` items over pp*vpp stages. */
static pp_layers *pp__layers_new(pp_layers_form form, int pp, int vpp, int max_items)
{
    pp_layers *l = (pp_layers *)pp__calloc(1, sizeof *l);
    if (!l) return NULL;
    l->form = form;
    l->pp = pp; l->vpp = vpp; l->num_stages = pp * vpp;
    l->stage_items = (int *)pp__calloc((size_t)l->num_stages + 1, sizeof(int));
    l->item_type = (unsigned char *)pp__calloc((size_t)max_items + 1, 1);
    if (!l->stage_items || !l->item_type) { pp_layers_free(l); return NULL; }
    return l;
}

static void pp__layers_push(pp_layers *l, int type, int count)
{
    int k;
    for (k = 0; k < count; k++) l->item_type[l->num_items++] = (unsigned char)type;
}

/* The items of a transformer model whose stage s builds count[s] decoder layers: the embedding
 * opens stage 0, the MTP depths and the loss close the last stage (where Megatron builds them
 * when no layout says otherwise). */
static void pp__layers_fill_counts(pp_layers *l, const int *count, int mtp_layers)
{
    int s;
    for (s = 0; s < l->num_stages; s++) {
        l->stage_items[s] = l->num_items;
        if (s == 0) pp__layers_push(l, PP_LAYER_EMBEDDING, 1);
        pp__layers_push(l, PP_LAYER_TRANSFORMER, count[s]);
        if (s == l->num_stages - 1) {
            pp__layers_push(l, PP_LAYER_MTP, mtp_layers);
            pp__layers_push(l, PP_LAYER_LOSS, 1);
        }
    }
    l->stage_items[l->num_stages] = l->num_items;
}

/* --- moe_layer_freq: "N" or a Python list expression ---------------------------------------
 * Megatron reads --moe-layer-freq with moe_freq_type: an integer N makes layer i an MoE layer
 * when i % N == 0; a string with '[' is evaluated as Python, e.g. "([1]*3+[0]*1)*3". We evaluate
 * the part of Python those patterns use: integer and list literals, '+', '*', parentheses.   */

typedef struct pp__moe_value {
    int is_list;
    long long num;
    unsigned char *items;
    size_t len;
} pp__moe_value;

typedef struct pp__moe_parser {
    const char *s;
    size_t i;
    const char *what;           /* name of the field, for messages */
    pp_error *err;
    pp_status status;
} pp__moe_parser;

static void pp__moe_skip(pp__moe_parser *p)
{
    while (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r') p->i++;
}

static int pp__moe_error(pp__moe_parser *p, const char *rule)
{
    char echo[96];
    if (p->status == PP_OK)
        p->status = pp__fail(p->err, PP_EPARSE, "%s='%s': %s at position %zu", p->what,
                             pp__layers_echo(p->s, echo, sizeof echo), rule, p->i);
    return 0;
}

static int pp__moe_int(pp__moe_parser *p, long long *out)
{
    long long v = 0;
    if (p->s[p->i] < '0' || p->s[p->i] > '9') return pp__moe_error(p, "expected a number");
    while (p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (p->s[p->i] - '0');
        if (v > PP__LAYERS_MAX) return pp__moe_error(p, "number too large");
        p->i++;
    }
    *out = v;
    return 1;
}

static int pp__moe_expr(pp__moe_parser *p, pp__moe_value *out, int depth);

static int pp__moe_factor(pp__moe_parser *p, pp__moe_value *out, int depth)
{
    memset(out, 0, sizeof *out);
    pp__moe_skip(p);
    if (depth > 64) return pp__moe_error(p, "nested too deeply");
    if (p->s[p->i] == '(') {
        p->i++;
        if (!pp__moe_expr(p, out, depth + 1)) return 0;
        pp__moe_skip(p);
        if (p->s[p->i] != ')') { PIPEPAR_FREE(out->items); out->items = NULL; return pp__moe_error(p, "expected ')'"); }
        p->i++;
        return 1;
    }
    if (p->s[p->i] == '[') {
        size_t cap = 0;
        p->i++;
        out->is_list = 1;
        for (;;) {
            long long v;
            pp__moe_skip(p);
            if (p->s[p->i] == ']') { p->i++; return 1; }
            if (!pp__moe_int(p, &v)) break;
            if (v > 255) { pp__moe_error(p, "list element too large"); break; }
            if (out->len == cap) {
                unsigned char *d;
                if (cap >= PP__LAYERS_MAX) { pp__moe_error(p, "list too long"); break; }
                cap = cap ? cap * 2 : 16;
                d = (unsigned char *)PIPEPAR_REALLOC(out->items, cap);
                if (!d) { if (p->status == PP_OK) p->status = pp__fail(p->err, PP_ENOMEM, "%s: out of memory", p->what); break; }
                out->items = d;
            }
            out->items[out->len++] = (unsigned char)v;
            pp__moe_skip(p);
            if (p->s[p->i] == ',') { p->i++; continue; }
            if (p->s[p->i] == ']') { p->i++; return 1; }
            pp__moe_error(p, "expected ',' or ']'");
            break;
        }
        PIPEPAR_FREE(out->items); out->items = NULL;
        return 0;
    }
    return pp__moe_int(p, &out->num);
}

/* a * b where one side may be a list (repetition, as in Python). */
static int pp__moe_times(pp__moe_parser *p, pp__moe_value *a, pp__moe_value *b)
{
    if (a->is_list && b->is_list) {
        PIPEPAR_FREE(b->items);
        return pp__moe_error(p, "cannot multiply a list by a list");
    }
    if (!a->is_list && !b->is_list) {
        if (a->num * b->num > PP__LAYERS_MAX) return pp__moe_error(p, "number too large");
        a->num *= b->num;
        return 1;
    }
    if (!a->is_list) { pp__moe_value t = *a; *a = *b; *b = t; }
    {
        long long n = b->num;
        size_t k;
        unsigned char *d;
        if (n == 0 || a->len == 0) { a->len = 0; return 1; }
        if ((long long)a->len * n > PP__LAYERS_MAX) return pp__moe_error(p, "list too long");
        d = (unsigned char *)PIPEPAR_REALLOC(a->items, a->len * (size_t)n);
        if (!d) {
            if (p->status == PP_OK) p->status = pp__fail(p->err, PP_ENOMEM, "%s: out of memory", p->what);
            return 0;
        }
        for (k = 1; k < (size_t)n; k++) memcpy(d + k * a->len, d, a->len);
        a->items = d;
        a->len *= (size_t)n;
    }
    return 1;
}

static int pp__moe_term(pp__moe_parser *p, pp__moe_value *out, int depth)
{
    if (!pp__moe_factor(p, out, depth)) return 0;
    for (;;) {
        pp__moe_value rhs;
        pp__moe_skip(p);
        if (p->s[p->i] != '*') return 1;
        p->i++;
        if (!pp__moe_factor(p, &rhs, depth) || !pp__moe_times(p, out, &rhs)) {
            PIPEPAR_FREE(out->items); out->items = NULL;
            return 0;
        }
        PIPEPAR_FREE(rhs.items);
    }
}

static int pp__moe_expr(pp__moe_parser *p, pp__moe_value *out, int depth)
{
    if (!pp__moe_term(p, out, depth)) return 0;
    for (;;) {
        pp__moe_value rhs;
        pp__moe_skip(p);
        if (p->s[p->i] != '+') return 1;
        p->i++;
        if (!pp__moe_term(p, &rhs, depth)) { PIPEPAR_FREE(out->items); out->items = NULL; return 0; }
        if (out->is_list != rhs.is_list) {
            PIPEPAR_FREE(rhs.items); PIPEPAR_FREE(out->items); out->items = NULL;
            return pp__moe_error(p, "cannot add a number and a list");
        }
        if (!out->is_list) {
            out->num += rhs.num;
            if (out->num > PP__LAYERS_MAX) { return pp__moe_error(p, "number too large"); }
        } else if (rhs.len) {
            unsigned char *d;
            if (out->len + rhs.len > PP__LAYERS_MAX) {
                PIPEPAR_FREE(rhs.items); PIPEPAR_FREE(out->items); out->items = NULL;
                return pp__moe_error(p, "list too long");
            }
            d = (unsigned char *)PIPEPAR_REALLOC(out->items, out->len + rhs.len);
            if (!d) {
                PIPEPAR_FREE(rhs.items); PIPEPAR_FREE(out->items); out->items = NULL;
                if (p->status == PP_OK) p->status = pp__fail(p->err, PP_ENOMEM, "%s: out of memory", p->what);
                return 0;
            }
            memcpy(d + out->len, rhs.items, rhs.len);
            out->items = d;
            out->len += rhs.len;
        }
        PIPEPAR_FREE(rhs.items);
    }
}

/* Fills is_moe[0..n) from a moe_layer_freq string. */
static pp_status pp__moe_pattern(const char *text, int n, unsigned char *is_moe, pp_error *err)
{
    char echo[96];
    int i;
    if (!strchr(text, '[')) {                       /* an integer N, as int(x) reads it */
        pp__moe_parser p;
        long long v;
        memset(&p, 0, sizeof p);
        p.s = text; p.what = "moe_layer_freq"; p.err = err;
        pp__moe_skip(&p);
        if (pp__moe_int(&p, &v)) pp__moe_skip(&p);
        else p.i = 0;
        if (p.i == 0 || p.s[p.i] != '\0')
            return pp__fail(err, PP_EPARSE, "moe_layer_freq='%s': expected an integer N (layer i is MoE "
                            "when i %% N == 0) or a list such as [0]*3+[1]*58",
                            pp__layers_echo(text, echo, sizeof echo));
        if (v < 1)
            return pp__fail(err, PP_EINVAL, "moe_layer_freq=%lld: must be at least 1", v);
        for (i = 0; i < n; i++) is_moe[i] = (unsigned char)(i % v == 0);
        return PP_OK;
    }
    {
        pp__moe_parser p;
        pp__moe_value v;
        memset(&p, 0, sizeof p);
        memset(&v, 0, sizeof v);
        p.s = text; p.what = "moe_layer_freq"; p.err = err; p.status = PP_OK;
        if (!pp__moe_expr(&p, &v, 0)) return p.status;
        pp__moe_skip(&p);
        if (p.s[p.i] != '\0') { PIPEPAR_FREE(v.items); pp__moe_error(&p, "unexpected text"); return p.status; }
        if (!v.is_list)
            return pp__fail(err, PP_EPARSE, "moe_layer_freq='%s': evaluates to a number, not a list",
                            pp__layers_echo(text, echo, sizeof echo));
        if ((long long)v.len != n) {
            PIPEPAR_FREE(v.items);
            return pp__fail(err, PP_EINVAL, "moe_layer_freq='%s': the list has %zu entries, but the model has "
                            "%d decoder layers", pp__layers_echo(text, echo, sizeof echo), v.len, n);
        }
        for (i = 0; i < n; i++) {
            if (v.items[i] > 1) {
                int bad = v.items[i];
                PIPEPAR_FREE(v.items);
                return pp__fail(err, PP_EINVAL, "moe_layer_freq: entry %d is %d; use 0 (dense) or 1 (MoE)", i, bad);
            }
            is_moe[i] = v.items[i];
        }
        PIPEPAR_FREE(v.items);
        return PP_OK;
    }
}

/* --- finishing: ranges, type-aware offsets, layout string ---------------------------------- */

/* Stage text in layout spelling ("Et*13") or, for hybrid patterns, the decoder symbols. */
static void pp__layers_stage_spell(const pp_layers *l, int s, pp__text *t)
{
    int i = l->stage_items[s], end = l->stage_items[s + 1];
    while (i < end) {
        int type = l->item_type[i], run = 1;
        char c = pp__layer_type_chars[type];
        if (l->form == PP_LAYERS_HYBRID) {
            if (pp__layer_is_decoder(type)) pp__layers_putc(t, c);
            i++;
            continue;
        }
        while (i + run < end && l->item_type[i + run] == type) run++;
        pp__layers_putc(t, c);
        if (run > 1) pp__text_printf(t, "*%d", run);
        i += run;
    }
}

/* A layout string: stages joined by '|', runs of equal stages as "(X|)*N". Megatron's parser
 * expands "(...)*N" before "x*N", so both nest as written here. */
static pp_status pp__layers_make_layout(pp_layers *l, pp_error *err)
{
    pp__text out, a, b;
    int s;
    memset(&out, 0, sizeof out); memset(&a, 0, sizeof a); memset(&b, 0, sizeof b);
    pp__layers_putc(&out, '\0'); out.len = 0;
    for (s = 0; s < l->num_stages; ) {
        int run = 1;
        a.len = 0; pp__layers_putc(&a, '\0'); a.len = 0;
        pp__layers_stage_spell(l, s, &a);
        if (s == l->num_stages - 1) { pp__text_printf(&out, "%s", a.data ? a.data : ""); break; }
        while (s + run < l->num_stages - 1) {
            b.len = 0; pp__layers_putc(&b, '\0'); b.len = 0;
            pp__layers_stage_spell(l, s + run, &b);
            if (a.failed || b.failed || strcmp(a.data, b.data) != 0) break;
            run++;
        }
        if (run > 1) pp__text_printf(&out, "(%s|)*%d", a.data ? a.data : "", run);
        else pp__text_printf(&out, "%s|", a.data ? a.data : "");
        s += run;
    }
    if (out.failed || a.failed || b.failed) {
        pp__text_free(&out); pp__text_free(&a); pp__text_free(&b);
        return pp__fail(err, PP_ENOMEM, "layout string: out of memory");
    }
    pp__text_free(&a); pp__text_free(&b);
    l->layout = out.data;
    return PP_OK;
}

static pp_status pp__layers_finish(pp_layers *l, const char *moe_freq, pp_error *err)
{
    const int C = PP_LAYER_TYPE_COUNT;
    int running[PP_LAYER_TYPE_COUNT];
    int s, i, t, g = 0, n = 0;
    pp_status st;
    for (i = 0; i < l->num_items; i++) n += pp__layer_is_decoder(l->item_type[i]);
    l->num_layers = n;
    l->first = (int *)pp__calloc((size_t)l->num_stages, sizeof(int));
    l->count = (int *)pp__calloc((size_t)l->num_stages, sizeof(int));
    l->is_moe = (unsigned char *)pp__calloc((size_t)n + 1, 1);
    l->layer_type = (unsigned char *)pp__calloc((size_t)n + 1, 1);
    l->type_first = (int *)pp__calloc((size_t)l->num_stages * C, sizeof(int));
    l->type_count = (int *)pp__calloc((size_t)l->num_stages * C, sizeof(int));
    if (!l->first || !l->count || !l->is_moe || !l->layer_type || !l->type_first || !l->type_count)
        return pp__fail(err, PP_ENOMEM, "layers: out of memory");
    if (moe_freq && (st = pp__moe_pattern(moe_freq, n, l->is_moe, err)) != PP_OK) return st;
    for (t = 0; t < C; t++) running[t] = 0;
    l->mtp_layers = 0;
    for (s = 0; s < l->num_stages; s++) {
        l->first[s] = g;
        for (t = 0; t < C; t++) l->type_first[s * C + t] = running[t];
        for (i = l->stage_items[s]; i < l->stage_items[s + 1]; i++) {
            int type = l->item_type[i], moe = 0;
            if (pp__layer_is_decoder(type)) {
                if (type == PP_LAYER_MOE) l->is_moe[g] = 1;
                moe = l->is_moe[g];
                l->layer_type[g++] = (unsigned char)type;
            }
            if (type == PP_LAYER_MTP) l->mtp_layers++;
            for (t = 0; t < C; t++) running[t] += pp__layer_matches(type, moe, t);
        }
        l->count[s] = g - l->first[s];
        for (t = 0; t < C; t++) l->type_count[s * C + t] = running[t] - l->type_first[s * C + t];
    }
    if (l->form != PP_LAYERS_HYBRID) return pp__layers_make_layout(l, err);
    return PP_OK;
}

/* --- checks shared by the forms -------------------------------------------------------------- */

static pp_status pp__layers_check_sizes(int pp, int vpp, pp_error *err)
{
    if (pp < 1 || pp > 65536) return pp__fail(err, PP_EINVAL, "pp=%d: must be between 1 and 65536", pp);
    if (vpp < 1 || vpp > 65536) return pp__fail(err, PP_EINVAL, "vpp=%d: must be between 1 and 65536", vpp);
    if ((long long)pp * vpp > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "pp*vpp=%lld: at most %d stages", (long long)pp * vpp, PP__LAYERS_MAX);
    if (vpp > 1 && pp < 2)
        return pp__fail(err, PP_EINVAL, "vpp=%d: virtual stages need pp >= 2 (Megatron-LM rejects an interleaved "
                        "schedule with one pipeline rank, and would give every chunk layer offset 0)", vpp);
    return PP_OK;
}

/* Layers per rank for the even and uneven forms (Megatron-LM's TransformerConfig checks and
 * get_num_layers_to_build), then per stage: count[vpp_rank * pp + pp_rank]. Stricter than
 * Megatron where it would build the wrong model: first + last > num_layers, or layers left over
 * with no middle stage to hold them. */
static pp_status pp__layers_split(int L, int pp, int vpp, int first, int last, int emb, int loss,
                                  int *count, pp_error *err)
{
    int r, v, S = pp * vpp;
    if (first || last) {
        int middle_stages = pp - (first ? 1 : 0) - (last ? 1 : 0);
        long long middle = (long long)L - first - last;
        int per = 0;
        if (emb || loss)
            return pp__fail(err, PP_EINVAL, "first=%d, last=%d: num_layers_in_first/last_pipeline_stage cannot be "
                            "combined with account_for_embedding/loss_in_pipeline_split", first, last);
        if (middle_stages < 0)
            return pp__fail(err, PP_EINVAL, "first=%d, last=%d: pp=1 has a single stage, it cannot take both the "
                            "first and the last stage's layers", first, last);
        if (first && vpp > 1 && first % vpp != 0)
            return pp__fail(err, PP_EINVAL, "first=%d: the first stage's layers must divide evenly over vpp=%d "
                            "chunks", first, vpp);
        if (last && vpp > 1 && last % vpp != 0)
            return pp__fail(err, PP_EINVAL, "last=%d: the last stage's layers must divide evenly over vpp=%d "
                            "chunks", last, vpp);
        if (middle < 0)
            return pp__fail(err, PP_EINVAL, "first=%d, last=%d: together more than num_layers=%d", first, last, L);
        if (middle_stages == 0 && middle != 0)
            return pp__fail(err, PP_EINVAL, "num_layers=%d minus first stage %d and last stage %d leaves %lld layers, "
                            "but pp=%d has 0 middle stages to hold them", L, first, last, middle, pp);
        if (middle_stages > 0) {
            if (middle % middle_stages != 0)
                return pp__fail(err, PP_EINVAL, "num_layers=%d minus first stage %d and last stage %d leaves %lld "
                                "layers, which do not divide evenly over %d middle stages (pp=%d)",
                                L, first, last, middle, middle_stages, pp);
            per = (int)(middle / middle_stages);
            if (vpp > 1 && per % vpp != 0)
                return pp__fail(err, PP_EINVAL, "vpp=%d: each middle rank's %d layers do not divide evenly over "
                                "%d chunks", vpp, per, vpp);
        }
        for (r = 0; r < pp; r++) {
            int n = per;
            if (r == 0 && first) n = first;
            else if (r == pp - 1 && last) n = last;
            for (v = 0; v < vpp; v++) count[v * pp + r] = n / vpp;
        }
        return PP_OK;
    }
    {
        long long total = (long long)L + (emb ? 1 : 0) + (loss ? 1 : 0);
        int per;
        if (total % pp != 0) {
            if (emb || loss)
                return pp__fail(err, PP_EINVAL, "num_layers=%d: with the %s counted as a layer that is %lld, which "
                                "does not divide evenly over pp=%d", L,
                                emb && loss ? "embedding and the loss" : emb ? "embedding" : "loss", total, pp);
            return pp__fail(err, PP_EINVAL, "num_layers=%d: does not divide evenly over pp=%d (set first/last for "
                            "an uneven split, or give a layout)", L, pp);
        }
        per = (int)(total / pp);
        if (vpp > 1 && per % vpp != 0)
            return pp__fail(err, PP_EINVAL, "vpp=%d: each rank's %d layers do not divide evenly over %d chunks",
                            vpp, per, vpp);
        for (r = 0; r < S; r++) count[r] = per / vpp;
        if (emb) count[0]--;
        if (loss) count[S - 1]--;
        if (count[0] < 0 || count[S - 1] < 0)
            return pp__fail(err, PP_EINVAL, "num_layers=%d: a stage of %d layers cannot give one up to the %s",
                            L, per / vpp, count[0] < 0 ? "embedding" : "loss");
        return PP_OK;
    }
}

/* --- layout strings ---------------------------------------------------------------------------
 * Megatron-LM's PipelineParallelLayerLayout.parse_str_to_list, step by step:
 *   1. drop every ','
 *   2. one left-to-right pass of  \(([^)]+)\)\*(\d+)  -> the group repeated  ("(tt|)*2" -> "tt|tt|")
 *   3. one left-to-right pass of  (.)\*(\d+)          -> the character repeated ("t*3" -> "ttt")
 *   4. split at '|'; every character must be one of E t m L.
 * Each expanded character remembers where it came from, so errors point into the input.     */

typedef struct pp__ptext { char *c; int *pos; size_t len, cap; } pp__ptext;

static void pp__ptext_free(pp__ptext *t) { PIPEPAR_FREE(t->c); PIPEPAR_FREE(t->pos); memset(t, 0, sizeof *t); }

/* Appends `times` copies of [c, c + n) (positions pos); 1 when the result would be too long. */
static int pp__ptext_append(pp__ptext *t, const char *c, const int *pos, size_t n, long long times, int *oom)
{
    long long k;
    if (times <= 0 || n == 0) return 0;
    if ((long long)n * times > (long long)PP__LAYERS_MAX - (long long)t->len) return 1;
    if (t->len + n * (size_t)times > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        char *nc; int *np;
        while (cap < t->len + n * (size_t)times) cap *= 2;
        nc = (char *)PIPEPAR_REALLOC(t->c, cap + 1);
        if (!nc) { *oom = 1; return 1; }
        t->c = nc;
        np = (int *)PIPEPAR_REALLOC(t->pos, (cap + 1) * sizeof(int));
        if (!np) { *oom = 1; return 1; }
        t->pos = np;
        t->cap = cap;
    }
    for (k = 0; k < times; k++) {
        memcpy(t->c + t->len, c, n);
        memcpy(t->pos + t->len, pos, n * sizeof(int));
        t->len += n;
    }
    t->c[t->len] = '\0';
    return 0;
}

static int pp__is_digit(char c) { return c >= '0' && c <= '9'; }

/* Reads the digits at s[*i] (at least one is there); -1 when the count is absurd. */
static long long pp__layout_count(const pp__ptext *s, size_t *i)
{
    long long v = 0;
    while (*i < s->len && pp__is_digit(s->c[*i])) {
        if (v <= PP__LAYERS_MAX) v = v * 10 + (s->c[*i] - '0');
        (*i)++;
    }
    return v > PP__LAYERS_MAX ? -1 : v;
}

static pp_status pp__layout_too_long(const char *text, int oom, pp_error *err)
{
    char echo[96];
    if (oom) return pp__fail(err, PP_ENOMEM, "layout: out of memory");
    return pp__fail(err, PP_EINVAL, "layout '%s': expands to more than %d characters",
                    pp__layers_echo(text, echo, sizeof echo), PP__LAYERS_MAX);
}

static pp_status pp__layout_expand(const char *text, pp__ptext *out, pp_error *err)
{
    pp__ptext a, b;
    size_t i, n = strlen(text);
    int oom = 0, pos;
    memset(&a, 0, sizeof a); memset(&b, 0, sizeof b); memset(out, 0, sizeof *out);
    if (n > PP__LAYERS_MAX) return pp__layout_too_long(text, 0, err);
    for (i = 0; i < n; i++) {                               /* 1. commas are cosmetic */
        if (text[i] == ',') continue;
        pos = (int)i;
        if (pp__ptext_append(&a, text + i, &pos, 1, 1, &oom)) goto too_long;
    }
    for (i = 0; i < a.len; ) {                              /* 2. (group)*N */
        if (a.c[i] == '(') {
            size_t j = i + 1, k;
            while (j < a.len && a.c[j] != ')') j++;
            if (j > i + 1 && j + 2 < a.len && a.c[j + 1] == '*' && pp__is_digit(a.c[j + 2])) {
                long long times;
                k = j + 2;
                times = pp__layout_count(&a, &k);
                if (times < 0) goto bad_count;
                if (pp__ptext_append(&b, a.c + i + 1, a.pos + i + 1, j - i - 1, times, &oom)) goto too_long;
                i = k;
                continue;
            }
        }
        if (pp__ptext_append(&b, a.c + i, a.pos + i, 1, 1, &oom)) goto too_long;
        i++;
    }
    pp__ptext_free(&a);
    for (i = 0; i < b.len; ) {                              /* 3. x*N ('.' is not a newline) */
        if (b.c[i] != '\n' && i + 2 < b.len && b.c[i + 1] == '*' && pp__is_digit(b.c[i + 2])) {
            size_t k = i + 2;
            long long times = pp__layout_count(&b, &k);
            if (times < 0) goto bad_count;
            if (pp__ptext_append(out, b.c + i, b.pos + i, 1, times, &oom)) goto too_long;
            i = k;
            continue;
        }
        if (pp__ptext_append(out, b.c + i, b.pos + i, 1, 1, &oom)) goto too_long;
        i++;
    }
    pp__ptext_free(&b);
    if (!out->c) {                                          /* nothing left: one empty stage */
        out->c = (char *)pp__calloc(1, 1);
        out->pos = (int *)pp__calloc(1, sizeof(int));
        if (!out->c || !out->pos) { oom = 1; goto too_long; }
    }
    return PP_OK;
too_long:
    pp__ptext_free(&a); pp__ptext_free(&b); pp__ptext_free(out);
    return pp__layout_too_long(text, oom, err);
bad_count:
    {
        char echo[96];
        pp__ptext_free(&a); pp__ptext_free(&b); pp__ptext_free(out);
        return pp__fail(err, PP_EINVAL, "layout '%s': a repeat count is larger than %d",
                        pp__layers_echo(text, echo, sizeof echo), PP__LAYERS_MAX);
    }
}

static int pp__layout_type(char c)
{
    switch (c) {
    case 'E': return PP_LAYER_EMBEDDING;
    case 't': return PP_LAYER_TRANSFORMER;
    case 'm': return PP_LAYER_MTP;
    case 'L': return PP_LAYER_LOSS;
    default:  return -1;
    }
}

static pp_status pp__layers_from_layout(const pp_layers_config *cfg, int pp, pp_layers **out, pp_error *err)
{
    const char *text = cfg->layout;
    char echo[96], ch[8];
    pp__ptext x;
    pp_layers *l = NULL;
    pp_status st;
    size_t i;
    int stages = 1, vpp, s, t, n_e = 0, n_l = 0, n_t = 0, n_m = 0;
    int first_m = -1, t_after_m = -1, m_stage = -1, m_other = -1, m_early = -1;
    if (cfg->first || cfg->last || cfg->account_for_embedding || cfg->account_for_loss)
        return pp__fail(err, PP_EINVAL, "layout: cannot be set with first=%d, last=%d, account_for_embedding=%d, "
                        "account_for_loss=%d (the layout already says where every layer goes)", cfg->first,
                        cfg->last, cfg->account_for_embedding, cfg->account_for_loss);
    if ((st = pp__layout_expand(text, &x, err)) != PP_OK) return st;
    for (i = 0; i < x.len; i++) {
        if (x.c[i] == '|') { stages++; continue; }
        if (pp__layout_type(x.c[i]) < 0) {
            if (x.c[i] == '(' || x.c[i] == ')' || x.c[i] == '*')   /* left over from step 2 or 3 */
                st = pp__fail(err, PP_EPARSE, "layout '%s': '%s' at position %d is not part of a repeat; a repeated "
                              "group is written '(tt|)*2' (closed, then '*' and a count; groups do not nest), a "
                              "repeated layer 't*3'", pp__layers_echo(text, echo, sizeof echo), pp__layers_char(x.c[i], ch), x.pos[i]);
            else
                st = pp__fail(err, PP_EPARSE, "layout '%s': '%s' at position %d (stage %d) is not a layer; known "
                              "layers are E (embedding), t (decoder), m (MTP), L (loss)",
                              pp__layers_echo(text, echo, sizeof echo), pp__layers_char(x.c[i], ch), x.pos[i],
                              stages - 1);
            pp__ptext_free(&x);
            return st;
        }
    }
    if (stages % pp != 0) {
        pp__ptext_free(&x);
        return pp__fail(err, PP_EINVAL, "layout '%s': %d stages, not a multiple of pp=%d",
                        pp__layers_echo(text, echo, sizeof echo), stages, pp);
    }
    vpp = stages / pp;
    if (cfg->vpp && cfg->vpp != vpp) {
        pp__ptext_free(&x);
        return pp__fail(err, PP_EINVAL, "vpp=%d: conflicts with the layout, whose %d stages over pp=%d make vpp=%d",
                        cfg->vpp, stages, pp, vpp);
    }
    if ((st = pp__layers_check_sizes(pp, vpp, err)) != PP_OK) { pp__ptext_free(&x); return st; }
    l = pp__layers_new(PP_LAYERS_LAYOUT, pp, vpp, (int)x.len);
    if (!l) { pp__ptext_free(&x); return pp__fail(err, PP_ENOMEM, "layout: out of memory"); }
    for (i = 0, s = 0; i < x.len; i++) {
        if (x.c[i] == '|') { l->stage_items[++s] = l->num_items; continue; }
        t = pp__layout_type(x.c[i]);
        if (t == PP_LAYER_MTP) {
            if (first_m < 0) first_m = (int)i;
            if (m_stage < 0) m_stage = s;
            else if (s != m_stage && m_other < 0) m_other = s;
            if (s / pp != vpp - 1 && m_early < 0) m_early = s;
        }
        if (t == PP_LAYER_TRANSFORMER && first_m >= 0 && t_after_m < 0) t_after_m = (int)i;
        n_e += t == PP_LAYER_EMBEDDING; n_l += t == PP_LAYER_LOSS; n_t += t == PP_LAYER_TRANSFORMER;
        n_m += t == PP_LAYER_MTP;
        pp__layers_push(l, t, 1);
    }
    l->stage_items[l->num_stages] = l->num_items;
    /* validate_layer_layout's rules, in its order; the flattened layout is the items in stage order */
    if (l->num_items == 0 || l->item_type[0] != PP_LAYER_EMBEDDING) {
        if (l->num_items == 0)
            st = pp__fail(err, PP_EINVAL, "layout '%s': the first layer must be E (embedding), but the layout has "
                          "no layers", pp__layers_echo(text, echo, sizeof echo));
        else
            st = pp__fail(err, PP_EINVAL, "layout '%s': the first layer must be E (embedding), but it is '%c'",
                          pp__layers_echo(text, echo, sizeof echo), pp__layer_type_chars[l->item_type[0]]);
    } else if (l->item_type[l->num_items - 1] != PP_LAYER_LOSS) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': the last layer must be L (loss), but it is '%c'",
                      pp__layers_echo(text, echo, sizeof echo), pp__layer_type_chars[l->item_type[l->num_items - 1]]);
    } else if (n_e != 1) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': E (embedding) appears %d times; it must appear exactly once",
                      pp__layers_echo(text, echo, sizeof echo), n_e);
    } else if (n_l != 1) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': L (loss) appears %d times; it must appear exactly once",
                      pp__layers_echo(text, echo, sizeof echo), n_l);
    } else if (cfg->num_layers && n_t != cfg->num_layers) {
        st = pp__fail(err, PP_EINVAL, "num_layers=%d: the layout has %d decoder layers (t)", cfg->num_layers, n_t);
    } else if (n_t == 0) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': has no decoder layers (t)", pp__layers_echo(text, echo, sizeof echo));
    } else if (cfg->mtp_layers && n_m != cfg->mtp_layers) {
        st = pp__fail(err, PP_EINVAL, "mtp_layers=%d: the layout has %d MTP layers (m)", cfg->mtp_layers, n_m);
    } else if (t_after_m >= 0) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': decoder layer 't' at position %d comes after the MTP layer at "
                      "position %d; decoder layers must be placed before MTP layers",
                      pp__layers_echo(text, echo, sizeof echo), x.pos[t_after_m], x.pos[first_m]);
    } else if (m_early >= 0) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': MTP layers in stage %d (rank %d, chunk %d); Megatron-LM requires "
                      "them in the last chunk of their rank (chunk %d)", pp__layers_echo(text, echo, sizeof echo),
                      m_early, m_early % pp, m_early / pp, vpp - 1);
    } else if (m_other >= 0) {
        st = pp__fail(err, PP_EINVAL, "layout '%s': MTP layers in stages %d and %d; all %d of them must be in one "
                      "stage", pp__layers_echo(text, echo, sizeof echo), m_stage, m_other, n_m);
    } else {
        st = PP_OK;
    }
    pp__ptext_free(&x);
    if (st == PP_OK) {
        l->mtp_standalone = m_stage >= 0 && m_stage % pp != pp - 1;
        st = pp__layers_finish(l, cfg->moe_layer_freq, err);
    }
    if (st != PP_OK) { pp_layers_free(l); return st; }
    *out = l;
    return pp__ok(err);
}

/* --- hybrid patterns --------------------------------------------------------------------------
 * Megatron-LM's hybrid layer allocation: "<main>/<mtp>/<mtp>..." where every MTP part is the
 * same pattern (one per depth); the main pattern's '|' separate stages (segment index
 * vpp_rank * pp + pp_rank, layer offset = layers of the segments before). Without '|' and
 * pp > 1 the pattern is split at run time like the even / uneven forms, with no vpp.          */

static pp_status pp__layers_from_hybrid(const pp_layers_config *cfg, int pp, pp_layers **out, pp_error *err)
{
    const char *text = cfg->hybrid;
    char echo[96], ch[8];
    size_t n = strlen(text), main_len, i, mtp_len = 0;
    const char *mtp = NULL;
    int segments = 1, L = 0, depths = 0, vpp, s, *count = NULL;
    pp_layers *l;
    pp_status st;
    pp__text pat;
    if (n > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "hybrid pattern: longer than %d characters", PP__LAYERS_MAX);
    if (cfg->layout) return pp__fail(err, PP_EINVAL, "hybrid: cannot be set together with a layout");
    if (cfg->account_for_embedding || cfg->account_for_loss)
        return pp__fail(err, PP_EINVAL, "hybrid pattern: account_for_embedding/loss do not apply; put '|' where the "
                        "stages should break");
    if (cfg->moe_layer_freq)
        return pp__fail(err, PP_EINVAL, "moe_layer_freq: does not apply to a hybrid pattern, whose 'E' marks the "
                        "MoE layers");
    for (main_len = 0; main_len < n && text[main_len] != '/'; main_len++) {}
    for (i = 0; i < main_len; i++) {
        if (text[i] == '|') { segments++; continue; }
        if (pp__hybrid_symbol_type(text[i]) < 0)
            return pp__fail(err, PP_EPARSE, "hybrid pattern '%s': '%s' at position %zu is not a layer symbol "
                            "(M mamba, * attention, - mlp, E moe, G gdn, D dsa, + mla, C csa, H hca, W swa; "
                            "| between stages%s)", pp__layers_echo(text, echo, sizeof echo),
                            pp__layers_char(text[i], ch), i,
                            text[i] == '[' || text[i] == ']' ? "; bracketed layer groups are not supported" : "");
        L++;
    }
    if (main_len < n) {                                     /* MTP parts: all equal, or all empty */
        const char *p = text + main_len + 1, *part = p;
        int parts = 0, any = 0;
        mtp = p;
        mtp_len = strcspn(p, "/");
        for (;;) {
            size_t len = strcspn(part, "/");
            parts++;
            if (len) any = 1;
            if (len != mtp_len || strncmp(part, mtp, len) != 0) {
                char a[48], b[48], ea[96], eb[96];
                snprintf(a, sizeof a, "%.*s", (int)(mtp_len < 40 ? mtp_len : 40), mtp);
                snprintf(b, sizeof b, "%.*s", (int)(len < 40 ? len : 40), part);
                return pp__fail(err, PP_EINVAL, "hybrid pattern '%s': all MTP patterns must be identical; pattern 1 "
                                "is '%s', but pattern %d is '%s'", pp__layers_echo(text, echo, sizeof echo),
                                pp__layers_echo(a, ea, sizeof ea), parts, pp__layers_echo(b, eb, sizeof eb));
            }
            if (part[len] == '\0') break;
            part += len + 1;
        }
        if (any) {
            for (i = 0; i < mtp_len; i++)
                if (pp__hybrid_symbol_type(mtp[i]) < 0)
                    return pp__fail(err, PP_EPARSE, "hybrid pattern '%s': '%s' at position %zu of the MTP pattern is "
                                    "not a layer symbol%s", pp__layers_echo(text, echo, sizeof echo),
                                    pp__layers_char(mtp[i], ch), main_len + 1 + i,
                                    mtp[i] == '|' ? " (stage boundaries belong in the main pattern)" : "");
            depths = parts;
        }
    }
    if (L == 0) return pp__fail(err, PP_EINVAL, "hybrid pattern '%s': has no decoder layers",
                                pp__layers_echo(text, echo, sizeof echo));
    if (cfg->num_layers && cfg->num_layers != L)
        return pp__fail(err, PP_EINVAL, "num_layers=%d: the hybrid pattern has %d layers", cfg->num_layers, L);
    if (cfg->mtp_layers && cfg->mtp_layers != depths)
        return pp__fail(err, PP_EINVAL, "mtp_layers=%d: the hybrid pattern has %d MTP depths", cfg->mtp_layers, depths);
    if (segments > 1) {
        if (cfg->first || cfg->last)
            return pp__fail(err, PP_EINVAL, "first=%d, last=%d: cannot be set when the hybrid pattern has '|' "
                            "separators; they already say where the stages break", cfg->first, cfg->last);
        if (cfg->vpp) {
            if ((long long)cfg->vpp * pp != segments)
                return pp__fail(err, PP_EINVAL, "hybrid pattern '%s': %d '|'-separated segments, but pp=%d x vpp=%d "
                                "needs %lld", pp__layers_echo(text, echo, sizeof echo), segments, pp, cfg->vpp,
                                (long long)pp * cfg->vpp);
            vpp = cfg->vpp;
        } else {
            if (segments % pp != 0)
                return pp__fail(err, PP_EINVAL, "hybrid pattern '%s': %d '|'-separated segments, not a multiple of "
                                "pp=%d", pp__layers_echo(text, echo, sizeof echo), segments, pp);
            vpp = segments / pp;
        }
    } else {
        vpp = cfg->vpp ? cfg->vpp : 1;
        if (vpp > 1 && pp > 1)
            return pp__fail(err, PP_EINVAL, "vpp=%d: a hybrid pattern without '|' separators cannot be interleaved; "
                            "add '|' where the %d stages break", vpp, pp * vpp);
    }
    if ((st = pp__layers_check_sizes(pp, vpp, err)) != PP_OK) return st;
    if (segments == 1) {
        count = (int *)pp__calloc((size_t)pp, sizeof(int));
        if (!count) return pp__fail(err, PP_ENOMEM, "hybrid: out of memory");
        if ((st = pp__layers_split(L, pp, 1, cfg->first, cfg->last, 0, 0, count, err)) != PP_OK) {
            PIPEPAR_FREE(count);
            return st;
        }
    }
    l = pp__layers_new(PP_LAYERS_HYBRID, pp, vpp, L + 2 + depths);
    if (!l) { PIPEPAR_FREE(count); return pp__fail(err, PP_ENOMEM, "hybrid: out of memory"); }
    memset(&pat, 0, sizeof pat);
    {
        size_t at = 0;
        for (s = 0; s < l->num_stages; s++) {
            int k = 0;
            l->stage_items[s] = l->num_items;
            if (s) pp__layers_putc(&pat, '|');
            if (s == 0) pp__layers_push(l, PP_LAYER_EMBEDDING, 1);
            while (at < main_len && (count ? k < count[s] : text[at] != '|')) {
                if (text[at] != '|') {
                    pp__layers_push(l, pp__hybrid_symbol_type(text[at]), 1);
                    pp__layers_putc(&pat, text[at]);
                    k++;
                }
                at++;
            }
            if (!count && at < main_len) at++;              /* the '|' that ends this segment */
            if (s == l->num_stages - 1) {
                pp__layers_push(l, PP_LAYER_MTP, depths);
                pp__layers_push(l, PP_LAYER_LOSS, 1);
            }
        }
        l->stage_items[l->num_stages] = l->num_items;
    }
    for (i = 0; depths && i < (size_t)depths; i++) {
        pp__layers_putc(&pat, '/');
        pp__text_printf(&pat, "%.*s", (int)mtp_len, mtp);
    }
    PIPEPAR_FREE(count);
    if (pat.failed || !pat.data) {
        pp__text_free(&pat);
        pp_layers_free(l);
        return pp__fail(err, PP_ENOMEM, "hybrid: out of memory");
    }
    l->pattern = pat.data;
    if ((st = pp__layers_finish(l, NULL, err)) != PP_OK) { pp_layers_free(l); return st; }
    *out = l;
    return pp__ok(err);
}

/* --- build ------------------------------------------------------------------------------------ */

pp_status pp_layers_build(const pp_layers_config *cfg, pp_layers **out, pp_error *err)
{
    int pp, vpp, *count;
    pp_layers *l;
    pp_status st;
    if (!out) return pp__fail(err, PP_EINVAL, "out: must not be NULL");
    *out = NULL;
    if (!cfg) return pp__fail(err, PP_EINVAL, "cfg: must not be NULL");
    pp = cfg->pp ? cfg->pp : 1;
    if (cfg->pp < 0 || cfg->pp > 65536) return pp__fail(err, PP_EINVAL, "pp=%d: must be between 1 and 65536", cfg->pp);
    if (cfg->vpp < 0 || cfg->vpp > 65536)
        return pp__fail(err, PP_EINVAL, "vpp=%d: must be between 1 and 65536", cfg->vpp);
    if (cfg->num_layers < 0 || cfg->num_layers > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "num_layers=%d: must be between 1 and %d", cfg->num_layers, PP__LAYERS_MAX);
    if (cfg->first < 0) return pp__fail(err, PP_EINVAL, "first=%d: must be at least 1 (0 means not set)", cfg->first);
    if (cfg->last < 0) return pp__fail(err, PP_EINVAL, "last=%d: must be at least 1 (0 means not set)", cfg->last);
    if (cfg->mtp_layers < 0 || cfg->mtp_layers > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "mtp_layers=%d: must be between 0 and %d", cfg->mtp_layers, PP__LAYERS_MAX);
    if (cfg->layout && cfg->hybrid)
        return pp__fail(err, PP_EINVAL, "layout and hybrid: give one of them, not both");
    if (cfg->layout) return pp__layers_from_layout(cfg, pp, out, err);
    if (cfg->hybrid) return pp__layers_from_hybrid(cfg, pp, out, err);

    vpp = cfg->vpp ? cfg->vpp : 1;
    if (cfg->num_layers < 1)
        return pp__fail(err, PP_EINVAL, "num_layers=%d: must be at least 1 (or give a layout or hybrid pattern)",
                        cfg->num_layers);
    if ((st = pp__layers_check_sizes(pp, vpp, err)) != PP_OK) return st;
    count = (int *)pp__calloc((size_t)pp * vpp, sizeof(int));
    if (!count) return pp__fail(err, PP_ENOMEM, "layers: out of memory");
    st = pp__layers_split(cfg->num_layers, pp, vpp, cfg->first, cfg->last, cfg->account_for_embedding != 0,
                          cfg->account_for_loss != 0, count, err);
    if (st != PP_OK) { PIPEPAR_FREE(count); return st; }
    l = pp__layers_new(cfg->first || cfg->last ? PP_LAYERS_UNEVEN : PP_LAYERS_EVEN, pp, vpp,
                       cfg->num_layers + 2 + cfg->mtp_layers);
    if (!l) { PIPEPAR_FREE(count); return pp__fail(err, PP_ENOMEM, "layers: out of memory"); }
    pp__layers_fill_counts(l, count, cfg->mtp_layers);
    PIPEPAR_FREE(count);
    if ((st = pp__layers_finish(l, cfg->moe_layer_freq, err)) != PP_OK) { pp_layers_free(l); return st; }
    *out = l;
    return pp__ok(err);
}

/* --- queries ---------------------------------------------------------------------------------- */

int pp_layers_stage(const pp_layers *l, int rank, int chunk)
{
    if (!l || rank < 0 || rank >= l->pp || chunk < 0 || chunk >= l->vpp) return -1;
    return chunk * l->pp + rank;
}

pp_status pp_layers_stage_range(const pp_layers *l, int stage, int *first, int *count, pp_error *err)
{
    return pp_layers_type_range(l, stage, PP_LAYER_DECODER, first, count, err);
}

pp_status pp_layers_type_range(const pp_layers *l, int stage, pp_layer_type type, int *first, int *count,
                               pp_error *err)
{
    if (!l) return pp__fail(err, PP_EINVAL, "layers: must not be NULL");
    if (stage < 0 || stage >= l->num_stages)
        return pp__fail(err, PP_EINVAL, "stage=%d: must be between 0 and %d", stage, l->num_stages - 1);
    if ((int)type < 0 || type >= PP_LAYER_TYPE_COUNT)
        return pp__fail(err, PP_EINVAL, "type=%d: not a pp_layer_type", (int)type);
    if (first) *first = l->type_first[stage * PP_LAYER_TYPE_COUNT + type];
    if (count) *count = l->type_count[stage * PP_LAYER_TYPE_COUNT + type];
    return pp__ok(err);
}

int pp_layers_layer_stage(const pp_layers *l, int layer)
{
    int lo = 0, hi;
    if (!l || layer < 0 || layer >= l->num_layers) return -1;
    hi = l->num_stages - 1;
    while (lo < hi) {                       /* the last stage whose first layer is <= layer */
        int mid = lo + (hi - lo + 1) / 2;
        if (l->first[mid] <= layer) lo = mid; else hi = mid - 1;
    }
    return lo;
}

int pp_layers_type_index(const pp_layers *l, int layer, pp_layer_type type)
{
    int s, g, idx;
    if (!l || layer < 0 || layer >= l->num_layers || (int)type < 0 || type >= PP_LAYER_TYPE_COUNT) return -1;
    if (!pp__layer_matches(l->layer_type[layer], l->is_moe[layer], type)) return -1;
    s = pp_layers_layer_stage(l, layer);
    idx = l->type_first[s * PP_LAYER_TYPE_COUNT + type];
    for (g = l->first[s]; g < layer; g++) idx += pp__layer_matches(l->layer_type[g], l->is_moe[g], type);
    return idx;
}

int pp_layers_stage_text(const pp_layers *l, int stage, char *buf, size_t size)
{
    pp__text t;
    int n;
    if (!l || stage < 0 || stage >= l->num_stages) return -1;
    memset(&t, 0, sizeof t);
    pp__layers_stage_spell(l, stage, &t);
    if (t.failed) { pp__text_free(&t); return -1; }
    n = (int)t.len;
    if (buf && size) snprintf(buf, size, "%s", t.data ? t.data : "");
    pp__text_free(&t);
    return n;
}

/* --- text and JSON ---------------------------------------------------------------------------- */

/* The types a listing shows beside the decoder range: those the model has, minus the obvious. */
static int pp__layers_shows_type(const pp_layers *l, int t)
{
    int s, total = 0, moe = 0;
    if (t == PP_LAYER_DECODER || t == PP_LAYER_EMBEDDING || t == PP_LAYER_LOSS || t == PP_LAYER_TRANSFORMER)
        return 0;
    for (s = 0; s < l->num_stages; s++) {
        total += l->type_count[s * PP_LAYER_TYPE_COUNT + t];
        moe += l->type_count[s * PP_LAYER_TYPE_COUNT + PP_LAYER_MOE];
    }
    if (t == PP_LAYER_DENSE) return moe > 0 && l->form != PP_LAYERS_HYBRID;
    return total > 0;
}

pp_status pp_layers_write_text(const pp_layers *l, FILE *out, pp_error *err)
{
    pp__text t;
    int s, k;
    if (!l || !out) return pp__fail(err, PP_EINVAL, "layers, out: must not be NULL");
    memset(&t, 0, sizeof t);
    for (s = 0; s < l->num_stages; s++) {
        t.len = 0; pp__layers_putc(&t, '\0'); t.len = 0;
        pp__layers_stage_spell(l, s, &t);
        if (t.failed) { pp__text_free(&t); return pp__fail(err, PP_ENOMEM, "write: out of memory"); }
        fprintf(out, "stage %d rank %d chunk %d layers [%d,%d) items %s", s, s % l->pp, s / l->pp, l->first[s],
                l->first[s] + l->count[s], t.len ? t.data : "-");
        for (k = 0; k < PP_LAYER_TYPE_COUNT; k++) {
            int a = l->type_first[s * PP_LAYER_TYPE_COUNT + k];
            if (pp__layers_shows_type(l, k))
                fprintf(out, " %s [%d,%d)", pp__layer_type_names[k], a, a + l->type_count[s * PP_LAYER_TYPE_COUNT + k]);
        }
        if (l->stage_cost) fprintf(out, " cost %.9g", l->stage_cost[s]);
        if (l->stage_memory) fprintf(out, " memory %.9g", l->stage_memory[s]);
        fputc('\n', out);
    }
    pp__text_free(&t);
    if (l->form == PP_LAYERS_BALANCED) fprintf(out, "max stage cost %.9g\n", l->max_cost);
    if (l->layout) fprintf(out, "layout %s\n", l->layout);
    if (l->pattern) fprintf(out, "pattern %s\n", l->pattern);
    return ferror(out) ? pp__fail(err, PP_EIO, "write: output error") : pp__ok(err);
}

pp_status pp_layers_write_json(const pp_layers *l, FILE *out, pp_error *err)
{
    pp__text t;
    int s, k;
    if (!l || !out) return pp__fail(err, PP_EINVAL, "layers, out: must not be NULL");
    memset(&t, 0, sizeof t);
    /* Strings here are layout letters and hybrid symbols: nothing JSON must escape. */
    fprintf(out, "{\"form\":\"%s\",\"pp\":%d,\"vpp\":%d,\"num_stages\":%d,\"num_layers\":%d,\"mtp_layers\":%d,"
            "\"mtp_standalone\":%s", pp_layers_form_name(l->form), l->pp, l->vpp, l->num_stages, l->num_layers,
            l->mtp_layers, l->mtp_standalone ? "true" : "false");
    if (l->layout) fprintf(out, ",\"layout\":\"%s\"", l->layout);
    if (l->pattern) fprintf(out, ",\"pattern\":\"%s\"", l->pattern);
    if (l->form == PP_LAYERS_BALANCED) fprintf(out, ",\"max_cost\":%.17g", l->max_cost);
    fprintf(out, ",\"is_moe\":[");
    for (k = 0; k < l->num_layers; k++) fprintf(out, k ? ",%d" : "%d", l->is_moe[k]);
    fprintf(out, "],\"stages\":[");
    for (s = 0; s < l->num_stages; s++) {
        int shown = 0;
        t.len = 0; pp__layers_putc(&t, '\0'); t.len = 0;
        pp__layers_stage_spell(l, s, &t);
        if (t.failed) { pp__text_free(&t); return pp__fail(err, PP_ENOMEM, "write: out of memory"); }
        fprintf(out, "%s{\"stage\":%d,\"rank\":%d,\"chunk\":%d,\"first\":%d,\"count\":%d,\"items\":\"%s\"",
                s ? "," : "", s, s % l->pp, s / l->pp, l->first[s], l->count[s], t.len ? t.data : "");
        if (l->stage_cost) fprintf(out, ",\"cost\":%.17g", l->stage_cost[s]);
        if (l->stage_memory) fprintf(out, ",\"memory\":%.17g", l->stage_memory[s]);
        fprintf(out, ",\"types\":{");
        for (k = 0; k < PP_LAYER_TYPE_COUNT; k++) {
            int a = l->type_first[s * PP_LAYER_TYPE_COUNT + k], c = l->type_count[s * PP_LAYER_TYPE_COUNT + k];
            int total = 0, j;
            for (j = 0; j < l->num_stages; j++) total += l->type_count[j * PP_LAYER_TYPE_COUNT + k];
            if (!total) continue;
            fprintf(out, "%s\"%s\":{\"first\":%d,\"count\":%d}", shown++ ? "," : "", pp__layer_type_names[k], a, c);
        }
        fprintf(out, "}}");
    }
    fprintf(out, "]}\n");
    pp__text_free(&t);
    return ferror(out) ? pp__fail(err, PP_EIO, "write: output error") : pp__ok(err);
}

/* --- balanced split ----------------------------------------------------------------------------
 * Stage s covers decoder layers [i, j). Its cost is summed in one fixed order,
 *     ((front + c[i] + c[i+1] + ... + c[j-1]) + back)
 * with front = the embedding's cost on stage 0 and back = the MTP depths' and the loss's on the
 * last stage, and every place below sums the same way, so the reported bottleneck is the very
 * number the search minimised (exact for doubles, not only for integers).
 *   1. best[s][j] = min over i of max(best[s-1][i], cost(s, i, j)): the smallest bottleneck B
 *      of any split of the first j layers into stages 0..s (memory cap respected).
 *   2. among the splits with every stage cost <= B, the least sum of squared stage costs
 *      (a tie-break that spreads the slack), remembered with parent pointers.              */

static int pp__finite_nonneg(double x) { return x == x && x >= 0 && x <= DBL_MAX; }

pp_status pp_layers_balance(const pp_balance_config *cfg, pp_layers **out, pp_error *err)
{
    int pp, vpp, S, n, s, i, j, k, *count = NULL, *parent = NULL;
    double front_c, back_c, front_m = 0, back_m = 0, cap, B, unit, *prev = NULL, *cur = NULL, *c = NULL;
    const double *m;
    pp_layers *l = NULL;
    pp_status st;
    if (!out) return pp__fail(err, PP_EINVAL, "out: must not be NULL");
    *out = NULL;
    if (!cfg) return pp__fail(err, PP_EINVAL, "cfg: must not be NULL");
    pp = cfg->pp ? cfg->pp : 1;
    vpp = cfg->vpp ? cfg->vpp : 1;
    n = cfg->num_layers;
    if (cfg->pp < 0) return pp__fail(err, PP_EINVAL, "pp=%d: must be between 1 and 65536", cfg->pp);
    if (cfg->vpp < 0) return pp__fail(err, PP_EINVAL, "vpp=%d: must be between 1 and 65536", cfg->vpp);
    if ((st = pp__layers_check_sizes(pp, vpp, err)) != PP_OK) return st;
    S = pp * vpp;
    if (n < 1 || n > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "num_layers=%d: must be between 1 and %d", n, PP__LAYERS_MAX);
    if (cfg->mtp_layers < 0 || cfg->mtp_layers > PP__LAYERS_MAX)
        return pp__fail(err, PP_EINVAL, "mtp_layers=%d: must be between 0 and %d", cfg->mtp_layers, PP__LAYERS_MAX);
    if ((double)S * (n + 1.0) > (double)(1 << 24) || (double)S * (n + 1.0) * (n + 2.0) / 2 > 2e9)
        return pp__fail(err, PP_EINVAL, "num_layers=%d, stages=%d: too large for the exact search (it takes "
                        "stages * num_layers^2 / 2 steps); group layers into coarser blocks", n, S);
    if (cfg->cost)
        for (i = 0; i < n; i++)
            if (!pp__finite_nonneg(cfg->cost[i]))
                return pp__fail(err, PP_EINVAL, "cost[%d]=%g: must be a finite number >= 0", i, cfg->cost[i]);
    if (cfg->memory)
        for (i = 0; i < n; i++)
            if (!pp__finite_nonneg(cfg->memory[i]))
                return pp__fail(err, PP_EINVAL, "memory[%d]=%g: must be a finite number >= 0", i, cfg->memory[i]);
    {
        static const char *const names[7] = { "memory_cap", "embedding_cost", "embedding_memory", "loss_cost",
                                              "loss_memory", "mtp_cost", "mtp_memory" };
        double vals[7];
        vals[0] = cfg->memory_cap; vals[1] = cfg->embedding_cost; vals[2] = cfg->embedding_memory;
        vals[3] = cfg->loss_cost; vals[4] = cfg->loss_memory; vals[5] = cfg->mtp_cost; vals[6] = cfg->mtp_memory;
        for (k = 0; k < 7; k++)
            if (!pp__finite_nonneg(vals[k]))
                return pp__fail(err, PP_EINVAL, "%s=%g: must be a finite number >= 0", names[k], vals[k]);
    }
    cap = cfg->memory_cap;
    m = cfg->memory;
    if (cap > 0 && !m)
        return pp__fail(err, PP_EINVAL, "memory_cap=%g: needs the per-layer memory", cap);
    front_c = cfg->embedding_cost;
    back_c = 0;
    for (k = 0; k < cfg->mtp_layers; k++) back_c += cfg->mtp_cost;
    back_c += cfg->loss_cost;
    if (m) {
        front_m = cfg->embedding_memory;
        for (k = 0; k < cfg->mtp_layers; k++) back_m += cfg->mtp_memory;
        back_m += cfg->loss_memory;
    }
    if (cap > 0) {                         /* infeasible caps get a reason, not just "no split" */
        int need = 1;
        double acc = front_m;
        if (front_m > cap)
            return pp__fail(err, PP_EINVAL, "memory_cap=%g: the embedding alone needs %g", cap, front_m);
        if (back_m > cap)
            return pp__fail(err, PP_EINVAL, "memory_cap=%g: the loss and MTP layers alone need %g", cap, back_m);
        for (i = 0; i < n; i++) {
            if (m[i] > cap)
                return pp__fail(err, PP_EINVAL, "memory_cap=%g: layer %d alone needs %g", cap, i, m[i]);
            if (acc + m[i] <= cap) acc += m[i];
            else { need++; acc = m[i]; }
        }
        if (acc + back_m > cap) need++;
        if (need > S)
            return pp__fail(err, PP_EINVAL, "memory_cap=%g: the layers need at least %d stages under this cap, but "
                            "pp*vpp = %d", cap, need, S);
    }
    c = (double *)pp__calloc((size_t)n, sizeof(double));
    prev = (double *)pp__calloc((size_t)n + 1, sizeof(double));
    cur = (double *)pp__calloc((size_t)n + 1, sizeof(double));
    parent = (int *)pp__calloc((size_t)S * (n + 1), sizeof(int));
    count = (int *)pp__calloc((size_t)S, sizeof(int));
    if (!c || !prev || !cur || !parent || !count) { st = pp__fail(err, PP_ENOMEM, "balance: out of memory"); goto done; }
    for (i = 0; i < n; i++) c[i] = cfg->cost ? cfg->cost[i] : 1.0;

    /* 1. the smallest bottleneck */
    for (s = 0; s < S; s++) {
        int last = s == S - 1;
        for (j = 0; j <= n; j++) cur[j] = HUGE_VAL;
        for (i = 0; i <= (s == 0 ? 0 : n); i++) {
            double p = s == 0 ? 0 : prev[i], acc = s == 0 ? front_c : 0, accm = s == 0 ? front_m : 0;
            if (p == HUGE_VAL) continue;
            for (j = i; j <= n; j++) {
                if (j > i) { acc += c[j - 1]; if (m) accm += m[j - 1]; }
                if (cap > 0 && accm > cap) break;
                if (!last || j == n) {
                    double sc = last ? acc + back_c : acc, v;
                    if (last && cap > 0 && accm + back_m > cap) break;
                    v = p > sc ? p : sc;
                    if (v < cur[j]) cur[j] = v;
                }
            }
        }
        { double *t = prev; prev = cur; cur = t; }
    }
    B = prev[n];
    if (B == HUGE_VAL) { st = pp__fail(err, PP_EINVAL, "memory_cap=%g: no split fits under the cap", cap); goto done; }

    /* 2. among splits with bottleneck B, the least sum of squares */
    unit = B > 0 ? B : 1;
    for (s = 0; s < S; s++) {
        int last = s == S - 1;
        for (j = 0; j <= n; j++) { cur[j] = HUGE_VAL; parent[(size_t)s * (n + 1) + j] = -1; }
        for (i = 0; i <= (s == 0 ? 0 : n); i++) {
            double p = s == 0 ? 0 : prev[i], acc = s == 0 ? front_c : 0, accm = s == 0 ? front_m : 0;
            if (p == HUGE_VAL) continue;
            for (j = i; j <= n; j++) {
                if (j > i) { acc += c[j - 1]; if (m) accm += m[j - 1]; }
                if ((cap > 0 && accm > cap) || acc > B) break;
                if (!last || j == n) {
                    double sc = last ? acc + back_c : acc, v;
                    if (sc > B || (last && cap > 0 && accm + back_m > cap)) break;
                    v = p + (sc / unit) * (sc / unit);   /* in units of B: huge costs square to no infinity */
                    if (v < cur[j] || parent[(size_t)s * (n + 1) + j] < 0) { cur[j] = v; parent[(size_t)s * (n + 1) + j] = i; }
                }
            }
        }
        { double *t = prev; prev = cur; cur = t; }
    }
    for (j = n, s = S - 1; s >= 0; s--) {
        i = parent[(size_t)s * (n + 1) + j];
        if (i < 0) { st = pp__fail(err, PP_EINVAL, "balance: internal error (no split reaches %g)", B); goto done; }
        count[s] = j - i;
        j = i;
    }

    l = pp__layers_new(PP_LAYERS_BALANCED, pp, vpp, n + 2 + cfg->mtp_layers);
    if (!l) { st = pp__fail(err, PP_ENOMEM, "balance: out of memory"); goto done; }
    pp__layers_fill_counts(l, count, cfg->mtp_layers);
    l->stage_cost = (double *)pp__calloc((size_t)S, sizeof(double));
    l->stage_memory = m ? (double *)pp__calloc((size_t)S, sizeof(double)) : NULL;
    if (!l->stage_cost || (m && !l->stage_memory)) { st = pp__fail(err, PP_ENOMEM, "balance: out of memory"); goto done; }
    for (s = 0, j = 0; s < S; s++) {                 /* the same sums, in the same order */
        double acc = s == 0 ? front_c : 0, accm = s == 0 ? front_m : 0;
        for (k = 0; k < count[s]; k++, j++) { acc += c[j]; if (m) accm += m[j]; }
        if (s == S - 1) { acc += back_c; accm += back_m; }
        l->stage_cost[s] = acc;
        if (m) l->stage_memory[s] = accm;
        if (acc > l->max_cost) l->max_cost = acc;
    }
    if ((st = pp__layers_finish(l, cfg->moe_layer_freq, err)) != PP_OK) goto done;
    *out = l;
    l = NULL;
    st = pp__ok(err);
done:
    pp_layers_free(l);
    PIPEPAR_FREE(c); PIPEPAR_FREE(prev); PIPEPAR_FREE(cur); PIPEPAR_FREE(parent); PIPEPAR_FREE(count);
    return st;
}
