
/* --- >>pack (implementation) -------------------------------------------------------------- */

static const char *const pp__pack_algo_names[PP_PACK_ALGO_COUNT] = {
    "first_fit_decreasing", "best_fit_decreasing", "first_fit_shuffle",
    "modified_first_fit_decreasing", "concatenative", "greedy_knapsack", "balanced_greedy_knapsack"
};

const char *pp_pack_algo_name(pp_pack_algo algo)
{
    if ((unsigned)algo >= (unsigned)PP_PACK_ALGO_COUNT) return "unknown";
    return pp__pack_algo_names[algo];
}

static int pp__streq_nocase(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        int x = (unsigned char)*a, y = (unsigned char)*b;
        if (x >= 'A' && x <= 'Z') x += 'a' - 'A';
        if (y >= 'A' && y <= 'Z') y += 'a' - 'A';
        if (x != y) return 0;
    }
    return *a == *b;
}

pp_status pp_pack_algo_parse(const char *name, pp_pack_algo *algo, pp_error *err)
{
    static const struct { const char *name; pp_pack_algo algo; } aliases[] = {
        { "ffd", PP_PACK_FFD }, { "bfd", PP_PACK_BFD }, { "ffs", PP_PACK_FIRST_FIT_SHUFFLE },
        { "mffd", PP_PACK_MFFD }, { "concat", PP_PACK_CONCATENATIVE },
        { "knapsack", PP_PACK_GREEDY_KNAPSACK }, { "balanced_knapsack", PP_PACK_BALANCED_GREEDY_KNAPSACK }
    };
    int i;
    if (!name || !algo) return pp__fail(err, PP_EINVAL, "pp_pack_algo_parse: name and algo must not be NULL");
    for (i = 0; i < (int)PP_PACK_ALGO_COUNT; i++)
        if (pp__streq_nocase(name, pp__pack_algo_names[i])) { *algo = (pp_pack_algo)i; return pp__ok(err); }
    for (i = 0; i < (int)(sizeof aliases / sizeof aliases[0]); i++)
        if (pp__streq_nocase(name, aliases[i].name)) { *algo = aliases[i].algo; return pp__ok(err); }
    return pp__fail(err, PP_EINVAL, "algo=%s: unknown packing algorithm (first_fit_decreasing, "
                    "best_fit_decreasing, first_fit_shuffle, modified_first_fit_decreasing, concatenative, "
                    "greedy_knapsack, balanced_greedy_knapsack)", name);
}

int64_t pp_pack_lower_bound(const int32_t *lengths, int n, int32_t capacity)
{
    int64_t sum = 0;
    int i;
    if (!lengths || n <= 0 || capacity < 1) return 0;
    for (i = 0; i < n; i++) sum += lengths[i] > 0 ? lengths[i] : 0;
    return (sum + capacity - 1) / capacity;
}

void pp_packing_free(pp_packing *p)
{
    if (!p) return;
    PIPEPAR_FREE(p->bin_offsets);
    PIPEPAR_FREE(p->seqs);
    PIPEPAR_FREE(p->bin_tokens);
    PIPEPAR_FREE(p);
}

static pp_status pp__pack_check(const int32_t *lengths, int n, const pp_pack_config *cfg, pp_error *err)
{
    int i;
    if (!cfg) return pp__fail(err, PP_EINVAL, "pp_pack: cfg must not be NULL");
    if (n < 0) return pp__fail(err, PP_EINVAL, "n=%d: the number of sequences must be at least 0", n);
    if (n > 0 && !lengths) return pp__fail(err, PP_EINVAL, "lengths: NULL with n=%d sequences", n);
    if (cfg->capacity < 1)
        return pp__fail(err, PP_EINVAL, "capacity=%d: a bin must hold at least 1 token", (int)cfg->capacity);
    if ((unsigned)cfg->algo >= (unsigned)PP_PACK_ALGO_COUNT)
        return pp__fail(err, PP_EINVAL, "algo=%d: unknown packing algorithm", (int)cfg->algo);
    if (cfg->min_bin_count < 0)
        return pp__fail(err, PP_EINVAL, "min_bin_count=%d: must be nonnegative", cfg->min_bin_count);
    if (cfg->bin_count_multiple < 0)
        return pp__fail(err, PP_EINVAL, "bin_count_multiple=%d: must be positive (0 means 1)",
                        cfg->bin_count_multiple);
    if (cfg->max_sequences_per_bin < 0)
        return pp__fail(err, PP_EINVAL, "max_sequences_per_bin=%d: must be positive (0 means unlimited)",
                        cfg->max_sequences_per_bin);
    for (i = 0; i < n; i++) {
        if (lengths[i] < 1)
            return pp__fail(err, PP_EINVAL, "lengths[%d]=%d: a sequence needs at least 1 token", i, (int)lengths[i]);
        if (lengths[i] > cfg->capacity)
            return pp__fail(err, PP_EINVAL, "lengths[%d]=%d: exceeds the bin capacity (%d)", i, (int)lengths[i],
                            (int)cfg->capacity);
    }
    return PP_OK;
}

/* Stable sort of idx[0..n) by lengths[idx[k]] ascending. Lengths up to 8n (token counts of a
 * batch usually are) take one counting pass over a histogram of every length; longer ones an
 * LSD radix sort, 11 bits a pass. tmp has room for n entries. */
static pp_status pp__sort_by_length(int32_t *idx, int32_t *tmp, int n, const int32_t *lengths, int32_t max_len,
                                    pp_error *err)
{
    int shift, i, passes = 0;
    int32_t *src = idx, *dst = tmp;
    if (n < 2) return PP_OK;
    if ((int64_t)max_len <= 8 * (int64_t)n + 4096) {
        int32_t *count = (int32_t *)pp__calloc((size_t)max_len + 2, sizeof(int32_t));
        if (!count) return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
        for (i = 0; i < n; i++) count[lengths[idx[i]] + 1]++;
        for (i = 0; i <= max_len; i++) count[i + 1] += count[i];
        for (i = 0; i < n; i++) tmp[count[lengths[idx[i]]]++] = idx[i];
        memcpy(idx, tmp, sizeof(int32_t) * (size_t)n);
        PIPEPAR_FREE(count);
        return PP_OK;
    }
    for (shift = 0; shift < 31 && (max_len >> shift) > 0; shift += 11) {
        int count[2049];
        memset(count, 0, sizeof count);
        for (i = 0; i < n; i++) count[((lengths[src[i]] >> shift) & 2047) + 1]++;
        for (i = 0; i < 2048; i++) count[i + 1] += count[i];
        for (i = 0; i < n; i++) dst[count[(lengths[src[i]] >> shift) & 2047]++] = src[i];
        { int32_t *t = src; src = dst; dst = t; }
        passes++;
    }
    if (passes & 1) memcpy(idx, tmp, sizeof(int32_t) * (size_t)n);
    return PP_OK;
}

static void pp__reverse(int32_t *a, int n)
{
    int i;
    for (i = 0; i < n / 2; i++) { int32_t t = a[i]; a[i] = a[n - 1 - i]; a[n - 1 - i] = t; }
}

static int32_t pp__max_length(const int32_t *lengths, const int32_t *idx, int n)
{
    int32_t m = 0;
    int i;
    for (i = 0; i < n; i++) if (lengths[idx[i]] > m) m = lengths[idx[i]];
    return m;
}

/* Orders idx[0..n) (any subset of sequences) by length. descending=0: (length, index) ascending.
 * descending=1, ties_low_index_first=0: (length, index) both descending, Python's
 * `pairs.sort(reverse=True)`. descending=1, ties_low_index_first=1: length descending, index
 * ascending, Python's stable `sort(key=length, reverse=True)`. idx must come in ascending index
 * order. */
static pp_status pp__order_by_length(int32_t *idx, int32_t *tmp, int n, const int32_t *lengths, int descending,
                                     int ties_low_index_first, pp_error *err)
{
    int32_t m = pp__max_length(lengths, idx, n);
    pp_status st;
    if (descending && ties_low_index_first) pp__reverse(idx, n);   /* stable ascending of index-descending input */
    if ((st = pp__sort_by_length(idx, tmp, n, lengths, m, err)) != PP_OK) return st;
    if (descending) pp__reverse(idx, n);
    return PP_OK;
}

/* First fit decreasing's order of all n sequences, built directly: length descending, index
 * descending on ties (Python's `sorted(((l, i) ...), reverse=True)`). With lengths up to 8n a
 * single counting pass writes each index straight to its place; otherwise the general sort. */
