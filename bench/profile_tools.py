#!/usr/bin/env python3
"""Per-request views of bench/profile.sh output (callgrind and DHAT), aggregated by function name.

  profile_tools.py cg FILE REQUESTS incl [REGEX]        inclusive Ir/request, calls/request
  profile_tools.py cg FILE REQUESTS self [REGEX]        exclusive Ir/request
  profile_tools.py cg FILE REQUESTS callees REGEX [N]   what a function spends its Ir on
  profile_tools.py cg FILE REQUESTS callers REGEX [N]   who calls a function (e.g. '^__rustc::__rust_alloc$')
  profile_tools.py cgdiff A B REQUESTS [self|incl] [N]  per-request difference B - A (e.g. plain vs connid)
  profile_tools.py hot FILE REQUESTS [MIN] [N]          the per-request code working set: distinct 64-byte
                                                        lines of code run at least MIN (0.5) times per request,
                                                        by crate and by function (needs --dump-instr=yes)
  profile_tools.py atomics FILE REQUESTS BINARY [N]     atomic read-modify-writes per request (lock-prefixed
                                                        and xchg-with-memory instructions of BINARY, the
                                                        profiled copy), each with its inlined call chain
                                                        (needs --dump-instr=yes; objdump and addr2line)
  profile_tools.py dhat FILE REQUESTS                   allocation sites per request (first frame in internal::)
  profile_tools.py dhatdiff A B REQUESTS                allocation sites that differ between two runs

callgrind_annotate splits a function over the files its inlined code came from; this merges them.
REQUESTS is what the load generator sent (PROFILE_REQUESTS + 1 check request).
"""

import collections
import json
import re
import sys

ALLOC_FRAME = re.compile(r"alloc::|__rust|malloc|realloc|raw_vec|RawVec|<alloc|core::ptr|bytes::|hashbrown|boxed.rs|vec/mod.rs|UnknownInlinedFun")


