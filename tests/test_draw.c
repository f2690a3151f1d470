/* test_draw.c — the pictures (SVG of a simulated and of a measured step) and the CSV forms that
 * PyTorch's _PipelineScheduleRuntime loads (tests/torch_interop.sh runs them in PyTorch itself). */
#include <stdlib.h>
#include "pp_test.h"

static pp_schedule *lowered(pp_schedule_kind kind, int pp, int vpp, int mb)
{
    pp_schedule_config cfg;
    pp_schedule *s = NULL;
    pp_error err;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = kind; cfg.pp = pp; cfg.vpp = vpp; cfg.mb = mb;
    if (pp_schedule_build(&cfg, &s, &err) != PP_OK || pp_schedule_lower(s, &err) != PP_OK) {
        pp_test_fail(__FILE__, __LINE__, "build %s pp=%d vpp=%d mb=%d: %s", pp_schedule_kind_name(kind), pp, vpp,
                     mb, err.message);
        pp_schedule_free(s);
        return NULL;
    }
    return s;
}

/* What a writer writes, as a string (the caller frees it); NULL after a failed check. */
static char *svg_of(const pp_schedule *s)
{
    char *text = NULL;
    size_t len = 0;
    pp_error err;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) return NULL;
    PP_CHECK_OK(pp_schedule_write_svg(s, NULL, mem, &err), &err);
    fclose(mem);
    return text;
}

static char *torch_csv_of(const pp_schedule *s, pp_torch_csv_format format)
{
    char *text = NULL;
    size_t len = 0;
    pp_error err;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) return NULL;
    PP_CHECK_OK(pp_schedule_write_torch_csv(s, format, mem, &err), &err);
    fclose(mem);
    return text;
}

/* The cell `text` in the row [row, nl): a whole cell, between commas or the row's ends; or NULL. */
static const char *find_cell(const char *row, const char *nl, const char *text)
{
    const char *p = row;
    size_t n = strlen(text);
    while ((p = strstr(p, text)) != NULL && p < nl) {
        if ((p == row || p[-1] == ',') && (p[n] == ',' || p + n == nl)) return p;
        p++;
    }
    return NULL;
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    const char *p = text;
    while ((p = strstr(p, needle)) != NULL) { n++; p += strlen(needle); }
    return n;
}

/* --- a small XML check: what an XML parser needs of the SVG -------------------------------- */

/* 1 when x is one element, every tag closed in order, every attribute value in double quotes and
 * free of '<', and every '&' the start of an entity; else 0 with the first problem in why. */