static pp_status pp__decreasing_order(int32_t *order, int32_t *tmp, int n, const int32_t *lengths, int32_t max_len,
                                      pp_error *err)
{
    int32_t *start;
    int i;
    if ((int64_t)max_len > 8 * (int64_t)n + 4096) {
        for (i = 0; i < n; i++) order[i] = i;
        return pp__order_by_length(order, tmp, n, lengths, 1, 0, err);
    }
    start = (int32_t *)pp__calloc((size_t)max_len + 2, sizeof(int32_t));
    if (!start) return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    for (i = 0; i < n; i++) start[lengths[i]]++;
    {   /* start[l] = first slot of length l: the longest lengths first */
        int32_t acc = 0, l;
        for (l = max_len; l >= 0; l--) { int32_t c = start[l]; start[l] = acc; acc += c; }
    }
    for (i = n - 1; i >= 0; i--) order[start[lengths[i]]++] = i;
    PIPEPAR_FREE(start);
    return PP_OK;
}

/* A binary min-heap on (a, b) with a payload, for "least-filled bin, earliest on ties". */
typedef struct pp__heap_item { int64_t a, b; int32_t v; } pp__heap_item;
typedef struct pp__heap { pp__heap_item *item; int size, cap; } pp__heap;

static int pp__heap_less(const pp__heap_item *x, const pp__heap_item *y)
{
    return x->a < y->a || (x->a == y->a && x->b < y->b);
}

static int pp__heap_push(pp__heap *h, int64_t a, int64_t b, int32_t v)
{
    int i;
    if (h->size == h->cap) {
        int cap = h->cap ? h->cap * 2 : 64;
        pp__heap_item *n2 = (pp__heap_item *)PIPEPAR_REALLOC(h->item, sizeof(pp__heap_item) * (size_t)cap);
        if (!n2) return 0;
        h->item = n2; h->cap = cap;
    }
    i = h->size++;
    h->item[i].a = a; h->item[i].b = b; h->item[i].v = v;
    while (i > 0) {
        int parent = (i - 1) / 2;
        pp__heap_item t;
        if (!pp__heap_less(&h->item[i], &h->item[parent])) break;
        t = h->item[i]; h->item[i] = h->item[parent]; h->item[parent] = t;
        i = parent;
    }
    return 1;
}

static pp__heap_item pp__heap_pop(pp__heap *h)
{
    pp__heap_item top = h->item[0];
    int i = 0;
    h->item[0] = h->item[--h->size];
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        pp__heap_item t;
        if (l < h->size && pp__heap_less(&h->item[l], &h->item[m])) m = l;
        if (r < h->size && pp__heap_less(&h->item[r], &h->item[m])) m = r;
        if (m == i) break;
        t = h->item[i]; h->item[i] = h->item[m]; h->item[m] = t;
        i = m;
    }
    return top;
}

/* --- first fit: a tournament tree over blocks of open bins' room ---------------------------
 * room[b] is bin b's room (-1 once it may take nothing more: closed, or not opened yet). Bins
 * come in blocks of 32; a tournament tree holds each block's largest room at its leaves and the
 * maximum of its two children at each inner node. The first bin with room >= need is the first
 * block whose maximum is >= need (walk down the tree, left whenever the left subtree has
 * enough), then the first such bin in that block (a short scan of one 128-byte block). That is
 * O(log bins) per placement instead of NeMo RL's scan over every open bin; the blocks keep the
 * tree small and the scans cache-friendly. */
#define PP__FIT_BLOCK 32

typedef struct pp__fit {
    int32_t *room;      /* [leaves * PP__FIT_BLOCK] */
    int32_t *count;     /* [leaves * PP__FIT_BLOCK] sequences in each bin */
    int32_t *node;      /* [2 * leaves]; node[1] is the root, block k's maximum is node[leaves + k] */
    int leaves, bins;
} pp__fit;

static int32_t pp__fit_block_max(const pp__fit *f, int blk)
{
    const int32_t *r = f->room + (size_t)blk * PP__FIT_BLOCK;
    int32_t m = -1;
    int i;
    for (i = 0; i < PP__FIT_BLOCK; i++) m = r[i] > m ? r[i] : m;
    return m;
}

static int pp__fit_grow(pp__fit *f)
{
    int leaves = f->leaves ? f->leaves * 2 : 64, i;
    size_t old = (size_t)f->leaves * PP__FIT_BLOCK, cap = (size_t)leaves * PP__FIT_BLOCK;
    int32_t *room = (int32_t *)PIPEPAR_REALLOC(f->room, sizeof(int32_t) * cap);
    int32_t *count, *node;
    if (!room) return 0;
    f->room = room;
    count = (int32_t *)PIPEPAR_REALLOC(f->count, sizeof(int32_t) * cap);
    if (!count) return 0;
    f->count = count;
    node = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * 2 * (size_t)leaves);
    if (!node) return 0;
    for (i = (int)old; i < (int)cap; i++) { room[i] = -1; count[i] = 0; }
    PIPEPAR_FREE(f->node);
    f->node = node;
    f->leaves = leaves;
    for (i = 0; i < leaves; i++) node[leaves + i] = pp__fit_block_max(f, i);
    for (i = leaves - 1; i >= 1; i--) { int c = 2 * i; node[i] = node[c] > node[c + 1] ? node[c] : node[c + 1]; }
    return 1;
}

static void pp__fit_set(pp__fit *f, int bin, int32_t room)
{
    int32_t old = f->room[bin], m;
    int i = f->leaves + bin / PP__FIT_BLOCK;
    f->room[bin] = room;
    if (room > f->node[i]) m = room;                                   /* a new bin raised its block */
    else if (old == f->node[i] && room < old) m = pp__fit_block_max(f, bin / PP__FIT_BLOCK);
    else return;                                                       /* the block's maximum stands */
    f->node[i] = m;
    for (i /= 2; i >= 1; i /= 2) {
        int c = 2 * i;
        m = f->node[c] > f->node[c + 1] ? f->node[c] : f->node[c + 1];
        if (f->node[i] == m) break;
        f->node[i] = m;
    }
}

/* The first bin at index >= from with room >= need, or -1. Scan the rest of from's block; else
 * climb the tree from that block until a right sibling holds enough room, walk down to its
 * leftmost such block and scan it. */
static int pp__fit_first_from(const pp__fit *f, int from, int32_t need)
{
    int b, i, blk = from / PP__FIT_BLOCK;
    if (from >= f->bins || f->node[1] < need) return -1;
    i = f->leaves + blk;
    if (f->node[i] >= need)
        for (b = from; b < (blk + 1) * PP__FIT_BLOCK; b++) if (f->room[b] >= need) return b;
    for (;;) {
        if (i == 1) return -1;
        if (!(i & 1) && f->node[i + 1] >= need) { i++; break; }
        i /= 2;
    }
    while (i < f->leaves) { int c = 2 * i; i = f->node[c] >= need ? c : c + 1; }
    for (b = (i - f->leaves) * PP__FIT_BLOCK; f->room[b] < need; b++) {}
    return b;
}

/* First fit's output: the placements as chunks. Chunk c puts the next count[c] sequences of
 * `order` (all of one length) into bin[c], so the bins' contents are copied chunk by chunk
 * instead of sequence by sequence. */
typedef struct pp__chunks { int32_t *bin, *count; int size, cap; } pp__chunks;

static int pp__chunk_push(pp__chunks *c, int32_t bin, int32_t count)
{
    if (c->size == c->cap) {
        int cap = c->cap ? c->cap * 2 : 4096;
        int32_t *b = (int32_t *)PIPEPAR_REALLOC(c->bin, sizeof(int32_t) * (size_t)cap), *n2;
        if (!b) return 0;
        c->bin = b;
        n2 = (int32_t *)PIPEPAR_REALLOC(c->count, sizeof(int32_t) * (size_t)cap);
        if (!n2) return 0;
        c->count = n2;
        c->cap = cap;
    }
    c->bin[c->size] = bin;
    c->count[c->size] = count;
    c->size++;
    return 1;
}

/* First fit over the sequences in `order`. A run of equal lengths is placed a bin at a time:
 * once a bin takes as many of the run as fit, the run's next sequence can only go to a later
 * bin (every earlier one already had too little room), so the search resumes after it, and a new
 * bin takes capacity/length of them at once. The bins are exactly those of placing the
 * sequences one by one; 1M long-tailed lengths need some 33k tree searches, not 1M. */
