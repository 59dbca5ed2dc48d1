#!/usr/bin/env bash
# ralph's per-iteration overhead side by side with the loop runners people use instead, every one
# driving the same fake `claude` for 20 iterations, and a bare bash loop as the floor.
#
#   scripts/bench-peers.sh           full run (about 20 minutes on 2 cores): 5 runs per runner,
#                                    a 20,000-file repository; writes the tables into
#                                    benches/RESULTS.md between <!-- peers --> and <!-- /peers -->
#   scripts/bench-peers.sh --quick   2 runs per runner, a 2,000-file repository; prints only
#
# Runners: ralph ($RALPH, default: a release build of this checkout), ralph-tui 0.11.0 on bun
# 1.4.5, ralphy (ralphy-cli 4.7.2) and ralph-starter 0.5.2, installed from npm into a temporary
# prefix (never globally); @ralph-orchestrator/ralph-cli is tried too. A peer that cannot be
# installed or run is listed with the reason, not fatal. Overhead per iteration = (mean wall time
# of the 20-iteration loop - 20 x the fake agent's own time) / 20, the agent timed alone with the
# argv and input each runner gave it. PEERS_RESULTS names the file written (default
# benches/RESULTS.md). Needs bash, git, node, npm and hyperfine (installed with apt-get when
# missing). Exit status: 0 when ralph's overhead is the lowest of every runner (the floors
# excepted) in every group, 2 when it is not (the groups are named), 1 when it cannot run.
set -euo pipefail

MODE=full
for arg in "$@"; do
  case "$arg" in
    --quick) MODE=quick ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "bench-peers.sh: unknown argument: $arg (use --quick or nothing)" >&2; exit 1 ;;
  esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STARTED=$(date +%s)
PEERS_RESULTS=${PEERS_RESULTS:-$ROOT/benches/RESULTS.md}

say() { printf '\033[1m==> [%ss] %s\033[0m\n' "$(($(date +%s) - STARTED))" "$*" >&2; }
die() { echo "bench-peers.sh: $*" >&2; exit 1; }

# --- Tools -----------------------------------------------------------------------------------------
command -v node >/dev/null 2>&1 || die "node is required (the peers run on node and bun)"
command -v npm >/dev/null 2>&1 || die "npm is required (the peers are installed from npm)"
command -v git >/dev/null 2>&1 || die "git is required"
if ! command -v hyperfine >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || die "please install hyperfine"
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  say "installing hyperfine with apt-get"
  if ! timeout 600 "${sudo[@]}" apt-get install -y -q hyperfine >/dev/null; then
    timeout 600 "${sudo[@]}" apt-get update -q >/dev/null
    timeout 600 "${sudo[@]}" apt-get install -y -q hyperfine >/dev/null
  fi
  command -v hyperfine >/dev/null 2>&1 || die "hyperfine could not be installed"
fi

# --- Sizes -----------------------------------------------------------------------------------------
ITERS=20     # agent calls per loop, every runner
MAX_ITERS=25 # the runners' own iteration limit: a runner that misses the promise stops there
if [ "$MODE" = full ]; then
  RUNS=5 BIG_FILES=20000
else
  RUNS=2 BIG_FILES=2000
fi
AGENT_RUNS=$((RUNS + 3))
CHECK_TIMEOUT=240 # seconds for a runner's first (checked) run; a hung peer ends there
INSTALL_TIMEOUT=600
TASK="Append one line to bench-log.txt"

# --- ralph -----------------------------------------------------------------------------------------
if [ -z "${RALPH:-}" ]; then
  say "building ralph (release)"
  (cd "$ROOT" && timeout 1800 cargo build --release --locked --quiet)
  RALPH="${CARGO_TARGET_DIR:-$ROOT/target}/release/ralph"
