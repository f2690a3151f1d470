#!/usr/bin/env bash
# The pictures and PyTorch's CSV forms from the command line: every SVG parses as XML (python3's
# xml.etree) and holds the promised parts (time axis, box labels, legend, title with the bubble);
# the torch-compute-only / torch-compute-comms files have PyTorch's shape and read back valid.
. "$(dirname "$0")/cli_lib.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# check_svg FILE PANELS [some]: parses, has PANELS panels, each with an axis, a legend and every box
# labelled (with "some": a measured step's shortest boxes may be too narrow for any label)
check_svg() {
    python3 - "$1" "$2" "${3:-all}" <<'PY'
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
panels = [g for g in root.iter(ns + "g") if g.get("class") == "panel"]
assert len(panels) == int(sys.argv[2]), f"{len(panels)} panels"
for p in panels:
    kinds = {g.get("class") for g in p.iter(ns + "g")}
    assert {"axis", "legend"} <= kinds, kinds
    axis = next(g for g in p.iter(ns + "g") if g.get("class") == "axis")
    assert any((t.text or "").startswith("time (") for t in axis.iter(ns + "text")), "no axis caption"
    boxes = [g for g in p.iter(ns + "g") if g.find(ns + "title") is not None]
    labelled = [g for g in boxes if g.find(ns + "text") is not None]
    assert boxes and labelled, "no labelled box"
    assert sys.argv[3] == "some" or len(labelled) == len(boxes), f"{len(labelled)} of {len(boxes)} boxes labelled"
PY
}

for spec in "1f1b --pp 4 --mb 8" "zbv --pp 4 --mb 8" "interleaved --pp 8 --vpp 4 --mb 64" "dualpipev --pp 4 --mb 10" \
            "dualpipe --pp 4 --mb 8" "interleaved-zb --pp 4 --vpp 2 --mb 8"; do
    # shellcheck disable=SC2086
    if $P schedule --kind $spec --format svg --out "$T/s.svg" && check_svg "$T/s.svg" 1; then ok
    else bad "schedule --kind $spec --format svg: not a well-formed picture with axis, labels and legend"; fi
done
grep -q '>zbv, pp=4, vpp=2, mb=8: simulated bubble 5.9%<' <($P schedule --kind zbv --pp 4 --mb 8 --format svg) \
    && ok || bad "the zbv title lacks the kind or the bubble"

# a measured step, drawn under its simulation
if [ -x build/mlp_threads ] && build/mlp_threads --pp 2 --mb 4 --schedule 1f1b --steps 1 --svg "$T/m.svg" >/dev/null \
   && check_svg "$T/m.svg" 2 some && grep -q 'time (ms)' "$T/m.svg"; then ok; else bad "mlp_threads --svg"; fi

# PyTorch's forms: no empty cell where PyTorch refuses one, REDUCE_GRAD per stage, read back valid
for k in 1f1b gpipe "interleaved --vpp 2" "interleaved-zb --vpp 2" zb-h1 zbv dualpipev; do
    # shellcheck disable=SC2086
    $P schedule --kind $k --pp 4 --mb 8 --format torch-compute-comms --out "$T/c.csv" || { bad "$k: torch-compute-comms"; continue; }
    # shellcheck disable=SC2086
    $P schedule --kind $k --pp 4 --mb 8 --format torch-compute-only --out "$T/o.csv" || { bad "$k: torch-compute-only"; continue; }
    grep -qE '(^|,)(,|$)' "$T/c.csv" && bad "$k: compute_comms file has an empty cell" || ok
    stages=$(tr ',' '\n' < "$T/o.csv" | sed -nE 's/^\(?([0-9]+)F.*/\1/p' | sort -u | wc -l)
    [ "$(grep -o 'REDUCE_GRAD' "$T/c.csv" | wc -l)" -eq "$stages" ] && ok || bad "$k: not one REDUCE_GRAD per stage"
    grep -qE 'SEND|RECV|REDUCE' "$T/o.csv" && bad "$k: compute_only file has communication" || ok
    $P schedule --from-csv "$T/c.csv" --format text | grep -q 'valid' && ok || bad "$k: compute_comms does not read back"
    $P schedule --from-csv "$T/o.csv" --format text | grep -q 'valid' && ok || bad "$k: compute_only does not read back"
done
grep -q '(0F3;3B1)OVERLAP_F_B' <($P schedule --kind dualpipev --pp 2 --mb 4 --format torch-compute-only) \
    && ok || bad "dualpipev's FB is not PyTorch's OVERLAP_F_B"
expect_error 2 "dualpipe's two routes" schedule --kind dualpipe --pp 2 --mb 4 --format torch-compute-comms
expect_error 2 "torch-compute-only, torch-compute-comms" schedule --kind 1f1b --pp 2 --mb 4 --format torch-csv
finish
