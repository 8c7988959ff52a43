#!/usr/bin/env python3
"""help_readme.py — every tool's --help and the README's usage text say the same.

usage: help_readme.py README.md NAME=COMMAND... (COMMAND: the tool and the arguments that print
its help, '::'-separated, e.g. "dpt-topo plan=/build/topology/dpt-topo::plan::--help")

The README's usage entries of a tool are the lines of its usage blocks (the ``` block right under
a "### " heading) that start with the tool's name (after an optional "dpt-launch -n N --" in
front), with their indented continuation lines, "# comments" dropped.  A NAME "dpt-topo plan@top"
checks the entries of "dpt-topo plan" against the help of another command (the @... is a label).  A --help's entries are its "usage:" line and the lines
under it indented past "usage: ".  Entries are compared as token sequences:
  - an entry of --help must be in the README as it is; one that ends in "..." (abridged) must
    begin a README entry;
  - a README entry must be a --help entry, or begin one when it ends in "..."; for a tool whose
    --help gives "[options]" and lists them below (dpt-train), every option the README names must
    be among them;
so an option, an optional "[...]" or a tree source written one way in one place and another way in
the other fails, naming the tool and both texts."""
import re
import subprocess
import sys

readme_path, specs = sys.argv[1], sys.argv[2:]
readme = open(readme_path, encoding="utf-8").read()
blocks, heading, cur = [], False, None
for line in readme.splitlines():  # the first ``` block under each ### heading
    if cur is not None:
        if line.startswith("```"):
            blocks.append("\n".join(cur))
            cur = None
        else:
            cur.append(line)
    elif line.startswith("### "):
        heading = True
    elif heading and line.startswith("```"):
        cur, heading = [], False
    elif line.strip():
        heading = False
fails = []


def entries_of(lines, starts):
    """Entries: a line that starts() plus the following lines indented deeper than 1 space."""
    out, cur = [], None
    for line in lines:
        code = line.split(" #", 1)[0].rstrip()
        if cur is not None and code.startswith("  ") and code.strip():
            cur.extend(code.split())
            continue
        if cur is not None:
            out.append(cur)
            cur = None
        toks = code.split()
        if toks and starts(toks):
            cur = list(toks)
    if cur is not None:
        out.append(cur)
    return out


for spec in specs:
    name, cmd = spec.split("=", 1)
    cmd = cmd.split("::")
    words = name.split("@")[0].split()  # "dpt-topo plan" -> ["dpt-topo", "plan"]

    def ours(t):  # an entry of this tool ("dpt-topo" is not "dpt-topo plan")
        return t[:len(words)] == words and (len(words) > 1 or t[1:2] != ["plan"])
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        fails.append(f"{name}: {' '.join(cmd)} exited {res.returncode}: {res.stderr}")
        continue
    help_lines, usage, in_usage = res.stdout.splitlines(), [], False
    for line in help_lines:
        if line.startswith("usage: "):
            in_usage = True
            usage.append(line[len("usage: "):])
        elif in_usage and line.startswith(" " * len("usage: ")) and line.strip():
            usage.append(line[len("usage: "):])
        elif in_usage:
            break
    help_entries = [e for e in entries_of(usage, ours) if not set(e[1:]) <= {"--help", "|", "--version"}]

    def readme_start(t):
        if t[:1] == ["dpt-launch"] and "--" in t and t[t.index("--") + 1:t.index("--") + 2] != ["PROGRAM"]:
            if words[0] == "dpt-launch":
                return False  # a program's entry, run under dpt-launch
            del t[:t.index("--") + 1]  # the launcher in front of the program
        return ours(t)
    readme_entries = [e for b in blocks for e in entries_of(b.splitlines(), readme_start)]
    readme_entries = [e for e in readme_entries if e[len(words):] != ["--help"]]
    if not help_entries:
        fails.append(f"{name}: no usage line in `{' '.join(cmd)}`:\n{res.stdout}")
        continue
    if not readme_entries:
        fails.append(f"{name}: no usage entry in {readme_path}")
        continue
    show = lambda e: " ".join(e)
    if help_entries == [words + ["[options]"]]:  # options listed below the usage line
        opts = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", res.stdout))
        for e in readme_entries:
            for o in re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", show(e)):
                if o not in opts:
                    fails.append(f"{name}: the README names {o}, which `{' '.join(cmd)}` does not list")
        print(f"{name}: {len(readme_entries)} README entr{'y' if len(readme_entries) == 1 else 'ies'}, options all in --help")
        continue
    for h in help_entries:
        if h[-1] == "...":
            ok = any(r[:len(h) - 1] == h[:-1] for r in readme_entries)
        else:
            ok = h in readme_entries
        if not ok:
            fails.append(f"{name}: --help says\n    {show(h)}\n  the README says\n    " +
                         "\n    ".join(show(r) for r in readme_entries))
    for r in readme_entries:
        if r[-1] == "...":
            ok = any(h[:len(r) - 1] == r[:-1] for h in help_entries)
        else:
            ok = r in help_entries or any(h[-1] == "..." and r[:len(h) - 1] == h[:-1] for h in help_entries)
        if not ok:
            fails.append(f"{name}: the README says\n    {show(r)}\n  --help says\n    " +
                         "\n    ".join(show(h) for h in help_entries))
    print(f"{name}: {len(help_entries)} usage entr{'y' if len(help_entries) == 1 else 'ies'} in --help, "
          f"{len(readme_entries)} in the README")

for f in fails:
    print("FAIL:", f, file=sys.stderr)
if not fails:
    print("ok: --help and the README agree")
sys.exit(1 if fails else 0)
