#!/usr/bin/env python3
"""Validate every dpt.report/1 file under the given directories.

A JSON file whose "schema" starts with "dpt.report/" is checked twice: against
schema-report.json (JSON Schema, python3-jsonschema: an oracle independent of
the C code) and with `dpt-report --check` (the C validator the writer and the
tool use).  Fails when any report is invalid or fewer than --min were found
(the producing tests must have run).  Files named by --skip prefixes (the bad-
input tests' deliberately broken files) are left out."""
import argparse, json, os, subprocess, sys

import jsonschema

ap = argparse.ArgumentParser()
ap.add_argument("--schema", required=True)
ap.add_argument("--tool", required=True)
ap.add_argument("--min", type=int, default=1)
ap.add_argument("--skip", action="append", default=[])
ap.add_argument("dirs", nargs="+")
a = ap.parse_args()

with open(a.schema) as f:
    schema = json.load(f)
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)

found, bad = [], []
for d in a.dirs:
    for root, dirs, files in os.walk(d):
        dirs[:] = [x for x in dirs if x not in ("chromium-profile", "CMakeFiles")]
        for name in files:
            if not (name.endswith(".json") or ".json.rank" in name):
                continue
            path = os.path.join(root, name)
            if any(path.startswith(s) for s in a.skip):
                continue
            try:
                with open(path, "rb") as f:
                    head = f.read(4096)
                if b'"dpt.report/' not in head:
                    continue
                doc = json.loads(open(path, "rb").read())
            except (OSError, ValueError):
                continue
            if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("dpt.report/"):
                continue
            found.append(path)
            errs = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
            for e in errs[:5]:
                bad.append(f"{path}: {'/'.join(map(str, e.path)) or '(top)'}: {e.message}")
            r = subprocess.run([a.tool, "--check", path], capture_output=True, text=True)
            if r.returncode != 0:
                bad.append(f"{path}: dpt-report --check: {r.stderr.strip()}")

for p in found:
    print("report", p)
for b in bad:
    print("INVALID", b)
print(f"{len(found)} report(s), {len(bad)} problem(s)")
if len(found) < a.min:
    print(f"expected at least {a.min} reports: did the producing tests run?")
    sys.exit(1)
sys.exit(1 if bad else 0)