static int xml_well_formed(const char *x, char *why, size_t n)
{
    const char *stack[64];
    size_t lens[64];
    int depth = 0, roots = 0;
    const char *p = x;
    while (*p) {
        if (*p == '&') {
            const char *q = p + 1;
            while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '#') q++;
            if (q == p + 1 || *q != ';') { snprintf(why, n, "bare '&' at offset %ld", (long)(p - x)); return 0; }
            p = q + 1;
        } else if (*p != '<') {
            if (depth == 0 && *p != '\n' && *p != ' ') { snprintf(why, n, "text outside the root"); return 0; }
            p++;
        } else if (p[1] == '/') {
            const char *name = p + 2, *e = name;
            while (*e && *e != '>') e++;
            if (!*e || depth == 0 || (size_t)(e - name) != lens[depth - 1] || strncmp(name, stack[depth - 1], lens[depth - 1])) {
                snprintf(why, n, "closing tag '%.*s' at offset %ld does not close '%.*s'", (int)(e - name), name,
                         (long)(p - x), depth ? (int)lens[depth - 1] : 0, depth ? stack[depth - 1] : "");
                return 0;
            }
            depth--;
            p = e + 1;
        } else {
            const char *name = p + 1, *q;
            size_t len = 0;
            while (name[len] && name[len] != ' ' && name[len] != '>' && name[len] != '/' && name[len] != '\n') len++;
            if (len == 0) { snprintf(why, n, "'<' without a name at offset %ld", (long)(p - x)); return 0; }
            q = name + len;
            for (;;) {   /* attributes: name="value" */
                while (*q == ' ' || *q == '\n') q++;
                if (*q == '>' || (q[0] == '/' && q[1] == '>') || !*q) break;
                while (*q && *q != '=' && *q != '>' && *q != ' ') q++;
                if (q[0] != '=' || q[1] != '"') { snprintf(why, n, "unquoted attribute at offset %ld", (long)(q - x)); return 0; }
                q += 2;
                while (*q && *q != '"' && *q != '<') q++;
                if (*q != '"') { snprintf(why, n, "attribute value not closed at offset %ld", (long)(q - x)); return 0; }
                q++;
            }
            if (!*q) { snprintf(why, n, "tag '%.*s' not closed", (int)len, name); return 0; }
            if (depth == 0) roots++;
            if (*q == '>') {
                if (depth == 64) { snprintf(why, n, "nested deeper than 64"); return 0; }
                stack[depth] = name; lens[depth] = len; depth++;
                p = q + 1;
            } else {
                p = q + 2;
            }
        }
    }
    if (depth) { snprintf(why, n, "'%.*s' never closed", (int)lens[depth - 1], stack[depth - 1]); return 0; }
    if (roots != 1) { snprintf(why, n, "%d root elements", roots); return 0; }
    return 1;
}

static void xml_check_finds_what_a_parser_would_refuse(void)
{
    char why[160];
    PP_CHECK(xml_well_formed("<svg a=\"1\"><g><text>x &lt; y</text></g><rect/></svg>\n", why, sizeof why));
    PP_CHECK(!xml_well_formed("<svg><g></svg>", why, sizeof why));
    PP_CHECK(!xml_well_formed("<svg><g></text></svg>", why, sizeof why));
    PP_CHECK(!xml_well_formed("<svg a=1></svg>", why, sizeof why));
    PP_CHECK(!xml_well_formed("<svg>a & b</svg>", why, sizeof why));
    PP_CHECK(!xml_well_formed("<svg></svg><svg></svg>", why, sizeof why));
    PP_CHECK(!xml_well_formed("<svg><rect", why, sizeof why));
}

/* --- the SVG of a simulated step ------------------------------------------------------------- */

/* How many boxes (a <g> with a <title>) the picture has, and how many of them carry a label; with
 * want_text, each box's label must be its title's action text (the full <stage><op><mb>). */
static void count_boxes(const char *svg, int *boxes, int *labelled, int want_full)
{
    const char *p = svg;
    *boxes = *labelled = 0;
    while ((p = strstr(p, "<g><title>rank ")) != NULL) {
        const char *end = strstr(p, "</g>"), *colon = strchr(p, ':'), *txt;
        char action[64] = "";
        if (!end || !colon) break;
        sscanf(colon + 2, "%63s", action);
        (*boxes)++;
        txt = strstr(p, "<text ");
        if (txt && txt < end) {
            const char *gt = strchr(txt, '>');
            (*labelled)++;
            if (want_full && gt && strncmp(gt + 1, action, strlen(action)) != 0)
                pp_test_fail(__FILE__, __LINE__, "box '%s' is labelled '%.12s'", action, gt + 1);
        }
        p = end;
    }
}

static void svg_is_well_formed_for_every_kind(void)
{
    static const pp_schedule_kind kinds[] = { PP_GPIPE, PP_1F1B, PP_INTERLEAVED_1F1B, PP_LOOPED_BFS, PP_ZB_H1,
                                              PP_ZB_H2, PP_ZBV, PP_DUALPIPEV, PP_INTERLEAVED_ZB, PP_DUALPIPE };
    size_t k;
    for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        pp_schedule *s = lowered(kinds[k], 4, kinds[k] == PP_INTERLEAVED_1F1B || kinds[k] == PP_LOOPED_BFS ? 2 : 0, 8);
        char *svg, why[200];
        if (!s) continue;
        svg = svg_of(s);
        if (svg) {
            PP_CHECK_MSG(xml_well_formed(svg, why, sizeof why), "%s: %s", pp_schedule_kind_name(kinds[k]), why);
            PP_CHECK_CONTAINS(svg, "class=\"axis\"");
            PP_CHECK_CONTAINS(svg, "class=\"legend\"");
            PP_CHECK_CONTAINS(svg, "time (simulation units)");
        }
        free(svg);
        pp_schedule_free(s);
    }
}

