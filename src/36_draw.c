
/* ============================================================================================
 * >>draw (implementation)
 * ============================================================================================ */

static pp_status pp__text_flush(pp__text *t, FILE *out, pp_error *err)
{
    pp_status st = PP_OK;
    if (t->failed) st = pp__fail(err, PP_ENOMEM, "out of memory while formatting");
    else if (t->len && fwrite(t->data, 1, t->len, out) != t->len) st = pp__fail(err, PP_EIO, "write failed");
    pp__text_free(t);
    return st == PP_OK ? pp__ok(err) : st;
}

/* Simulates with default costs when the caller gave no result; checks that a given result
 * belongs to this schedule (same program lengths). */
static pp_status pp__sim_for_drawing(const pp_schedule *s, const pp_sim_result *given, pp_sim_result **owned,
                                     const pp_sim_result **use, pp_error *err)
{
    int r;
    *owned = NULL;
    if (given) {
        if (given->pp != s->pp) return pp__fail(err, PP_EINVAL, "sim: computed for pp=%d, schedule has pp=%d", given->pp, s->pp);
        for (r = 0; r < s->pp; r++)
            if (given->length[r] != s->length[r])
                return pp__fail(err, PP_EINVAL, "sim: rank %d has %d timed actions but the schedule has %d "
                                "(simulate the lowered schedule you draw)", r, given->length[r], s->length[r]);
        *use = given;
        return PP_OK;
    }
    {
        pp_status st = pp_simulate(s, NULL, owned, err);
        if (st != PP_OK) return st;
        for (r = 0; r < s->pp; r++)
            if ((*owned)->length[r] != s->length[r]) {
                pp_sim_result_free(*owned);
                *owned = NULL;
                return pp__fail(err, PP_EINVAL, "schedule: lower it before drawing (pp_schedule_lower)");
            }
        *use = *owned;
    }
    return PP_OK;
}

static char pp__mb_char(int m)
{
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    return m < 62 ? digits[m] : '#';
}

/* Compact Gantt chart: one column per time unit (the shortest compute action), and for every
 * rank one line per kind of work (F; B or I; W), each cell the microbatch id (0-9, a-z, A-Z).
 * With several chunks per rank a 'chunk' line says which chunk the rank works on. */
pp_status pp_schedule_draw_ascii(const pp_schedule *s, const pp_sim_result *sim, FILE *out, pp_error *err)
{
    pp_sim_result *owned = NULL;
    const pp_sim_result *use = NULL;
    pp__text t = { NULL, 0, 0, 0 };
    pp_status st;
    double unit = DBL_MAX;
    int r, i, cols, c, has_w = 0, has_i = 0;
    char *line = NULL;
    if (!s || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    st = pp__sim_for_drawing(s, sim, &owned, &use, err);
    if (st != PP_OK) return st;
    for (r = 0; r < s->pp; r++)
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            double d = use->end[r][i] - use->start[r][i];
            if (pp__is_comm(a.op)) continue;
            if (a.op == PP_OP_W) has_w = 1;
            if (a.op == PP_OP_I) has_i = 1;
            if (d > 1e-12 && d < unit) unit = d;
        }
    if (unit == DBL_MAX) unit = 1;
    cols = (int)ceil(use->makespan / unit - 1e-9);
    if (cols > 100000) {
        pp_sim_result_free(owned);
        return pp__fail(err, PP_EINVAL, "timeline is %d columns wide: too wide for text, use the SVG", cols);
    }
    line = (char *)PIPEPAR_MALLOC((size_t)cols + 1);
    if (!line) { pp_sim_result_free(owned); return pp__fail(err, PP_ENOMEM, "out of memory"); }
    pp__text_printf(&t, "%s  pp=%d vpp=%d mb=%d  (one column = %g time unit%s; cells show the microbatch)\n",
                    pp_schedule_kind_name(s->kind), s->pp, s->vpp, s->mb, unit, unit == 1 ? "" : "s");
    for (r = 0; r < s->pp; r++) {
        int row, nrows = 2 + (has_w ? 1 : 0) + (s->vpp > 1 ? 1 : 0);
        for (row = 0; row < nrows; row++) {
            const char *name;
            int want_chunk = s->vpp > 1 && row == nrows - 1;
            if (want_chunk) name = "chunk";
            else if (row == 0) name = "F";
            else if (row == 1) name = has_i ? (has_w ? "B/I" : "B") : "B";
            else name = "W";
            memset(line, want_chunk ? '.' : ' ', (size_t)cols);
            line[cols] = '\0';
            for (i = 0; i < s->length[r]; i++) {
                pp_action a = s->actions[r][i];
                int from, to, op = a.op, ops[2], stg[2], mbs[2], nh, h;
                if (pp__is_comm(a.op)) continue;
                from = (int)floor(use->start[r][i] / unit + 1e-9);
                to = (int)ceil(use->end[r][i] / unit - 1e-9);
                if (from < 0) from = 0;
                if (to > cols) to = cols;
                nh = pp__halves(a, ops, stg, mbs);
                for (h = 0; h < nh; h++) {
                    int show;
                    op = ops[h];
                    if (want_chunk) show = 1;
                    else if (row == 0) show = op == PP_OP_F;
                    else if (row == 1) show = op == PP_OP_B || op == PP_OP_I;
                    else show = op == PP_OP_W;
                    if (!show) continue;
                    for (c = from; c < to; c++)
                        line[c] = want_chunk ? (char)('0' + pp_stage_chunk(s, stg[h]) % 10) : pp__mb_char(mbs[h]);
                }
            }
            if (row == 0) pp__text_printf(&t, "rank %-3d %5s |%s|\n", r, name, line);
            else pp__text_printf(&t, "         %5s |%s|\n", name, line);
        }
    }
    pp__text_printf(&t, "bubble per rank:");
    for (r = 0; r < s->pp; r++) pp__text_printf(&t, " %.1f%%", 100.0 * use->bubble[r]);
    pp__text_printf(&t, "   peak live activations per rank:");
    for (r = 0; r < s->pp; r++) pp__text_printf(&t, " %d", use->peak_live[r]);
    pp__text_printf(&t, "\n");
    PIPEPAR_FREE(line);
    pp_sim_result_free(owned);
    return pp__text_flush(&t, out, err);
}

