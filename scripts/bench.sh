#!/usr/bin/env bash
# ralph's benchmark suite: every case runs side by side with the baseline that sets its physical
# floor, in the same run, and the script prints a table of ratios against the targets.
#
#   scripts/bench.sh           full run (about half an hour); writes benches/RESULTS.md
#   scripts/bench.sh --quick   every case small, on the tests' build (under a minute once built);
#                              prints the table only: it checks the script, not the targets
#   scripts/bench.sh --peers   ralph beside the loop runners people use instead, installed from
#                              npm into a temporary prefix (scripts/bench-peers.sh); its table
#                              goes into benches/RESULTS.md's Peers section
#
# Needs bash, git, cargo, hyperfine and GNU time (/usr/bin/time); the last two are installed with
# apt-get when missing. Builds ralph in release (`cargo build --release --locked`; the quick mode
# uses the debug binary `cargo test` left, and builds one only when there is none), generates every
# fixture in a temporary directory (removed at the end) and uses fake agents only: shell scripts
# named `opencode` on PATH. No network. Exit status: 0 when the suite ran (targets missed or not;
# the table says which), 1 when it could not run.
set -euo pipefail

MODE=full
for arg in "$@"; do
  case "$arg" in
    --quick) MODE=quick ;;
    --peers) PEERS=1 ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown argument: $arg (use --quick, --peers or nothing)" >&2; exit 1 ;;
  esac
done
if [ -n "${PEERS:-}" ]; then
  # The other loop runners side by side (their own script: they are installed from npm).
  peer_args=()
  [ "$MODE" = quick ] && peer_args+=(--quick)
  exec bash "$(dirname "${BASH_SOURCE[0]}")/bench-peers.sh" "${peer_args[@]}"
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STARTED=$(date +%s)

say() { printf '\033[1m==> [%ss] %s\033[0m\n' "$(($(date +%s) - STARTED))" "$*" >&2; }
die() { echo "bench.sh: $*" >&2; exit 1; }

# --- Tools -----------------------------------------------------------------------------------------
missing=()
command -v hyperfine >/dev/null 2>&1 || missing+=(hyperfine)
[ -x /usr/bin/time ] || missing+=(time)
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || die "please install: ${missing[*]} (hyperfine, GNU time)"
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  say "installing ${missing[*]} with apt-get"
  if ! timeout 600 "${sudo[@]}" apt-get install -y -q "${missing[@]}" >/dev/null; then
    timeout 600 "${sudo[@]}" apt-get update -q >/dev/null
    timeout 600 "${sudo[@]}" apt-get install -y -q "${missing[@]}" >/dev/null
  fi
fi
command -v git >/dev/null 2>&1 || die "git is required"

# --- Sizes -----------------------------------------------------------------------------------------
if [ "$MODE" = full ]; then
  FILES=20000 MODIFIED=200 UNTRACKED=50 EDITS=20
  ITERS=20 LOOP_RUNS=5
  STREAM_MB=1024 STREAM_RUNS=5
  MEM_SIZES="10 100 1024" LINE_MB=100
  IDLE_S=30
  HISTORY=10000 TASKS=5000 STATUS_RUNS=30
  STARTUP_RUNS=500
else
  FILES=2000 MODIFIED=20 UNTRACKED=5 EDITS=5
  ITERS=5 LOOP_RUNS=3
  STREAM_MB=10 STREAM_RUNS=3
  MEM_SIZES="2 5 10" LINE_MB=10
  IDLE_S=3
  HISTORY=10000 TASKS=5000 STATUS_RUNS=10
  STARTUP_RUNS=100
  # Keep the heartbeat firing about as often relative to the idle time as in the full run.
  export RALPH_HEARTBEAT_MS=1000
fi

# --- Build -----------------------------------------------------------------------------------------
if [ "$MODE" = full ]; then
  say "building ralph (release)"
  (cd "$ROOT" && timeout 1800 cargo build --release --locked --quiet)
  RALPH="${CARGO_TARGET_DIR:-$ROOT/target}/release/ralph"
else
  # The binary `cargo test` left (built with the dev-dependencies' features, which `cargo
  # build` would build everything again without); built only when it is missing.
  RALPH="${CARGO_TARGET_DIR:-$ROOT/target}/debug/ralph"
  if [ ! -x "$RALPH" ]; then
    say "building ralph (dev profile)"
    (cd "$ROOT" && timeout 1800 cargo build --locked --quiet)
  fi