# Callgrind compresses names per kind (functions, files, objects), each with its own ids: the
# same "(12)" names one function and another file, so each kind keeps its own table.
KIND_OF = {"fn": "fn", "cfn": "fn", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl", "ob": "ob", "cob": "ob"}


def compressed_name(names, tok):
    """The name `tok` ("(12) name" defines id 12, "(12)" uses it) stands for, in the table `names`."""
    m = re.match(r"\((\d+)\)(?: (.*))?", tok)
    if not m:
        return tok
    if m.group(2) is not None:
        names[m.group(1)] = m.group(2)
    return names[m.group(1)]


def parse_callgrind(path):
    tables = {"fn": {}, "fl": {}, "ob": {}}
    self_cost, calls = collections.Counter(), collections.defaultdict(lambda: [0, 0])

    def name(tok, kind="fn"):
        return compressed_name(tables[kind], tok)

    fn = cfn = pending = None
    at = 1  # the column of the first cost: 2 with --dump-instr=yes ("positions: instr line")
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("positions:"):
                at = len(line.split()) - 1
            elif line.startswith("fn="):
                fn = name(line[3:])
            elif line.startswith("cfn="):
                cfn = name(line[4:])
            elif line.startswith("calls="):
                pending = int(line[6:].split()[0])
            elif line[0].isdigit() or line[0] in "+-*":
                parts = line.split()
                cost = int(parts[at]) if len(parts) > at else 0
                if pending is not None:
                    c = calls[(fn, cfn)]
                    c[0] += pending
                    c[1] += cost
                    pending = None
                else:
                    self_cost[fn] += cost
            else:
                for p in ("fl=", "fi=", "fe=", "cfi=", "cfl=", "ob=", "cob="):
                    if line.startswith(p):
                        name(line[len(p):], KIND_OF[p[:-1]])
                        break
    incl, called = collections.Counter(self_cost), collections.Counter()
    for (a, b), (n, c) in calls.items():
        if a != b:
            incl[a] += c
        called[b] += n
    return self_cost, calls, incl, called


def short(s, n=150):
    return s[:n]


def cg(argv):
    path, reqs, mode = argv[0], float(argv[1]), argv[2]
    pat = argv[3] if len(argv) > 3 else ""
    limit = int(argv[4]) if len(argv) > 4 else 25
    self_cost, calls, incl, called = parse_callgrind(path)
    print(f"total {sum(self_cost.values()) / reqs:.0f} Ir/request")
    if mode in ("incl", "self"):
        d = incl if mode == "incl" else self_cost
        shown = 0
        for f, c in sorted(d.items(), key=lambda x: -x[1]):
            if re.search(pat, f):
                print(f"{c / reqs:10.0f} Ir/req  {called.get(f, 0) / reqs:6.2f} calls/req  {short(f)}")
                shown += 1
                if shown >= limit:
                    break
    else:
        for f in [f for f in incl if re.search(pat, f)][:3]:
            idx = 0 if mode == "callees" else 1
            print(f"== {short(f)}  incl {incl[f] / reqs:.0f} Ir/req, self {self_cost.get(f, 0) / reqs:.0f}")
            rows = [(k[1 - idx], n, c) for k, (n, c) in calls.items() if k[idx] == f]
            for other, n, c in sorted(rows, key=lambda r: -r[2])[:limit]:
                print(f"   {c / reqs:9.0f} Ir/req  {n / reqs:6.2f} calls/req  {short(other)}")


def cgdiff(argv):
    a, b, reqs = parse_callgrind(argv[0]), parse_callgrind(argv[1]), float(argv[2])
    i = 0 if (argv[3] if len(argv) > 3 else "self") == "self" else 2
    limit = int(argv[4]) if len(argv) > 4 else 30
    print(f"total {(sum(b[0].values()) - sum(a[0].values())) / reqs:+.0f} Ir/request")
    keys = set(a[i]) | set(b[i])
    for k in sorted(keys, key=lambda k: -(b[i].get(k, 0) - a[i].get(k, 0)))[:limit]:
        d = (b[i].get(k, 0) - a[i].get(k, 0)) / reqs
        print(f"{d:+9.0f} Ir/req  calls/req {a[3].get(k, 0) / reqs:5.2f} -> {b[3].get(k, 0) / reqs:5.2f}  {short(k)}")


def instr_costs(path):
    """Ir per instruction address and the function it belongs to, from a --dump-instr=yes file."""
    tables = {"fn": {}, "fl": {}, "ob": {}}
    fn, fl, addr, src, pending = None, None, 0, 0, False
    ir, owner = collections.Counter(), {}
    with open(path, errors="replace") as f:
        for line in f:
            key, eq, tok = line.rstrip("\n").partition("=")
            if eq and key in KIND_OF:
                # Every kind's names are read (a later line may use the id); fn and fl/fi/fe set
                # what the cost lines below belong to.
                named = compressed_name(tables[KIND_OF[key]], tok)
                if key == "fn":
                    fn = named
                elif key in ("fl", "fi", "fe"):
                    fl = named
            elif line.startswith("calls="):
                pending = True
            elif line[:1] in "0123456789+-*":
                parts = line.split()
                tok = parts[0]
                if tok.startswith("0x"):
                    addr = int(tok, 16)
                elif tok[0] in "+-":
                    addr += (1 if tok[0] == "+" else -1) * int(tok[1:], 0)
                ltok = parts[1] if len(parts) > 1 else "*"
                if ltok[0] in "+-":
                    src += (1 if ltok[0] == "+" else -1) * int(ltok[1:])
                elif ltok != "*":
                    src = int(ltok)
                if pending:
                    pending = False
                    continue
                cost = int(parts[2]) if len(parts) > 2 else 0
                ir[addr] += cost
                owner.setdefault(addr, (fn, fl, src))
    return ir, owner


def crate_of(fn):
    fn = re.sub(r"^<", "", fn or "?")
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", fn)
    return m.group(1) if m else fn.split("(")[0][:40]


def hot(argv):
    ir, owner = instr_costs(argv[0])
    reqs = float(argv[1])
    floor = float(argv[2]) if len(argv) > 2 else 0.5
    limit = int(argv[3]) if len(argv) > 3 else 40
    lines, per_fn, per_crate, per_file = {}, collections.Counter(), collections.Counter(), collections.Counter()
    for a, c in sorted(ir.items()):
        if c >= floor * reqs:
            lines.setdefault(a >> 6, owner[a])
    for fn, fl, _ in lines.values():
        per_fn[fn] += 1
        per_crate[crate_of(fn)] += 1
        per_file[re.sub(r".*/(src|library)/", "", fl or "?")] += 1
    hot_instrs = sum(1 for c in ir.values() if c >= floor * reqs)
    print(f"{hot_instrs} distinct instructions in {len(lines)} lines of 64 bytes ({len(lines) * 64 / 1024:.1f} KiB)"
          f" run >= {floor} times per request")
    print("by crate:")
    for k, n in per_crate.most_common(20):
        print(f"  {n:5d} lines {n * 64 / 1024:6.1f} KiB  {k}")
    print("by function:")
    for k, n in per_fn.most_common(limit):
        print(f"  {n:5d} lines  {short(k)}")
    print("by source file (of the inlined code):")
    for k, n in per_file.most_common(limit):
        print(f"  {n:5d} lines  {short(k)}")
    if len(argv) > 4:
        print(f"source lines of functions matching {argv[4]!r}:")
        per_src = collections.Counter()
        for fn, fl, ln in lines.values():
            if re.search(argv[4], fn or ""):
                per_src[f"{re.sub(r'.*/(src|library)/', '', fl or '?')}:{ln}"] += 1
        for k, n in per_src.most_common(limit):
            print(f"  {n:5d} lines  {k}")


def atomics(argv):
    import subprocess

    ir, _ = instr_costs(argv[0])
    reqs, binary = float(argv[1]), argv[2]
    limit = int(argv[3]) if len(argv) > 3 else 60
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary], capture_output=True, text=True).stdout
    locked = {}
    for line in dis.splitlines():
        m = re.match(r"\s+([0-9a-f]+):\s+(lock \S+|xchg)\s*(.*)", line)
        # xchg is atomic only with a memory operand (`xchg %ax,%ax` is a two-byte nop).
        if m and (m.group(2) != "xchg" or "(" in m.group(3)):
            locked[int(m.group(1), 16)] = m.group(2)
    hot = sorted(((ir[a], a) for a in locked if ir.get(a, 0) >= 0.3 * reqs), reverse=True)
    print(f"{sum(c for c, _ in hot) / reqs:.1f} atomic read-modify-writes per request (sites run >= 0.3 times)")
    for c, a in hot[:limit]:
        out = subprocess.run(["addr2line", "-i", "-f", "-C", "-e", binary, hex(a)], capture_output=True, text=True).stdout.split("\n")
        frames = [(out[i], out[i + 1]) for i in range(0, len(out) - 1, 2)]
        chain = [f"{fn.rsplit('::', 2)[-2] + '::' + fn.rsplit('::', 1)[-1] if fn.count('::') > 1 else fn}@{re.sub(r'.*/(src|library)/', '', loc)}"
                 for fn, loc in frames if re.search(r"internal/src|tokio|bytes|arc.swap", loc)]
        print(f"{c / reqs:6.2f}  {locked[a]:12s} {' <- '.join(chain[:4])[:200]}")


