#!/usr/bin/env python3
"""The size limits of STYLE.md, checked: every Rust file of the workspace at most 400 lines, every
function at most 80 lines unless its doc comment gives the reason in a line that starts with
"Kept as one function" or "Longer than 80 lines on purpose".

A function runs from its `fn` line to the closing brace at the same indentation. Prints one line per
breach (path:line, the count, the limit) and exits 1 when there is any; with --list, prints every
function over the limit with its reason and exits 0.
"""

import os
import re
import sys

FILE_LIMIT = 400
FN_LIMIT = 80
ROOTS = ["internal/src", "mock-backend", "cmd", "tests"]
FN = re.compile(r"^(\s*)(pub(\([^)]*\))? )?(const )?(async )?(unsafe )?fn (\w+)")
REASON = re.compile(r"^\s*///\s*(Kept as one function|Longer than 80 lines on purpose)")


def fn_end(lines, i, indent):
    """Index of the line closing the function that starts at `i` (its `fn` line)."""
    if lines[i].rstrip().endswith("}") and "{" in lines[i]:
        return i
    for j in range(i + 1, len(lines)):
        if lines[j].startswith(indent + "}") and lines[j].strip() in ("}", "};"):
            return j
    return i


def reason(lines, i):
    """True if the doc comment above line `i` (attributes between are skipped) gives a reason."""
    k = i - 1
    while k >= 0 and (lines[k].strip().startswith("///") or lines[k].strip().startswith("#[")):
        if REASON.match(lines[k]):
            return True
        k -= 1
    return False


def main():
    listing = "--list" in sys.argv[1:]
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    bad = []
    for root in ROOTS:
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if x != "target"]
            for f in sorted(files):
                if not f.endswith(".rs"):
                    continue
                path = os.path.join(d, f)
                lines = open(path, encoding="utf-8").read().split("\n")
                n = len(lines) - (1 if lines and lines[-1] == "" else 0)
                if n > FILE_LIMIT:
                    bad.append(f"{path}: {n} lines (limit {FILE_LIMIT}: split it by concern)")
                for i, line in enumerate(lines):
                    m = FN.match(line)
                    if not m or line.rstrip().endswith(";"):
                        continue
                    length = fn_end(lines, i, m.group(1)) - i + 1
                    if length <= FN_LIMIT:
                        continue
                    ok = reason(lines, i)
                    if listing:
                        print(f"{length:4d} {path}:{i + 1} {m.group(7)}{'' if ok else '  (no reason)'}")
                    elif not ok:
                        bad.append(
                            f"{path}:{i + 1}: fn {m.group(7)} is {length} lines (limit {FN_LIMIT}: split it, "
                            f"or give the reason in a doc line starting 'Kept as one function')"
                        )
    for b in bad:
        print(f"check-limits: {b}")
    if bad and not listing:
        sys.exit(1)
    if not listing:
        print(f"check-limits: every file within {FILE_LIMIT} lines; every function within {FN_LIMIT} or with its reason")


if __name__ == "__main__":
    main()