static void svg_title_names_the_kind_and_the_simulated_bubble(void)
{
    /* 1F1B, pp 4, mb 8, F = 1, B = 2: step (mb + pp - 1) * 3 = 33, each rank busy 8 * 3 = 24, so
     * the bubble is 9 / 33 = 27.3%. ZB-V, pp 4, mb 8: a chunk's F, I, W cost 0.5 each; each rank
     * works 2 * 8 * 1.5 = 24 of a 25.5 step: 1.5 / 25.5 = 5.9% */
    pp_schedule *a = lowered(PP_1F1B, 4, 0, 8), *b = lowered(PP_ZBV, 4, 0, 8);
    char *sa = a ? svg_of(a) : NULL, *sb = b ? svg_of(b) : NULL;
    if (sa) PP_CHECK_CONTAINS(sa, ">1f1b, pp=4, vpp=1, mb=8: simulated bubble 27.3%</text>");
    if (sb) PP_CHECK_CONTAINS(sb, ">zbv, pp=4, vpp=2, mb=8: simulated bubble 5.9%</text>");
    if (sb) PP_CHECK_CONTAINS(sb, "stages 0,7");   /* the V: rank 0 holds the first and last stage */
    free(sa); free(sb);
    pp_schedule_free(a); pp_schedule_free(b);
}

static void svg_time_axis_ticks_every_nice_step_up_to_the_step(void)
{
    /* 1F1B pp 4 mb 8 fills 788 px for 33 units (23.9 px each); ticks at least 72 px apart want
     * 3 units, so every 5: 0, 5, .., 30 and no 35 */
    pp_schedule *s = lowered(PP_1F1B, 4, 0, 8);
    char *svg = s ? svg_of(s) : NULL;
    if (svg) {
        const char *axis = strstr(svg, "class=\"axis\"");
        PP_CHECK(axis != NULL);
        if (axis) {
            PP_CHECK_CONTAINS(axis, "text-anchor=\"middle\">0</text>");
            PP_CHECK_CONTAINS(axis, "text-anchor=\"middle\">5</text>");
            PP_CHECK_CONTAINS(axis, "text-anchor=\"middle\">30</text>");
            PP_CHECK(strstr(axis, "text-anchor=\"middle\">35</text>") == NULL);
            PP_CHECK(strstr(axis, "text-anchor=\"middle\">3</text>") == NULL);
        }
    }
    free(svg);
    pp_schedule_free(s);
}

static void svg_labels_every_box_of_1f1b_with_its_action(void)
{
    /* 64 forwards and 64 backwards; the narrowest box (an F, 23.9 px) holds "0F0" */
    pp_schedule *s = lowered(PP_1F1B, 4, 0, 8);
    char *svg = s ? svg_of(s) : NULL;
    int boxes, labelled;
    if (svg) {
        count_boxes(svg, &boxes, &labelled, 1);
        PP_CHECK_INT(boxes, 64);
        PP_CHECK_INT(labelled, 64);
    }
    free(svg);
    pp_schedule_free(s);
}

