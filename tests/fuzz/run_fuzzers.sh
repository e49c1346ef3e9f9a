#!/usr/bin/env bash
# Runs the libFuzzer targets built in build-fuzz/ (tests/fuzz/CMakeLists.txt) and prints one line per
# target and a summary table; exits non-zero when any target found a crash, leak, timeout or OOM.
#
#   tests/fuzz/run_fuzzers.sh                      # every target, FUZZ_SECONDS (600) each, FUZZ_JOBS (2) at a time
#   FUZZ_SECONDS=30 tests/fuzz/run_fuzzers.sh      # the smoke (make fuzz-smoke)
#   tests/fuzz/run_fuzzers.sh nifti safetensors    # some targets only
#
# Environment: FUZZ_BUILD_DIR (build-fuzz), FUZZ_SECONDS (600), FUZZ_JOBS (2), FUZZ_NICE (10), FUZZ_KEEP_GOING (0),
# FUZZ_SEED (unset: libFuzzer picks one; the smoke in CI uses 1, which repeats a run as far as threaded
# decoders let coverage repeat),
# FUZZ_OUT (FUZZ_BUILD_DIR/fuzz-out/<date-time>): per target, new corpus entries go to
# FUZZ_OUT/corpus/<target>/ (the committed tests/fuzz/corpus/<target>/ is only read), crash/leak/timeout
# reproducers to FUZZ_OUT/artifacts/<target>/ and libFuzzer's output to FUZZ_OUT/logs/<target>.log.
# A reproducer, once minimised (fuzz_<target> -minimize_crash=1 -runs=10000 <file>) and its cause fixed,
# belongs in tests/fuzz/corpus/<target>/ so that the replay test of the normal build covers it.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-600}"
jobs="${FUZZ_JOBS:-2}"
niceness="${FUZZ_NICE:-10}"
out="${FUZZ_OUT:-$build/fuzz-out/$(date +%Y%m%d-%H%M%S)}"

all_targets=(nifti nifti_gz metaimage_mha metaimage_mhd nrrd mgh dicom hdf5 tiff png
             experiment partition_dims device safetensors checkpoint_index label_descriptions tf_example)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")

# Largest input per target: a few times the largest seed, small enough to keep executions fast.
max_len() {
    case "$1" in
        nifti|nifti_gz|metaimage_mha|metaimage_mhd|nrrd|mgh|dicom|hdf5|tiff|png) echo 65536 ;;
        safetensors) echo 16384 ;;
        experiment|device|label_descriptions) echo 8192 ;;
        checkpoint_index) echo 4096 ;;
        partition_dims) echo 512 ;;
        *) echo 4096 ;;
    esac
}
# Formats sharing a dictionary.
dict_of() {
    case "$1" in
        nifti|nifti_gz) echo nifti ;;
        metaimage_mha|metaimage_mhd) echo metaimage ;;
        experiment|device|checkpoint_index|safetensors) echo "$1" ;;
        *) echo "$1" ;;
    esac
}

for t in "${targets[@]}"; do
    if [ ! -x "$build/tests/fuzz/fuzz_$t" ]; then
        echo "run_fuzzers: $build/tests/fuzz/fuzz_$t is missing; build it first (make fuzz builds everything)" >&2
        exit 2
    fi
done
mkdir -p "$out/logs" "$out/corpus" "$out/artifacts" "$out/bin"
# The runs use copies taken now: a rebuild during a long run (fork mode starts the binary again for
# each job) must not mix two versions of the code in one target's figures.
for t in "${targets[@]}"; do cp "$build/tests/fuzz/fuzz_$t" "$out/bin/"; done