fi
case "$RALPH" in /*) ;; *) RALPH="$PWD/$RALPH" ;; esac
[ -x "$RALPH" ] || die "no ralph binary at $RALPH"
RALPH_VERSION=$("$RALPH" --version 2>/dev/null) || die "$RALPH --version failed"
if pgrep -x rustc >/dev/null 2>&1 || pgrep -x cargo >/dev/null 2>&1; then
  echo "bench-peers.sh: warning: cargo or rustc is running; the numbers will be noisy" >&2
fi
LOAD_START=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo unknown)
if [ "$LOAD_START" != unknown ] && awk -v l="$LOAD_START" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
  echo "bench-peers.sh: warning: load average $LOAD_START on $(nproc) cores; the numbers will be noisy" >&2
fi

# --- Work directory and a clean, reproducible git environment ---------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ralph-bench-peers.XXXXXX")
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$WORK/bin" "$WORK/fakebin" "$WORK/home" "$WORK/repos" "$WORK/runs" "$WORK/fake" \
  "$WORK/rec" "$WORK/out" "$WORK/hf"
LOG="$WORK/log"
: >"$LOG"
# shellcheck source=scripts/bench-lib.sh
. "$ROOT/scripts/bench-lib.sh"
bench_git_env "$WORK" "$WORK"
PATH_BASE=$PATH

# --- The fake agent --------------------------------------------------------------------------------
# `claude` as Claude Code's print mode calls it: bash builtins only. FAKE_CLAUDE_DIR holds its
# call counter; it says <promise>COMPLETE</promise> from call FAKE_CLAUDE_DONE_AT on (20 for the
# loops that stop on the promise, 1 for the runners that take one task per call). The prompt is
# read from standard input when none is given as an argument, as claude does. Each call appends
# a line to bench-log.txt in the working directory (a change to commit). The first call's argv
# and standard input are kept, to time the agent alone with them.
cat >"$WORK/fakebin/claude" <<'EOF'
#!/usr/bin/env bash
argv=("$@")
dir=${FAKE_CLAUDE_DIR:?FAKE_CLAUDE_DIR is not set}
done_at=${FAKE_CLAUDE_DONE_AT:-1}
format=text prompt= given=
while [ $# -gt 0 ]; do
  case $1 in
    --version | -v) echo '2.1.197 (Claude Code)'; exit 0 ;;
    --output-format) format=${2:-text}; shift ;;
    --output-format=*) format=${1#*=} ;;
    --model | --add-dir | --permission-mode | --allowedTools | --allowed-tools | --disallowedTools | \
      --disallowed-tools | --append-system-prompt | --system-prompt | --max-turns | --resume | -r | \
      --session-id | --mcp-config | --settings | --fallback-model | --input-format | --agents) shift ;;
    -*) ;;
    *) prompt=$1 given=1 ;;
  esac
  [ $# -gt 0 ] && shift
done
[ -n "$given" ] || IFS= read -r -d '' prompt || true
n=0
[ -f "$dir/count" ] && { read -r n <"$dir/count" || true; }
n=$((n + 1))
printf '%s\n' "$n" >"$dir/count"
if [ "$n" -eq 1 ]; then
  printf '%q ' "${argv[@]}" >"$dir/argv"
  [ -n "$given" ] || printf '%s' "$prompt" >"$dir/stdin"
fi
printf 'call %s at %s (%s bytes of prompt)\n' "$n" "$EPOCHREALTIME" "${#prompt}" >>bench-log.txt
if [ "$n" -ge "$done_at" ]; then
  text='Appended the line; every task is done. <promise>COMPLETE</promise>'
else
  text='Appended the line; there is more to do.'
fi
sid="0b5e7c1a-6d2f-4e8b-9c3a-$RANDOM$RANDOM"
usage='"usage":{"input_tokens":1200,"output_tokens":40,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}'
case $format in
  stream-json)
    printf '%s\n' \
      '{"type":"system","subtype":"init","cwd":"'"$PWD"'","session_id":"'"$sid"'","tools":["Bash","Edit","Read","Write"],"mcp_servers":[],"model":"fake-model","permissionMode":"bypassPermissions","apiKeySource":"none","claude_code_version":"2.1.197","output_style":"default"}' \
      '{"type":"assistant","message":{"id":"msg_01","type":"message","role":"assistant","model":"fake-model","content":[{"type":"tool_use","id":"toolu_01","name":"Edit","input":{"file_path":"'"$PWD"'/bench-log.txt","old_string":"","new_string":"call '"$n"'"}}],"stop_reason":null,"stop_sequence":null,'"$usage"'},"parent_tool_use_id":null,"session_id":"'"$sid"'"}' \
      '{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01","type":"tool_result","content":"The file '"$PWD"'/bench-log.txt has been updated."}]},"parent_tool_use_id":null,"session_id":"'"$sid"'"}' \
      '{"type":"assistant","message":{"id":"msg_02","type":"message","role":"assistant","model":"fake-model","content":[{"type":"text","text":"'"$text"'"}],"stop_reason":null,"stop_sequence":null,'"$usage"'},"parent_tool_use_id":null,"session_id":"'"$sid"'"}' \
      '{"type":"result","subtype":"success","is_error":false,"duration_ms":12,"duration_api_ms":8,"num_turns":2,"result":"'"$text"'","stop_reason":"end_turn","session_id":"'"$sid"'","total_cost_usd":0.0042,"usage":{"input_tokens":2400,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":80,"service_tier":"standard"},"permission_denials":[],"terminal_reason":"completed"}'
    ;;
  json)
    printf '%s\n' '{"type":"result","subtype":"success","is_error":false,"num_turns":2,"result":"'"$text"'","session_id":"'"$sid"'","total_cost_usd":0.0042,"usage":{"input_tokens":2400,"output_tokens":80}}'
    ;;
  *) printf '%s\n' "$text" ;;
esac
EOF
chmod +x "$WORK/fakebin/claude"

# The floor: the least a loop can do. MAX COMMIT(1|0) TASK.
cat >"$WORK/bin/floor-loop" <<'EOF'
#!/usr/bin/env bash
max=$1 commit=$2 task=$3
for ((i = 1; i <= max; i++)); do
  out=$(claude -p "$task" --output-format stream-json --verbose --dangerously-skip-permissions)
  if [ "$commit" = 1 ]; then git add -A && git commit -qm "Iteration $i"; fi
  [[ $out == *'<promise>COMPLETE</promise>'* ]] && exit 0
done
exit 1
EOF

# The agent alone: REC N runs it N times with the argv (and standard input, through a pipe as
# the runner gave it) kept in REC by a runner's first call. N=0 times the script's own start.
cat >"$WORK/bin/agent-loop" <<'EOF'
#!/usr/bin/env bash
rec=$1 n=$2
eval "args=($(<"$rec/argv"))"
printf '0\n' >"$FAKE_CLAUDE_DIR/count"
if [ -f "$rec/stdin" ]; then
  input=$(<"$rec/stdin")
  for ((i = 0; i < n; i++)); do claude "${args[@]}" <<<"$input" >/dev/null; done
else
  for ((i = 0; i < n; i++)); do claude "${args[@]}" </dev/null >/dev/null; done
fi
EOF

# Before each timed run (hyperfine --prepare): note what the previous run did (agent calls and
# commits) and lay a fresh copy of the template.
#   prep reset|record TEMPLATE RUN FAKEDIR RECORD
cat >"$WORK/bin/prep" <<'EOF'
#!/usr/bin/env bash
set -eu
what=$1 template=$2 run=$3 fake=$4 record=$5
if [ -f "$fake/count" ]; then
  read -r calls <"$fake/count"
  commits=$(($(git -C "$run" rev-list --count HEAD) - $(cat "$template.commits")))
  echo "$calls $commits" >>"$record"
fi
[ "$what" = record ] && exit 0
rm -rf "$run" "$fake"
mkdir -p "$fake"
cp -a "$template" "$run"
# A fresh copy's index no longer matches the files' inodes and ctimes; refresh it, as a user's
# repository is, so that no runner pays for re-reading every file.
git -C "$run" update-index -q --refresh >/dev/null 2>&1 || true
# Flush what the copy wrote, so that its write-back does not land in the timed run (it slows
# every fsync there, and ralph and git fsync).
sync
EOF

# --- Peers from npm --------------------------------------------------------------------------------
PEERS="$WORK/peers"
mkdir -p "$PEERS"
declare -A PEER_FAIL=() PEER_VERSION=() PEER_BIN=()
# The last meaningful line of a failed npm install.
npm_reason() {
  local log=$1 script last
  script=$(sed -n 's/^npm error command sh -c //p' "$log" | tail -n 1)
  grep '^npm error' "$log" | grep -v -e 'A complete log' -e '^npm error *$' -e '^npm error code ' \
    -e '^npm error path ' -e '^npm error command ' | sed -e 's/^npm error //' -e 's/^404 *//' >"$log.errors" || true
  last=$(grep -Ei 'error|not found|not in this registry|network|timed? ?out|E[A-Z_]{4,}' "$log.errors" | tail -n 1)
  [ -n "$last" ] || last=$(tail -n 1 "$log.errors")
  [ -n "$last" ] || last=$(grep -v '^ *$' "$log" | tail -n 1)
  if [ -n "$script" ]; then
    echo "npm install failed in its install script \`$script\`: ${last:0:200}"
  else
    echo "npm install failed: ${last:0:200}"
  fi
}
npm_add() { # PREFIX LOGNAME SPEC [NPM FLAGS...]: 0 when installed
  local prefix=$1 name=$2 spec=$3
  shift 3
  say "npm install $spec"
  timeout "$INSTALL_TIMEOUT" npm install --prefix "$prefix" --no-audit --no-fund --save-exact "$@" "$spec" \
    >"$WORK/out/npm-$name.log" 2>&1
}
peer_install() { # KEY DISPLAY SPEC BIN [NPM FLAGS...]
  local key=$1 display=$2 spec=$3 bin=$4 rc=0 version
  shift 4
  npm_add "$PEERS" "$key" "$spec" "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then
    if [ "$rc" -eq 124 ]; then
      PEER_FAIL[$key]="npm install timed out after ${INSTALL_TIMEOUT}s"
    else
      PEER_FAIL[$key]=$(npm_reason "$WORK/out/npm-$key.log")
    fi
    say "$display: ${PEER_FAIL[$key]}"
    return 0
  fi
  if [ ! -x "$PEERS/node_modules/.bin/$bin" ]; then
    PEER_FAIL[$key]="installed, but no \`$bin\` in node_modules/.bin"
    return 0
  fi
  if ! version=$(cd "$WORK/home" && PATH="$PEERS/node_modules/.bin:$PATH_BASE" HOME="$WORK/home" \
    timeout 60 "$PEERS/node_modules/.bin/$bin" --version </dev/null 2>"$WORK/out/version-$key.err"); then
    PEER_FAIL[$key]="\`$bin --version\` failed: $(tail -n 1 "$WORK/out/version-$key.err" | cut -c1-200)"
    return 0
  fi
  PEER_BIN[$key]="$PEERS/node_modules/.bin/$bin"
  PEER_VERSION[$key]=$(printf '%s\n' "$version" | grep -Eo '[0-9]+\.[0-9]+\.[0-9]+[^ ]*' | head -n 1)
}
say "installing the peers from npm into $PEERS"
BUN_VERSION=
if npm_add "$PEERS" bun bun@1.4.5 && BUN_VERSION=$(PATH="$PEERS/node_modules/.bin:$PATH_BASE" \
  timeout 60 bun --version 2>/dev/null); then
  :