static void svg_labels_every_box_of_zbv_and_of_a_long_interleaved_schedule(void)
{
    /* ZB-V pp 4 mb 8: 4 ranks x 2 chunks x 8 microbatches x (F, I, W) = 192 boxes. Interleaved pp 8,
     * vpp 4, mb 64: 8 x 4 x 64 x (F, B) = 4096 boxes; a forward costs 1/4 and still gets 22 px, so
     * the picture is wider than a screen (a browser scrolls it) and every box shows its microbatch */
    pp_schedule *a = lowered(PP_ZBV, 4, 0, 8), *b = lowered(PP_INTERLEAVED_1F1B, 8, 4, 64);
    char *sa = a ? svg_of(a) : NULL, *sb = b ? svg_of(b) : NULL;
    int boxes, labelled, width = 0;
    if (sa) {
        count_boxes(sa, &boxes, &labelled, 0);
        PP_CHECK_INT(boxes, 192);
        PP_CHECK_INT(labelled, 192);
    }
    if (sb) {
        count_boxes(sb, &boxes, &labelled, 0);
        PP_CHECK_INT(boxes, 4096);
        PP_CHECK_INT(labelled, 4096);
        sscanf(strstr(sb, "width=\""), "width=\"%d", &width);
        PP_CHECK_MSG(width > 8000, "width %d", width);
        PP_CHECK_CONTAINS(sb, "shade = chunk:");
    }
    free(sa); free(sb);
    pp_schedule_free(a); pp_schedule_free(b);
}

static void svg_draws_an_overlapped_f_and_b_as_two_halves(void)
{
    /* DualPipeV pp 2 mb 4 has FB actions; each is one box with an F half above a B half */
    pp_schedule *s = lowered(PP_DUALPIPEV, 2, 0, 4);
    char *svg = s ? svg_of(s) : NULL;
    if (svg) {
        const char *fb = strstr(svg, "OVERLAP_F_B");
        const char *end = fb ? strstr(fb, "</g>") : NULL;
        int rects = 0;
        const char *p = fb;
        while (p && end && (p = strstr(p, "<rect")) != NULL && p < end) { rects++; p++; }
        PP_CHECK_INT(rects, 2);
        PP_CHECK_CONTAINS(svg, "F&amp;B overlapped");
    }
    free(svg);
    pp_schedule_free(s);
}

/* --- the SVG of a measured step ------------------------------------------------------------- */

/* 1F1B on 2 ranks, 1 microbatch, timed by hand (seconds):
 *   rank 0: F0 runs [0, 1 ms); B0 waits from 1.5 ms for its gradient, runs [4, 6 ms)
 *   rank 1: F0 waits [0, 1.2 ms) for its input, runs to 2.2 ms; B0 runs [2.2, 4.2 ms)
 * The step is 6 ms; each rank computes 3 ms of it: idle 50%. Transfers get times in between. */
static void fake_timelines(const pp_schedule *s, pp_timeline *t, double times[2][3][16])
{
    int r, i;
    for (r = 0; r < 2; r++) {
        memset(&t[r], 0, sizeof t[r]);
        t[r].rank = r;
        t[r].length = s->length[r];
        t[r].schedule = s;
        t[r].actions = s->actions[r];
        for (i = 0; i < s->length[r] && i < 16; i++) {
            pp_action a = s->actions[r][i];
            double st = 0.001, rd = 0.0015, en = 0.0015;   /* transfers */
            if (a.op == PP_OP_F) { st = 0; rd = r ? 0.0012 : 0; en = r ? 0.0022 : 0.001; }
            if (a.op == PP_OP_B) { st = r ? 0.0022 : 0.0015; rd = r ? 0.0022 : 0.004; en = r ? 0.0042 : 0.006; }
            times[r][0][i] = st; times[r][1][i] = rd; times[r][2][i] = en;
        }
        t[r].start = times[r][0];
        t[r].ready = times[r][1];
        t[r].end = times[r][2];
    }
}

