#!/usr/bin/env python3
"""layering.py SOURCE_DIR — the layers of docs/architecture.md, checked on the sources.

Each directory may include only its own headers, the system's and those of the
directories below it:

    base < topology < runtime < launcher < spank < trainer < tools

(runtime/ holds the job report library too; it sits on topology, like runtime).
Every `#include "x.h"` of a .c/.h/.cu file in a layer is looked up among the
headers of all layers; one that belongs to a layer above is printed as
"FILE includes x.h (LAYER/): LAYER is above DIR" and fails the test.  A header
name found in two layers also fails (the include would be ambiguous)."""
import os
import re
import sys

LAYERS = ["base", "topology", "runtime", "launcher", "spank", "trainer", "tools"]


def sources(root, layer):
    for d, _, files in os.walk(os.path.join(root, layer)):
        for f in sorted(files):
            if f.endswith((".c", ".h", ".cu")):
                yield os.path.join(d, f)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    owner, bad = {}, []
    for layer in LAYERS:
        if not os.path.isdir(os.path.join(root, layer)):
            bad.append("no directory %s/ in %s" % (layer, root))
            continue
        for f in sources(root, layer):
            if f.endswith(".h"):
                name = os.path.basename(f)
                if name in owner and owner[name] != layer:
                    bad.append("%s is in both %s/ and %s/" % (name, owner[name], layer))
                owner[name] = layer
    edges = set()
    for i, layer in enumerate(LAYERS):
        for f in sources(root, layer):
            with open(f, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
                o = owner.get(os.path.basename(m.group(1)))
                if o is None or o == layer:
                    continue
                edges.add((layer, o))
                if LAYERS.index(o) > i:
                    bad.append("%s includes %s (%s/): %s is above %s" %
                               (os.path.relpath(f, root), m.group(1), o, o, layer))
    for a, b in sorted(edges, key=lambda e: (LAYERS.index(e[0]), LAYERS.index(e[1]))):
        print("%s -> %s" % (a, b))
    for b in bad:
        print("FAIL " + b)
    print("layering: %d headers, %d layer edges, %s" %
          (len(owner), len(edges), "%d violation(s)" % len(bad) if bad else "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
