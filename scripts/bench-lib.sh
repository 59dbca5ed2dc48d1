# shellcheck shell=bash
# What scripts/bench.sh and scripts/bench-peers.sh share; sourced by both.

# A clean, reproducible git for everything under WORK: its own configuration (identity, `main`,
# no automatic gc, no signing), no system configuration, no repository found above CEILING, none
# of the variables that would point git elsewhere.
bench_git_env() { # WORK CEILING
  cat >"$1/gitconfig" <<'CONFIG'
[user]
	name = Bench
	email = bench@example.invalid
[init]
	defaultBranch = main
[gc]
	auto = 0
[commit]
	gpgSign = false
[advice]
	detachedHead = false
CONFIG
  export GIT_CONFIG_GLOBAL="$1/gitconfig" GIT_CONFIG_NOSYSTEM=1 GIT_CEILING_DIRECTORIES="$2"
  unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE
}

# N files of three lines in N/100 folders, `src/d000/f00000.txt` on, in the current directory.
bench_files() { # N
  seq -f 'src/d%03g' 0 $((($1 + 99) / 100 - 1)) | xargs mkdir -p
  awk -v n="$1" 'BEGIN {
    for (i = 0; i < n; i++) {
      f = sprintf("src/d%03d/f%05d.txt", int(i / 100), i)
      printf "file %d\nsecond line of file %d\nsome more text so that the file has a body\n", i, i > f
      close(f)
    }
  }'
}
