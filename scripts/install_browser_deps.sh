#!/usr/bin/env bash
# System packages of tests/e2e/test_web_page.py: Debian chromium (driven by Playwright for Python; never
# `playwright install`, which downloads a browser of its own), espeak-ng and sox (the fake microphone's wav); and curl,
# which the documentation's shell examples call (tests/e2e/test_doc_examples.py).
# Non-interactive; nothing to do when they are installed; a machine without apt-get is left alone.
set -euo pipefail
PACKAGES=(chromium espeak-ng sox curl)
missing=()
for cmd in "${PACKAGES[@]}"; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "install_browser_deps.sh: no apt-get; install ${missing[*]} yourself or the browser test is skipped" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "install_browser_deps.sh: not root and no sudo; install ${missing[*]} yourself" >&2
    exit 1
  fi
  SUDO="sudo"
fi
$SUDO apt-get update -q
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${PACKAGES[@]}"  # env: sudo drops variables