static void measured_svg_draws_the_step_in_ms_below_its_simulation(void)
{
    pp_schedule *s = lowered(PP_1F1B, 2, 0, 1), *other = lowered(PP_1F1B, 4, 0, 1);
    pp_sim_result *sim = NULL, *wrong = NULL;
    pp_timeline t[2];
    double times[2][3][16];
    pp_error err;
    char *text = NULL, why[200];
    size_t len = 0;
    FILE *mem;
    if (!s || !other) goto done;
    PP_CHECK(s->length[0] <= 16 && s->length[1] <= 16);
    fake_timelines(s, t, times);
    PP_CHECK_OK(pp_simulate(s, NULL, &sim, &err), &err);
    mem = open_memstream(&text, &len);
    PP_CHECK_OK(pp_timeline_write_svg(t, 2, sim, mem, &err), &err);
    fclose(mem);
    PP_CHECK_MSG(xml_well_formed(text, why, sizeof why), "%s", why);
    PP_CHECK_INT(count_of(text, "class=\"panel\""), 2);
    PP_CHECK_CONTAINS(text, "time (simulation units)");
    PP_CHECK_CONTAINS(text, "time (ms)");
    PP_CHECK_CONTAINS(text, ">1f1b, pp=2, vpp=1, mb=1: measured, idle 50.0% (mean over ranks)</text>");
    PP_CHECK_CONTAINS(text, "measured step: 6.000 ms");
    /* the two waits (rank 0's B0 from 1.5 ms, rank 1's F0 from 0), and the legend's sample */
    PP_CHECK_INT(count_of(text, "height=\"4\" fill=\"#9a9a9a\""), 3);
    free(text);
    text = NULL;

    /* alone, without a simulation: one panel */
    mem = open_memstream(&text, &len);
    PP_CHECK_OK(pp_timeline_write_svg(t, 2, NULL, mem, &err), &err);
    fclose(mem);
    PP_CHECK_INT(count_of(text, "class=\"panel\""), 1);
    free(text);
    text = NULL;

    /* a simulation of another schedule, or one with no schedule to check it against */
    PP_CHECK_OK(pp_simulate(other, NULL, &wrong, &err), &err);
    mem = open_memstream(&text, &len);
    PP_CHECK_FAILS(pp_timeline_write_svg(t, 2, wrong, mem, &err), &err, PP_EINVAL, "sim: computed for pp=4");
    t[0].schedule = t[1].schedule = NULL;
    PP_CHECK_FAILS(pp_timeline_write_svg(t, 2, sim, mem, &err), &err, PP_EINVAL, "no timeline names its schedule");
    PP_CHECK_FAILS(pp_timeline_write_svg(t, 2, NULL, NULL, &err), &err, PP_EINVAL, "out");
    fclose(mem);
done:
    free(text);
    pp_sim_result_free(sim);
    pp_sim_result_free(wrong);
    pp_schedule_free(s);
    pp_schedule_free(other);
}

/* --- the CSV forms of PyTorch's runtime ------------------------------------------------------ */

static void torch_compute_only_csv_is_the_compute_order(void)
{
    /* 1F1B pp 2 mb 4: rank 0 warms up with one forward, then alternates */
    pp_schedule *s = lowered(PP_1F1B, 2, 0, 4);
    char *csv = s ? torch_csv_of(s, PP_TORCH_COMPUTE_ONLY) : NULL;
    if (csv) PP_CHECK_STR(csv, "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n");
    free(csv);
    pp_schedule_free(s);
}

static void torch_compute_comms_csv_has_no_empty_cell_and_reduces_each_stage_after_its_last_backward(void)
{
    /* pipepar's own CSV of this schedule has an empty cell between rank 0's 0SEND_F1 and 0RECV_B0
     * (two groups); PyTorch's form drops it and adds <stage>REDUCE_GRAD after each stage's fourth
     * backward, behind the send that follows it (rank 1's 1SEND_B3) */
    pp_schedule *s = lowered(PP_1F1B, 2, 0, 4);
    char *csv = s ? torch_csv_of(s, PP_TORCH_COMPUTE_COMMS) : NULL;
    if (csv)
        PP_CHECK_STR(csv, "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0F2,0SEND_F2,0RECV_B1,0B1,0F3,0SEND_F3,0RECV_B2,0B2,"
                          "0RECV_B3,0B3,0REDUCE_GRAD\n"
                          "1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1RECV_F2,1SEND_B1,1F2,1B2,1RECV_F3,1SEND_B2,1F3,"
                          "1B3,1SEND_B3,1REDUCE_GRAD\n");
    free(csv);
    pp_schedule_free(s);
}