else
  BUN_VERSION=
fi
if [ -n "$BUN_VERSION" ]; then
  peer_install tui ralph-tui ralph-tui@0.11.0 ralph-tui
else
  PEER_FAIL[tui]="bun 1.4.5 (its runtime) could not be installed or run: $(npm_reason "$WORK/out/npm-bun.log")"
fi
peer_install ralphy ralphy ralphy-cli@4.7.2 ralphy
# Its preinstall is `npx only-allow pnpm`, which fails under npm.
peer_install starter ralph-starter ralph-starter@0.5.2 ralph-starter --ignore-scripts
# ralph-orchestrator: its postinstall downloads the binary from GitHub releases. In its own prefix,
# so that a failed install leaves nothing behind among the others.
ORCH_NOTE=
if npm_add "$WORK/peers-orchestrator" orchestrator @ralph-orchestrator/ralph-cli; then
  ORCH_NOTE="installed ($(sed -n 's/.*"@ralph-orchestrator\/ralph-cli": "\(.*\)".*/\1/p' \
    "$WORK/peers-orchestrator/package.json")), but not benchmarked: peer-bench.md gives it no run line"
else
  ORCH_NOTE=$(npm_reason "$WORK/out/npm-orchestrator.log")
fi
say "ralph-orchestrator: $ORCH_NOTE"

