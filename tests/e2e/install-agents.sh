#!/usr/bin/env bash
# Installs the real agent CLIs (Claude Code, Codex, OpenCode, Gemini CLI, Qwen Code, pi, Copilot CLI,
# Factory Droid, Kilo Code, Cline, and the ACP adapters of Claude Code and Codex) from the npm registry, and Aider from PyPI (in a virtual
# environment), into a cache directory outside the repository, for ralph's end-to-end tests
# (tests/integration/real_agents.rs). Crush (its npm package downloads the binary from GitHub) and
# Mistral Vibe (Python 3.12 or later) are not installed.
#
#   tests/e2e/install-agents.sh            # installs into ${RALPH_AGENT_CACHE:-$HOME/.cache/ralph-agents}
#   RALPH_AGENT_CACHE=/opt/agents tests/e2e/install-agents.sh
#   RALPH_AGENT_UPGRADE=1 tests/e2e/install-agents.sh && cargo test real_agents   # newest releases
#
# Idempotent: when every binary is already in node_modules/.bin it only prints where they are.
# Needs node and npm (Debian's node 20 / npm 11 work), python3 with venv, and access to the npm
# registry and PyPI, nothing else. About 2.5 GB and 90 s for all eleven.
set -euo pipefail

# Without HOME (some CI runners), the tests look in the same fallback directory.
cache="${RALPH_AGENT_CACHE:-${HOME:-/tmp/ralph-no-home}/.cache/ralph-agents}"
# Pinned to the versions the tests and tests/fixtures/agents/ were recorded with; set
# RALPH_AGENT_UPGRADE=1 to try the latest ones.
# Two packages are named on purpose:
# - Qwen Code: without a version npm picks an old release that still supports node 20; name it.
# - Droid: the CLI's optional platform package is published under a newer patch version than the
#   CLI asks for, so npm skips it silently; name the platform package itself.
# - Kilo Code: the same, its platform package (7.7.9) lags behind the CLI package (7.8.1).
packages=(
    @anthropic-ai/claude-code@2.1.197 @openai/codex@0.169.0 opencode-ai@1.18.33
    @google/gemini-cli@0.61.0 @qwen-code/qwen-code@0.24.4 @mariozechner/pi-coding-agent@0.73.1
    @github/copilot@1.0.102 @factory/cli@0.225.1 @factory/cli-linux-x64@0.225.2
    @kilocode/cli@7.8.1 @kilocode/cli-linux-x64@7.7.9 cline@3.0.65
    @zed-industries/claude-agent-acp@0.23.1 @zed-industries/codex-acp@0.16.0
)
aider=aider-chat==0.86.2
if [[ "${RALPH_AGENT_UPGRADE:-0}" == 1 ]]; then
    packages=(
        @anthropic-ai/claude-code@latest @openai/codex@latest opencode-ai@latest
        @google/gemini-cli@latest @qwen-code/qwen-code@latest @mariozechner/pi-coding-agent@latest
        @github/copilot@latest @factory/cli@latest @factory/cli-linux-x64@latest
        @kilocode/cli@latest @kilocode/cli-linux-x64@latest cline@latest
        @zed-industries/claude-agent-acp@latest @zed-industries/codex-acp@latest
    )
    aider=aider-chat
fi
binaries=(claude codex opencode gemini qwen pi copilot droid kilocode cline claude-agent-acp codex-acp)

all_present() {
    local name
    for name in "${binaries[@]}"; do
        [[ -x "$cache/node_modules/.bin/$name" ]] || return 1
    done
    [[ -x "$cache/python/bin/aider" ]]
}

if ! command -v npm >/dev/null 2>&1; then
    echo "install-agents: npm is not installed (Debian: apt-get install npm)" >&2
    exit 1
fi

if [[ "${RALPH_AGENT_UPGRADE:-0}" != 1 ]] && all_present; then
    echo "install-agents: already installed in $cache"
else
    mkdir -p "$cache"
    cd "$cache"
    if [[ ! -f package.json ]]; then
        npm init -y >/dev/null
    fi
    echo "install-agents: installing ${packages[*]} and $aider into $cache (about 2.5 GB, 90 s)"
    # No audit/fund noise; install scripts may be reported as not covered by allowScripts,
    # the binaries work anyway (the platform packages are optional dependencies).
    npm install --no-audit --no-fund --loglevel=error "${packages[@]}"
    if [[ ! -x "$cache/python/bin/aider" || "${RALPH_AGENT_UPGRADE:-0}" == 1 ]]; then
        python3 -m venv "$cache/python"
        "$cache/python/bin/pip" install --quiet --disable-pip-version-check "$aider"
    fi
    if ! all_present; then
        echo "install-agents: npm finished but a binary is missing from $cache/node_modules/.bin" >&2
        ls -l "$cache/node_modules/.bin" >&2 || true
        exit 1
    fi
fi

for bin in "${binaries[@]/#/$cache/node_modules/.bin/}" "$cache/python/bin/aider"; do
    version="$(timeout 30 "$bin" --version </dev/null 2>/dev/null | head -n 1 || true)"
    printf '%-9s %s  (%s)\n' "${bin##*/}" "$bin" "${version:-version unknown}"
done
echo "Run the end-to-end tests with: RALPH_AGENT_CACHE=$cache cargo test --test integration real_agents"