/* Colour of a microbatch: hues spread by the golden angle so neighbours differ. */
static void pp__svg_colour(int m, int op, char *buf, size_t n)
{
    int hue = (int)fmod(m * 137.508, 360.0);
    int light = op == PP_OP_F ? 72 : op == PP_OP_W ? 30 : op == PP_OP_I ? 56 : 45;
    snprintf(buf, n, "hsl(%d,70%%,%d%%)", hue, light);
}

pp_status pp_schedule_write_svg(const pp_schedule *s, const pp_sim_result *sim, FILE *out, pp_error *err)
{
    pp_sim_result *owned = NULL;
    const pp_sim_result *use = NULL;
    pp__text t = { NULL, 0, 0, 0 };
    pp_status st;
    double width = 1200, row_h = 34, left = 70, top = 56, scale;
    int r, i;
    char colour[48], label[64];
    if (!s || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    st = pp__sim_for_drawing(s, sim, &owned, &use, err);
    if (st != PP_OK) return st;
    scale = use->makespan > 0 ? (width - left - 20) / use->makespan : 1;
    pp__text_printf(&t, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                    "font-family=\"Helvetica,Arial,sans-serif\" font-size=\"11\">\n",
                    width, top + row_h * s->pp + 70);
    pp__text_printf(&t, "<defs><pattern id=\"stripes\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
                    "patternTransform=\"rotate(45)\"><rect width=\"3\" height=\"6\" fill=\"white\" "
                    "fill-opacity=\"0.35\"/></pattern></defs>\n");
    pp__text_printf(&t, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    pp__text_printf(&t, "<text x=\"%.0f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">%s schedule: pp=%d, "
                    "vpp=%d, mb=%d</text>\n", left, pp_schedule_kind_name(s->kind), s->pp, s->vpp, s->mb);
    pp__text_printf(&t, "<text x=\"%.0f\" y=\"40\">step time %.4g, mean bubble %.1f%%. Box label: "
                    "&lt;stage&gt;&lt;op&gt;&lt;microbatch&gt;; colour = microbatch; light = forward, dark = "
                    "backward, striped = input-grad (I), darkest = weight-grad (W).</text>\n",
                    left, use->makespan, 100.0 * use->bubble_mean);
    for (r = 0; r < s->pp; r++) {
        double y = top + r * row_h;
        pp__text_printf(&t, "<text x=\"8\" y=\"%.1f\">rank %d</text>\n", y + row_h / 2 + 4, r);
        pp__text_printf(&t, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f3f3f3\"/>\n",
                        left, y + 2, use->makespan * scale, row_h - 4);
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            double x = left + use->start[r][i] * scale, w = (use->end[r][i] - use->start[r][i]) * scale;
            int m = a.mb, op = a.op;
            if (pp__is_comm(a.op)) continue;
            if (op == PP_OP_FB) op = PP_OP_F;
            pp__svg_colour(m, op, colour, sizeof colour);
            pp_action_format(a, label, sizeof label);
            pp__text_printf(&t, "<g><title>rank %d: %s  [%.4g, %.4g]</title>", r, label, use->start[r][i], use->end[r][i]);
            pp__text_printf(&t, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                            "stroke=\"white\" stroke-width=\"0.8\"/>", x, y + 2, w > 0.5 ? w : 0.5, row_h - 4, colour);
            if (a.op == PP_OP_I)
                pp__text_printf(&t, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"url(#stripes)\"/>",
                                x, y + 2, w, row_h - 4);
            if (a.op == PP_OP_FB)
                pp__text_printf(&t, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"black\" "
                                "fill-opacity=\"0.35\"/>", x, y + row_h / 2, w, row_h / 2 - 2);
            /* the chunk, where a rank holds several: a strip along the top, darker for later chunks */
            if (s->vpp > 1 && pp_stage_chunk(s, a.stage) > 0)
                pp__text_printf(&t, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"4\" fill=\"black\" "
                                "fill-opacity=\"%.2f\"/>", x, y + 2, w > 0.5 ? w : 0.5,
                                0.25 + 0.6 * (double)pp_stage_chunk(s, a.stage) / (double)(s->vpp - 1));
            if (w >= 7.0 * (double)strlen(label) + 6.0 && a.op != PP_OP_FB)
                pp__text_printf(&t, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"%s\">%s</text>",
                                x + w / 2, y + row_h / 2 + 4, op == PP_OP_F ? "black" : "white", label);
            pp__text_printf(&t, "</g>\n");
        }
    }
    {
        double y = top + row_h * s->pp + 24;
        static const int legend_ops[] = { PP_OP_F, PP_OP_B, PP_OP_I, PP_OP_W };
        static const char *const legend_names[] = { "F forward", "B backward", "I input-grad", "W weight-grad" };
        int k;
        for (k = 0; k < 4; k++) {
            pp__svg_colour(0, legend_ops[k], colour, sizeof colour);
            pp__text_printf(&t, "<rect x=\"%.0f\" y=\"%.0f\" width=\"18\" height=\"12\" fill=\"%s\"/>",
                            left + k * 150.0, y, colour);
            if (legend_ops[k] == PP_OP_I)
                pp__text_printf(&t, "<rect x=\"%.0f\" y=\"%.0f\" width=\"18\" height=\"12\" fill=\"url(#stripes)\"/>",
                                left + k * 150.0, y);
            pp__text_printf(&t, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", left + k * 150.0 + 24, y + 10, legend_names[k]);
        }
        pp__text_printf(&t, "<text x=\"%.0f\" y=\"%.0f\">grey = idle (the bubble)%s</text>\n", left + 600.0, y + 10,
                        s->vpp > 1 ? "; dark strip on top = later chunk (none = chunk 0)" : "");
    }
    pp__text_printf(&t, "</svg>\n");
    pp_sim_result_free(owned);
    return pp__text_flush(&t, out, err);
}

pp_status pp_schedule_write_torch(const pp_schedule *s, FILE *out, pp_error *err)
{
    pp__text t = { NULL, 0, 0, 0 };
    int r, i;
    char buf[64];
    if (!s || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    for (r = 0; r < s->pp; r++) {
        pp__text_printf(&t, "rank%d:", r);
        for (i = 0; i < s->length[r]; i++) {
            if (pp__is_comm(s->actions[r][i].op)) continue;
            pp_action_format(s->actions[r][i], buf, sizeof buf);
            pp__text_printf(&t, " %s", buf);
        }
        pp__text_printf(&t, "\n");
    }
    return pp__text_flush(&t, out, err);
}

pp_status pp_schedule_write_csv(const pp_schedule *s, FILE *out, pp_error *err)
{
    pp__text t = { NULL, 0, 0, 0 };
    int r, i;
    char buf[64];
    if (!s || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    for (r = 0; r < s->pp; r++) {
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            /* an empty cell between two communication groups that touch (PyTorch reads it as None) */
            if (i && pp__is_comm(a.op) && pp__is_comm(s->actions[r][i - 1].op) && a.group != s->actions[r][i - 1].group)
                pp__text_printf(&t, ",");
            pp_action_format(a, buf, sizeof buf);
            pp__text_printf(&t, "%s%s", i ? "," : "", buf);
        }
        pp__text_printf(&t, "\n");
    }
    return pp__text_flush(&t, out, err);
}

pp_status pp_schedule_write_json(const pp_schedule *s, const pp_sim_result *sim, FILE *out, pp_error *err)
{
    pp__text t = { NULL, 0, 0, 0 };
    int r, i;
    char buf[64];
    if (!s || !out) return pp__fail(err, PP_EINVAL, "schedule and out: must not be NULL");
    if (sim) {
        if (sim->pp != s->pp) return pp__fail(err, PP_EINVAL, "sim: computed for another schedule");
        for (r = 0; r < s->pp; r++)
            if (sim->length[r] != s->length[r])
                return pp__fail(err, PP_EINVAL, "sim: rank %d has %d timed actions but the schedule has %d",
                                r, sim->length[r], s->length[r]);
    }
    pp__text_printf(&t, "{\"kind\": \"%s\", \"pp\": %d, \"vpp\": %d, \"mb\": %d, \"group\": %d, "
                    "\"placement\": \"%s\", \"num_stages\": %d, \"lowered\": %s,\n \"ranks\": [\n",
                    pp_schedule_kind_name(s->kind), s->pp, s->vpp, s->mb, s->group,
                    s->placement == PP_PLACEMENT_DUAL ? "dual" : s->placement == PP_PLACEMENT_V ? "v" : "looped", s->num_stages, s->lowered ? "true" : "false");
    for (r = 0; r < s->pp; r++) {
        pp__text_printf(&t, "  {\"rank\": %d, \"actions\": [", r);
        for (i = 0; i < s->length[r]; i++) {
            pp_action a = s->actions[r][i];
            pp_action_format(a, buf, sizeof buf);
            pp__text_printf(&t, "%s\n    {\"action\": \"%s\", \"op\": \"%s\", \"stage\": %d, \"mb\": %d", i ? "," : "",
                            buf, pp_op_name((pp_op)a.op), (int)a.stage, (int)a.mb);
            if (sim) pp__text_printf(&t, ", \"start\": %.9g, \"end\": %.9g", sim->start[r][i], sim->end[r][i]);
            pp__text_printf(&t, "}");
        }
        pp__text_printf(&t, "]}%s\n", r + 1 < s->pp ? "," : "");
    }
    pp__text_printf(&t, " ]");
    if (sim) {
        pp__text_printf(&t, ",\n \"simulation\": {\"makespan\": %.9g, \"bubble_mean\": %.9g, \"bubble\": [",
                        sim->makespan, sim->bubble_mean);
        for (r = 0; r < s->pp; r++) pp__text_printf(&t, "%s%.9g", r ? ", " : "", sim->bubble[r]);
        pp__text_printf(&t, "], \"peak_live\": [");
        for (r = 0; r < s->pp; r++) pp__text_printf(&t, "%s%d", r ? ", " : "", sim->peak_live[r]);
        pp__text_printf(&t, "], \"peak_memory\": [");
        for (r = 0; r < s->pp; r++) pp__text_printf(&t, "%s%.9g", r ? ", " : "", sim->peak_memory[r]);
        pp__text_printf(&t, "]}");
    }
    pp__text_printf(&t, "\n}\n");
    return pp__text_flush(&t, out, err);
}

/* Reads PyTorch's pipeline-order CSV: row r is rank r's program, one action per cell; empty
 * cells (PyTorch writes None as an empty cell) are skipped. pp is the number of rows; stages,
 * microbatches and the placement come from the actions themselves. */
pp_status pp_schedule_read_csv(const char *text, size_t len, pp_schedule **out, pp_error *err)
{
    pp_action *acts = NULL;
    int *row_of = NULL;
    size_t n = 0, cap = 0, pos = 0;
    int group = 1;
    int rows = 0, max_stage = -1, max_mb = -1, looped = 1, vshape = 1, dual = 1, vpp;
    pp_schedule *s = NULL;
    pp_status st = PP_OK;
    if (!text || !out) return pp__fail(err, PP_EINVAL, "text and out: must not be NULL");
    *out = NULL;
    while (pos < len) {
        size_t line_end = pos, cell;
        while (line_end < len && text[line_end] != '\n') line_end++;
        cell = pos;
        /* skip blank lines and comments */
        {
            size_t q = pos;
            while (q < line_end && (text[q] == ' ' || text[q] == '\t' || text[q] == '\r')) q++;
            if (q == line_end || text[q] == '#') { pos = line_end + 1; continue; }
        }
        while (cell <= line_end) {
            size_t ce = cell;
            char buf[96];
            pp_action a;
            while (ce < line_end && text[ce] != ',') ce++;
            {
                size_t b = cell, e = ce;
                while (b < e && (text[b] == ' ' || text[b] == '\t' || text[b] == '\r' || text[b] == '"')) b++;
                while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\r' || text[e - 1] == '"')) e--;
                if (e == b) group++;   /* an empty cell closes a communication group */
                if (e > b) {
                    if (e - b >= sizeof buf) {
                        st = pp__fail(err, PP_EPARSE, "CSV row %d: cell '%.20s...' is too long for an action", rows, text + b);
                        goto done;
                    }
                    memcpy(buf, text + b, e - b);
                    buf[e - b] = '\0';
                    st = pp_action_parse(buf, &a, err);
                    if (st != PP_OK) {
                        char msg[PP_ERROR_MESSAGE_SIZE];
                        snprintf(msg, sizeof msg, "%s", err ? err->message : "");
                        st = pp__fail(err, PP_EPARSE, "CSV row %d (rank %d): %s", rows + 1, rows, msg);
                        goto done;
                    }
                    if (n == cap) {
                        size_t nc = cap ? cap * 2 : 256;
                        pp_action *na = (pp_action *)PIPEPAR_REALLOC(acts, nc * sizeof(pp_action));
                        int *nr = (int *)PIPEPAR_REALLOC(row_of, nc * sizeof(int));
                        if (na) acts = na;
                        if (nr) row_of = nr;
                        if (!na || !nr) { st = pp__fail(err, PP_ENOMEM, "out of memory"); goto done; }
                        cap = nc;
                    }
                    if (pp__is_comm(a.op)) a.group = group;
                    acts[n] = a;
                    row_of[n] = rows;
                    n++;
                    if (a.stage > max_stage) max_stage = a.stage;
                    if (a.op == PP_OP_FB && a.stage2 > max_stage) max_stage = a.stage2;
                    if (a.mb > max_mb) max_mb = a.mb;
                    if (a.op == PP_OP_FB && a.mb2 > max_mb) max_mb = a.mb2;
                }
            }
            cell = ce + 1;
        }
        rows++;
        if (rows > 65536) { st = pp__fail(err, PP_EPARSE, "CSV: more than 65536 rows (ranks)"); goto done; }
        pos = line_end + 1;
    }
    if (rows == 0 || n == 0) { st = pp__fail(err, PP_EPARSE, "CSV: no actions found (one row per rank expected)"); goto done; }
    if ((max_stage + 1) % rows != 0) {
        st = pp__fail(err, PP_EPARSE, "CSV: %d stages over %d ranks is not a whole number of chunks per rank",
                      max_stage + 1, rows);
        goto done;
    }
    vpp = (max_stage + 1) / rows;
    for (pos = 0; pos < n; pos++) {
        int sg = acts[pos].stage, rr = row_of[pos];
        if (sg % rows != rr) looped = 0;
        if (vpp != 2 || !(sg == rr || sg == 2 * rows - 1 - rr)) vshape = 0;
        if (acts[pos].op == PP_OP_FB && acts[pos].stage2 != rr && acts[pos].stage2 != 2 * rows - 1 - rr) vshape = 0;
    }
    if (!looped && !vshape) {
        st = pp__fail(err, PP_EPARSE, "CSV: stages are placed neither looped (stage s on rank s %% pp) nor V-shaped "
                      "(rank r holds r and 2pp-1-r)");
        goto done;
    }
    /* V-shaped stages where no microbatch crosses from the first pp stages to the others, the
     * first half of the microbatches staying in front and the second half behind: DualPipe's two
     * routes (a V schedule sends every microbatch through all 2pp stages) */
    if (!looped && vshape && rows % 2 == 0 && (max_mb + 1) % 2 == 0) {
        int half = (max_mb + 1) / 2;
        for (pos = 0; pos < n && dual; pos++) {
            pp_action a = acts[pos];
            if ((a.stage < rows) != (a.mb < half)) dual = 0;
            if (a.op == PP_OP_FB && (a.stage2 < rows) != (a.mb2 < half)) dual = 0;
        }
    } else {
        dual = 0;
    }
    st = pp_schedule_create(rows, vpp, max_mb + 1,
                            looped ? PP_PLACEMENT_LOOPED : dual ? PP_PLACEMENT_DUAL : PP_PLACEMENT_V, &s, err);
    if (st != PP_OK) goto done;
    s->kind = PP_CUSTOM;
    for (pos = 0; pos < n; pos++) {
        st = pp_schedule_append(s, row_of[pos], acts[pos], err);
        if (st != PP_OK) goto done;
    }
    *out = s;
    s = NULL;
    st = pp__ok(err);
done:
    pp_schedule_free(s);
    PIPEPAR_FREE(acts);
    PIPEPAR_FREE(row_of);
    return st;
}