# From here on: the fake agent first on PATH, then the peers and bun; a home of our own.
export PATH="$WORK/fakebin:$PEERS/node_modules/.bin:$PATH_BASE"
export HOME="$WORK/home"
unset XDG_CONFIG_HOME XDG_DATA_HOME XDG_STATE_HOME XDG_CACHE_HOME

# --- Repositories and the runners' templates ----------------------------------------------------
# make_base NAME FILES: FILES=0 is the small one (README + 5 files).
make_base() {
  local dir="$WORK/repos/$1" files=$2
  mkdir -p "$dir"
  (
    cd "$dir"
    git init -q
    echo "# Bench repository" >README.md
    if [ "$files" -eq 0 ]; then
      for i in 1 2 3 4 5; do printf 'file %s\nsome text so that the file has a body\n' "$i" >"file$i.txt"; done
    else
      bench_files "$files"
    fi
    timeout 600 git add -A
    timeout 600 git commit -q -m "generated"
  )
}
# make_template SIZE KIND: the base repository with the runner's own files committed, packed.
make_template() {
  local size=$1 kind=$2 dir="$WORK/repos/$1-$2"
  cp -a "$WORK/repos/$size" "$dir"
  (
    cd "$dir"
    case $kind in
      plain) ;;
      tui-commit | tui-nocommit)
        mkdir -p .ralph-tui
        {
          echo 'configVersion = "2.1"'
          echo 'tracker = "json"'
          echo 'agent = "claude"'
          echo 'iterationDelay = 0'
          echo "autoCommit = $([ "$kind" = tui-commit ] && echo true || echo false)"
          echo
          echo '[[agents]]'
          echo 'name = "claude"'
          echo 'plugin = "claude"'
          echo 'default = true'
          echo
          echo '[agents.options]'
          echo 'printMode = "stream"'
        } >.ralph-tui/config.toml
        {
          echo '{'
          echo '  "name": "Bench",'
          echo '  "branchName": "main",'
          echo '  "userStories": ['
          for i in $(seq 1 "$ITERS"); do
            printf '    {"id": "US-%03d", "title": "Task %d", "description": "Append line %d to bench-log.txt.", "acceptanceCriteria": ["bench-log.txt has line %d"], "priority": 1, "passes": false, "dependsOn": []}%s\n' \
              "$i" "$i" "$i" "$i" "$([ "$i" -lt "$ITERS" ] && echo ,)"
          done
          echo '  ]'
          echo '}'
        } >prd.json
        ;;
      ralphy)
        {
          echo '# Bench'
          echo
          echo '## Tasks'
          echo
          for i in $(seq 1 "$ITERS"); do echo "- [ ] Task $i: append line $i to bench-log.txt"; done
        } >PRD.md
        ;;
    esac
    if [ "$kind" != plain ]; then
      git add -A
      git commit -q -m "$kind files"
    fi
    git config gc.auto 0
    timeout 600 git gc -q
    git rev-list --count HEAD >"$dir.commits"
  )
}

