/* pipepar — the command-line face of pipepar.h.
 *
 *     build/pipepar schedule --kind interleaved --pp 4 --vpp 2 --mb 8 --format text
 *     build/pipepar simulate --kind 1f1b --pp 4 --mb 8 --f 1 --b 2
 *     build/pipepar help
 *     build/pipepar --version
 *
 * Each subcommand lives in its own examples/cli_*.c; the Makefile lists them in
 * build/cli_commands.gen.h as PP_CLI_COMMANDS(X). This file dispatches, then flushes and closes
 * stdout and checks it, so a failed write (a full disk) exits 1 whatever the subcommand.
 * Exit codes and flag conventions: examples/cli.h.                                           */
#define PIPEPAR_IMPLEMENTATION
#include "cli.h"
#include "cli_commands.gen.h"

#define PP__DECLARE_COMMAND(name) \
    int pp_cli_##name(int argc, char **argv); extern const char pp_cli_##name##_summary[];
PP_CLI_COMMANDS(PP__DECLARE_COMMAND)

static const struct { const char *name; int (*run)(int, char **); const char *summary; } commands[] = {
    { "help", NULL, "this list" },
#define PP__LIST_COMMAND(name) { #name, pp_cli_##name, pp_cli_##name##_summary },
    PP_CLI_COMMANDS(PP__LIST_COMMAND)
};

static void print_help(FILE *out)
{
    size_t i;
    fprintf(out, "usage: pipepar <command> [flags]     (pipepar help <command>, or <command> --help, for its flags)\n\n");
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n  --version  pipepar's version (PIPEPAR_VERSION_STRING of pipepar.h)\n"
                 "\nFlags: --flag value or --flag=value, each given once. Exit 0: done; 2: the request is refused (one\n"
                 "line on stderr says which flag or input and the rule); 1: it failed (out of memory, a read or write\n"
                 "error), or search found no schedule under --max-mem.\n");
}

/* The command line's exit code, before stdout is checked. */
static int dispatch(int argc, char **argv)
{
    size_t i;
    if (argc < 2) { print_help(stderr); return 2; }
    if (!strcmp(argv[1], "--version")) {
        if (argc > 2) return cli_usage_error("--version: takes no arguments, got '%s'", cli_short(argv[2]));
        printf("pipepar %s\n", PIPEPAR_VERSION_STRING);
        return 0;
    }
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        if (argc > 2 && !strcmp(argv[1], "help")) {   /* pipepar help COMMAND: that command's --help */
            char *sub[3];
            sub[0] = argv[2]; sub[1] = (char *)"--help"; sub[2] = NULL;
            if (!strcmp(argv[2], "help")) { print_help(stdout); return 0; }
            for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
                if (commands[i].run && strcmp(argv[2], commands[i].name) == 0) return commands[i].run(2, sub);
            return cli_usage_error("help: unknown command '%s' (try 'pipepar help')", cli_short(argv[2]));
        }
        print_help(stdout);
        return 0;
    }
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].run && strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    return cli_usage_error("unknown command '%s' (try 'pipepar help')", cli_short(argv[1]));
}

int main(int argc, char **argv)
{
    int rc = dispatch(argc, argv);
    /* stdio reports a full disk only when the buffer goes out: at the latest here. A command
     * that failed has said why already; one that succeeded fails now if its output did not. */
    if (rc == 0) rc = cli_close_output(stdout, "stdout");
    else fclose(stdout);
    return rc;
}