static pp_status pp__first_fit(const int32_t *order, int n, const int32_t *lengths, int32_t capacity,
                               int max_seqs, pp__chunks *out, int *num_bins, pp_error *err)
{
    pp__fit f;
    int k = 0;
    memset(&f, 0, sizeof f);
    if (!pp__fit_grow(&f)) goto oom;
    while (k < n) {
        int32_t len = lengths[order[k]];
        int end = k + 1, from = 0;
        while (end < n && lengths[order[end]] == len) end++;
        while (k < end) {
            int b = pp__fit_first_from(&f, from, len), take;
            int32_t room;
            if (b < 0) {
                if (f.bins == f.leaves * PP__FIT_BLOCK && !pp__fit_grow(&f)) goto oom;
                b = f.bins++;
                room = capacity;
            } else {
                room = f.room[b];
            }
            take = (int)(room / len);
            if (take > end - k) take = end - k;
            if (max_seqs && take > max_seqs - f.count[b]) take = max_seqs - f.count[b];
            if (!pp__chunk_push(out, b, take)) goto oom;
            room -= (int32_t)take * len;
            f.count[b] += take;
            k += take;
            pp__fit_set(&f, b, (max_seqs && f.count[b] >= max_seqs) ? -1 : room);
            from = b + 1;
        }
    }
    *num_bins = f.bins;
    PIPEPAR_FREE(f.room); PIPEPAR_FREE(f.count); PIPEPAR_FREE(f.node);
    return PP_OK;
oom:
    PIPEPAR_FREE(f.room); PIPEPAR_FREE(f.count); PIPEPAR_FREE(f.node);
    return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
}

/* --- best fit: a treap of open bins keyed by (room, bin) -----------------------------------
 * A bin's node id is the bin's own index. The best bin for a sequence of length L is the
 * smallest key >= (L, -1): least room that still fits, the earliest bin on ties. */
typedef struct pp__treap {
    int32_t *room, *left, *right;
    uint32_t *prio;
    int root;
} pp__treap;

static int pp__treap_key_less(const pp__treap *t, int node, int32_t room, int32_t bin)
{
    return t->room[node] < room || (t->room[node] == room && node < bin);
}

/* Splits the tree at `node` into keys < (room, bin) and keys >= (room, bin). */
static void pp__treap_split(pp__treap *t, int node, int32_t room, int32_t bin, int *lo, int *hi)
{
    if (node < 0) { *lo = *hi = -1; return; }
    if (pp__treap_key_less(t, node, room, bin)) {
        pp__treap_split(t, t->right[node], room, bin, &t->right[node], hi);
        *lo = node;
    } else {
        pp__treap_split(t, t->left[node], room, bin, lo, &t->left[node]);
        *hi = node;
    }
}

static int pp__treap_merge(pp__treap *t, int a, int b)
{
    if (a < 0) return b;
    if (b < 0) return a;
    if (t->prio[a] > t->prio[b]) { t->right[a] = pp__treap_merge(t, t->right[a], b); return a; }
    t->left[b] = pp__treap_merge(t, a, t->left[b]);
    return b;
}

static void pp__treap_insert(pp__treap *t, int node)
{
    int lo, hi;
    t->left[node] = t->right[node] = -1;
    pp__treap_split(t, t->root, t->room[node], node, &lo, &hi);
    t->root = pp__treap_merge(t, pp__treap_merge(t, lo, node), hi);
}

static pp_status pp__best_fit(const int32_t *order, int n, const int32_t *lengths, int32_t capacity,
                              int max_seqs, int32_t *ev_bin, int *num_bins, pp_error *err)
{
    pp__treap t;
    int32_t *count;
    uint32_t x = 2463534242u;   /* xorshift32 state for the priorities: fixed, so runs repeat */
    int k, bins = 0;
    t.root = -1;
    t.room = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    t.left = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    t.right = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    t.prio = (uint32_t *)PIPEPAR_MALLOC(sizeof(uint32_t) * (size_t)(n > 0 ? n : 1));
    count = (int32_t *)pp__calloc((size_t)(n > 0 ? n : 1), sizeof(int32_t));
    if (!t.room || !t.left || !t.right || !t.prio || !count) {
        PIPEPAR_FREE(t.room); PIPEPAR_FREE(t.left); PIPEPAR_FREE(t.right); PIPEPAR_FREE(t.prio); PIPEPAR_FREE(count);
        return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    }
    for (k = 0; k < n; k++) {
        int32_t len = lengths[order[k]];
        int lo, hi, b;
        pp__treap_split(&t, t.root, len, -1, &lo, &hi);
        if (hi < 0) {                       /* no open bin fits: open one */
            t.root = lo;
            b = bins++;
            t.room[b] = capacity - len;
            x ^= x << 13; x ^= x >> 17; x ^= x << 5;
            t.prio[b] = x;
        } else {                            /* take the leftmost (best) node out of hi */
            int parent = -1;
            b = hi;
            while (t.left[b] >= 0) { parent = b; b = t.left[b]; }
            if (parent < 0) hi = t.right[b]; else t.left[parent] = t.right[b];
            t.root = pp__treap_merge(&t, lo, hi);
            t.room[b] -= len;
        }
        count[b]++;
        if (!max_seqs || count[b] < max_seqs) pp__treap_insert(&t, b);
        ev_bin[k] = b;
    }
    *num_bins = bins;
    PIPEPAR_FREE(t.room); PIPEPAR_FREE(t.left); PIPEPAR_FREE(t.right); PIPEPAR_FREE(t.prio); PIPEPAR_FREE(count);
    return PP_OK;
}

/* --- Python's random.shuffle, bit for bit ---------------------------------------------------
 * CPython seeds its Mersenne Twister (MT19937) from an integer with init_by_array over the
 * integer's 32-bit words, least significant first; shuffle walks i = n-1 .. 1 and swaps item i
 * with item randbelow(i+1), where randbelow(m) draws k = bit_length(m) bits (the top k bits of
 * one 32-bit output) until the value is below m. */
typedef struct pp__mt { uint32_t s[624]; int i; } pp__mt;