# --- Measuring one runner -------------------------------------------------------------------------
# Results, keyed by "GROUP|KEY".
declare -A OVER=() AGENT=() FAIL=() COMMITS=()
hf() { # FILE-NAME hyperfine-args...: quietly, with CSV and JSON exports
  local name=$1
  shift
  echo "+ hyperfine $*" >>"$LOG"
  timeout 3600 hyperfine -N --style basic --export-csv "$WORK/hf/$name.csv" --export-json "$WORK/hf/$name.json" \
    "$@" >>"$LOG" 2>&1
}
mean_of() { awk -F, 'NR == 2 { print $2 }' "$WORK/hf/$1.csv"; }
mean_named() { awk -F, -v n="$2" 'NR > 1 && $1 == n { print $2 }' "$WORK/hf/$1.csv"; }
exit_codes() { # the exit codes of a JSON export's runs, space-separated
  awk '/"exit_codes"/ { on = 1; next } on && /\]/ { on = 0 } on { gsub(/[ ,]/, ""); if ($0 != "") printf "%s ", $0 }' \
    "$WORK/hf/$1.json"
}
calc() { awk "BEGIN { printf \"%.${2:-2}f\", $1 }"; }
lt() { awk "BEGIN { exit !(($1) < ($2)) }"; }
last_line() { # FILE: its last non-empty line, escapes stripped, shortened
  sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e 's/\r/\n/g' "$1" | grep -v '^[[:space:]]*$' | tail -n 1 | cut -c1-160
}

# measure GROUP KEY DISPLAY TEMPLATE DONE_AT COMMAND...
measure() {
  local group=$1 key=$2 display=$3 template=$4 done_at=$5
  shift 5
  local id="$group|$key" slug="${group//\//-}-$key"
  local run="$WORK/runs/$slug" fake="$WORK/fake/$slug" rec="$WORK/rec/$slug" out="$WORK/out/$slug"
  local record="$WORK/out/$slug.record" prep="$WORK/bin/prep"
  local rc=0 t0 t1 dur calls cmd i codes bad
  say "$group: $display"
  # 1. One run, checked: it must end by itself, with exit status 0, after exactly ITERS calls.
  bash "$prep" reset "$template" "$run" "$fake" /dev/null
  t0=$EPOCHREALTIME
  (cd "$run" && FAKE_CLAUDE_DIR="$fake" FAKE_CLAUDE_DONE_AT="$done_at" \
    timeout -k 5 "$CHECK_TIMEOUT" "$@" </dev/null >"$out.check.log" 2>&1) || rc=$?
  t1=$EPOCHREALTIME
  dur=$(calc "$t1 - $t0" 1)
  calls=0
  [ ! -f "$fake/count" ] || read -r calls <"$fake/count" || true
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    FAIL[$id]="did not end within ${CHECK_TIMEOUT}s (killed after $calls agent calls)"
  elif [ "$rc" -ne 0 ]; then
    FAIL[$id]="exit status $rc after $calls agent calls: $(last_line "$out.check.log")"
  elif [ "$calls" -ne "$ITERS" ]; then
    FAIL[$id]="made $calls agent calls, not $ITERS (exit status 0): $(last_line "$out.check.log")"
  fi
  if [ -n "${FAIL[$id]:-}" ]; then
    say "$display: not timed: ${FAIL[$id]}"
    return 0
  fi
  mkdir -p "$rec"
  cp "$fake/argv" "$rec/argv"
  [ ! -f "$fake/stdin" ] || cp "$fake/stdin" "$rec/stdin"
  # 2. The agent alone, with the argv and standard input this runner gave it, in a copy of the
  #    same-size repository: (N calls - the script's own start) / N.
  (cd "$WORK/repos/$SIZE-agent" && mkdir -p "$fake-alone" &&
    hf "$slug-agent" --warmup 1 --runs "$AGENT_RUNS" \
      -n calls "env FAKE_CLAUDE_DIR=$fake-alone FAKE_CLAUDE_DONE_AT=$done_at bash $WORK/bin/agent-loop $rec $ITERS" \
      -n start "env FAKE_CLAUDE_DIR=$fake-alone FAKE_CLAUDE_DONE_AT=$done_at bash $WORK/bin/agent-loop $rec 0") || {
    FAIL[$id]="timing the agent alone failed (hyperfine)"
    tail -n 20 "$LOG" >&2
    return 0
  }
  AGENT[$id]=$(calc "($(mean_named "$slug-agent" calls) - $(mean_named "$slug-agent" start)) / $ITERS" 6)
  # 3. The timed runs, each on a fresh copy. A run's time limit follows from the checked run's.
  local limit
  limit=$(awk -v d="$dur" 'BEGIN { printf "%d", d * 5 + 60 }')
  cmd=$(printf '%q ' timeout -k 5 "$limit" env -C "$run" "FAKE_CLAUDE_DIR=$fake" "FAKE_CLAUDE_DONE_AT=$done_at" "$@")
  rm -f "$fake/count" "$record"
  : >"$record"
  hf "$slug" -i --runs "$RUNS" --prepare "bash $prep reset $template $run $fake $record" -n "$display" "$cmd" || {
    FAIL[$id]="hyperfine failed"
    tail -n 20 "$LOG" >&2
    return 0
  }
  bash "$prep" record "$template" "$run" "$fake" "$record"
  codes=$(exit_codes "$slug")
  bad=
  for i in $codes; do [ "$i" = 0 ] || bad=1; done
  while read -r calls _; do [ "$calls" = "$ITERS" ] || bad=1; done <"$record"
  [ "$(wc -l <"$record")" -eq "$RUNS" ] || bad=1
  if [ -n "$bad" ]; then
    FAIL[$id]="timed runs went wrong: exit statuses ${codes% }; agent calls per run $(awk '{ printf "%s%s", s, $1; s = " " }' "$record")"
    say "$display: ${FAIL[$id]}"
    return 0
  fi
  COMMITS[$id]=$(awk '{ printf "%s%s", s, $2; s = " " }' "$record")
  OVER[$id]=$(calc "($(mean_of "$slug") - $ITERS * ${AGENT[$id]}) / $ITERS * 1000" 3)
  say "$display: $(calc "${OVER[$id]}" 1) ms/iteration (agent alone $(calc "${AGENT[$id]} * 1000" 2) ms/call; commits per run: ${COMMITS[$id]})"
}

