#!/usr/bin/env bash
# A mutation study for developers (not part of .ci/run): applies each one-line bug of
# scripts/mutations.txt, one at a time, to a scratch copy of the repository, builds it,
# runs the narrowest tests that should catch it, and prints a caught/survived table.
# A survived mutation is a blind spot of the suite.
#
# Usage: bash scripts/mutate.sh [NAME_REGEX]      (default: every mutation)
# Scratch copy and build: $NDT_MUTATE_DIR (default /tmp/ndtrain-mutate), reused
# between runs (only changed files are rebuilt).
#
# Format of scripts/mutations.txt: one mutation per line, fields separated by " @@ ":
#   name | file | text to find (exactly once) | replacement | tests
# "\n" in the text or the replacement stands for a newline. tests is one or more
# space-separated BINARY:GTEST_FILTER, where BINARY is a test executable of the build
# (test_kernels, test_train, ...) or mpi2 / mpi4 for test_mpi under mpirun with 2 / 4 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
only="${1:-.}"
scratch="${NDT_MUTATE_DIR:-/tmp/ndtrain-mutate}"
tree="$scratch/tree"
build="$scratch/build"
mkdir -p "$tree"
# The tracked files of the working tree (with uncommitted edits), into the scratch tree;
# only those newer than the scratch copy, so unchanged files are not rebuilt.
git ls-files -z | xargs -0 cp -u -p --parents -t "$tree"
cmake -S "$tree" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
echo "mutate: building the unmutated tree in $build"
ninja -C "$build" >/dev/null

mpirun_flags=(--oversubscribe --bind-to none --allow-run-as-root -x OMP_NUM_THREADS=1)
# Runs BINARY:FILTER ... (stdin closed: mpirun would read the mutation list). Status 0:
# all passed; 1: one failed; 2: a filter selected no test (the list is wrong).
run_tests() {
  local spec binary filter log="$scratch/test.log"
  for spec in "$@"; do
    binary="${spec%%:*}"
    filter="${spec#*:}"
    case "$binary" in
      mpi2|mpi4)
        timeout 600 mpirun -np "${binary#mpi}" "${mpirun_flags[@]}" "$build/test_mpi" --gtest_filter="$filter" \
          </dev/null >"$log" 2>&1 || return 1 ;;
      *)
        OMP_NUM_THREADS=2 timeout 600 "$build/$binary" --gtest_filter="$filter" </dev/null >"$log" 2>&1 || return 1 ;;
    esac
    if grep -q "Running 0 tests" "$log"; then return 2; fi
  done
}

total=0; caught=0; survived=(); start=$(date +%s)
printf '%-34s %-9s %6s  %s\n' "mutation" "result" "secs" "tests"
while IFS= read -r line; do
  [[ -z "$line" || "$line" == \#* ]] && continue
  fields=()
  rest="$line"
  while [[ "$rest" == *" @@ "* ]]; do fields+=("${rest%% @@ *}"); rest="${rest#* @@ }"; done
  fields+=("$rest")
  if [ ${#fields[@]} -ne 5 ]; then echo "mutate: malformed line (5 fields expected): $line" >&2; exit 2; fi
  name="${fields[0]}"; file="${fields[1]}"; from="${fields[2]}"; to="${fields[3]}"; tests="${fields[4]}"
  [[ "$name" =~ $only ]] || continue
  total=$((total + 1))
  t0=$(date +%s)
  cp "$tree/$file" "$scratch/original"
  if ! FROM="$from" TO="$to" perl -0777 -i -pe '
        my ($f, $t) = ($ENV{FROM}, $ENV{TO}); s/\\n/\n/g for ($f, $t);
        my $n = () = /\Q$f\E/g; die "found $n times\n" if $n != 1; s/\Q$f\E/$t/;' "$tree/$file" 2>"$scratch/why"; then
    result="STALE ($(cat "$scratch/why"))"
  elif ! ninja -C "$build" >/dev/null 2>&1; then
    result="NO-BUILD"
  else
    status=0
    run_tests $tests || status=$?
    case $status in
      0) result="SURVIVED"; survived+=("$name") ;;
      2) result="NO-TESTS" ;;
      *) result="caught"; caught=$((caught + 1)) ;;
    esac
  fi
  cp "$scratch/original" "$tree/$file"
  printf '%-34s %-9s %6d  %s\n' "$name" "$result" $(( $(date +%s) - t0 )) "$tests"
done < scripts/mutations.txt
ninja -C "$build" >/dev/null  # leave the scratch build unmutated
echo "mutate: $caught of $total mutations caught in $(( $(date +%s) - start )) s"
if [ ${#survived[@]} -gt 0 ]; then echo "survived: ${survived[*]}"; fi
[ "$caught" -eq "$total" ]