/* Checks one kind's two PyTorch forms: no empty cell; one REDUCE_GRAD per stage, in its rank's row,
 * after the stage's last B or W; read back, the same actions in the same order (each transfer its
 * own group, as PyTorch posts them) and a valid schedule. */
static void check_torch_forms(pp_schedule *s)
{
    char *comms = torch_csv_of(s, PP_TORCH_COMPUTE_COMMS), *only = torch_csv_of(s, PP_TORCH_COMPUTE_ONLY);
    pp_schedule *back = NULL;
    pp_error err;
    const char *name = pp_schedule_kind_name(s->kind);
    int r, i, st;
    if (!comms || !only) goto done;
    PP_CHECK_MSG(!strstr(comms, ",,") && !strstr(comms, "\n,") && !strstr(comms, ",\n") && comms[0] != ',',
                 "%s pp=%d: an empty cell", name, s->pp);
    PP_CHECK_INT(count_of(comms, "REDUCE_GRAD"), s->num_stages);
    PP_CHECK(strstr(only, "REDUCE_GRAD") == NULL && strstr(only, "SEND") == NULL && strstr(only, "RECV") == NULL);
    for (st = 0; st < s->num_stages; st++) {
        /* the row of the stage's rank holds its REDUCE_GRAD, after its last B/W cell */
        char cell[32];
        const char *row = comms, *hit, *nl;
        int rank = pp_stage_rank(s, st), k, last = -1;
        for (k = 0; k < rank && row; k++) row = strchr(row, '\n') ? strchr(row, '\n') + 1 : NULL;
        if (!row) { PP_CHECK(row != NULL); continue; }
        nl = strchr(row, '\n');
        snprintf(cell, sizeof cell, "%dREDUCE_GRAD", st);
        hit = find_cell(row, nl, cell);
        PP_CHECK_MSG(hit != NULL, "%s pp=%d: %s not in rank %d's row", name, s->pp, cell, rank);
        for (i = 0; i < s->length[rank]; i++) {
            pp_action a = s->actions[rank][i];
            if (((a.op == PP_OP_B || a.op == PP_OP_W) && a.stage == st) || (a.op == PP_OP_FB && a.stage2 == st)) last = i;
        }
        if (last >= 0 && hit) {
            char text[64];
            const char *at;
            pp_action_format(s->actions[rank][last], text, sizeof text);
            at = find_cell(row, nl, text);   /* every action appears once in a row */
            PP_CHECK_MSG(at && at < hit, "%s pp=%d: %s before the last backward %s", name, s->pp, cell, text);
        }
    }
    PP_CHECK_OK(pp_schedule_read_csv(comms, strlen(comms), &back, &err), &err);
    if (back) {
        PP_CHECK(back->lowered || s->pp == 1);   /* one rank sends nothing */
        for (r = 0; r < s->pp; r++) {
            PP_CHECK_INT(back->length[r], s->length[r]);
            for (i = 0; i < s->length[r] && back->length[r] == s->length[r]; i++) {
                pp_action a = s->actions[r][i], b = back->actions[r][i];
                PP_CHECK(a.op == b.op && a.stage == b.stage && a.mb == b.mb);
                PP_CHECK_INT(pp_schedule_group_end(back, r, i), i + 1);
            }
        }
        PP_CHECK_MSG(pp_schedule_validate(back, &err) == PP_OK, "%s pp=%d read back: %s", name, s->pp, err.message);
        pp_schedule_free(back);
        back = NULL;
    }
    PP_CHECK_OK(pp_schedule_read_csv(only, strlen(only), &back, &err), &err);
    if (back) {
        PP_CHECK(!back->lowered);
        PP_CHECK_MSG(pp_schedule_validate(back, &err) == PP_OK, "%s pp=%d compute-only read back: %s", name, s->pp,
                     err.message);
    }
done:
    pp_schedule_free(back);
    free(comms);
    free(only);
}