# --- The groups ------------------------------------------------------------------------------------
GROUPS_DONE=()
declare -A GROUP_TITLE=() GROUP_ROWS=()
for SIZE in small big; do
  if [ "$SIZE" = small ]; then
    say "small repository: README + 5 files"
    make_base small 0
  else
    say "big repository: $BIG_FILES files in $((BIG_FILES / 100)) directories"
    make_base big "$BIG_FILES"
  fi
  for kind in plain tui-commit tui-nocommit ralphy; do make_template "$SIZE" "$kind"; done
  cp -a "$WORK/repos/$SIZE" "$WORK/repos/$SIZE-agent"
  size_title=$([ "$SIZE" = small ] && echo "small repository (README + 5 files)" ||
    printf '%s-file repository (%s directories)' "$(echo "$BIG_FILES" | sed -E ':a;s/^([0-9]+)([0-9]{3})/\1,\2/;ta')" "$((BIG_FILES / 100))")
  for MODE_C in commit no-commit; do
    group="$SIZE/$MODE_C"
    GROUPS_DONE+=("$group")
    rows=()
    T="$WORK/repos/$SIZE"
    if [ "$MODE_C" = commit ]; then
      GROUP_TITLE[$group]="$size_title, runners that commit"
      measure "$group" ralph "ralph" "$T-plain" "$ITERS" \
        "$RALPH" --agent claude-code --pause 0 --max-iterations "$MAX_ITERS" --color never "$TASK"
      rows+=(ralph)
      if [ -n "${PEER_BIN[tui]:-}" ]; then
        measure "$group" tui "ralph-tui (autoCommit)" "$T-tui-commit" 1 \
          "${PEER_BIN[tui]}" run --prd ./prd.json --headless --no-setup --no-notify --iterations "$MAX_ITERS"
      fi
      rows+=(tui)
      if [ -n "${PEER_BIN[starter]:-}" ]; then
        measure "$group" starter "ralph-starter --commit" "$T-plain" "$ITERS" \
          "${PEER_BIN[starter]}" run "$TASK" --agent claude-code --max-iterations "$MAX_ITERS" --headless \
          --no-auto-skills --commit
      fi
      rows+=(starter)
      measure "$group" floor "bash loop floor +commit" "$T-plain" "$ITERS" \
        bash "$WORK/bin/floor-loop" "$MAX_ITERS" 1 "$TASK"
      rows+=(floor)
    else
      GROUP_TITLE[$group]="$size_title, no commits"
      measure "$group" ralph "ralph --no-commit" "$T-plain" "$ITERS" \
        "$RALPH" --agent claude-code --pause 0 --max-iterations "$MAX_ITERS" --color never --no-commit "$TASK"
      rows+=(ralph)
      if [ -n "${PEER_BIN[tui]:-}" ]; then
        measure "$group" tui "ralph-tui" "$T-tui-nocommit" 1 \
          "${PEER_BIN[tui]}" run --prd ./prd.json --headless --no-setup --no-notify --iterations "$MAX_ITERS"
      fi
      rows+=(tui)
      if [ -n "${PEER_BIN[ralphy]:-}" ]; then
        measure "$group" ralphy "ralphy" "$T-ralphy" 1 \
          "${PEER_BIN[ralphy]}" --prd PRD.md --fast --max-iterations "$MAX_ITERS"
      fi
      rows+=(ralphy)
      if [ -n "${PEER_BIN[starter]:-}" ]; then
        measure "$group" starter "ralph-starter" "$T-plain" "$ITERS" \
          "${PEER_BIN[starter]}" run "$TASK" --agent claude-code --max-iterations "$MAX_ITERS" --headless \
          --no-auto-skills
      fi
      rows+=(starter)
      measure "$group" floor "bash loop floor" "$T-plain" "$ITERS" \
        bash "$WORK/bin/floor-loop" "$MAX_ITERS" 0 "$TASK"
      rows+=(floor)
    fi
    GROUP_ROWS[$group]="${rows[*]}"
  done
  rm -rf "$WORK/runs" "$WORK/repos"
  mkdir -p "$WORK/runs" "$WORK/repos"