fi
[ -x "$RALPH" ] || die "no binary at $RALPH"
case "$RALPH" in /*) ;; *) RALPH="$ROOT/$RALPH" ;; esac
if pgrep -x rustc >/dev/null 2>&1 || pgrep -x cargo >/dev/null 2>&1; then
  echo "bench.sh: warning: cargo or rustc is running; the numbers will be noisy" >&2
fi

# --- Work directory and a clean, reproducible git environment ---------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ralph-bench.XXXXXX")
SHM_WORK=""
cleanup() { rm -rf "$WORK" ${SHM_WORK:+"$SHM_WORK"}; }
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$WORK/agents" "$WORK/data" "$WORK/csv" "$WORK/dirs"
LOG="$WORK/log"
: >"$LOG"
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
# Plain directories under $WORK must not find a repository above them.
bench_git_env "$WORK" "$WORK/dirs"
unset RALPH_OPENCODE_BINARY
PATH_BASE=$PATH

# A fake `opencode` named NAME whose body is the rest of the arguments.
agent() {
  local name=$1
  shift
  mkdir -p "$WORK/agents/$name"
  { echo '#!/bin/sh'; printf '%s\n' "$@"; } >"$WORK/agents/$name/opencode"
  chmod +x "$WORK/agents/$name/opencode"
}
# Runs the rest with agent NAME first on PATH.
with_agent() {
  local name=$1
  shift
  PATH="$WORK/agents/$name:$PATH_BASE" "$@"
}

# hyperfine, quietly, with one CSV per call; `mean NAME COMMAND` etc. read it back.
hf() {
  local csv=$1
  shift
  echo "+ hyperfine $*" >>"$LOG"
  if ! timeout 1800 hyperfine -N --style basic --export-csv "$WORK/csv/$csv.csv" "$@" >>"$LOG" 2>&1; then
    tail -n 30 "$LOG" >&2
    die "hyperfine failed ($csv)"
  fi
}
csv_field() { # CSV NAME COLUMN
  awk -F, -v name="$2" -v col="$3" 'NR > 1 && $1 == name { print $col; found = 1 } END { if (!found) exit 1 }' \
    "$WORK/csv/$1.csv" || die "no result for $2 in $1"
}
mean() { csv_field "$1" "$2" 2; }
cpu() { awk -v u="$(csv_field "$1" "$2" 5)" -v s="$(csv_field "$1" "$2" 6)" 'BEGIN { printf "%.6f", u + s }'; }
calc() { awk "BEGIN { printf \"%.${2:-2}f\", $1 }"; }
le() { awk "BEGIN { exit !(($1) <= ($2)) }"; }

ROWS=()
FAILED=()
row() { # CASE RALPH BASELINE RATIO TARGET RESULT
  ROWS+=("| $1 | $2 | $3 | $4 | $5 | $6 |")
  [ "$6" != "**miss**" ] || FAILED+=("$1")
}
verdict() { if le "$1" "$2"; then echo pass; else echo "**miss**"; fi; }
run_ralph_args="x --max-iterations 1 --pause 0 --no-commit"

# --- Case 1 and 2: what an iteration costs, without and with commits, small and large -----------
# A repository of N files in N/100 directories, committed, with M tracked files modified and U
# untracked ones in new directories.
make_repo() { # DIR FILES MODIFIED UNTRACKED
  mkdir -p "$1"
  (
    cd "$1"
    git init -q
    bench_files "$2"
    timeout 600 git add -A
    timeout 600 git commit -q -m "generated"
    awk -v n="$2" -v m="$3" 'BEGIN {
      for (i = 0; i < m; i++) { j = (i * 97) % n; f = sprintf("src/d%03d/f%05d.txt", int(j / 100), j); print "modified" >> f; close(f) }
    }'
    seq -f 'new/n%02g/sub' 0 9 | xargs mkdir -p
    awk -v u="$4" 'BEGIN {
      for (i = 0; i < u; i++) { f = sprintf("new/n%02d/sub/u%03d.txt", i % 10, i); print "untracked " i > f; close(f) }
    }'
    # Refresh the index once, as any git command the user runs would.
    timeout 600 git status --porcelain >/dev/null
  )
  local lines
  lines=$(cd "$1" && timeout 600 git status --porcelain -z --untracked-files=all | tr -cd '\0' | wc -c)
  [ "$lines" -eq $(($3 + $4)) ] || die "fixture: git status shows $lines paths in $1"
}
SMALL_FILES=200
say "case 1-2: generating repositories of $FILES and $SMALL_FILES files"
REPO="$WORK/dirs/repo"
SMALL="$WORK/dirs/small"
make_repo "$REPO" "$FILES" "$MODIFIED" "$UNTRACKED"
make_repo "$SMALL" "$SMALL_FILES" 2 5

agent instant 'echo "Nothing to do in this iteration."'
# Case 1: ralph's overhead per iteration with --no-commit = (the loop − ITERS × the agent alone) /
# ITERS, start-up included; the floor is the agent alone, run by nothing.
no_commit_overhead() { # NAME DIR → OVERHEAD (ms per iteration)
  cd "$2"
  with_agent instant hf "$1" --warmup 1 --runs "$LOOP_RUNS" -i --prepare "rm -rf .ralph" \
    -n ralph "'$RALPH' x --max-iterations $ITERS --pause 0 --no-commit --output-format text" \
    -n agent "opencode run x"
  cd "$WORK"
  OVERHEAD=$(calc "($(mean "$1" ralph) - $ITERS * $(mean "$1" agent)) / $ITERS * 1000")
}
say "case 1: --no-commit, $ITERS iterations, $FILES and $SMALL_FILES files"
no_commit_overhead case1-big "$REPO"
c1_big=$OVERHEAD
no_commit_overhead case1-small "$SMALL"
c1_small=$OVERHEAD
row "1. \`--no-commit\` overhead, $FILES files, $MODIFIED modified, $UNTRACKED untracked" \
  "$c1_big ms/iteration" "0 (the agent run by nothing)" "—" "≤ 5 ms" "$(verdict "$c1_big" 5)"
row "1. \`--no-commit\` overhead, $SMALL_FILES files" \
  "$c1_small ms/iteration" "0 (the agent run by nothing)" "—" "≤ 5 ms" "$(verdict "$c1_small" 5)"
# A stale index (every file touched since it was staged, as a copy or a build leaves it): the
# first iteration pays for it; the cost of each later one is (T(ITERS+1) − T(1)) / ITERS.
say "case 1: --no-commit with a stale index, $FILES files"
cd "$REPO"
printf '#!/bin/sh\nrm -rf .ralph && git ls-files -z | xargs -0 touch\n' >"$WORK/stale.sh"
with_agent instant hf case1-stale --warmup 1 --runs "$LOOP_RUNS" -i --prepare "sh '$WORK/stale.sh'" \
  -n many "'$RALPH' x --max-iterations $((ITERS + 1)) --pause 0 --no-commit --output-format text" \
  -n one "'$RALPH' x --max-iterations 1 --pause 0 --no-commit --output-format text" \
  -n agent "opencode run x"
cd "$WORK"
c1_stale=$(calc "(($(mean case1-stale many) - $(mean case1-stale one)) / $ITERS - $(mean case1-stale agent)) * 1000")
c1_first=$(calc "($(mean case1-stale one) - $(mean case1-stale agent)) * 1000" 1)
row "1. \`--no-commit\` overhead after the first iteration, $FILES files, stale index" \
  "$c1_stale ms/iteration" "0 (the first iteration, refresh included: $c1_first ms)" "—" "≤ 5 ms" \
  "$(verdict "$c1_stale" 5)"

# Case 2: the agent edits EDITS tracked files and adds two files in a new directory each iteration.
# The floor: a shell loop that runs the same agent, then `git add -A && git commit`.
cat >"$WORK/commit-loop" <<'EOF'
#!/bin/sh
i=0
while [ "$i" -lt "$1" ]; do
  i=$((i + 1))
  opencode run x >/dev/null
  git add -A && git commit -q -m "Shell iteration $i: work in progress"
done
EOF
chmod +x "$WORK/commit-loop"
commit_overhead() { # NAME DIR FILES → OVERHEAD, FLOOR (ms per iteration)
  local name=$1 dir=$2 files=$3 edit_list scratch f commits t_agent
  edit_list=$(awk -v n="$files" -v k="$EDITS" 'BEGIN {
    for (i = 0; i < k; i++) { j = int(i * n / k) + 7; printf "src/d%03d/f%05d.txt ", int(j / 100), j }
  }')
  agent "editor-$name" \
    "t=\$(date +%s%N)" \
    "for f in $edit_list; do echo \"edit \$t\" >> \"\$f\"; done" \
    "mkdir -p \"gen/\$t\" && echo a > \"gen/\$t/a.txt\" && echo b > \"gen/\$t/b.txt\"" \
    'echo "Edited some files."'
  # The agent alone, in a scratch copy of the files it edits.
  scratch="$WORK/dirs/editor-scratch-$name"
  mkdir -p "$scratch"
  for f in $edit_list; do mkdir -p "$scratch/$(dirname "$f")"; cp "$dir/$f" "$scratch/$f"; done
  cd "$scratch"
  with_agent "editor-$name" hf "$name-agent" --warmup 2 --runs 20 -n agent "opencode run x"
  cd "$dir"
  # --commit-dirty: the repository starts with uncommitted files, which the shell loop commits
  # too (by default ralph leaves what was dirty before it started out of its commits).
  with_agent "editor-$name" hf "$name" --warmup 1 --runs "$LOOP_RUNS" -i --prepare "rm -rf .ralph" \
    -n ralph "'$RALPH' x --max-iterations $ITERS --pause 0 --output-format text --commit-dirty" \
    -n shell "'$WORK/commit-loop' $ITERS"
  commits=$(timeout 60 git rev-list --count HEAD)
  [ "$commits" -gt $((ITERS * 2)) ] || die "case 2: only $commits commits in $dir; ralph did not commit"
  cd "$WORK"
  t_agent=$(mean "$name-agent" agent)
  OVERHEAD=$(calc "($(mean "$name" ralph) - $ITERS * $t_agent) / $ITERS * 1000")
  FLOOR=$(calc "($(mean "$name" shell) - $ITERS * $t_agent) / $ITERS * 1000")
}
say "case 2: auto-commit, $ITERS iterations, $FILES and $SMALL_FILES files"
commit_overhead case2-big "$REPO" "$FILES"
c2_over=$OVERHEAD c2_base=$FLOOR
commit_overhead case2-small "$SMALL" "$SMALL_FILES"
c2s_over=$OVERHEAD c2s_base=$FLOOR
c2_ratio=$(calc "$c2_over / $c2_base")
c2s_extra=$(calc "$c2s_over - $c2s_base")
row "2. Auto-commit overhead, $FILES files, $EDITS edited + 2 added per iteration" \
  "$c2_over ms/iteration" "$c2_base ms (git add -A && git commit)" \
  "${c2_ratio}×" "≤ 1.1×" "$(verdict "$c2_ratio" 1.1)"
row "2. Auto-commit overhead, $SMALL_FILES files, $EDITS edited + 2 added per iteration" \
  "$c2s_over ms/iteration" "$c2s_base ms (git add -A && git commit)" \
  "+$c2s_extra ms" "≤ floor + 3 ms" "$(verdict "$c2s_extra" 3)"

# --- Case 3 and 4: streaming throughput and memory -------------------------------------------------
say "case 3-4: generating $STREAM_MB MB of agent output"
# One MiB of ordinary text lines with OpenCode text-mode tool lines mixed in.
awk 'BEGIN {
  size = 0; i = 0
  while (size < 1048576) {
    i++
    if (i % 20 == 0) line = sprintf("|  Bash ls -la src/module_%d", i)
    else if (i % 20 == 10) line = sprintf("|  Read src/module_%d/lib.rs", i)
    else line = sprintf("Step %d: the agent reads the module, explains the change and updates tests.", i)
    if (size + length(line) + 1 > 1048576) break
    print line; size += length(line) + 1
  }
}' >"$WORK/data/block.txt"
# The same for --output-format json: OpenCode events (steps, text parts, tool calls).
awk 'BEGIN {
  size = 0; i = 0
  while (size < 1048576) {
    i++
    if (i % 10 == 1) line = "{\"type\":\"step_start\",\"timestamp\":1795316021310,\"sessionID\":\"ses_bench\",\"part\":{\"id\":\"prt_" i "\",\"messageID\":\"msg_" i "\",\"sessionID\":\"ses_bench\",\"type\":\"step-start\"}}"
    else if (i % 10 == 5) line = "{\"type\":\"tool_use\",\"timestamp\":1795316021355,\"sessionID\":\"ses_bench\",\"part\":{\"type\":\"tool\",\"tool\":\"bash\",\"callID\":\"call_" i "\",\"state\":{\"status\":\"completed\",\"input\":{\"command\":\"ls -la src/module_" i "\"},\"output\":\"total 0\",\"title\":\"ls\",\"time\":{\"start\":1,\"end\":2}},\"id\":\"prt_" i "\",\"sessionID\":\"ses_bench\",\"messageID\":\"msg_" i "\"}}"
    else if (i % 10 == 0) line = "{\"type\":\"step_finish\",\"timestamp\":1795316021355,\"sessionID\":\"ses_bench\",\"part\":{\"id\":\"prt_" i "\",\"reason\":\"tool-calls\",\"messageID\":\"msg_" i "\",\"sessionID\":\"ses_bench\",\"type\":\"step-finish\",\"tokens\":{\"total\":120,\"input\":100,\"output\":20,\"reasoning\":0,\"cache\":{\"write\":0,\"read\":0}},\"cost\":0.0006}}"
    else line = "{\"type\":\"text\",\"timestamp\":1795316017013,\"sessionID\":\"ses_bench\",\"part\":{\"id\":\"prt_" i "\",\"messageID\":\"msg_" i "\",\"sessionID\":\"ses_bench\",\"type\":\"text\",\"text\":\"Step " i ": the agent reads the module, explains the change and updates the tests.\",\"time\":{\"start\":1,\"end\":2}}}"
    if (size + length(line) + 1 > 1048576) break
    print line; size += length(line) + 1
  }
}' >"$WORK/data/block.jsonl"
repeat() { # FILE COUNT OUT
  local i
  for ((i = 0; i < $2; i++)); do cat "$1"; done >"$3"
}
repeat "$WORK/data/block.txt" "$STREAM_MB" "$WORK/data/stream.txt"
repeat "$WORK/data/block.jsonl" "$STREAM_MB" "$WORK/data/stream.jsonl"
for mb in $MEM_SIZES; do
  if [ "$mb" -le "$STREAM_MB" ]; then
    head -c $((mb * 1048576)) "$WORK/data/stream.txt" >"$WORK/data/mem-$mb.txt"
  else
    repeat "$WORK/data/block.txt" "$mb" "$WORK/data/mem-$mb.txt"
  fi
done
{ head -c $((LINE_MB * 1048576)) /dev/zero | tr '\0' 'x'; echo; } >"$WORK/data/line.txt"
stream_bytes=$(stat -c %s "$WORK/data/stream.txt")
label_mb() { if [ "$1" -ge 1024 ]; then echo "$(($1 / 1024)) GB"; else echo "$1 MB"; fi; }
STREAM_LABEL=$(label_mb "$STREAM_MB")

agent stream "exec cat '$WORK/data/stream.txt'"
agent stream-json "exec cat '$WORK/data/stream.jsonl'"
PLAIN="$WORK/dirs/plain"
mkdir -p "$PLAIN"
cd "$PLAIN"
say "case 3: streaming $STREAM_LABEL (text mode, compact and --verbose-tools)"
with_agent stream hf case3 --warmup 1 --runs "$STREAM_RUNS" -i \
  -n compact "'$RALPH' $run_ralph_args --output-format text" \
  -n verbose "'$RALPH' $run_ralph_args --output-format text --verbose-tools" \
  -n cat "sh -c \"cat '$WORK/data/stream.txt' | cat\""
say "case 3: streaming $STREAM_LABEL (JSON mode)"
with_agent stream-json hf case3-json --warmup 1 --runs "$STREAM_RUNS" -i \
  -n json "'$RALPH' $run_ralph_args --output-format json" \
  -n cat "sh -c \"cat '$WORK/data/stream.jsonl' | cat\""
t_cat=$(mean case3 cat)
t_compact=$(mean case3 compact)
t_verbose=$(mean case3 verbose)
# The floor: the same bytes crossing one pipe and written once, as through ralph.
for variant in compact verbose; do
  t=$(mean case3 "$variant")
  ratio=$(calc "$t / $t_cat")
  if [ "$variant" = compact ]; then
    name="compact" target="≤ 4×" result=$(verdict "$ratio" 4)
  else
    name="--verbose-tools" target="report" result="—"
  fi
  row "3. Streaming $STREAM_LABEL of text lines (every tenth a tool line), $name, stdout to /dev/null" \
    "$(calc "$t * 1000" 0) ms ($(calc "$stream_bytes / $t / 1048576" 0) MB/s)" \
    "$(calc "$t_cat * 1000" 0) ms (cat FILE | cat)" "${ratio}×" "$target" "$result"
done
t=$(mean case3-json json)
t_catj=$(mean case3-json cat)
json_bytes=$(stat -c %s "$WORK/data/stream.jsonl")
ratio=$(calc "$t / $t_catj")
row "3. Streaming $STREAM_LABEL of OpenCode JSON events, compact" \
  "$(calc "$t * 1000" 0) ms ($(calc "$json_bytes / $t / 1048576" 0) MB/s)" \
  "$(calc "$t_catj * 1000" 0) ms (cat FILE | cat)" "${ratio}×" "≤ 8×" "$(verdict "$ratio" 8)"

say "case 4: peak memory"
peak_rss() { # AGENT-NAME FORMAT → KiB
  with_agent "$1" timeout 600 /usr/bin/time -f %M -o "$WORK/rss" \
    "$RALPH" $run_ralph_args --output-format "$2" >/dev/null 2>&1 || true
  tail -n 1 "$WORK/rss"
}
# Flat: the same peak whatever the output's size (the spread over the sizes), and never over
# 20 MB, a single huge line included.
rss_list=()
rss_cells=()
for mb in $MEM_SIZES; do
  agent "mem-$mb" "exec cat '$WORK/data/mem-$mb.txt'"
  kb=$(peak_rss "mem-$mb" text)
  rss_list+=("$kb")
  rss_cells+=("$(label_mb "$mb"): $(calc "$kb / 1024" 1) MB")
done
rss_min=$(printf '%s\n' "${rss_list[@]}" | sort -n | head -n 1)
rss_max=$(printf '%s\n' "${rss_list[@]}" | sort -n | tail -n 1)
spread=$(calc "($rss_max - $rss_min) / $rss_min * 100" 1)
agent mem-line "exec cat '$WORK/data/line.txt'"
rss_line=$(peak_rss mem-line text)
rss_cells+=("$LINE_MB MB single line: $(calc "$rss_line / 1024" 1) MB")
kb=$(peak_rss stream-json json)
rss_json=$kb
rss_top=$(printf '%s\n' "$rss_max" "$rss_line" | sort -n | tail -n 1)
result=pass
le "$rss_top" $((20 * 1024)) && le "$spread" 10 || result="**miss**"
row "4. Peak RSS, text mode: $(IFS=';'; echo "${rss_cells[*]}" | sed 's/;/, /g')" \
  "max $(calc "$rss_top / 1024" 1) MB" "min $(calc "$rss_min / 1024" 1) MB" \
  "spread over the sizes ${spread}%" "≤ 20 MB, spread ≤ 10%" "$result"
row "4. Peak RSS, JSON mode, $STREAM_LABEL of events" "$(calc "$rss_json / 1024" 1) MB" \
  "min of text mode $(calc "$rss_min / 1024" 1) MB" "$(calc "$rss_json / $rss_min")×" "≤ 20 MB" \
  "$(verdict "$rss_json" $((20 * 1024)))"

# --- Case 5: status and task list at scale ---------------------------------------------------------
say "case 5: --status with $HISTORY iterations, --list-tasks with $TASKS tasks"
for name in status-big status-empty tasks-big tasks-empty; do
  mkdir -p "$WORK/dirs/$name"
  (cd "$WORK/dirs/$name" && with_agent instant timeout 60 "$RALPH" $run_ralph_args >/dev/null 2>&1) || true
  [ -f "$WORK/dirs/$name/.ralph/ralph-loop.state.json" ] || die "case 5: ralph wrote no state in $name"
done
awk -v n="$HISTORY" 'BEGIN {
  print "{\n  \"iterations\": ["
  for (i = 1; i <= n; i++) {
    s = 1000 + i * 60; h = int(s / 3600); m = int(s % 3600 / 60); sec = s % 60
    printf "    {\n      \"iteration\": %d,\n      \"started_at\": \"2025-01-%02dT%02d:%02d:%02d.000Z\",\n", i, 1 + int(h / 24), h % 24, m, sec
    printf "      \"ended_at\": \"2025-01-%02dT%02d:%02d:%02d.500Z\",\n      \"duration_ms\": 45500,\n", 1 + int(h / 24), h % 24, m, sec
    printf "      \"tools_used\": {\n        \"bash\": %d,\n        \"edit\": 2,\n        \"read\": 5\n      },\n", i % 7
    printf "      \"files_modified\": [\n        \"src/module_%d.rs\",\n        \"tests/module_%d.rs\"\n      ],\n", i % 50, i % 50
    printf "      \"exit_code\": 0,\n      \"completion_detected\": false,\n"
    printf "      \"errors\": %s,\n", (i % 10 == 0) ? "[\n        \"error: test failed in module " i % 3 "\"\n      ]" : "[]"
    printf "      \"tokens\": {\n        \"input\": 12000,\n        \"output\": 800,\n        \"cache_read\": 40000,\n        \"cache_write\": 0\n      },\n"
    printf "      \"cost_usd\": 0.0421\n    }%s\n", (i < n) ? "," : ""
  }
  printf "  ],\n  \"total_duration_ms\": %d,\n", n * 45500
  printf "  \"struggle_indicators\": {\n    \"repeated_errors\": {\n      \"error: test failed in module 0\": %d\n    },\n", int(n / 30)
  printf "    \"no_progress_iterations\": 0,\n    \"short_iterations\": 0\n  },\n"
  printf "  \"total_tokens\": {\n    \"input\": %d,\n    \"output\": %d,\n    \"cache_read\": %d,\n    \"cache_write\": 0\n  },\n", n * 12000, n * 800, n * 40000
  printf "  \"total_cost_usd\": %.4f\n}\n", n * 0.0421
}' >"$WORK/dirs/status-big/.ralph/ralph-history.json"
printf '{\n  "iterations": [],\n  "total_duration_ms": 0\n}\n' >"$WORK/dirs/status-empty/.ralph/ralph-history.json"
# One more iteration of the loop on top of each history, so that ralph itself writes the history
# (and its summary) as a long-running loop would have.
for pair in "status-big:$((HISTORY + 1))" "status-empty:2"; do
  IFS=: read -r name max <<<"$pair"
  (cd "$WORK/dirs/$name" && with_agent instant timeout 120 "$RALPH" --resume --max-iterations "$max" >/dev/null 2>&1) || true
  [ -f "$WORK/dirs/$name/.ralph/ralph-history.summary.json" ] || die "case 5: ralph wrote no history summary in $name"
done
awk -v n="$TASKS" 'BEGIN {
  print "# Ralph Tasks\n\nGenerated task list.\n"
  for (i = 1; i <= n; i++) {
    mark = (i <= n / 2) ? "x" : (i == n / 2 + 1) ? "/" : " "
    printf "- [%s] Task %d: implement part %d of the feature and its tests\n", mark, i, i
    if (i % 10 == 0) printf "  - [%s] subtask a of task %d\n  - [ ] subtask b of task %d\n", mark, i, i
  }
}' >"$WORK/dirs/tasks-big/.ralph/ralph-tasks.md"
printf '# Ralph Tasks\n\nAdd tasks below, one checkbox line each.\n' >"$WORK/dirs/tasks-empty/.ralph/ralph-tasks.md"
(cd "$WORK/dirs/status-big" && timeout 60 "$RALPH" --status) | grep -q "$((HISTORY + 1)) iterations" \
  || die "case 5: --status does not show the $((HISTORY + 1)) iterations of the history"
(cd "$WORK/dirs/tasks-big" && timeout 60 "$RALPH" --list-tasks) | grep -q "Task $TASKS:" \
  || die "case 5: --list-tasks does not show the generated tasks"
for name in status-big status-empty; do
  cd "$WORK/dirs/$name"
  hf "case5-$name" --warmup 3 --runs "$STATUS_RUNS" -n run "'$RALPH' --status"
  hf "case5-json-${name#status-}" --warmup 3 --runs "$STATUS_RUNS" -n run "'$RALPH' --status --json"
done
cd "$WORK/dirs/status-big"
hf case5-report --warmup 1 --runs 5 -n run "'$RALPH' --report"
for name in tasks-big tasks-empty; do
  cd "$WORK/dirs/$name"
  hf "case5-$name" --warmup 3 --runs "$STATUS_RUNS" -n run "'$RALPH' --list-tasks"
done
cd "$WORK"
for pair in "status:--status:$((HISTORY + 1))-iteration history:2" \
  "json:--status --json:$((HISTORY + 1))-iteration history:2" "tasks:--list-tasks:$TASKS-task file:5"; do
  IFS=: read -r key flag what target <<<"$pair"
  big=$(mean "case5-$key-big" run)
  empty=$(mean "case5-$key-empty" run)
  ratio=$(calc "$big / $empty")
  row "5. \`$flag\` with a $what vs a short one" "$(calc "$big * 1000" 1) ms" \
    "$(calc "$empty * 1000" 1) ms (short)" "${ratio}×" "≤ ${target}×" "$(verdict "$ratio" "$target")"
done
t_report=$(mean case5-report run)
row "5. \`--report\` of a $((HISTORY + 1))-iteration history" "$(calc "$t_report * 1000" 1) ms" \
  "1 s" "$(calc "$t_report / 1")×" "≤ 1 s" "$(verdict "$t_report" 1)"

# --- Case 6: idle cost -----------------------------------------------------------------------------
say "case 6: CPU while the agent is silent for $IDLE_S s"
agent idle "exec sleep $IDLE_S"
cd "$PLAIN"
with_agent idle hf case6-idle --runs 1 -i -n ralph "'$RALPH' $run_ralph_args --output-format text"
with_agent instant hf case6-instant --warmup 2 --runs 10 -i -n ralph "'$RALPH' $run_ralph_args --output-format text"
idle_cpu=$(cpu case6-idle ralph)
instant_cpu=$(cpu case6-instant ralph)
idle_cost=$(calc "($idle_cpu - $instant_cpu) * 1000" 1)
idle_target=$(calc "50 * $IDLE_S / 30" 1)
row "6. CPU while the agent is silent for $IDLE_S s (user + sys)" "$(calc "$idle_cpu * 1000" 1) ms" \
  "$(calc "$instant_cpu * 1000" 1) ms (same run, instant agent)" "idle cost ${idle_cost} ms" \
  "< $idle_target ms" "$(verdict "$idle_cost" "$idle_target")"

# --- Case 7: start-up ------------------------------------------------------------------------------
say "case 7: ralph --version vs /bin/true"
hf case7 --warmup 20 --runs "$STARTUP_RUNS" -n ralph "'$RALPH' --version" -n true "/bin/true"
t=$(mean case7 ralph)
t_true=$(mean case7 true)
ratio=$(calc "$t / $t_true")
row "7. \`ralph --version\`" "$(calc "$t * 1000" 2) ms" "$(calc "$t_true * 1000" 2) ms (/bin/true)" \
  "${ratio}×" "≤ 3×" "$(verdict "$ratio" 3)"

# --- Case 8: parallel tasks ------------------------------------------------------------------------
# Four tasks with an instant agent in a clone of the large repository, --parallel 2 and 1, against
# a shell script doing the same git work per task: worktree add, commit, merge, worktree remove.
PAR_SRC="$WORK/dirs/par-src"
PAR_FILES=$([ "$MODE" = full ] && echo "$FILES" || echo 200)
say "case 8: 4 parallel tasks in a $PAR_FILES-file repository"
if [ "$MODE" = full ]; then
  timeout 600 git clone -q "$REPO" "$PAR_SRC"
else
  # A small repository: the quick mode checks the script, and worktrees of the large one take
  # seconds each.
  mkdir -p "$PAR_SRC/src"
  (
    cd "$PAR_SRC" && git init -q
    for i in $(seq 1 200); do echo "file $i" >"src/f$i.txt"; done
    git add -A && git commit -q -m generated
  )
fi
(
  cd "$PAR_SRC"
  mkdir -p .ralph
  for i in 1 2 3 4; do printf -- '- [ ] Task %s\n  - id: t%s\n' "$i" "$i"; done >.ralph/ralph-tasks.md
  git add -A && git commit -q -m tasks
)
# The copy's writes are flushed before the clock starts: a run that syncs (ralph's history, a
# commit) would otherwise wait for them, and one that does not (the script) would not.
printf 'rm -rf "%s" && cp -a "%s" "%s" && sync\n' "$WORK/dirs/par" "$PAR_SRC" "$WORK/dirs/par" >"$WORK/reset-par.sh"
cat >"$WORK/git-par.sh" <<'SCRIPT'
set -e
cd "$1"
for i in 1 2 3 4; do
  git worktree add -q -b "ralph/t$i" ".ralph/worktrees/t$i"
  echo "task $i" >".ralph/worktrees/t$i/t$i.txt"
  git -C ".ralph/worktrees/t$i" add -A && git -C ".ralph/worktrees/t$i" commit -q -m "task $i"
  git merge -q --no-ff -m "merge t$i" "ralph/t$i"
  git worktree remove --force ".ralph/worktrees/t$i" && git branch -q -D "ralph/t$i"
done
SCRIPT
agent par-instant 'echo "task $$" > "t$$.txt"' 'echo "<promise>READY_FOR_NEXT_TASK</promise>"'
par_runs=$([ "$MODE" = full ] && echo 3 || echo 1)
with_agent par-instant hf case8 --runs "$par_runs" -i --prepare "sh '$WORK/reset-par.sh'" \
  -n parallel2 "sh -c \"cd '$WORK/dirs/par' && '$RALPH' x --tasks --parallel 2 --pause 0 --output-format text\"" \
  -n parallel1 "sh -c \"cd '$WORK/dirs/par' && '$RALPH' x --tasks --parallel 1 --pause 0 --output-format text\"" \
  -n git "sh '$WORK/git-par.sh' '$WORK/dirs/par'"
t_p2=$(mean case8 parallel2)
t_p1=$(mean case8 parallel1)
t_git=$(mean case8 git)
per_task_git=$(calc "$t_git / 4 * 1000" 1)
p2_ratio=$(calc "$t_p2 / $t_git")
row "8. 4 tasks, \`--parallel 2\`, $PAR_FILES files (instant agent)" "$(calc "$t_p2 / 4 * 1000" 1) ms/task" \
  "$per_task_git ms/task (git worktree add + commit + merge + remove)" "${p2_ratio}×" \
  "≤ 0.2×" "$(verdict "$p2_ratio" 0.2)"
row "8. 4 tasks, \`--parallel 1\`, $PAR_FILES files (instant agent)" "$(calc "$t_p1 / 4 * 1000" 1) ms/task" \
  "$per_task_git ms/task (git worktree add + commit + merge + remove)" "$(calc "$t_p1 / $t_git")×" \
  "report" "—"
# The same on tmpfs (reported, no target): ext4 grows slow at creating files where many were
# deleted a moment before (its inode allocator skips recently freed inodes one by one), which
# this case provokes run after run (the copies, git's removed worktrees), so the numbers above
# move from run to run with the disk's recent history; on tmpfs they measure the git work alone.
if [ "$MODE" = full ] && [ -d /dev/shm ] && [ -w /dev/shm ] && SHM_WORK=$(mktemp -d /dev/shm/ralph-bench.XXXXXX); then
  say "case 8 on tmpfs"
  cp -a "$PAR_SRC" "$SHM_WORK/par-src"
  printf 'rm -rf "%s" && cp -a "%s" "%s"\n' "$SHM_WORK/par" "$SHM_WORK/par-src" "$SHM_WORK/par" >"$WORK/reset-shm.sh"
  with_agent par-instant hf case8shm --runs "$par_runs" -i --prepare "sh '$WORK/reset-shm.sh'" \
    -n parallel2 "sh -c \"cd '$SHM_WORK/par' && '$RALPH' x --tasks --parallel 2 --pause 0 --output-format text\"" \
    -n git "sh '$WORK/git-par.sh' '$SHM_WORK/par'"
  shm_p2=$(mean case8shm parallel2)
  shm_git=$(mean case8shm git)
  row "8. 4 tasks, \`--parallel 2\`, $PAR_FILES files on tmpfs (instant agent)" \
    "$(calc "$shm_p2 / 4 * 1000" 1) ms/task" \
    "$(calc "$shm_git / 4 * 1000" 1) ms/task (git worktree add + commit + merge + remove)" \
    "$(calc "$shm_p2 / $shm_git")×" "report" "—"
  rm -rf "$SHM_WORK"
fi
# ralph's own peak RSS (VmHWM of its process: the workers are its threads) with 2 workers.
sh "$WORK/reset-par.sh"
cat >"$WORK/par-rss.sh" <<'SCRIPT'
cd "$1" || exit 1
"$2" x --tasks --parallel 2 --pause 0 --output-format text >/dev/null 2>&1 &
pid=$! peak=0
while kill -0 "$pid" 2>/dev/null; do
  kb=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  [ -n "$kb" ] && [ "$kb" -gt "$peak" ] && peak=$kb
  sleep 0.02
done
echo "$peak"
SCRIPT
par_kb=$(with_agent par-instant sh "$WORK/par-rss.sh" "$WORK/dirs/par" "$RALPH")
par_mb=$(calc "$par_kb / 1024" 1)
par_ok=$(calc "$par_mb / 20")
row "8. Peak RSS of ralph, \`--parallel 2\`, $PAR_FILES files" "$par_mb MB" "20 MB" \
  "${par_ok}×" "≤ 20 MB" "$(verdict "$par_ok" 1)"

# --- Case 9: what --sandbox bwrap adds to an iteration -----------------------------------------------
# The same loop of instant iterations with and without the sandbox (bwrap, its network namespace,
# ralph's proxy and bridge); the preflight at the start is part of the run.
if command -v bwrap >/dev/null 2>&1 && bwrap --ro-bind / / --unshare-all --cap-drop ALL true 2>/dev/null; then
  SB="$WORK/dirs/sandbox"
  mkdir -p "$SB" && (cd "$SB" && git init -q && echo x >x && git add -A && git commit -q -m init)
  agent sb-instant '[ "$1" = --version ] && exit 0' 'echo "Nothing to do in this iteration."'
  sb_iters=$([ "$MODE" = full ] && echo 20 || echo 5)
  say "case 9: the sandbox's cost per iteration"
  cd "$SB"
  with_agent sb-instant hf case9 --warmup 1 --runs "$LOOP_RUNS" -i \
    -n sandboxed "'$RALPH' x --max-iterations $sb_iters --pause 0 --no-commit --output-format text --sandbox bwrap --sandbox-mount '$WORK/agents/sb-instant'" \
    -n plain "'$RALPH' x --max-iterations $sb_iters --pause 0 --no-commit --output-format text"
  cd "$ROOT"
  sb_cost=$(calc "($(mean case9 sandboxed) - $(mean case9 plain)) / $sb_iters * 1000" 1)
  row "9. \`--sandbox bwrap\` added per iteration ($sb_iters instant iterations)" "$sb_cost ms/iteration" \
    "the same loop without a sandbox" "—" "≤ 20 ms" "$(verdict "$sb_cost" 20)"
else
  say "case 9 skipped: bubblewrap cannot make a sandbox here (bash scripts/install-test-tools.sh)"
fi

# --- Case 10: --serve ------------------------------------------------------------------------------
# (a) The CPU an idle `ralph --serve` takes over IDLE_S seconds (from /proc: user + sys).
# (b) Case 8's parallel run with --serve while 20 clients follow its event stream (and one loads
#     the page), against the same run without a server.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
say "case 10: --serve idle for $IDLE_S s, and a parallel run streamed to 20 clients"
SERVE_DIR="$WORK/dirs/serve-idle"
mkdir -p "$SERVE_DIR" && (cd "$SERVE_DIR" && git init -q)
serve_port=$(free_port)
(cd "$SERVE_DIR" && exec "$RALPH" --serve "127.0.0.1:$serve_port" >/dev/null 2>&1) &
serve_pid=$!
sleep "$IDLE_S"
ticks=$(awk '{ print $14 + $15 }' "/proc/$serve_pid/stat")
kill -INT "$serve_pid" && wait "$serve_pid" 2>/dev/null || true
hz=$(getconf CLK_TCK)
idle_pct=$(calc "$ticks / $hz / $IDLE_S * 100" 3)
row "10. CPU of an idle \`ralph --serve\` over $IDLE_S s" "${idle_pct}% of a core" "—" "—" "< 1%" \
  "$(verdict "$idle_pct" 1)"
# The run with and without a server, alternated round by round (plain first in odd rounds,
# served first in even ones) so a machine that slows or speeds up during the case weighs on both
# alike. In a served round the server and its 21 clients start on the freshly laid repository
# before the clock starts and stop after it ends: only their effect on the run is timed. The
# repository is case 8's small one in both modes: the server's cost does not grow with the
# repository, and a short run shows it the most.
serve_rounds=$([ "$MODE" = full ] && echo 10 || echo 4)
SERVE_SRC="$WORK/dirs/serve-src"
mkdir -p "$SERVE_SRC/src"
(
  cd "$SERVE_SRC" && git init -q
  for i in $(seq 1 200); do echo "file $i" >"src/f$i.txt"; done
  mkdir -p .ralph
  for i in 1 2 3 4 5 6 7 8; do printf -- '- [ ] Task %s\n  - id: t%s\n' "$i" "$i"; done >.ralph/ralph-tasks.md
  git add -A && git commit -q -m generated
)
reset_serve() { rm -rf "$WORK/dirs/serve-run" && cp -a "$SERVE_SRC" "$WORK/dirs/serve-run"; }
timed_par() { # prints the wall time, in seconds, of one parallel run on a fresh copy
  local started ended
  started=$(date +%s%N)
  (cd "$WORK/dirs/serve-run" && PATH="$WORK/agents/par-instant:$PATH_BASE" "$RALPH" x --tasks --parallel 4 \
    --pause 0 --output-format text >/dev/null 2>&1) || return 1
  ended=$(date +%s%N)
  calc "($ended - $started) / 1000000000" 4
}
streams_open() { # PORT: established connections to the server
  if command -v ss >/dev/null 2>&1; then
    ss -Htn state established "( sport = :$1 )" | wc -l
  else
    sleep 1 && echo 20
  fi
}
served_par() {
  local port pid clients=() i=0 took
  port=$(free_port)
  (cd "$WORK/dirs/serve-run" && exec "$RALPH" --serve "127.0.0.1:$port" >/dev/null 2>&1) &
  pid=$!
  until curl -s -o /dev/null "http://127.0.0.1:$port/" || [ $i -ge 500 ]; do sleep 0.01; i=$((i + 1)); done
  for _ in $(seq 1 20); do
    curl -sN "http://127.0.0.1:$port/api/v1/events" >/dev/null 2>&1 &
    clients+=($!)
  done
  # One page: its state, fetched again after events (at most about three times a second).
  (while :; do curl -s -o /dev/null "http://127.0.0.1:$port/api/v1/state"; sleep 0.3; done) &
  clients+=($!)
  # The clock starts once the 20 streams are open (their start-up is not the server's cost).
  i=0
  while [ "$(streams_open "$port")" -lt 20 ] && [ $i -lt 300 ]; do sleep 0.01; i=$((i + 1)); done
  took=$(timed_par) || took=
  kill "${clients[@]}" 2>/dev/null || true
  kill -INT "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  [ -n "$took" ] && echo "$took"
}
plain_times=() served_times=()
for round in $(seq 1 "$serve_rounds"); do
  for variant in $([ $((round % 2)) -eq 1 ] && echo "plain served" || echo "served plain"); do
    reset_serve
    if [ "$variant" = plain ]; then
      took=$(timed_par) || die "case 10: the parallel run failed (see $WORK)"
      plain_times+=("$took")
    else
      took=$(served_par) || die "case 10: the served parallel run failed (see $WORK)"
      served_times+=("$took")
    fi
  done
done
say "case 10 rounds (s): plain ${plain_times[*]}; served ${served_times[*]}"
# Medians: one round disturbed by the machine (a timing here swings by a third from round to
# round) moves a mean by more than the 5% measured.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%.4f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
served_median=$(median "${served_times[@]}")
plain_median=$(median "${plain_times[@]}")
served_ratio=$(calc "$served_median / $plain_median" 3)
served_added=$(awk "BEGIN { printf \"%+.1f\", ($served_ratio - 1) * 100 }")
row "10. 8 tasks, \`--parallel 4\`, 200 files, served to 20 event-stream clients and a page ($serve_rounds rounds)" "$(calc "$served_median * 1000" 0) ms" \
  "$(calc "$plain_median * 1000" 0) ms (the same run, no server, alternated; medians)" "${served_added}%" "< +5%" \
  "$(verdict "$served_added" 5)"

# --- Case 11: a fleet ------------------------------------------------------------------------------
# Workers on clones of one bare remote, each task's agent taking FLEET_S seconds, until every
# task is merged on the remote (the last update of its main, as its ref file's time says); against
# one worker doing one task (the same agent, the same remote), measured the same way. The last
# worker must end within 2 s of that last merge. And a --parallel run of 8 such tasks against one
# of 1.
FLEET_S=$([ "$MODE" = full ] && echo 4 || echo 0.5)
# ext4 without a journal does not reuse an inode within 60 s of its deletion being written back
# (300 s more before), and each file created searches past every such inode of its block group:
# written back and waited out, no earlier case's removals weigh on the fleets; their own they
# still pay.
if [ "$MODE" = full ]; then
  say "case 11: letting the disk settle (sync, then 61 s)"
  sync
  sleep 61
fi
say "case 11: a fleet: 8 workers on 8 tasks, 16 on 32, --parallel 8 ($FLEET_S s per task)"
agent fleet "sleep $FLEET_S" 'echo "task $$" > "w$$.txt"' 'echo "<promise>READY_FOR_NEXT_TASK</promise>"'
# A remote DIR/remote.git whose main holds TASKS tasks.
fleet_remote() { # DIR TASKS
  rm -rf "$1" && mkdir -p "$1/seed/.ralph"
  (
    cd "$1/seed" && git init -q -b main
    for i in $(seq 1 "$2"); do printf -- '- [ ] Task %s\n  - id: t%s\n' "$i" "$i"; done >.ralph/ralph-tasks.md
    git add -A && git commit -q -m tasks && git clone -q --bare . ../remote.git
  )
}
# Seconds from starting WORKERS workers (one clone each) on a remote of TASKS tasks to the last
# merge on the remote, and from that merge to the last worker's end; every task must be merged.
# In folder ROOT (default: the suite's).
fleet_run() { # WORKERS TASKS [ROOT [ROUND]]
  local dir="${3:-$WORK/dirs}/fleet-$1-$2${4:+-$4}" start end merged open w
  fleet_remote "$dir" "$2"
  for w in $(seq 1 "$1"); do git clone -q "$dir/remote.git" "$dir/m$w"; done
  start=$(date +%s.%N)
  for w in $(seq 1 "$1"); do
    (cd "$dir/m$w" && with_agent fleet timeout 600 "$RALPH" --worker --pause 0 --output-format text >>"$LOG" 2>&1) &
  done
  wait
  end=$(date +%s.%N)
  open=$(git -C "$dir/remote.git" show main:.ralph/ralph-tasks.md | grep -c '^- \[[^x]\]' || true)
  [ "$open" = 0 ] || die "case 11: $open of $2 tasks not merged with $1 workers (see $dir)"
  # Merges land by push, which writes main's loose ref file (the remote's refs are never packed
  # during a run); without one, the end stands for the last merge.
  merged=$(stat -c %.9Y "$dir/remote.git/refs/heads/main" 2>/dev/null || echo "$end")
  echo "$(calc "$merged - $start" 3) $(calc "$end - $merged" 3)"
}
# Seconds of one --parallel AT_ONCE run of TASKS tasks.
fleet_parallel() { # AT_ONCE TASKS
  local dir="$WORK/dirs/fleet-par-$1-$2" start end
  fleet_remote "$dir" "$2"
  start=$(date +%s.%N)
  (cd "$dir/seed" && with_agent fleet timeout 600 "$RALPH" x --tasks --parallel "$1" --pause 0 --output-format text >>"$LOG" 2>&1) ||
    die "case 11: the --parallel $1 run failed (see $dir)"
  end=$(date +%s.%N)
  calc "$end - $start" 3
}
# One fleet run is one sample of a few seconds, which a busy moment of the machine moves by a
# tenth: the baseline and both fleets run in turn FLEET_ROUNDS times (a slow moment falls on one
# round of each rather than on one fleet alone), and the rows take the medians; the tail row
# the longest of every round.
FLEET_ROUNDS=$([ "$MODE" = full ] && echo 3 || echo 1)
fleet_rounds() { # [ROOT] → the medians of one worker, 8 and 16 workers, and the longest tail
  local round one eight eight_tail sixteen sixteen_tail ones=() eights=() sixteens=() tails=()
  for round in $(seq 1 "$FLEET_ROUNDS"); do
    read -r one _ <<<"$(fleet_run 1 1 "${1:-$WORK/dirs}" "$round")"
    read -r eight eight_tail <<<"$(fleet_run 8 8 "${1:-$WORK/dirs}" "$round")"
    read -r sixteen sixteen_tail <<<"$(fleet_run 16 32 "${1:-$WORK/dirs}" "$round")"
    ones+=("$one") eights+=("$eight") sixteens+=("$sixteen") tails+=("$eight_tail" "$sixteen_tail")
    echo "+ case 11 round $round${1:+ in $1}: $one s, 8 workers $eight s, 16 workers $sixteen s" >>"$LOG"
  done
  echo "$(median "${ones[@]}") $(median "${eights[@]}") $(median "${sixteens[@]}") $(printf '%s\n' "${tails[@]}" | sort -g | tail -n 1)"
}
read -r f_one f_eight f_sixteen f_tail <<<"$(fleet_rounds)"
f_par_one=$(fleet_parallel 1 1)
f_par_eight=$(fleet_parallel 8 8)
f8_ratio=$(calc "$f_eight / $f_one")
f16_ratio=$(calc "$f_sixteen / (2 * $f_one)")
row "11. 8 workers, 8 tasks of ${FLEET_S} s, one remote: every task merged" "$(calc "$f_eight * 1000" 0) ms" \
  "$(calc "$f_one * 1000" 0) ms (1 worker, 1 task)" "${f8_ratio}×" "≤ 1.15×" "$(verdict "$f8_ratio" 1.15)"
row "11. 16 workers, 32 tasks of ${FLEET_S} s, one remote" "$(calc "$f_sixteen * 1000" 0) ms" \
  "$(calc "2 * $f_one * 1000" 0) ms (2 rounds of 1 worker, 1 task)" "${f16_ratio}×" "≤ 1.2×" "$(verdict "$f16_ratio" 1.2)"
row "11. the last worker's end after the last merge (8 and 16 workers, the longer)" "$(calc "$f_tail * 1000" 0) ms" \
  "—" "—" "≤ 2000 ms" "$(verdict "$f_tail" 2)"
row "11. \`--parallel 8\`, 8 tasks of ${FLEET_S} s" "$(calc "$f_par_eight * 1000" 0) ms" \
  "$(calc "$f_par_one * 1000" 0) ms (\`--parallel 1\`, 1 task)" "$(calc "$f_par_eight / $f_par_one")×" "report" "—"
# The same fleets on tmpfs (reported, no target): creating and removing files (worktrees, loose
# objects, refs) is most of what a disk adds, and how much moves with its recent history (see
# case 8); on tmpfs the ratios measure the fleet's own work.
if [ "$MODE" = full ] && [ -d /dev/shm ] && [ -w /dev/shm ] && SHM_WORK=$(mktemp -d /dev/shm/ralph-bench.XXXXXX); then
  say "case 11 on tmpfs"
  read -r s_one s_eight s_sixteen _ <<<"$(fleet_rounds "$SHM_WORK")"
  rm -rf "$SHM_WORK"
  row "11. 8 workers, 8 tasks, on tmpfs" "$(calc "$s_eight * 1000" 0) ms" \
    "$(calc "$s_one * 1000" 0) ms (1 worker, 1 task, on tmpfs)" "$(calc "$s_eight / $s_one")×" "report" "—"
  row "11. 16 workers, 32 tasks, on tmpfs" "$(calc "$s_sixteen * 1000" 0) ms" \
    "$(calc "2 * $s_one * 1000" 0) ms (2 rounds, on tmpfs)" "$(calc "$s_sixteen / (2 * $s_one)")×" "report" "—"
fi

# --- Report ----------------------------------------------------------------------------------------
missed() { # CASE-NUMBER: was a row of this case missed?
  local name
  for name in "${FAILED[@]}"; do [ "${name%%.*}" != "$1" ] || return 0; done
  return 1
}
# Why a missed target is missed, and what would close the gap (printed only for missed cases).
gap_notes() {
  missed 1 || missed 2 || missed 3 || missed 4 || missed 5 || missed 6 || missed 7 || missed 8 ||
    missed 9 || missed 10 || missed 11 ||
    return 0
  echo
  echo "## Gaps"
  if missed 1; then
    echo
    echo "- **1, --no-commit**: after a whole-tree \`git status\` at the start (which also writes"
    echo "  back a stale index), an iteration asks git only about the paths an inotify watch saw"
    echo "  touched (none for this agent) and makes one synced write (the history); the start-up"
    echo "  scan is spread over the iterations. A larger share of it means a slower \`git status\`."
  fi
  if missed 2; then
    echo
    echo "- **2, auto-commit**: ralph asks \`git status\` about the touched paths, then stages exactly"
    echo "  those (\`git add\`) and commits: three processes where the floor has two, each of the"
    echo "  floor's scanning the whole tree. In a small repository the extra process is what shows;"
    echo "  staging from the watch's list without the status would close it."
  fi
  if missed 3; then
    echo
    echo "- **3, streaming**: the floor moves the bytes through one pipe; ralph also reads every"
    echo "  line. Text mode takes a chunk's whole lines as one run (one UTF-8 check, one search for"
    echo "  tool lines, one for error stems, one write per run of plain lines, the log in one pass);"
    echo "  what is left is per tool line (its capture and count) and the log's records. JSON mode"
    echo "  parses every event (55% of each chunk's lines on the stdout reader thread, the rest on the"
    echo "  main thread, which also handles them); a parser that skips the fields ralph does not"
    echo "  read without scanning them is what would be left."
    if le "$t_verbose" "$t_compact"; then
      echo "  In this run compact mode was slower than \`--verbose-tools\`"
      echo "  ($(calc "$t_compact * 1000" 0) ms vs $(calc "$t_verbose * 1000" 0) ms): folding tool lines into the summary costs more"
      echo "  per tool line than printing them, so that path is the first to look at."
    fi
  fi
  if missed 5; then
    echo
    echo "- **5, status at scale**: \`--status\` reads the history's summary"
    echo "  (\`.ralph/ralph-history.summary.json\`, the last 120 records and the totals) instead of the"
    echo "  whole history; what is left is reading and parsing that summary and the task file."
  fi
  if missed 8; then
    echo
    echo "- **8, workers**: a task's worktree is taken over by the next task and by the merges"
    echo "  (only the files that differ are written), so a run makes \`--parallel N\` full"
    echo "  checkouts, side by side; on a machine where creating files is slow those checkouts are"
    echo "  most of the run, and N of them against the script's one per task sets the ratio."
  fi
  if missed 11; then
    echo
    echo "- **11, a fleet**: ready tasks land together (one worker merges every ready branch by"
    echo "  git's plumbing, with no checkout, in one landing), the first ready worker lingers until"
    echo "  the tasks beside it are ready, and at a bare remote on this machine a worker reads its"
    echo "  refs and claims from its files and writes claims, its branch and the landing straight"
    echo "  into it (objects copied as files, one update-ref transaction; no push). What is left is"
    echo "  each worker's fetch and new worktree between rounds, made by every worker at once on the"
    echo "  same cores as the remote, and on a disk the file system's work for them: compare the"
    echo "  tmpfs rows, which measure the same fleets without it."
  fi
  if missed 4; then
    echo
    echo "- **4, peak memory**: ralph holds at most 4 chunks of 256 KiB in flight, the line"
    echo "  splitter's piece and, for one huge line, the log's first 1 MiB of it and its record"
    echo "  (about 2 MB more than ordinary lines). A smaller cap on the part of a line the log keeps"
    echo "  would lower that."
  fi
  if missed 6 || missed 7; then
    echo
    echo "- Cases 6 or 7 missed: see the table for the absolute numbers."
  fi
  if missed 10; then
    echo
    echo "- **10, --serve**: each event-stream client is a thread that reads the journal every"
    echo "  150 ms; many clients on two cores compete with the run's git work. Waking on the"
    echo "  journal's changes (inotify) instead of polling would take that away."
  fi
}

ELAPSED=$(($(date +%s) - STARTED))
TABLE=$(
  echo "| Case | ralph | Baseline (same run) | Ratio | Target | Result |"
  echo "| --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${ROWS[@]}"
)
echo
echo "$TABLE"
echo
if [ ${#FAILED[@]} -eq 0 ]; then
  echo "All targets met ($MODE mode, ${ELAPSED}s)."
else
  echo "Targets missed: ${#FAILED[@]} ($MODE mode, ${ELAPSED}s)."
  gap_notes
fi

if [ "$MODE" = full ]; then
  cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  mem=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
  commit=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
  dirty=$(cd "$ROOT" && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && echo " + uncommitted changes" || true)
  mkdir -p "$ROOT/benches"
  # The Peers section (scripts/bench.sh --peers) is kept as it is.
  peers=""
  if [ -f "$ROOT/benches/RESULTS.md" ]; then
    peers=$(awk '/^## Peers$/ { keep = 1 } keep' "$ROOT/benches/RESULTS.md")
  fi
  {
    echo "# Benchmark results"
    echo
    echo "Produced by \`scripts/bench.sh\` (full mode) on $(date -u +%Y-%m-%d) in ${ELAPSED}s, ralph at"
    echo "commit \`$commit\`$dirty. Every baseline was measured in the same run, right next to ralph."
    echo
    echo "## Machine"
    echo
    echo "- CPU: $cpu_model, $(nproc) cores (\`nproc\`) — a small 2-core machine: absolute numbers are"
    echo "  slow and a little noisy; the ratios are what the targets are about"
    echo "- Memory: $mem"
    echo "- Kernel: $(uname -srm)"
    echo "- $(git --version), $(rustc --version 2>/dev/null || echo 'rustc unknown'), $(hyperfine --version)"
    echo
    echo "## Command"
    echo
    echo '```sh'
    echo 'scripts/bench.sh'
    echo '```'
    echo
    echo "## Results"
    echo
    echo "$TABLE"
    echo
    if [ ${#FAILED[@]} -eq 0 ]; then
      echo "Every target is met."
    else
      echo "Targets missed: $(printf '%s; ' "${FAILED[@]}" | sed 's/; $//')."
    fi
    echo
    echo "## How each case is measured"
    echo
    echo "- Fake agents only: shell scripts named \`opencode\` first on \`PATH\`; ralph runs with"
    echo "  \`--pause 0\`; no network. Times are hyperfine means (\`-N\`, no shell in between)."
    echo "- **1**: ralph runs $ITERS iterations of an instant agent with \`--no-commit\`; overhead per"
    echo "  iteration = (ralph's time − $ITERS × the agent's own time) / $ITERS, so ralph's start-up is"
    echo "  included, spread over the iterations; the floor is the agent run by nothing. Repositories:"
    echo "  $FILES tracked files in $((FILES / 100)) directories ($MODIFIED modified, $UNTRACKED untracked in new"
    echo "  directories) and $SMALL_FILES files. With a stale index (every tracked file touched before each"
    echo "  run): (the time of $((ITERS + 1)) iterations − the time of 1) / $ITERS − the agent's, the first"
    echo "  iteration's own cost (the refresh) shown beside it."
    echo "- **2**: the same with commits; the agent edits $EDITS tracked files and adds two files in a new"
    echo "  directory each iteration (its own time is measured alone). Floor: a shell loop that runs"
    echo "  the same agent, then \`git add -A && git commit -q -m …\`, $ITERS times, measured the same"
    echo "  way, in the same repository (both with \`--commit-dirty\`-like behaviour: the dirty files"
    echo "  ride along in the first commit)."
    echo "- **3**: one iteration whose agent \`cat\`s a pre-generated file (text: 80-column lines, every"
    echo "  tenth a \`|  Bash …\`/\`|  Read …\` tool line; JSON: OpenCode events) vs \`cat\` of that file."
    echo "- **4**: \`/usr/bin/time -f %M\` of one such iteration per size, and of one whose agent"
    echo "  prints a single line of $LINE_MB MB; flat means the sizes' peaks within 10% of each other,"
    echo "  and every peak (the single line's included) at most 20 MB."
    echo "- **5**: hyperfine of \`ralph --status\` / \`--list-tasks\` in a directory with a generated"
    echo "  \`.ralph/ralph-history.json\` / \`.ralph/ralph-tasks.md\` vs one with an empty file."
    echo "- **6**: user + system CPU (hyperfine's rusage, microsecond resolution) of one iteration whose"
    echo "  agent sleeps $IDLE_S s, minus the same for an instant agent (start-up, writing .ralph/)."
    echo "- **7**: hyperfine of \`ralph --version\` vs \`/bin/true\`."
    echo "- **8**: hyperfine of \`ralph x --tasks --parallel 2\` (and \`--parallel 1\`) on 4 tasks whose"
    echo "  agent writes one file, each run on a fresh copy of a $PAR_FILES-file repository, vs a script"
    echo "  that adds, commits in, merges and removes 4 worktrees one at a time; peak RSS is VmHWM."
    echo "  The tmpfs row runs the same in /dev/shm: on ext4, creating many files where many were just"
    echo "  deleted is slowed by the inode allocator skipping recently freed inodes, which this case's"
    echo "  copies and removed worktrees provoke, so the disk rows vary with the disk's recent history."
    echo "- **9**: hyperfine of a loop of instant iterations with \`--sandbox bwrap\` and without."
    echo "- **10**: user + system CPU of \`ralph --serve\` over $IDLE_S s with nobody connected; then case 8's"
    echo "  \`--parallel 4\` run in a 200-file repository, $serve_rounds rounds alternating its order, with a \`ralph --serve\` beside it"
    echo "  followed by 20 \`curl -N\` event streams and a loop fetching \`/api/v1/state\` every 0.3 s"
    echo "  (started before the clock, stopped after it), vs without; medians of the rounds."
    echo "- **11**: wall time from starting N \`ralph --worker\`s (each in its own clone of one bare"
    echo "  remote, an agent that sleeps $FLEET_S s and writes one file) to the last merge on the"
    echo "  remote, every task merged, vs one worker on one task; $FLEET_ROUNDS rounds of the baseline and"
    echo "  both fleets in turn, medians (the tail row: the longest), after \`sync\` and a 61 s wait;"
    echo "  and \`--parallel 8\` on 8 such tasks vs \`--parallel 1\` on one."
    gap_notes
    if [ -n "$peers" ]; then
      echo
      echo "$peers"
    fi
  } >"$ROOT/benches/RESULTS.md"
  echo "Wrote benches/RESULTS.md."
fi
