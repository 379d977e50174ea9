#!/usr/bin/env bash
# Headless Chromium + chromedriver for the browser test of the Snakemake HTML report
# (tests/workflow/test_report_browser.py). Idempotent: does nothing when both are on PATH.
# Debian/Ubuntu with apt; run as root or with sudo available.
set -euo pipefail
have() { command -v "$1" >/dev/null 2>&1; }
if have chromium && have chromedriver; then
  echo "browser_up: $(chromium --version 2>/dev/null | head -1), chromedriver present"
  exit 0
fi
if ! have apt-get; then
  echo "browser_up: apt-get not found; install chromium and chromedriver by hand" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  have sudo || { echo "browser_up: need root or sudo for apt-get" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
echo "browser_up: installed $(chromium --version 2>/dev/null | head -1)"