static void pp__mt_seed(pp__mt *mt, uint64_t seed)
{
    uint32_t key[2];
    int klen = (seed >> 32) ? 2 : 1, i = 1, j = 0, k;
    key[0] = (uint32_t)seed; key[1] = (uint32_t)(seed >> 32);
    mt->s[0] = 19650218u;
    for (k = 1; k < 624; k++) mt->s[k] = 1812433253u * (mt->s[k - 1] ^ (mt->s[k - 1] >> 30)) + (uint32_t)k;
    for (k = 624; k > 0; k--) {
        mt->s[i] = (mt->s[i] ^ ((mt->s[i - 1] ^ (mt->s[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++; j++;
        if (i >= 624) { mt->s[0] = mt->s[623]; i = 1; }
        if (j >= klen) j = 0;
    }
    for (k = 623; k > 0; k--) {
        mt->s[i] = (mt->s[i] ^ ((mt->s[i - 1] ^ (mt->s[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= 624) { mt->s[0] = mt->s[623]; i = 1; }
    }
    mt->s[0] = 0x80000000u;
    mt->i = 624;
}

static uint32_t pp__mt_next(pp__mt *mt)
{
    uint32_t y;
    if (mt->i >= 624) {
        int k;
        for (k = 0; k < 624; k++) {
            y = (mt->s[k] & 0x80000000u) | (mt->s[(k + 1) % 624] & 0x7fffffffu);
            mt->s[k] = mt->s[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        mt->i = 0;
    }
    y = mt->s[mt->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

static void pp__python_shuffle(int32_t *a, int n, uint64_t seed)
{
    pp__mt mt;
    int i;
    pp__mt_seed(&mt, seed);
    for (i = n - 1; i >= 1; i--) {
        uint32_t m = (uint32_t)i + 1u, r;
        int k = 0;
        int32_t t;
        while ((m >> k) != 0 && k < 32) k++;            /* bit_length(m) */
        do r = pp__mt_next(&mt) >> (32 - k); while (r >= m);
        t = a[i]; a[i] = a[r]; a[r] = t;
    }
}

/* --- presence sets over a sorted array, for the removals of MFFD and greedy knapsack --------
 * next[i] leads to the first present position >= i (next[m] = m is the end); prev[i+1] to the
 * last present position <= i, plus one (prev[0] = 0 means none). Path halving keeps both
 * near-constant per step. */
static int pp__next_present(int32_t *next, int i)
{
    while (next[i] != i) { next[i] = next[next[i]]; i = next[i]; }
    return i;
}

static int pp__prev_present(int32_t *prev, int i)   /* last present position <= i, or -1 */
{
    int j = i + 1;
    while (prev[j] != j) { prev[j] = prev[prev[j]]; j = prev[j]; }
    return j - 1;
}

/* First position p in a[0..m) (lengths[a[k]] descending) with lengths[a[p]] <= x; m if none. */
static int pp__first_at_most_desc(const int32_t *a, int m, const int32_t *lengths, int64_t x)
{
    int lo = 0, hi = m;
    while (lo < hi) { int mid = lo + (hi - lo) / 2; if (lengths[a[mid]] <= x) hi = mid; else lo = mid + 1; }
    return lo;
}

/* First position p in a[0..m) (lengths ascending) with lengths[a[p]] > x; m if none. */
static int pp__first_above_asc(const int32_t *a, int m, const int32_t *lengths, int64_t x)
{
    int lo = 0, hi = m;
    while (lo < hi) { int mid = lo + (hi - lo) / 2; if (lengths[a[mid]] > x) hi = mid; else lo = mid + 1; }
    return lo;
}

/* The output of the algorithms below: events (seq, bin) in the order sequences were placed; a
 * bin's contents are its events in that order. */
typedef struct pp__events { int32_t *seq, *bin; int count, num_bins; } pp__events;

static void pp__event(pp__events *e, int32_t seq, int32_t bin) { e->seq[e->count] = seq; e->bin[e->count] = bin; e->count++; }

/* Modified first fit decreasing, NeMo RL's phases. Classes by size s against capacity C: large
 * s > C/2, medium C/3 < s <= C/2, small C/6 < s <= C/3, tiny s <= C/6. */
static pp_status pp__mffd(const int32_t *lengths, int n, int32_t capacity, pp__events *ev, pp_error *err)
{
    int32_t *large, *medium, *small, *tiny, *rest, *tmp, *next_m, *next_s, *prev_s, *next_r;
    int32_t *first3, *nfirst, *bin_of_tmp = NULL;
    int64_t *load;
    uint8_t *has_medium, *in_rest;
    int nl = 0, nm = 0, ns = 0, nt = 0, nr = 0, i, b, alive_small;
    pp__heap heap;
    pp_status st = PP_OK;
    size_t sz = (size_t)(n > 0 ? n : 1);
    memset(&heap, 0, sizeof heap);
    large = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    medium = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    small = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    tiny = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    rest = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    tmp = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    next_m = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (sz + 1));
    next_s = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (sz + 1));
    prev_s = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (sz + 1));
    next_r = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (sz + 1));
    first3 = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * 3 * sz);
    nfirst = (int32_t *)pp__calloc(sz, sizeof(int32_t));
    load = (int64_t *)pp__calloc(sz, sizeof(int64_t));
    has_medium = (uint8_t *)pp__calloc(sz, 1);
    in_rest = (uint8_t *)pp__calloc(sz, 1);
    if (!large || !medium || !small || !tiny || !rest || !tmp || !next_m || !next_s || !prev_s || !next_r ||
        !first3 || !nfirst || !load || !has_medium || !in_rest) {
        st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
        goto done;
    }
    /* Phase 0: classify (integer forms of s > C/2, s > C/3, s > C/6) and sort. */
    for (i = 0; i < n; i++) {
        int64_t s = lengths[i];
        if (2 * s > capacity) large[nl++] = i;
        else if (3 * s > capacity) medium[nm++] = i;
        else if (6 * s > capacity) small[ns++] = i;
        else tiny[nt++] = i;
    }
    if ((st = pp__order_by_length(large, tmp, nl, lengths, 1, 1, err)) != PP_OK ||   /* size descending, stable */
        (st = pp__order_by_length(medium, tmp, nm, lengths, 1, 1, err)) != PP_OK ||
        (st = pp__order_by_length(small, tmp, ns, lengths, 0, 0, err)) != PP_OK ||    /* size ascending, stable */
        (st = pp__order_by_length(tiny, tmp, nt, lengths, 0, 0, err)) != PP_OK) goto done;
    /* Phase 1: one bin per large item. */
    for (b = 0; b < nl; b++) { first3[(size_t)3 * b] = large[b]; nfirst[b] = 1; load[b] = lengths[large[b]]; }
    /* Phase 2: each large bin, in order, takes the first (largest) medium that fits. */
    for (i = 0; i <= nm; i++) next_m[i] = i;
    for (b = 0; b < nl; b++) {
        int p = pp__first_at_most_desc(medium, nm, lengths, capacity - load[b]);
        int q = pp__next_present(next_m, p);
        if (q < nm) {
            first3[(size_t)3 * b + nfirst[b]++] = medium[q];
            load[b] += lengths[medium[q]];
            has_medium[b] = 1;
            next_m[q] = q + 1;
        }
    }
    /* Phase 3: backwards over the bins without a medium, the smallest small plus the largest
     * small that still fits beside it, when the two smallest fit together. */
    for (i = 0; i <= ns; i++) { next_s[i] = i; prev_s[i] = i; }
    alive_small = ns;
    for (b = nl - 1; b >= 0; b--) {
        int f1, f2, p, j;
        int64_t room;
        if (has_medium[b] || alive_small < 2) continue;
        room = capacity - load[b];
        f1 = pp__next_present(next_s, 0);
        f2 = pp__next_present(next_s, f1 + 1);
        if ((int64_t)lengths[small[f1]] + lengths[small[f2]] > room) continue;
        next_s[f1] = f1 + 1; prev_s[f1 + 1] = f1;
        p = pp__first_above_asc(small, ns, lengths, room - lengths[small[f1]]);
        j = pp__prev_present(prev_s, p - 1);   /* exists: f2 fits */
        next_s[j] = j + 1; prev_s[j + 1] = j;
        first3[(size_t)3 * b + nfirst[b]++] = small[f1];
        first3[(size_t)3 * b + nfirst[b]++] = small[j];
        load[b] += (int64_t)lengths[small[f1]] + lengths[small[j]];
        alive_small -= 2;
    }
    /* Phase 4: what is left of medium, small and tiny, largest first (ties: lower index); each
     * large bin in order takes the largest remaining item that fits until none does. */
    for (i = 0; i < nm; i++) if (pp__next_present(next_m, i) == i) in_rest[medium[i]] = 1;
    for (i = 0; i < ns; i++) if (pp__next_present(next_s, i) == i) in_rest[small[i]] = 1;
    for (i = 0; i < nt; i++) in_rest[tiny[i]] = 1;
    for (i = 0; i < n; i++) if (in_rest[i]) rest[nr++] = i;
    if ((st = pp__order_by_length(rest, tmp, nr, lengths, 1, 1, err)) != PP_OK) goto done;
    for (i = 0; i <= nr; i++) next_r[i] = i;
    for (b = 0; b < nl; b++) {
        int k;
        for (k = 0; k < nfirst[b]; k++) pp__event(ev, first3[(size_t)3 * b + k], b);
        for (;;) {
            int p = pp__first_at_most_desc(rest, nr, lengths, capacity - load[b]);
            int q = pp__next_present(next_r, p);
            if (q >= nr) break;
            pp__event(ev, rest[q], b);
            load[b] += lengths[rest[q]];
            next_r[q] = q + 1;
        }
    }
    /* Phase 5, as NeMo RL writes it: leftover bins kept sorted by load (bisect_right, so a bin
     * that changed goes after equal loads); each leftover, largest first, joins the least-filled
     * bin when it fits there, else starts a new bin. The heap key (load, time of last change)
     * is exactly that list's order; the bins come out in it. */
    {
        int temp_bins = 0;
        int64_t clock = 0;
        int32_t next_id = nl;
        bin_of_tmp = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
        if (!bin_of_tmp || !pp__heap_push(&heap, 0, clock++, 0)) {
            st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
            goto done;
        }
        temp_bins = 1;
        for (i = 0; i < nr; i++) {
            int32_t s;
            int q = pp__next_present(next_r, i);
            if (q != i) continue;
            s = rest[i];
            if ((int64_t)lengths[s] <= capacity - heap.item[0].a) {
                pp__heap_item top = pp__heap_pop(&heap);
                pp__event(ev, s, nl + top.v);
                if (!pp__heap_push(&heap, top.a + lengths[s], clock++, top.v)) {
                    st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
                    goto done;
                }
            } else {
                pp__event(ev, s, nl + temp_bins);
                if (!pp__heap_push(&heap, lengths[s], clock++, temp_bins)) {
                    st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
                    goto done;
                }
                temp_bins++;
            }
        }
        /* Final ids: phase-5 bins in heap order, skipping the empty starter bin. */
        while (heap.size > 0) {
            pp__heap_item it = pp__heap_pop(&heap);
            bin_of_tmp[it.v] = it.a > 0 ? next_id++ : -1;
        }
        for (i = 0; i < ev->count; i++) if (ev->bin[i] >= nl) ev->bin[i] = bin_of_tmp[ev->bin[i] - nl];
        ev->num_bins = next_id;
    }
done:
    PIPEPAR_FREE(large); PIPEPAR_FREE(medium); PIPEPAR_FREE(small); PIPEPAR_FREE(tiny); PIPEPAR_FREE(rest);
    PIPEPAR_FREE(tmp); PIPEPAR_FREE(next_m); PIPEPAR_FREE(next_s); PIPEPAR_FREE(prev_s); PIPEPAR_FREE(next_r);
    PIPEPAR_FREE(first3); PIPEPAR_FREE(nfirst); PIPEPAR_FREE(load); PIPEPAR_FREE(has_medium);
    PIPEPAR_FREE(in_rest); PIPEPAR_FREE(bin_of_tmp); PIPEPAR_FREE(heap.item);
    return st;
}

/* Greedy knapsack (Megatron-LM): sequences ascending by length (ties: lower index first); bin
 * after bin, repeatedly take the last remaining sequence that fits (bisect_right - 1: the
 * largest, the higher index on ties) until none fits. */
static pp_status pp__greedy_knapsack(const int32_t *lengths, int n, int32_t capacity, int max_seqs,
                                     pp__events *ev, pp_error *err)
{
    size_t sz = (size_t)(n > 0 ? n : 1);
    int32_t *a = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    int32_t *tmp = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    int32_t *prev = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (sz + 1));
    int i, left = n, bins = 0;
    if (!a || !tmp || !prev) {
        PIPEPAR_FREE(a); PIPEPAR_FREE(tmp); PIPEPAR_FREE(prev);
        return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    }
    for (i = 0; i < n; i++) a[i] = i;
    if (pp__order_by_length(a, tmp, n, lengths, 0, 0, err) != PP_OK) {
        PIPEPAR_FREE(a); PIPEPAR_FREE(tmp); PIPEPAR_FREE(prev);
        return PP_ENOMEM;
    }
    for (i = 0; i <= n; i++) prev[i] = i;
    while (left > 0) {
        int64_t room = capacity;
        int taken = 0;
        for (;;) {
            int p = pp__first_above_asc(a, n, lengths, room);
            int q = p > 0 ? pp__prev_present(prev, p - 1) : -1;
            if (q < 0) break;
            pp__event(ev, a[q], bins);
            room -= lengths[a[q]];
            prev[q + 1] = q;
            left--; taken++;
            if (max_seqs && taken >= max_seqs) break;
        }
        bins++;
    }
    ev->num_bins = bins;
    PIPEPAR_FREE(a); PIPEPAR_FREE(tmp); PIPEPAR_FREE(prev);
    return PP_OK;
}

/* Balanced greedy knapsack (Megatron-LM): longest first (ties: lower index), each into the
 * least-filled bin (ties: earliest) when it fits, else into a new bin; starts with
 * ceil(sum/capacity) + delta empty bins. More starting bins than sequences would only stay
 * empty (the n first sequences go one to each of the n earliest), so at most n are made. */
static pp_status pp__balanced_knapsack(const int32_t *lengths, int n, int32_t capacity, int delta, int max_seqs,
                                       pp__events *ev, pp_error *err)
{
    size_t sz = (size_t)(n > 0 ? n : 1);
    int32_t *a = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    int32_t *tmp = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    int32_t *count = (int32_t *)pp__calloc(sz, sizeof(int32_t));
    int32_t *used = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    pp__heap heap;
    int64_t total = 0, start;
    int i, bins, ids = 0;
    pp_status st = PP_OK;
    memset(&heap, 0, sizeof heap);
    if (!a || !tmp || !count || !used) { st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory"); goto done; }
    for (i = 0; i < n; i++) { a[i] = i; total += lengths[i]; }
    if ((st = pp__order_by_length(a, tmp, n, lengths, 1, 1, err)) != PP_OK) goto done;
    start = (total + capacity - 1) / capacity + delta;
    bins = (int)(start < n ? start : n);
    for (i = 0; i < bins; i++)
        if (!pp__heap_push(&heap, 0, i, i)) { st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory"); goto done; }
    for (i = 0; i < n; i++) {
        int32_t s = a[i], b;
        int64_t ld;
        if (heap.size > 0 && heap.item[0].a + lengths[s] <= capacity) {
            pp__heap_item top = pp__heap_pop(&heap);
            b = top.v; ld = top.a + lengths[s];
        } else {
            b = bins++; ld = lengths[s];
        }
        pp__event(ev, s, b);
        count[b]++;
        if ((!max_seqs || count[b] < max_seqs) && !pp__heap_push(&heap, ld, b, b)) {
            st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
            goto done;
        }
    }
    /* Drop the bins left empty, keep the order of the rest. */
    for (i = 0; i < bins; i++) used[i] = count[i] > 0 ? ids++ : -1;
    for (i = 0; i < ev->count; i++) ev->bin[i] = used[ev->bin[i]];
    ev->num_bins = ids;
done:
    PIPEPAR_FREE(a); PIPEPAR_FREE(tmp); PIPEPAR_FREE(count); PIPEPAR_FREE(used); PIPEPAR_FREE(heap.item);
    return st;
}

/* Builds the compressed-row bins from events; a bin's sequences keep their event order. */
static pp_status pp__packing_from_events(const pp__events *ev, int n, const int32_t *lengths, int32_t capacity,
                                         pp_packing **out, pp_error *err)
{
    pp_packing *p = (pp_packing *)pp__calloc(1, sizeof(pp_packing));
    int32_t *fill = NULL;
    int i, nb = ev->num_bins;
    if (!p) return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    p->num_seqs = n; p->num_bins = nb; p->capacity = capacity;
    p->bin_offsets = (int32_t *)pp__calloc((size_t)nb + 1, sizeof(int32_t));
    p->seqs = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    p->bin_tokens = (int32_t *)pp__calloc((size_t)(nb > 0 ? nb : 1), sizeof(int32_t));
    fill = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(nb > 0 ? nb : 1));
    if (!p->bin_offsets || !p->seqs || !p->bin_tokens || !fill) {
        PIPEPAR_FREE(fill);
        pp_packing_free(p);
        return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    }
    for (i = 0; i < ev->count; i++) {
        p->bin_offsets[ev->bin[i] + 1]++;
        p->bin_tokens[ev->bin[i]] += lengths[ev->seq[i]];
        p->total_tokens += lengths[ev->seq[i]];
    }
    for (i = 0; i < nb; i++) { p->bin_offsets[i + 1] += p->bin_offsets[i]; fill[i] = p->bin_offsets[i]; }
    for (i = 0; i < ev->count; i++) p->seqs[fill[ev->bin[i]]++] = ev->seq[i];
    PIPEPAR_FREE(fill);
    *out = p;
    return PP_OK;
}

/* Builds the compressed-row bins from first fit's chunks: each chunk is one copy. */
static pp_status pp__packing_from_chunks(const int32_t *order, const pp__chunks *ch, int num_bins, int n,
                                         const int32_t *lengths, int32_t capacity, pp_packing **out, pp_error *err)
{
    pp_packing *p = (pp_packing *)pp__calloc(1, sizeof(pp_packing));
    int32_t *fill = NULL;
    int c, i, k = 0;
    if (!p) return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    p->num_seqs = n; p->num_bins = num_bins; p->capacity = capacity;
    p->bin_offsets = (int32_t *)pp__calloc((size_t)num_bins + 1, sizeof(int32_t));
    p->seqs = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    p->bin_tokens = (int32_t *)pp__calloc((size_t)(num_bins > 0 ? num_bins : 1), sizeof(int32_t));
    fill = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(num_bins > 0 ? num_bins : 1));
    if (!p->bin_offsets || !p->seqs || !p->bin_tokens || !fill) {
        PIPEPAR_FREE(fill);
        pp_packing_free(p);
        return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    }
    for (c = 0; c < ch->size; c++) p->bin_offsets[ch->bin[c] + 1] += ch->count[c];
    for (i = 0; i < num_bins; i++) { p->bin_offsets[i + 1] += p->bin_offsets[i]; fill[i] = p->bin_offsets[i]; }
    for (c = 0; c < ch->size; c++) {
        int32_t b = ch->bin[c], cnt = ch->count[c], len = lengths[order[k]];   /* one length per chunk */
        memcpy(p->seqs + fill[b], order + k, sizeof(int32_t) * (size_t)cnt);
        fill[b] += cnt;
        p->bin_tokens[b] += cnt * len;
        p->total_tokens += (int64_t)cnt * len;
        k += cnt;
    }
    PIPEPAR_FREE(fill);
    *out = p;
    return PP_OK;
}

typedef struct pp__bin_size { int32_t count, bin; } pp__bin_size;

static int pp__bin_size_cmp(const void *x, const void *y)   /* count descending, then bin descending */
{
    const pp__bin_size *a = (const pp__bin_size *)x, *b = (const pp__bin_size *)y;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    return a->bin > b->bin ? -1 : (a->bin < b->bin ? 1 : 0);
}

/* NeMo RL's _adjust_bin_count on compressed-row bins (see the >>pack notes). */
static pp_status pp__adjust_bins(pp_packing *p, const int32_t *lengths, int min_bins, int multiple, pp_error *err)
{
    int64_t target = p->num_bins;
    int extra, i, k, src = 0, nb = p->num_bins;
    pp__bin_size *order;
    int32_t *count, *moved, *offsets, *seqs, *tokens;
    if (min_bins > target) target = min_bins;
    if (multiple > 1 && target % multiple) target += multiple - target % multiple;
    if (target == p->num_bins) return PP_OK;
    if (target > p->num_seqs)
        return pp__fail(err, PP_EINVAL, "min_bin_count=%d, bin_count_multiple=%d: %lld bins are needed but there "
                        "are only %d sequences (every bin needs at least one)", min_bins, multiple ? multiple : 1,
                        (long long)target, p->num_seqs);
    extra = (int)(target - nb);
    order = (pp__bin_size *)PIPEPAR_MALLOC(sizeof(pp__bin_size) * (size_t)(nb > 0 ? nb : 1));
    count = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(nb > 0 ? nb : 1));
    moved = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)extra);
    offsets = (int32_t *)pp__calloc((size_t)target + 1, sizeof(int32_t));
    seqs = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)p->num_seqs);
    tokens = (int32_t *)pp__calloc((size_t)target, sizeof(int32_t));
    if (!order || !count || !moved || !offsets || !seqs || !tokens) {
        PIPEPAR_FREE(order); PIPEPAR_FREE(count); PIPEPAR_FREE(moved);
        PIPEPAR_FREE(offsets); PIPEPAR_FREE(seqs); PIPEPAR_FREE(tokens);
        return pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
    }
    for (i = 0; i < nb; i++) {
        count[i] = p->bin_offsets[i + 1] - p->bin_offsets[i];
        order[i].count = count[i]; order[i].bin = i;
    }
    qsort(order, (size_t)nb, sizeof *order, pp__bin_size_cmp);
    for (k = 0; k < extra; k++) {          /* each new bin: the last sequence of the current source */
        while (count[order[src].bin] <= 1) src++;   /* target <= num_seqs keeps src in range */
        {
            int b = order[src].bin;
            moved[k] = p->seqs[p->bin_offsets[b] + count[b] - 1];
            count[b]--;
        }
    }
    for (i = 0; i < nb; i++) {
        offsets[i + 1] = offsets[i] + count[i];
        memcpy(seqs + offsets[i], p->seqs + p->bin_offsets[i], sizeof(int32_t) * (size_t)count[i]);
        for (k = offsets[i]; k < offsets[i + 1]; k++) tokens[i] += lengths[seqs[k]];
    }
    for (k = 0; k < extra; k++) {
        offsets[nb + k + 1] = offsets[nb + k] + 1;
        seqs[offsets[nb + k]] = moved[k];
        tokens[nb + k] = lengths[moved[k]];
    }
    PIPEPAR_FREE(p->bin_offsets); PIPEPAR_FREE(p->seqs); PIPEPAR_FREE(p->bin_tokens);
    p->bin_offsets = offsets; p->seqs = seqs; p->bin_tokens = tokens; p->num_bins = (int)target;
    PIPEPAR_FREE(order); PIPEPAR_FREE(count); PIPEPAR_FREE(moved);
    return PP_OK;
}

pp_status pp_pack(const int32_t *lengths, int n, const pp_pack_config *cfg, pp_packing **out, pp_error *err)
{
    pp__events ev;
    pp__chunks chunks;
    int32_t *order = NULL, *tmp = NULL, *seq_buf = NULL, max_len = 0;
    pp_packing *p = NULL;
    pp_status st;
    size_t sz = (size_t)(n > 0 ? n : 1);
    int i, ordered = 0, fit = 0;
    if (!out) return pp__fail(err, PP_EINVAL, "pp_pack: out must not be NULL");
    *out = NULL;
    if ((st = pp__pack_check(lengths, n, cfg, err)) != PP_OK) return st;
    for (i = 0; i < n; i++) if (lengths[i] > max_len) max_len = lengths[i];
    memset(&ev, 0, sizeof ev);
    memset(&chunks, 0, sizeof chunks);
    fit = cfg->algo == PP_PACK_FFD || cfg->algo == PP_PACK_FIRST_FIT_SHUFFLE ||
          (cfg->algo == PP_PACK_MFFD && cfg->max_sequences_per_bin);
    order = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    if (!fit) ev.bin = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
    if (!order || (!fit && !ev.bin)) { st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory"); goto done; }
    /* The placing orders that need no scratch space are built in `order`, which then doubles
     * as the event sequence list; the others get their own event and scratch arrays. */
    if (cfg->algo == PP_PACK_FFD || cfg->algo == PP_PACK_BFD ||
        (cfg->algo == PP_PACK_MFFD && cfg->max_sequences_per_bin)) {
        if ((int64_t)max_len > 8 * (int64_t)n + 4096 &&
            !(tmp = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz))) {
            st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory");
            goto done;
        }
        if ((st = pp__decreasing_order(order, tmp, n, lengths, max_len, err)) != PP_OK) goto done;
        ordered = 1;
    } else if (cfg->algo == PP_PACK_FIRST_FIT_SHUFFLE) {
        for (i = 0; i < n; i++) order[i] = i;
        pp__python_shuffle(order, n, cfg->seed);
        ordered = 1;
    } else {
        seq_buf = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * sz);
        if (!seq_buf) { st = pp__fail(err, PP_ENOMEM, "pp_pack: out of memory"); goto done; }
    }
    ev.seq = ordered ? order : seq_buf;
    switch (cfg->algo) {
    case PP_PACK_FFD:
    case PP_PACK_FIRST_FIT_SHUFFLE:
        st = pp__first_fit(order, n, lengths, cfg->capacity, cfg->max_sequences_per_bin, &chunks, &ev.num_bins, err);
        break;
    case PP_PACK_BFD:
        st = pp__best_fit(order, n, lengths, cfg->capacity, cfg->max_sequences_per_bin, ev.bin, &ev.num_bins, err);
        ev.count = n;
        break;
    case PP_PACK_MFFD:
        if (cfg->max_sequences_per_bin)   /* NeMo RL: with a sequence cap MFFD runs capped FFD */
            st = pp__first_fit(order, n, lengths, cfg->capacity, cfg->max_sequences_per_bin, &chunks, &ev.num_bins, err);
        else
            st = pp__mffd(lengths, n, cfg->capacity, &ev, err);
        break;
    case PP_PACK_CONCATENATIVE: {
        int64_t used = 0;
        int in_bin = 0;
        for (i = 0; i < n; i++) {
            if (i == 0 || used + lengths[i] > cfg->capacity ||
                (cfg->max_sequences_per_bin && in_bin >= cfg->max_sequences_per_bin)) {
                ev.num_bins++; used = 0; in_bin = 0;
            }
            pp__event(&ev, i, ev.num_bins - 1);
            used += lengths[i]; in_bin++;
        }
        st = PP_OK;
        break;
    }
    case PP_PACK_GREEDY_KNAPSACK:
        st = pp__greedy_knapsack(lengths, n, cfg->capacity, cfg->max_sequences_per_bin, &ev, err);
        break;
    case PP_PACK_BALANCED_GREEDY_KNAPSACK: {
        int delta = cfg->knapsack_delta == 0 ? 20 : (cfg->knapsack_delta < 0 ? 0 : cfg->knapsack_delta);
        st = pp__balanced_knapsack(lengths, n, cfg->capacity, delta, cfg->max_sequences_per_bin, &ev, err);
        break;
    }
    default:
        st = pp__fail(err, PP_EINVAL, "algo=%d: unknown packing algorithm", (int)cfg->algo);
        break;
    }
    if (st != PP_OK) goto done;
    st = fit ? pp__packing_from_chunks(order, &chunks, ev.num_bins, n, lengths, cfg->capacity, &p, err)
             : pp__packing_from_events(&ev, n, lengths, cfg->capacity, &p, err);
    if (st != PP_OK) goto done;
    if ((st = pp__adjust_bins(p, lengths, cfg->min_bin_count, cfg->bin_count_multiple, err)) != PP_OK) {
        pp_packing_free(p);
        goto done;
    }
    *out = p;
    st = pp__ok(err);
done:
    PIPEPAR_FREE(seq_buf); PIPEPAR_FREE(ev.bin); PIPEPAR_FREE(order); PIPEPAR_FREE(tmp);
    PIPEPAR_FREE(chunks.bin); PIPEPAR_FREE(chunks.count);
    return st;
}

/* --- the distributed plan ------------------------------------------------------------------ */

void pp_pack_plan_free(pp_pack_plan *plan)
{
    if (!plan) return;
    pp_packing_free(plan->bins);
    PIPEPAR_FREE(plan->lengths); PIPEPAR_FREE(plan->padded_lengths); PIPEPAR_FREE(plan->seq_starts);
    PIPEPAR_FREE(plan->bin_rank); PIPEPAR_FREE(plan->bin_microbatch); PIPEPAR_FREE(plan->microbatch_bin);
    PIPEPAR_FREE(plan->bin_real_tokens); PIPEPAR_FREE(plan->bin_padded_tokens);
    PIPEPAR_FREE(plan->cu_seqlens); PIPEPAR_FREE(plan->cu_seqlens_padded);
    PIPEPAR_FREE(plan);
}

typedef struct pp__bin_cost { int64_t cost; int32_t bin; } pp__bin_cost;

static int pp__bin_cost_cmp(const void *x, const void *y)   /* cost descending, then bin ascending */
{
    const pp__bin_cost *a = (const pp__bin_cost *)x, *b = (const pp__bin_cost *)y;
    if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
    return a->bin < b->bin ? -1 : (a->bin > b->bin ? 1 : 0);
}

/* Largest bins first, each to the dp rank with the least cost so far (ties: lower rank) among
 * those with fewer than num_microbatches bins; a rank's microbatches then run in bin order. */
static pp_status pp__assign_balanced(pp_pack_plan *plan, int attention, pp_error *err)
{
    int nb = plan->num_bins, dp = plan->dp, i;
    pp__bin_cost *order = (pp__bin_cost *)PIPEPAR_MALLOC(sizeof(pp__bin_cost) * (size_t)nb);
    int32_t *taken = (int32_t *)pp__calloc((size_t)dp, sizeof(int32_t));
    pp__heap heap;
    memset(&heap, 0, sizeof heap);
    if (!order || !taken) goto oom;
    for (i = 0; i < nb; i++) {
        int k;
        int64_t c = 0;
        for (k = plan->bins->bin_offsets[i]; k < plan->bins->bin_offsets[i + 1]; k++) {
            int64_t l = plan->padded_lengths[plan->bins->seqs[k]];
            c += attention ? l * l : l;
        }
        order[i].cost = c; order[i].bin = i;
    }
    qsort(order, (size_t)nb, sizeof *order, pp__bin_cost_cmp);
    for (i = 0; i < dp; i++) if (!pp__heap_push(&heap, 0, i, i)) goto oom;
    for (i = 0; i < nb; i++) {
        pp__heap_item top = pp__heap_pop(&heap);
        plan->bin_rank[order[i].bin] = top.v;
        if (++taken[top.v] < plan->num_microbatches && !pp__heap_push(&heap, top.a + order[i].cost, top.v, top.v))
            goto oom;
    }
    memset(taken, 0, sizeof(int32_t) * (size_t)dp);
    for (i = 0; i < nb; i++) plan->bin_microbatch[i] = taken[plan->bin_rank[i]]++;
    PIPEPAR_FREE(order); PIPEPAR_FREE(taken); PIPEPAR_FREE(heap.item);
    return PP_OK;
oom:
    PIPEPAR_FREE(order); PIPEPAR_FREE(taken); PIPEPAR_FREE(heap.item);
    return pp__fail(err, PP_ENOMEM, "pp_pack_plan_build: out of memory");
}

static int64_t pp__round_up(int64_t x, int64_t m) { return m > 1 ? (x + m - 1) / m * m : x; }

pp_status pp_pack_plan_build(const int32_t *lengths, int n, const pp_pack_plan_config *cfg,
                             pp_pack_plan **out, pp_error *err)
{
    pp_pack_plan *plan;
    pp_pack_config pc;
    int dp, pp, vpp, tp, cp, def, i, b;
    int64_t seq_multiple, start = 0;
    int64_t *target = NULL;
    pp_status st;
    if (!out) return pp__fail(err, PP_EINVAL, "pp_pack_plan_build: out must not be NULL");
    *out = NULL;
    if (!cfg) return pp__fail(err, PP_EINVAL, "pp_pack_plan_build: cfg must not be NULL");
    if (n < 0) return pp__fail(err, PP_EINVAL, "n=%d: the number of sequences must be at least 0", n);
    if (n > 0 && !lengths) return pp__fail(err, PP_EINVAL, "lengths: NULL with n=%d sequences", n);
    if (cfg->dp < 0) return pp__fail(err, PP_EINVAL, "dp=%d: must be at least 1 (0 means 1)", cfg->dp);
    if (cfg->pp < 0) return pp__fail(err, PP_EINVAL, "pp=%d: must be at least 1 (0 means 1)", cfg->pp);
    if (cfg->vpp < 0) return pp__fail(err, PP_EINVAL, "vpp=%d: must be at least 1 (0 means 1)", cfg->vpp);
    if (cfg->tp < 0) return pp__fail(err, PP_EINVAL, "tp=%d: must be at least 1 (0 means 1)", cfg->tp);
    if (cfg->cp < 0) return pp__fail(err, PP_EINVAL, "cp=%d: must be at least 1 (0 means 1)", cfg->cp);
    if (cfg->seq_multiple < 0)
        return pp__fail(err, PP_EINVAL, "seq_multiple=%d: must be positive (0 means the default)", cfg->seq_multiple);
    if (cfg->bin_multiple < 0)
        return pp__fail(err, PP_EINVAL, "bin_multiple=%d: must be positive (0 means 1)", cfg->bin_multiple);
    if ((unsigned)cfg->assign > (unsigned)PP_ASSIGN_ATTENTION)
        return pp__fail(err, PP_EINVAL, "assign=%d: unknown bin assignment", (int)cfg->assign);
    dp = cfg->dp ? cfg->dp : 1; pp = cfg->pp ? cfg->pp : 1; vpp = cfg->vpp ? cfg->vpp : 1;
    tp = cfg->tp ? cfg->tp : 1; cp = cfg->cp ? cfg->cp : 1;
    seq_multiple = cfg->seq_multiple ? cfg->seq_multiple : (cp > 1 ? (int64_t)tp * cp * 2 : tp);
    if (seq_multiple > INT32_MAX)
        return pp__fail(err, PP_EINVAL, "tp=%d, cp=%d: the sequence padding multiple tp*cp*2 is too large", tp, cp);
    if (cp > 1 && seq_multiple % (2 * (int64_t)cp))
        return pp__fail(err, PP_EINVAL, "seq_multiple=%lld: with cp=%d it must be a multiple of 2*cp=%d, so each "
                        "sequence splits into 2*cp equal chunks", (long long)seq_multiple, cp, 2 * cp);
    if (cp > 1 && cfg->bin_multiple > 1 && cfg->bin_multiple % (2 * cp))
        return pp__fail(err, PP_EINVAL, "bin_multiple=%d: with cp=%d it must be a multiple of 2*cp=%d (the tail "
                        "padding joins the last sequence's chunks)", cfg->bin_multiple, cp, 2 * cp);
    pc = cfg->pack;
    if (vpp > 1 && (int64_t)dp * pp > INT_MAX)
        return pp__fail(err, PP_EINVAL, "dp=%d, pp=%d: dp*pp microbatches per step is past %d", dp, pp, INT_MAX);
    def = vpp > 1 ? dp * pp : dp;
    if (pc.min_bin_count == 0) pc.min_bin_count = def;
    if (pc.bin_count_multiple == 0) pc.bin_count_multiple = def;
    else if (pc.bin_count_multiple % dp)
        return pp__fail(err, PP_EINVAL, "bin_count_multiple=%d: must be a multiple of dp (%d) so every data-parallel "
                        "rank gets the same number of microbatches", pc.bin_count_multiple, dp);
    plan = (pp_pack_plan *)pp__calloc(1, sizeof(pp_pack_plan));
    if (!plan) return pp__fail(err, PP_ENOMEM, "pp_pack_plan_build: out of memory");
    plan->num_seqs = n; plan->dp = dp; plan->pp = pp; plan->tp = tp; plan->cp = cp;
    plan->seq_multiple = (int)seq_multiple; plan->bin_multiple = cfg->bin_multiple ? cfg->bin_multiple : 1;
    plan->lengths = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    plan->padded_lengths = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    plan->seq_starts = (int64_t *)PIPEPAR_MALLOC(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    if (!plan->lengths || !plan->padded_lengths || !plan->seq_starts) goto oom;
    for (i = 0; i < n; i++) {
        int64_t padded;
        if (lengths[i] < 1) {
            st = pp__fail(err, PP_EINVAL, "lengths[%d]=%d: a sequence needs at least 1 token", i, (int)lengths[i]);
            goto fail;
        }
        padded = pp__round_up(lengths[i], seq_multiple);
        if (padded > pc.capacity) {
            if (padded == lengths[i])
                st = pp__fail(err, PP_EINVAL, "lengths[%d]=%d: exceeds the bin capacity (%d)", i, (int)lengths[i],
                              (int)pc.capacity);
            else
                st = pp__fail(err, PP_EINVAL, "lengths[%d]=%d: padded to a multiple of %lld it is %lld tokens, more "
                              "than the bin capacity (%d)", i, (int)lengths[i], (long long)seq_multiple,
                              (long long)padded, (int)pc.capacity);
            goto fail;
        }
        plan->lengths[i] = lengths[i];
        plan->padded_lengths[i] = (int32_t)padded;
        plan->seq_starts[i] = start;
        start += lengths[i];
    }
    if ((st = pp_pack(plan->padded_lengths, n, &pc, &plan->bins, err)) != PP_OK) goto fail;
    plan->num_bins = plan->bins->num_bins;
    plan->num_microbatches = plan->num_bins / dp;
    b = plan->num_bins > 0 ? plan->num_bins : 1;
    plan->bin_rank = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)b);
    plan->bin_microbatch = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)b);
    plan->microbatch_bin = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * (size_t)b);
    plan->bin_real_tokens = (int32_t *)pp__calloc((size_t)b, sizeof(int32_t));
    plan->bin_padded_tokens = (int32_t *)pp__calloc((size_t)b, sizeof(int32_t));
    plan->cu_seqlens = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * ((size_t)n + (size_t)b));
    plan->cu_seqlens_padded = (int32_t *)PIPEPAR_MALLOC(sizeof(int32_t) * ((size_t)n + (size_t)b));
    target = (int64_t *)pp__calloc((size_t)(dp > b ? dp : b), sizeof(int64_t));
    if (!plan->bin_rank || !plan->bin_microbatch || !plan->microbatch_bin || !plan->bin_real_tokens ||
        !plan->bin_padded_tokens || !plan->cu_seqlens || !plan->cu_seqlens_padded || !target) goto oom;
    /* Bins to (rank, microbatch). */
    if (cfg->assign == PP_ASSIGN_ROUND_ROBIN) {
        for (b = 0; b < plan->num_bins; b++) { plan->bin_rank[b] = b % dp; plan->bin_microbatch[b] = b / dp; }
    } else if ((st = pp__assign_balanced(plan, cfg->assign == PP_ASSIGN_ATTENTION, err)) != PP_OK) {
        goto fail;
    }
    for (b = 0; b < plan->num_bins; b++)
        plan->microbatch_bin[plan->bin_rank[b] * plan->num_microbatches + plan->bin_microbatch[b]] = b;
    /* Microbatch lengths: each bin's padded total to bin_multiple; with pp > 1 each rank's
     * largest (or the largest of all ranks) for every microbatch of the rank. */
    for (b = 0; b < plan->num_bins; b++) {
        int64_t t = pp__round_up(plan->bins->bin_tokens[b], plan->bin_multiple);
        if (t > INT32_MAX) {
            st = pp__fail(err, PP_EINVAL, "bin_multiple=%d: bin %d's %d tokens round up past 2^31-1",
                          plan->bin_multiple, b, (int)plan->bins->bin_tokens[b]);
            goto fail;
        }
        plan->bin_padded_tokens[b] = (int32_t)t;
    }
    if (pp > 1 && !cfg->variable_shapes) {
        int64_t all = 0;
        for (i = 0; i < dp; i++) target[i] = 0;
        for (b = 0; b < plan->num_bins; b++) {
            int r = plan->bin_rank[b];
            if (plan->bin_padded_tokens[b] > target[r]) target[r] = plan->bin_padded_tokens[b];
            if (plan->bin_padded_tokens[b] > all) all = plan->bin_padded_tokens[b];
        }
        for (b = 0; b < plan->num_bins; b++)
            plan->bin_padded_tokens[b] = (int32_t)(cfg->same_shape_all_ranks ? all : target[plan->bin_rank[b]]);
    }
    for (b = 0; b < plan->num_bins; b++) {
        int c = plan->bins->bin_offsets[b] + b, k, cnt = plan->bins->bin_offsets[b + 1] - plan->bins->bin_offsets[b];
        plan->cu_seqlens[c] = 0;
        plan->cu_seqlens_padded[c] = 0;
        for (k = 0; k < cnt; k++) {
            int32_t s = plan->bins->seqs[plan->bins->bin_offsets[b] + k];
            plan->cu_seqlens[c + k + 1] = plan->cu_seqlens[c + k] + plan->lengths[s];
            plan->cu_seqlens_padded[c + k + 1] = plan->cu_seqlens_padded[c + k] + plan->padded_lengths[s];
        }
        plan->bin_real_tokens[b] = plan->cu_seqlens[c + cnt];
        plan->cu_seqlens_padded[c + cnt] = plan->bin_padded_tokens[b];   /* the last sequence takes the tail */
    }
    PIPEPAR_FREE(target);
    *out = plan;
    return pp__ok(err);
