#!/usr/bin/env bash
# The main job, from a fresh machine: install, then grade the staff reference through the
# autograder exactly as a student submission would be graded, and print the score.
#
#     bash scripts/main.sh                          # all parts, gloo on CPU, the graders' world sizes 2,4,8
#     bash scripts/main.sh --world-sizes 1,2,4      # extra arguments go to the grader (python -m scripts.grading)
#     bash scripts/main.sh --parts 1,2
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
submission=$(mktemp -d)
trap 'rm -rf "$submission"' EXIT
# A submission is a folder holding cs336_systems/ with the student's part modules.
mkdir -p "$submission/cs336_systems"
cp reference_solutions/*.py "$submission/cs336_systems/"
mkdir -p out
# Graders grade at world sizes 2, 4 and 8 (8-GPU nodes): the main job grades there; a later --world-sizes wins.
.venv/bin/python -m scripts.grading "$submission" --out out/results.json --world-sizes 2,4,8 "$@"
echo "results: out/results.json"
# The reference must get every point it was graded on; anything less is a bug in the kit, so fail.
.venv/bin/python -c '
import json, sys
tests = json.load(open("out/results.json"))["tests"]
lost = [t["name"] for t in tests if t["status"] != "passed"] if tests else ["all (no test ran)"]
if lost:
    sys.exit(f"FAIL: the reference did not get full marks; points lost on: {lost}")'
