/* fuzz_layers_check.h — consistency checks of a pp_layers, shared by the layers harnesses
 * (fuzz_layers_layout.c, fuzz_layers_hybrid.c, fuzz_layers_balance.c, fuzz_moe_freq.c).
 * Include after pipepar.h and fuzz_common.h. */
#ifndef PP_FUZZ_LAYERS_CHECK_H
#define PP_FUZZ_LAYERS_CHECK_H

/* Consistency of a built split: stages tile the layers and items, and every query agrees. */
FUZZ_UNUSED static void check_layers(const pp_layers *l)
{
    int s, t, g, items = 0, layers = 0, limit;
    char small[8], *buf;
    pp_error err;
    FUZZ_CHECK(l->pp >= 1 && l->vpp >= 1 && l->num_stages == l->pp * l->vpp);
    FUZZ_CHECK(l->stage_items[0] == 0 && l->stage_items[l->num_stages] == l->num_items);
    for (s = 0; s < l->num_stages; s++) {
        int first, count, need;
        FUZZ_CHECK(l->stage_items[s] <= l->stage_items[s + 1]);
        FUZZ_CHECK(l->first[s] == layers && l->count[s] >= 0);
        layers += l->count[s];
        items += l->stage_items[s + 1] - l->stage_items[s];
        FUZZ_CHECK(pp_layers_stage_range(l, s, &first, &count, &err) == PP_OK);
        FUZZ_CHECK(first == l->first[s] && count == l->count[s]);
        for (t = 0; t < PP_LAYER_TYPE_COUNT; t++) {
            FUZZ_CHECK(pp_layers_type_range(l, s, (pp_layer_type)t, &first, &count, &err) == PP_OK);
            FUZZ_CHECK(first >= 0 && count >= 0);
        }
        FUZZ_CHECK(pp_layers_stage(l, s % l->pp, s / l->pp) == s);
        need = pp_layers_stage_text(l, s, small, sizeof small);
        FUZZ_CHECK(need >= 0);
        FUZZ_CHECK(strlen(small) == (size_t)(need < (int)sizeof small ? need : (int)sizeof small - 1));
        if (s < 64) {
            buf = (char *)malloc((size_t)need + 1);
            FUZZ_CHECK(buf != NULL);
            FUZZ_CHECK(pp_layers_stage_text(l, s, buf, (size_t)need + 1) == need && strlen(buf) == (size_t)need);
            free(buf);
        }
    }
    FUZZ_CHECK(layers == l->num_layers && items == l->num_items);
    FUZZ_CHECK(pp_layers_stage(l, l->pp, 0) == -1 && pp_layers_stage(l, 0, l->vpp) == -1);
    limit = l->num_layers < 512 ? l->num_layers : 512;     /* the queries scan: keep inputs fast */
    for (g = 0; g < limit; g++) {
        int st = pp_layers_layer_stage(l, g);
        FUZZ_CHECK(st >= 0 && st < l->num_stages && g >= l->first[st] && g < l->first[st] + l->count[st]);
        FUZZ_CHECK(pp_layers_type_index(l, g, PP_LAYER_DECODER) == g);
        FUZZ_CHECK(l->is_moe[g] <= 1);
        FUZZ_CHECK((pp_layers_type_index(l, g, PP_LAYER_MOE) >= 0) == (l->is_moe[g] == 1));
    }
    FUZZ_CHECK(pp_layers_layer_stage(l, l->num_layers) == -1 && pp_layers_layer_stage(l, -1) == -1);
    if (l->num_stages <= 4096) {
        FUZZ_CHECK(pp_layers_write_text(l, fuzz_devnull(), &err) == PP_OK);
        FUZZ_CHECK(pp_layers_write_json(l, fuzz_devnull(), &err) == PP_OK);
    }
}

/* l->layout builds again into the same stages (pp and moe_layer_freq as given). */
FUZZ_UNUSED static void check_layout_round_trip(const pp_layers *l, const char *moe)
{
    pp_layers_config c;
    pp_layers *m = NULL;
    pp_error err;
    int s;
    if (!l->layout) return;
    memset(&c, 0, sizeof c);
    c.pp = l->pp; c.layout = l->layout; c.moe_layer_freq = moe;
    if (pp_layers_build(&c, &m, &err) != PP_OK) {
        fprintf(stderr, "layout '%.200s' does not build again: %s\n", l->layout, err.message);
        FUZZ_CHECK(!"l->layout parses back");
    }
    FUZZ_CHECK(m->num_stages == l->num_stages && m->num_layers == l->num_layers && m->mtp_layers == l->mtp_layers);
    for (s = 0; s < l->num_stages; s++) {
        FUZZ_CHECK(m->first[s] == l->first[s] && m->count[s] == l->count[s]);
        FUZZ_CHECK(m->stage_items[s + 1] - m->stage_items[s] == l->stage_items[s + 1] - l->stage_items[s]);
    }
    FUZZ_CHECK(memcmp(m->is_moe, l->is_moe, (size_t)l->num_layers) == 0);
    pp_layers_free(m);
}

#endif
