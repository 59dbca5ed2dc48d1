#!/usr/bin/env bash
# Installs the programs the test suite drives besides the agent CLIs: tmux (the `--watch` screen
# test runs ralph in a tmux session), bubblewrap (the `--sandbox` tests) and Chromium (the
# report's and the `--serve` page's browser tests). Does nothing when they are there already. Debian/Ubuntu
# (apt-get); elsewhere it says what to install and the tests that need it skip with a note.
set -euo pipefail

missing=()
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ||
  command -v google-chrome >/dev/null 2>&1 || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-test-tools: please install: ${missing[*]} (the tests that need them are skipped)" >&2
  exit 0
fi
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
echo "install-test-tools: installing ${missing[*]}" >&2
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
  { "${sudo[@]}" apt-get update -qq >/dev/null 2>&1 &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }
