#!/bin/sh
# Builds pipepar.h from the section files in src/, in the order the data travels.
# Declarations (src/*.h) first, then the implementation (src/*.c) behind PIPEPAR_IMPLEMENTATION.
# Usage: sh tools/amalgamate.sh > pipepar.h      (make does this; CI checks the result is current)
set -e
cd "$(dirname "$0")/.."
cat src/00_top.h
echo '#ifndef PIPEPAR_H'
echo '#define PIPEPAR_H'
cat src/01_prelude.h
for f in src/[1-9]*.h; do
    [ "$f" = src/99_end.h ] && continue     # closes extern "C": last, once
    printf '\n'; cat "$f"
done
cat src/99_end.h
echo '#endif /* PIPEPAR_H */'
printf '\n'
echo '#ifdef PIPEPAR_IMPLEMENTATION'
echo '#ifndef PIPEPAR_IMPLEMENTATION_DONE'
echo '#define PIPEPAR_IMPLEMENTATION_DONE'
cat src/01_prelude.c
for f in src/[1-9]*.c; do printf '\n'; cat "$f"; done
echo '#endif /* PIPEPAR_IMPLEMENTATION_DONE */'
echo '#endif /* PIPEPAR_IMPLEMENTATION */'
