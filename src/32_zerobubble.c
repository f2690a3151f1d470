
/* ============================================================================================
 * >>zerobubble (implementation): ZB-H1, ZB-H2, ZB-V, DualPipeV, interleaved zero bubble.
 * ============================================================================================ */

static pp_status pp__build_zero_bubble(const pp_schedule_config *cfg, pp_schedule *s, pp_error *err)
{
    (void)s;
    return pp__fail(err, PP_EUNSUPPORTED, "kind %s: not built yet in this version",
                    pp_schedule_kind_name(cfg->kind));
}