# One target: run, then summarise its log into $out/results/<target>.
run_one() {
    local t="$1"
    local corpus="$out/corpus/$t" artifacts="$out/artifacts/$t/" log="$out/logs/$t.log"
    mkdir -p "$corpus" "$artifacts" "$out/results"
    local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")"
                -print_final_stats=1 -artifact_prefix="$artifacts")
    # FUZZ_KEEP_GOING=1: fork mode, the run goes on after a finding (each one still fails the target).
    [ -n "${FUZZ_SEED:-}" ] && args+=(-seed="$FUZZ_SEED")
    [ "${FUZZ_KEEP_GOING:-0}" = 1 ] && args+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
    # DICOM runs GDCM in a child process whose address space is capped (engine/io/dicom_io.cpp): a damaged
    # length makes GDCM ask for gigabytes there, which must fail as std::bad_alloc (allocator_may_return_null)
    # rather than trip libFuzzer's malloc limit, inherited by the child.
    local asan_options="detect_leaks=1:abort_on_error=0:handle_abort=1"
    # HDF5 too asks malloc for what a damaged size field says and reports the failure as an error (its
    # allocations go straight to malloc, which must return null here rather than abort).
    if [ "$t" = dicom ] || [ "$t" = hdf5 ]; then
        args+=(-malloc_limit_mb=1000000)
        asan_options="$asan_options:allocator_may_return_null=1"
    fi
    local dict="$here/dict/$(dict_of "$t").dict"
    [ -f "$dict" ] && args+=(-dict="$dict")
    local seeds="$here/corpus/$t"
    [ -d "$seeds" ] || seeds=""
    local start end status
    start=$(date +%s)
    ASAN_OPTIONS="${ASAN_OPTIONS:-$asan_options}" LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$here/lsan.supp}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE \
        nice -n "$niceness" "$out/bin/fuzz_$t" "${args[@]}" "$corpus" $seeds >"$log" 2>&1
    status=$?
    end=$(date +%s)
    local execs cov findings verdict
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
    [ -z "$execs" ] && execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')  # fork mode
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
    findings=$(find "$artifacts" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
                                                     -o -name 'oom-*' \) | wc -l)
    if [ "$status" -eq 0 ] && [ "$findings" -eq 0 ]; then verdict=ok; else
        local kinds
        kinds=$(find "$artifacts" -maxdepth 1 -type f -printf '%f\n' | sed 's/-.*//' | sort | uniq -c | awk '{printf "%s%s %s", sep, $1, $2; sep=", "}')
        verdict="FAILED (exit $status${kinds:+; $kinds}; $(grep -m1 -o 'ERROR: [A-Za-z]*: [^ ]*\|ERROR: libFuzzer: [a-z-]*\|fuzz finding: .*\|runtime error: .*' "$log" | head -c 120))"
        [ "$findings" -eq 0 ] && findings=1
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$((end - start))" "${execs:-?}" "${cov:-?}" "$findings" "$verdict" \
        >"$out/results/$t"
    printf 'fuzz %-17s %5ss  %10s execs  cov %6s  crashes %s  %s\n' "$t" "$((end - start))" "${execs:-?}" "${cov:-?}" \
        "$findings" "$verdict"
}

started=$(date +%s)
echo "Fuzzing ${#targets[@]} targets for ${seconds}s each, $jobs at a time; output in $out"
running=0
for t in "${targets[@]}"; do
    run_one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait

echo
printf '%-18s %8s %12s %9s %8s  %s\n' target seconds executions "cov edges" crashes verdict
failed=0
for t in "${targets[@]}"; do
    IFS=$'\t' read -r name secs execs cov findings verdict <"$out/results/$t"
    printf '%-18s %8s %12s %9s %8s  %s\n' "$name" "$secs" "$execs" "$cov" "$findings" "$verdict"
    [ "$verdict" = ok ] || failed=1
done
echo "${#targets[@]} targets in $(( $(date +%s) - started ))s"
if [ "$failed" -ne 0 ]; then
    # The report itself (sanitizer stack, the input's bytes) goes to this output too: a run in a throwaway
    # machine (CI, fresh-machine) keeps nothing else.
    for t in "${targets[@]}"; do
        IFS=$'\t' read -r _ _ _ _ _ verdict <"$out/results/$t"
        [ "$verdict" = ok ] && continue
        echo "---- $t: the finding's report ($out/logs/$t.log)" >&2
        grep -m1 -A60 -e '==[0-9]*==ERROR' -e 'ERROR: libFuzzer' -e 'fuzz finding:' -e 'runtime error:' "$out/logs/$t.log" >&2 || tail -40 "$out/logs/$t.log" >&2
        for artifact in "$out/artifacts/$t"/*; do
            [ -f "$artifact" ] || continue
            echo "---- $t: $(basename "$artifact") as base64" >&2
            head -c 65536 "$artifact" | base64 >&2
        done
    done
    echo "run_fuzzers: findings above; reproducers in $out/artifacts/<target>/, logs in $out/logs/" >&2
    exit 1
fi
