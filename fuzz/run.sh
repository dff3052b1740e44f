#!/usr/bin/env bash
# Runs the fuzz targets, each for a bounded time, starting from its kept corpus.
#
#   fuzz/run.sh                       every target, 60 s each
#   FUZZ_TIME=600 fuzz/run.sh taskfile plan_patch
#
# Environment:
#   FUZZ_TIME       seconds per target (default 60)
#   FUZZ_SANITIZER  address (default), leak, memory, thread or none
#   FUZZ_ARGS       more libFuzzer flags, e.g. "-jobs=2 -workers=2"
#
# Seeds are read from corpus/<target>/ (committed, read-only here); what a run learns goes to
# target/corpus/<target>/ (ignored by git, kept between runs). A crash leaves its input in
# artifacts/<target>/ and makes the script exit non-zero after the other targets ran; see
# docs/fuzzing.md for turning it into a regression test.
set -euo pipefail
cd "$(dirname "$0")"

time_per_target=${FUZZ_TIME:-60}
sanitizer=${FUZZ_SANITIZER:-address}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi
# cargo-fuzz passes nightly-only compiler flags (-Zsanitizer, -Cpasses=sancov-module). The
# stable compiler accepts them with RUSTC_BOOTSTRAP=1, so no nightly toolchain is needed; the
# project itself never builds with this.
export RUSTC_BOOTSTRAP=1

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

# One build of every target first, so a compile error shows at once and not in a log.
cargo fuzz build --sanitizer "$sanitizer"

mkdir -p target/logs
failed=()
for t in "${targets[@]}"; do
    mkdir -p "target/corpus/$t" "corpus/$t"
    log="target/logs/$t.log"
    echo "== $t (${time_per_target}s)" >&2
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
    if cargo fuzz run --sanitizer "$sanitizer" "$t" "target/corpus/$t" "corpus/$t" -- \
        -max_total_time="$time_per_target" -timeout=10 -print_final_stats=1 ${FUZZ_ARGS:-} \
        >"$log" 2>&1; then
        status=ok
    else
        status=FAILED
        failed+=("$t")
    fi
    runs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1 || true)
    echo "$t: $status ${runs:+($runs(s))}" >&2
    if [ "$status" = FAILED ]; then
        grep -E 'panicked at|ERROR: libFuzzer|SUMMARY|Test unit written' "$log" | head -8 >&2 || true
        echo "   full log: fuzz/$log" >&2
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "failed: ${failed[*]}" >&2
    exit 1
fi