oom:
    st = pp__fail(err, PP_ENOMEM, "pp_pack_plan_build: out of memory");
fail:
    PIPEPAR_FREE(target);
    pp_pack_plan_free(plan);
    return st;
}

int pp_pack_plan_bin_size(const pp_pack_plan *plan, int bin)
{
    if (!plan || bin < 0 || bin >= plan->num_bins) return -1;
    return plan->bins->bin_offsets[bin + 1] - plan->bins->bin_offsets[bin];
}

const int32_t *pp_pack_plan_cu_seqlens(const pp_pack_plan *plan, int bin)
{
    if (!plan || bin < 0 || bin >= plan->num_bins) return NULL;
    return plan->cu_seqlens + plan->bins->bin_offsets[bin] + bin;
}

const int32_t *pp_pack_plan_cu_seqlens_padded(const pp_pack_plan *plan, int bin)
{
    if (!plan || bin < 0 || bin >= plan->num_bins) return NULL;
    return plan->cu_seqlens_padded + plan->bins->bin_offsets[bin] + bin;
}

pp_status pp_pack_plan_gather(const pp_pack_plan *plan, int bin, const int64_t *seq_offsets, int64_t *rows,
                              pp_error *err)
{
    const int32_t *cu;
    int k, cnt;
    if (!plan || !rows) return pp__fail(err, PP_EINVAL, "pp_pack_plan_gather: plan and rows must not be NULL");
    if (bin < 0 || bin >= plan->num_bins)
        return pp__fail(err, PP_EINVAL, "bin=%d: must be in 0 .. %d", bin, plan->num_bins - 1);
    cu = pp_pack_plan_cu_seqlens_padded(plan, bin);
    cnt = pp_pack_plan_bin_size(plan, bin);
    for (k = 0; k < cnt; k++) {
        int32_t s = plan->bins->seqs[plan->bins->bin_offsets[bin] + k], t;
        int64_t base = seq_offsets ? seq_offsets[s] : plan->seq_starts[s];
        for (t = cu[k]; t < cu[k + 1]; t++)
            rows[t] = t - cu[k] < plan->lengths[s] ? base + (t - cu[k]) : -1;
    }
    return pp__ok(err);
}