static void torch_forms_of_every_kind_read_back_to_the_same_programs(void)
{
    static const pp_schedule_kind kinds[] = { PP_GPIPE, PP_1F1B, PP_INTERLEAVED_1F1B, PP_LOOPED_BFS, PP_ZB_H1,
                                              PP_ZB_H2, PP_ZBV, PP_DUALPIPEV, PP_INTERLEAVED_ZB };
    static const int pps[] = { 1, 2, 4 }, mbs[] = { 1, 3, 8 };
    size_t k, p, m;
    for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (p = 0; p < 3; p++)
            for (m = 0; m < 3; m++) {
                int vpp = kinds[k] == PP_INTERLEAVED_1F1B || kinds[k] == PP_LOOPED_BFS || kinds[k] == PP_INTERLEAVED_ZB ? 2 : 0;
                pp_schedule *s;
                if (kinds[k] == PP_INTERLEAVED_1F1B && mbs[m] % pps[p]) continue;   /* Megatron's rule */
                s = lowered(kinds[k], pps[p], vpp, mbs[m]);
                if (s) check_torch_forms(s);
                pp_schedule_free(s);
            }
}

static void torch_csv_of_an_unlowered_schedule_is_lowered_on_a_copy(void)
{
    pp_schedule *a = lowered(PP_ZBV, 2, 0, 4), *b = NULL;
    pp_schedule_config cfg;
    pp_error err;
    char *x, *y;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = PP_ZBV; cfg.pp = 2; cfg.mb = 4;
    PP_CHECK_OK(pp_schedule_build(&cfg, &b, &err), &err);
    if (!a || !b) goto done;
    x = torch_csv_of(a, PP_TORCH_COMPUTE_COMMS);
    y = torch_csv_of(b, PP_TORCH_COMPUTE_COMMS);
    if (x && y) PP_CHECK_STR(y, x);
    PP_CHECK(!b->lowered);
    free(x); free(y);
done:
    pp_schedule_free(a);
    pp_schedule_free(b);
}

static void torch_csv_refuses_dualpipe_and_an_unknown_format(void)
{
    pp_schedule *s = lowered(PP_DUALPIPE, 2, 0, 4), *z = lowered(PP_ZBV, 2, 0, 4);
    pp_error err;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (s) PP_CHECK_FAILS(pp_schedule_write_torch_csv(s, PP_TORCH_COMPUTE_ONLY, mem, &err), &err, PP_EINVAL,
                          "dualpipe's two routes");
    if (z) PP_CHECK_FAILS(pp_schedule_write_torch_csv(z, (pp_torch_csv_format)7, mem, &err), &err, PP_EINVAL, "format=7");
    PP_CHECK_FAILS(pp_schedule_write_torch_csv(NULL, PP_TORCH_COMPUTE_ONLY, mem, &err), &err, PP_EINVAL, "schedule");
    fclose(mem);
    PP_CHECK_INT(len, 0);
    free(text);
    pp_schedule_free(s);
    pp_schedule_free(z);
}

static void csv_reader_skips_pytorch_bookkeeping_cells(void)
{
    /* PyTorch's own compute_comms dump: FSDP's UNSHARD/RESHARD and REDUCE_GRAD among the actions */
    static const char text[] = "0UNSHARD,0F0,0SEND_F0,0RECV_B0,0B0,0REDUCE_GRAD,0RESHARD\n"
                               "1UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1REDUCE_GRAD,1RESHARD\n";
    pp_schedule *s = NULL;
    pp_error err;
    PP_CHECK_OK(pp_schedule_read_csv(text, strlen(text), &s, &err), &err);
    if (!s) return;
    PP_CHECK_INT(s->length[0], 4);
    PP_CHECK_INT(s->length[1], 4);
    PP_CHECK_OK(pp_schedule_validate(s, &err), &err);
    pp_schedule_free(s);
}

