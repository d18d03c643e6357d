#!/usr/bin/env bash
# The full MaskBench development subset (3,479 schemas) on the Llama 3 vocabulary, all four
# backends, as recorded in bench/README.md ("MaskBench, full development subset").
#
# Resumable: every per-schema result is streamed to $CKPT as it finishes; rerunning this script
# with the same file skips what it already holds, so a stopped run (a session end, a reboot)
# continues where it was. Outputs go to $OUT/maskbench-full* (default bench/results).
#
#   OUTLINES_WALL_S  time box for the outlines-core pass, seconds (default: no box). outlines-core
#                    builds its whole token index at compile time and hits the 10 s limit on about
#                    half of the schemas, so its pass needs ~5 core-hours here; the boxed pass runs a
#                    seeded uniform random order, so what it has done is a uniform sample.
#                    Each invocation gets a fresh box (a rerun adds another box of items); rerun
#                    without it to finish the pass.
#   JOBS             worker slots (default 2 = this machine's cores)
#   CORPUS, CKPT, OUT  corpus folder, checkpoint file, output folder; relative paths are taken
#                    from the repository root (the script cd's there first)
set -euo pipefail
cd "$(dirname "$0")/.."
SG=${SG:-.venv/bin/structgate}
CORPUS=${CORPUS:-../shared/data/maskbench}
CKPT=${CKPT:-.bench-runs/maskbench-full.ckpt.jsonl}
OUT=${OUT:-bench/results}
JOBS=${JOBS:-2}
COMMON=(maskbench --corpus "$CORPUS" --tokenizer llama3 --timeout-s 10 --jobs "$JOBS" --checkpoint "$CKPT"
        --no-progress --quiet)
mkdir -p "$(dirname "$CKPT")" "$OUT"

# 1. native, llguidance, XGrammar: every schema, file order
"$SG" bench "${COMMON[@]}" --backends native,structgate-llguidance,structgate-xgrammar

# 2. outlines-core: seeded uniform order, optionally time-boxed
BOX=()
[ -n "${OUTLINES_WALL_S:-}" ] && BOX=(--max-wall-s "$OUTLINES_WALL_S")
"$SG" bench "${COMMON[@]}" --backends structgate-outlines-core --shuffle 20261130 "${BOX[@]}"

# 3. reports from the checkpoint alone (--max-wall-s 0 runs nothing):
#    a. all four on every schema each has run
"$SG" bench "${COMMON[@]}" --backends native,structgate-llguidance,structgate-xgrammar,structgate-outlines-core \
    --max-wall-s 0 --json "$OUT/maskbench-full.json" --markdown "$OUT/maskbench-full.md" \
    --plot "$OUT/maskbench-full.png" --details "$OUT/maskbench-full.details.jsonl"
gzip -f "$OUT/maskbench-full.details.jsonl"  # per schema × backend outcome, ~1 MB compressed
#    b. with a time box: all four on the same schemas (those outlines-core has run)
if [ -n "${OUTLINES_WALL_S:-}" ]; then
  "$SG" bench "${COMMON[@]}" --backends native,structgate-llguidance,structgate-xgrammar,structgate-outlines-core \
      --max-wall-s 0 --common-items --json "$OUT/maskbench-full-common.json" \
      --markdown "$OUT/maskbench-full-common.md" --plot "$OUT/maskbench-full-common.png"
fi
