/* pipepar — the command-line face of pipepar.h.
 *
 *     build/pipepar schedule --kind interleaved --pp 4 --vpp 2 --mb 8 --format text
 *     build/pipepar simulate --kind 1f1b --pp 4 --mb 8 --f 1 --b 2
 *     build/pipepar help
 *
 * Each subcommand lives in its own examples/cli_*.c; the Makefile lists them in
 * build/cli_commands.gen.h as PP_CLI_COMMANDS(X). This file only dispatches.               */
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
}

int main(int argc, char **argv)
{
    size_t i;
    if (argc < 2) { print_help(stderr); return 2; }
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        if (argc > 2 && !strcmp(argv[1], "help")) {   /* pipepar help COMMAND: that command's --help */
            char *sub[3];
            sub[0] = argv[2]; sub[1] = (char *)"--help"; sub[2] = NULL;
            if (!strcmp(argv[2], "help")) { print_help(stdout); return 0; }
            for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
                if (commands[i].run && strcmp(argv[2], commands[i].name) == 0) return commands[i].run(2, sub);
            fprintf(stderr, "pipepar: help: unknown command '%s' (try 'pipepar help')\n", argv[2]);
            return 2;
        }
        print_help(stdout);
        return 0;
    }
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (commands[i].run && strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "pipepar: unknown command '%s' (try 'pipepar help')\n", argv[1]);
    return 2;
}
