/* fuzz_mimo_module.c — libFuzzer harness for pp_mimo_module_parse (pipepar.h >>mimo) and what
 * `pipepar mimo --grid NAME:key=value,... [--grid ...] [--world W] [--language NAME] [--mb M]
 * [--schedule K]` does with the modules (examples/cli_mimo.c): pp_mimo_init, the bridges, the
 * rank roles and the pipeline of a step.
 *
 * Input: one line per flag (blank lines are skipped). A line "world=W", "language=NAME", "mb=M" or "schedule=KIND" sets
 * that flag; any other line is one --grid module ("vision:offset=0,tp=1,pp=1,dp=2"), at most
 * PP_MIMO_MAX_MODULES of them. Every module line must parse; then, when pp_mimo_init accepts
 * them: the modules lie inside the world, every rank's role names modules that hold it, each
 * encoder's bridge links agree in count, and for worlds up to 64 ranks (and mb up to 16) the
 * pipeline is built, its programs checked, and every stage maps back to a module.
 *
 *   clang -std=c99 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=all tests/fuzz/fuzz_mimo_module.c tests/fuzz/fuzz_impl.c -o build/fuzz_mimo_module -lm -lpthread
 *   build/fuzz_mimo_module -dict=tests/fuzz/grid.dict tests/fuzz/corpus/mimo_module
 * Replay without clang: see replay_main.c. */
#include "../../pipepar.h"
#include "fuzz_common.h"

#define MAX_LINES 16

static void check_mimo(const pp_mimo *m, int mb, pp_schedule_kind kind)
{
    int k, r, limit = m->world < 256 ? m->world : 256;
    pp_error err;
    pp_mimo_pipeline_config pc;
    pp_mimo_pipeline *pl = NULL;
    pp_status st;
    FUZZ_CHECK(m->world >= 1 && m->num_modules >= 1 && m->language >= 0 && m->language < m->num_modules);
    for (k = 0; k < m->num_modules; k++) {
        const pp_mimo_module *mod = &m->modules[k];
        FUZZ_CHECK(mod->offset >= 0 && mod->size >= 1 && (long long)mod->offset + mod->size <= m->world);
        FUZZ_CHECK(pp_mimo_find(m, mod->name) == k);
        FUZZ_CHECK((long long)mod->grid.size[0] * mod->grid.size[1] * mod->grid.size[2] * mod->grid.size[3] ==
                   mod->size);
    }
    for (r = 0; r < limit; r++) {
        pp_mimo_role role;
        int i;
        FUZZ_CHECK(pp_mimo_rank_role(m, r, &role, &err) == PP_OK);
        FUZZ_CHECK(role.num_modules >= 1);
        for (i = 0; i < role.num_modules; i++) {
            const pp_mimo_module *mod = &m->modules[role.modules[i].module];
            FUZZ_CHECK(r >= mod->offset && r < mod->offset + mod->size);
            FUZZ_CHECK(pp_mimo_role_module(&role, role.modules[i].module) == &role.modules[i]);
            FUZZ_CHECK(pp_mimo_rank(m, role.modules[i].module, role.modules[i].coord) == r);
        }
        for (k = 0; k < m->num_modules; k++) {
            int color, key;
            FUZZ_CHECK(pp_mimo_group_color(m, k, r, PP_GROUP_DP, &color, &key, &err) == PP_OK);
            if (k == m->language) continue;
            {
                int op, count = -1;
                for (op = PP_OP_SEND_F; op <= PP_OP_RECV_B; op++) {
                    pp_mimo_link links[64];
                    if (pp_mimo_bridge_links(m, k, r, op, NULL, 0, &count, &err) != PP_OK) break;
                    FUZZ_CHECK(count >= 0);
                    if (count <= 64) {
                        int again = -1;
                        FUZZ_CHECK(pp_mimo_bridge_links(m, k, r, op, links, 64, &again, &err) == PP_OK);
                        FUZZ_CHECK(again == count);
                    }
                }
            }
        }
    }
    {
        pp_mimo_role role;
        FUZZ_CHECK(pp_mimo_rank_role(m, m->world, &role, NULL) != PP_OK);
    }
    if (m->world > 64 || mb > 16) return;
    memset(&pc, 0, sizeof pc);
    pc.mb = mb; pc.kind = kind;
    st = pp_mimo_pipeline_create(m, &pc, &pl, &err);
    FUZZ_CHECK(err.status == st);
    if (st == PP_OK) {
        int s, total = 0;
        for (s = 0; s < pl->schedule->pp; s++) {
            int mod = -1, mst = -1;
            FUZZ_CHECK(pp_mimo_pipeline_stage(pl, s, &mod, &mst, &err) == PP_OK);
            FUZZ_CHECK(mod >= 0 && mod < m->num_modules && mst >= 0);
        }
        for (r = 0; r < m->world; r++) {
            char txt[160];
            int i;
            FUZZ_CHECK(pp_mimo_pipeline_rank(pl, r) >= -1);
            for (i = 0; i < pl->programs->length[r]; i++)
                FUZZ_CHECK(pp_mimo_op_format(&pl->mimo, pl->programs->ops[r][i], txt, sizeof txt) >= 0);
            total += pl->programs->length[r];
        }
        FUZZ_CHECK(pp_mimo_check(pl->programs, &err) == PP_OK);
        (void)total;
    } else {
        FUZZ_CHECK(pl == NULL);
    }
    pp_mimo_pipeline_free(pl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size), *line[MAX_LINES];
    pp_mimo_module_config mods[PP_MIMO_MAX_MODULES];
    pp_mimo_config cfg;
    pp_mimo m;
    pp_error err;
    pp_status st;
    pp_schedule_kind kind = PP_1F1B;
    int nl, i, n = 0, mb = 4;
    memset(&cfg, 0, sizeof cfg);
    memset(line, 0, sizeof line);
    nl = fuzz_lines(text, line, MAX_LINES);
    for (i = 0; i < nl; i++) {
        const char *l = line[i];
        if (!*l) continue;                                  /* blank lines (a final newline) */
        if (!strncmp(l, "world=", 6)) { cfg.world = (int)fuzz_key_long(l, "world=", 0, -2, 1 << 25); continue; }
        if (!strncmp(l, "mb=", 3)) { mb = (int)fuzz_key_long(l, "mb=", 4, 1, 1 << 16); continue; }
        if (!strncmp(l, "language=", 9)) { cfg.language = l + 9; continue; }
        if (!strncmp(l, "schedule=", 9)) {
            if (pp_schedule_kind_parse(l + 9, &kind, &err) != PP_OK) goto out;
            if (kind == PP_ZBV || kind == PP_DUALPIPEV) goto out;   /* the CLI refuses them */
            continue;
        }
        if (n == PP_MIMO_MAX_MODULES) goto out;
        st = pp_mimo_module_parse(l, &mods[n], &err);
        FUZZ_CHECK(err.status == st);
        if (st != PP_OK) goto out;
        FUZZ_CHECK(memchr(mods[n].name, '\0', PP_MIMO_NAME_SIZE) && mods[n].name[0]);
        FUZZ_CHECK(memchr(mods[n].order, '\0', PP_MIMO_ORDER_SIZE) != NULL);
        n++;
    }
    if (n == 0) goto out;
    cfg.num_modules = n;
    cfg.modules = mods;
    st = pp_mimo_init(&cfg, &m, &err);
    FUZZ_CHECK(err.status == st);
    if (st == PP_OK) check_mimo(&m, mb, kind);
out:
    free(text);
    return 0;
}