/* Each writer, with its k-th allocation failing for every k until it succeeds: PP_ENOMEM every
 * time before, nothing leaked (the sanitizer run checks) and no partial output. */
static void writers_fail_cleanly_when_memory_runs_out(void)
{
    pp_schedule_config cfg;
    pp_schedule *unlowered = NULL, *zbv = lowered(PP_ZBV, 2, 0, 4), *one = lowered(PP_1F1B, 2, 0, 1);
    pp_sim_result *sim = NULL;
    pp_timeline t[2];
    double times[2][3][16];
    pp_error err;
    int which;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = PP_ZBV; cfg.pp = 2; cfg.mb = 4;
    PP_CHECK_OK(pp_schedule_build(&cfg, &unlowered, &err), &err);   /* the torch writer lowers a copy */
    if (!unlowered || !zbv || !one) goto done;
    fake_timelines(one, t, times);
    PP_CHECK_OK(pp_simulate(one, NULL, &sim, &err), &err);
    for (which = 0; which < 3; which++) {
        long k;
        int failures = 0, written = 0;
        for (k = 0; k < 100000 && !written; k++) {
            char *text = NULL;
            size_t len = 0;
            FILE *mem = open_memstream(&text, &len);
            pp_status st;
            pp_test_alloc_countdown = k;
            st = which == 0 ? pp_schedule_write_torch_csv(unlowered, PP_TORCH_COMPUTE_COMMS, mem, &err)
               : which == 1 ? pp_schedule_write_svg(zbv, NULL, mem, &err)
                            : pp_timeline_write_svg(t, 2, sim, mem, &err);
            pp_test_alloc_countdown = -1;
            fclose(mem);
            if (st == PP_OK) {
                written = 1;
            } else {
                failures++;
                PP_CHECK_MSG(st == PP_ENOMEM, "writer %d, allocation %ld failing: %s: %s", which, k,
                             pp_status_name(st), err.message);
                PP_CHECK_INT(len, 0);
            }
            free(text);
        }
        PP_CHECK_MSG(written && failures > 0, "writer %d: %d failures, written %d", which, failures, written);
    }
done:
    pp_sim_result_free(sim);
    pp_schedule_free(unlowered);
    pp_schedule_free(zbv);
    pp_schedule_free(one);
}

const pp_test_case pp_suite_draw[] = {
    PP_TEST(xml_check_finds_what_a_parser_would_refuse),
    PP_TEST(svg_is_well_formed_for_every_kind),
    PP_TEST(svg_title_names_the_kind_and_the_simulated_bubble),
    PP_TEST(svg_time_axis_ticks_every_nice_step_up_to_the_step),
    PP_TEST(svg_labels_every_box_of_1f1b_with_its_action),
    PP_TEST(svg_labels_every_box_of_zbv_and_of_a_long_interleaved_schedule),
    PP_TEST(svg_draws_an_overlapped_f_and_b_as_two_halves),
    PP_TEST(measured_svg_draws_the_step_in_ms_below_its_simulation),
    PP_TEST(torch_compute_only_csv_is_the_compute_order),
    PP_TEST(torch_compute_comms_csv_has_no_empty_cell_and_reduces_each_stage_after_its_last_backward),
    PP_TEST(torch_forms_of_every_kind_read_back_to_the_same_programs),
    PP_TEST(torch_csv_of_an_unlowered_schedule_is_lowered_on_a_copy),
    PP_TEST(torch_csv_refuses_dualpipe_and_an_unknown_format),
    PP_TEST(csv_reader_skips_pytorch_bookkeeping_cells),
    PP_TEST(writers_fail_cleanly_when_memory_runs_out),
    { 0, 0 }
};