done

# --- Report ----------------------------------------------------------------------------------------
display_of() { # GROUP KEY: the runner's name in that group, also when it was never measured
  local mode=${1#*/}
  case $2 in
    ralph) [ "$mode" = commit ] && echo "ralph" || echo "ralph --no-commit" ;;
    tui) [ "$mode" = commit ] && echo "ralph-tui (autoCommit)" || echo "ralph-tui" ;;
    ralphy) echo "ralphy" ;;
    starter) [ "$mode" = commit ] && echo "ralph-starter --commit" || echo "ralph-starter" ;;
    floor) [ "$mode" = commit ] && echo "bash loop floor +commit" || echo "bash loop floor" ;;
  esac
}
signed() { awk -v v="$1" 'BEGIN { s = sprintf("%+.1f", v); if (s == "-0.0" || s == "+0.0") s = "0.0"; sub(/^-/, "−", s); print s }'; }
NOT_LOWEST=()
NOT_RUN=()
TABLES=$(
  for group in "${GROUPS_DONE[@]}"; do
    commits=$([ "${group#*/}" = commit ] && echo yes || echo no)
    floor=${OVER["$group|floor"]:-}
    ralph_over=${OVER["$group|ralph"]:-}
    echo "### ${GROUP_TITLE[$group]}"
    echo
    echo "| runner | commits | overhead (ms/iteration) | − floor (ms) | × ralph |"
    echo "|---|---|---|---|---|"
    notes=()
    for key in ${GROUP_ROWS[$group]}; do
      id="$group|$key"
      name=$(display_of "$group" "$key")
      c=$commits
      [ "$key" != ralphy ] || c="no (the runner never commits)"
      over=${OVER[$id]:-}
      if [ -z "$over" ]; then
        echo "| $name | $c | not run | — | — |"
        continue
      fi
      minus=$([ -n "$floor" ] && signed "$(calc "$over - $floor" 3)" || echo "—")
      [ "$key" != floor ] || minus=0
      times=$([ -n "$ralph_over" ] && awk -v a="$over" -v b="$ralph_over" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "—" }' || echo "—")
      echo "| $name | $c | $(calc "$over" 1) | $minus | $times |"
      notes+=("$name $(calc "${AGENT[$id]} * 1000" 2)")
      if [ "$commits" = yes ]; then
        for n in ${COMMITS[$id]}; do
          if [ "$n" != "$ITERS" ]; then
            echo "$name made ${COMMITS[$id]// /, } commits in its $RUNS runs ($ITERS iterations each)." >>"$WORK/out/odd"
            break
          fi
        done
      fi
    done
    echo
    echo "Agent alone (ms per call, with each runner's argv and input): $(printf '%s; ' "${notes[@]}" | sed 's/; $//')."
    echo
  done
)
for group in "${GROUPS_DONE[@]}"; do
  ralph=${OVER["$group|ralph"]:-}
  beaten=()
  for key in ${GROUP_ROWS[$group]}; do
    if [ "$key" = ralph ] || [ "$key" = floor ]; then continue; fi
    over=${OVER["$group|$key"]:-}
    if [ -n "$over" ] && [ -n "$ralph" ] && ! lt "$ralph" "$over"; then
      beaten+=("$(display_of "$group" "$key") $(calc "$over" 1) ms")
    fi
  done
  if [ -z "$ralph" ]; then
    NOT_LOWEST+=("$group (ralph did not run: ${FAIL["$group|ralph"]:-unknown})")
  elif [ ${#beaten[@]} -gt 0 ]; then
    NOT_LOWEST+=("$group (ralph $(calc "$ralph" 1) ms; $(printf '%s, ' "${beaten[@]}" | sed 's/, $//'))")
  fi
  for key in ${GROUP_ROWS[$group]}; do
    id="$group|$key"
    if [ -z "${OVER[$id]:-}" ] && [ -n "${FAIL[$id]:-}" ]; then
      NOT_RUN+=("$(display_of "$group" "$key"), $group: ${FAIL[$id]}")
    fi
  done
done
for key in tui ralphy starter; do
  if [ -n "${PEER_FAIL[$key]:-}" ]; then
    case $key in
      tui) NOT_RUN+=("ralph-tui (npm \`ralph-tui@0.11.0\` on \`bun@1.4.5\`): ${PEER_FAIL[$key]}") ;;
      ralphy) NOT_RUN+=("ralphy (npm \`ralphy-cli@4.7.2\`): ${PEER_FAIL[$key]}") ;;
      starter) NOT_RUN+=("ralph-starter (npm \`ralph-starter@0.5.2\`): ${PEER_FAIL[$key]}") ;;
    esac
  fi
