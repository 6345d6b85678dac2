#!/usr/bin/env bash
# release-check.sh — what must hold before a release is tagged, in the
# order that fails fastest: the module verifies, nothing refers outside the
# repository, formatting/vet/staticcheck/tidiness and generated code are
# current (make lint), and the whole suite passes with -race (make test).
#
#   scripts/release-check.sh
#
# It changes nothing it does not restore: make lint regenerates mocks and
# API code and fails if they differ from what is committed.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== go mod verify"
go mod verify

echo "== no links outside the repository"
if grep -rnI --exclude-dir=.git --exclude-dir=bin -e '\.\./shared' . ; then
	echo "the repository must stand alone: remove the references above" >&2
	exit 1
fi

echo "== clean tree"
if [ -n "$(git status --porcelain)" ]; then
	git status --short
	echo "commit or remove the changes above first" >&2
	exit 1
fi

echo "== make lint"
make lint

echo "== make test"
make test

echo "release checks passed at $(git rev-parse --short HEAD)"