def dhat_sites(path):
    d = json.load(open(path))
    ftbl, agg, total = d["ftbl"], collections.Counter(), 0
    sizes = collections.Counter()
    for pp in d["pps"]:
        frames = [re.sub(r"0x[0-9A-F]+: ", "", ftbl[i]) for i in pp["fs"]]
        site = next((f for f in frames if "internal::" in f and "library/alloc" not in f), None)
        if site is None:
            site = "(lib) " + next((f for f in frames if not ALLOC_FRAME.search(f)), frames[-1])
        site = re.sub(r"/root/.cargo/registry/src/index.crates.io-[0-9a-f]+/", "", site)
        agg[site] += pp["tbk"]
        sizes[site] += pp["tb"]
        total += pp["tbk"]
    return agg, sizes, total


def dhat(argv):
    agg, sizes, total = dhat_sites(argv[0])
    reqs = float(argv[1])
    print(f"total {total / reqs:.1f} allocations/request")
    for s, n in agg.most_common():
        if n / reqs < 0.5:
            break
        print(f"{n / reqs:6.2f} allocs/req {sizes[s] / reqs:8.0f} B/req  {short(s, 180)}")


def dhatdiff(argv):
    (a, _, ta), (b, _, tb), reqs = dhat_sites(argv[0]), dhat_sites(argv[1]), float(argv[2])
    print(f"allocations/request {ta / reqs:.1f} -> {tb / reqs:.1f}")
    for k in sorted(set(a) | set(b), key=lambda k: -(b[k] - a[k])):
        d = (b[k] - a[k]) / reqs
        if abs(d) >= 0.5:
            print(f"{d:+5.2f}  {a[k] / reqs:5.2f} -> {b[k] / reqs:5.2f}  {short(k, 170)}")


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] not in ("cg", "cgdiff", "hot", "atomics", "dhat", "dhatdiff"):
        print(__doc__)
        sys.exit(2)
    try:
        {"cg": cg, "cgdiff": cgdiff, "hot": hot, "atomics": atomics, "dhat": dhat, "dhatdiff": dhatdiff}[sys.argv[1]](sys.argv[2:])
    except BrokenPipeError:
        pass