done
NOT_RUN+=("ralph-orchestrator (npm \`@ralph-orchestrator/ralph-cli\`): $ORCH_NOTE")

ELAPSED=$(($(date +%s) - STARTED))
cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
mem=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo 2>/dev/null || true)
versions="${RALPH_VERSION}"
[ -z "${PEER_VERSION[tui]:-}" ] || versions+=", ralph-tui ${PEER_VERSION[tui]} on bun $BUN_VERSION"
[ -z "${PEER_VERSION[ralphy]:-}" ] || versions+=", ralphy-cli ${PEER_VERSION[ralphy]}"
[ -z "${PEER_VERSION[starter]:-}" ] || versions+=", ralph-starter ${PEER_VERSION[starter]}"
versions+=", node $(node --version), npm $(npm --version 2>/dev/null), $(git --version | sed 's/ version//'), $(hyperfine --version)"
BLOCK=$(
  echo "Produced by \`scripts/bench-peers.sh\` ($MODE mode) on $(date -u +%Y-%m-%d) in ${ELAPSED}s. Machine:"
  echo "$(nproc) cores, ${cpu_model:-unknown CPU}, ${mem:-unknown memory}, load average $LOAD_START at the start."
  echo "Versions: $versions."
  echo
  echo "Every runner drives the same fake \`claude\` (bash builtins, Claude Code stream-json events) for"
  echo "$ITERS iterations: the promise-driven loops get \`<promise>COMPLETE</promise>\` on call $ITERS, the task"
  echo "runners on every call, with $ITERS tasks. Each run starts from a fresh copy of the repository;"
  echo "overhead per iteration = (mean wall time of the loop − $ITERS × the agent's own time) / $ITERS, means"
  echo "of $RUNS runs. − floor: against the bash loop (\`out=\$(claude -p …)\`, then \`git add -A && git"
  echo "commit\` when committing, then the promise check); × ralph: against ralph in the same group."
  echo
  echo "$TABLES"
  echo
  if [ -s "$WORK/out/odd" ]; then
    echo "Odd:"
    echo
    sed 's/^/- /' "$WORK/out/odd"
    echo
  fi
  echo "Not run:"
  echo
  printf -- '- %s\n' "${NOT_RUN[@]}"
)
echo
echo "$BLOCK"
echo

if [ "$MODE" = full ]; then
  mkdir -p "$(dirname "$PEERS_RESULTS")"
  [ -f "$PEERS_RESULTS" ] || : >"$PEERS_RESULTS"
  printf '%s\n' "$BLOCK" >"$WORK/block"
  if grep -qx '<!-- peers -->' "$PEERS_RESULTS" && grep -qx '<!-- /peers -->' "$PEERS_RESULTS"; then
    awk -v block="$WORK/block" '
      $0 == "<!-- peers -->" { print; print ""; while ((getline line < block) > 0) print line; print ""; skip = 1; next }
      $0 == "<!-- /peers -->" { skip = 0 }
      !skip { print }
    ' "$PEERS_RESULTS" >"$WORK/results.new"
    cat "$WORK/results.new" >"$PEERS_RESULTS"
  else
    [ -z "$(tail -c 1 "$PEERS_RESULTS")" ] || echo >>"$PEERS_RESULTS"
    printf '\n## Peers\n\n<!-- peers -->\n\n%s\n\n<!-- /peers -->\n' "$BLOCK" >>"$PEERS_RESULTS"
  fi
  echo "Wrote the peers' tables into $PEERS_RESULTS."
fi

if [ ${#NOT_LOWEST[@]} -gt 0 ]; then
  echo "ralph's overhead is not the lowest in: $(printf '%s; ' "${NOT_LOWEST[@]}" | sed 's/; $//') ($MODE mode, ${ELAPSED}s)."
  exit 2
fi
skipped=$((${#NOT_RUN[@]} - 1))
if [ "$skipped" -gt 0 ]; then
  echo "ralph's overhead is the lowest in every group, of the runners that ran ($skipped not run: see above; $MODE mode, ${ELAPSED}s)."
else
  echo "ralph's overhead is the lowest in every group ($MODE mode, ${ELAPSED}s)."
fi
