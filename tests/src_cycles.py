"""Holds the files of src/ to their layers and finds cycles among them.

Layers: every folder of src/ has a rank (RANKS below); a file may include or call files of its
own folder and of folders of a lower rank, never of a higher rank nor of another folder of the
same rank (folders of one rank are siblings that know nothing of each other). A header of
include/sdp/ belongs to the folder whose sources implement it (HEADER_HOMES, checked against
where the functions it declares are defined). An edge that breaks this is printed with its two
files (and, for a call, the functions called) and fails the check, unless ALLOWED lists it with
a reason.

Cycles: include cycles among the headers and sources of src/ and include/sdp/, and call cycles
among the object files of src/ (a.c calls a function that b.c defines, and b.c, directly or
through other files, calls back into a.c). Either kind means two files that cannot be read,
tested or replaced apart.

Prints every violation and exits 1 if there is one.

Names: every file name in src/ is unique, and every header of include/sdp/ is named after the
source that implements it (src/**/X.c or X.cu for X.h) or its folder (src/X/), unless it is
header-only (HEADER_ONLY). The global symbols of src/train/ start with train_, trainer_ or
TRAIN_ (SYMBOL_PREFIXES), so that a program linking libsdptrain can tell its names from its
own, and a reader can tell where a name lives.

Usage: python3 tests/src_cycles.py SOURCE_DIR BUILD_DIR
The call graph comes from `nm` on the object files CMake built for src/ (every library and the
sdp program), so it sees exactly what the compiler emitted, static functions excluded."""
import collections
import os
import re
import subprocess
import sys


# Folders, top to bottom (a higher rank may use a lower one), each with why it sits there.
RANKS = {
    "cli": 6,  # the program: its commands drive the trainer and everything below
    "train": 5,  # the trainer: models under a plan, with data, optimizer, checkpoints and world
    "sdp": 4,  # plans, subnetworks and gradient sync, over a model's layout and the ops
    "io": 4,  # checkpoint files of a layout; beside sdp: neither reads the other
    "models": 3,  # model families and their layouts, written against the ops
    "optim": 3,  # optimizer state and each step's scalars, updated by ops; beside models
    "ops": 2,  # the op table, its checks, and the CPU and CUDA kernels and backends
    "data": 2,  # datasets and batch loaders: core alone; beside ops
    "comm": 2,  # the MPI world and its thread count: core alone; beside ops
    "core": 1,  # errors, memory accounting, rng, signals, watchdog: nothing else of src/
}

# The folder each header of include/sdp/ belongs to: that of the sources implementing it.
HEADER_HOMES = {
    "backend.h": "ops",
    "bench.h": "ops",
    "check.h": "core",
    "atomic_file.h": "io",
    "checkpoint.h": "io",
    "comm.h": "comm",
    "cuda_check.h": "ops",  # macros over sdp_fatal for src/ops/cuda alone
    "cuda_scratch.h": "ops",  # the CUDA backend's scratch sizes, inline
    "data.h": "data",
    "image_loader.h": "data",
    "interrupt.h": "core",
    "layout.h": "models",
    "mem.h": "core",
    "memplan.h": "sdp",
    "model.h": "models",
    "netcost.h": "sdp",
    "ops.h": "ops",
    "ops_vision.h": "ops",
    "optim.h": "optim",
    "plan.h": "sdp",
    "resnet.h": "models",
    "rng.h": "core",
    "safetensors.h": "io",
    "steptime.h": "sdp",
    "subnet.h": "sdp",
    "sync.h": "sdp",
    "transformer.h": "models",
    "watchdog.h": "core",
}

# Headers whose name is not that of a source file or a folder of src/: header-only ones, each
# with where its name leads instead.
HEADER_ONLY = {
    "cuda_check.h": "macros for src/ops/cuda",
    "cuda_scratch.h": "inline sizes for src/ops/cuda",
}

# Edges that break the layers on purpose: (from file, to file) -> why. Paths as printed.
ALLOWED = {}


def strongly_connected(graph):
    """Tarjan's algorithm, iterative: the components of more than one node."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in list(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def include_graph(root):
    """File -> the project files it includes, over src/ and include/sdp/, paths from root."""
    graph = collections.defaultdict(set)
    src, inc_root = os.path.join(root, "src"), os.path.join(root, "include")
    for top in (src, os.path.join(inc_root, "sdp")):
        for d, _, files in os.walk(top):
            for f in files:
                if not f.endswith((".c", ".h", ".cu", ".cuh")):
                    continue
                path = os.path.join(d, f)
                node = os.path.relpath(path, root)
                graph[node]
                with open(path, errors="replace") as fh:
                    text = fh.read()
                for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
                    for base in (d, src, inc_root):
                        cand = os.path.join(base, inc)
                        if os.path.exists(cand):
                            graph[node].add(os.path.relpath(cand, root))
                            break
    return graph


def call_graph(root, build):
    """Object -> the objects it calls, the functions called along each edge, and where each
    symbol is defined (symbol -> objects)."""
    objects = []
    for d, _, files in os.walk(os.path.join(build, "CMakeFiles")):
        objects += [os.path.join(d, f) for f in files if f.endswith(".o") and "/src/" in d + "/"]
    defined, used = collections.defaultdict(set), collections.defaultdict(set)
    # An object whose source is gone (a file deleted since this build dir last built) is stale.
    objects = [o for o in objects
               if os.path.exists(os.path.join(root, re.sub(r".*?\.dir/", "", o)[: -len(".o")]))]
    for obj in objects:
        name = re.sub(r".*?\.dir/", "", obj)[: -len(".o")]
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBR":
                defined[parts[2]].add(name)
            elif len(parts) == 2 and parts[0] == "U":
                used[name].add(parts[1])
    graph, symbols = collections.defaultdict(set), collections.defaultdict(set)
    for name, syms in used.items():
        graph[name]
        for sym in syms:
            for owner in defined.get(sym, ()):
                if owner != name:
                    graph[name].add(owner)
                    symbols[name, owner].add(sym)
    return graph, symbols, defined, len(objects)


def folder(path):
    """The folder of src/ a file belongs to (a header of include/sdp/: its home), or None."""
    parts = path.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[:2] == ["include", "sdp"]:
        return HEADER_HOMES.get(parts[2])
    return None


def declared_functions(path):
    """The functions a header declares at file scope: comments, preprocessor lines and every
    braced body (inline functions, structs) left out."""
    with open(path, errors="replace") as fh:
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", fh.read(), flags=re.S)
    text = re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)
    top, depth = [], 0
    for ch in text:
        depth += ch == "{"
        if depth == 0:
            top.append(ch)
        depth -= ch == "}" and depth > 0
    return {m for stmt in "".join(top).split(";") if not stmt.lstrip().startswith("typedef")
            for m in re.findall(r"\b(\w+)\s*\(", stmt)}


def layer_violations(root, includes, calls, symbols, defined):
    """Lines naming every edge that goes up or sideways between folders, and every header whose
    home is unknown or wrong."""
    bad = []
    for folder_name in sorted({p.split("/")[1] for p in includes if p.startswith("src/")} |
                              {p.split("/")[1] for p in calls}):
        if folder_name not in RANKS:
            bad.append(f"layer: src/{folder_name}/ has no rank: add it to RANKS")
    for h in sorted(os.listdir(os.path.join(root, "include", "sdp"))):
        if h not in HEADER_HOMES:
            bad.append(f"layer: include/sdp/{h} has no folder: add it to HEADER_HOMES")
            continue
        for fn in sorted(declared_functions(os.path.join(root, "include", "sdp", h))):
            away = sorted(o for o in defined.get(fn, ()) if folder(o) != HEADER_HOMES[h])
            if away:
                bad.append(f"layer: include/sdp/{h} ({HEADER_HOMES[h]}) declares {fn}, defined "
                           f"in {', '.join(away)}: move one or the other")
    seen = set()

    def check(kind, a, b, detail=""):
        fa, fb = folder(a), folder(b)
        if fa is None or fb is None or fa == fb or fa not in RANKS or fb not in RANKS:
            return
        seen.add((a, b))
        if RANKS[fa] > RANKS[fb] or (a, b) in ALLOWED:
            return
        way = "up" if RANKS[fb] > RANKS[fa] else "sideways"
        bad.append(f"layer: {kind} {way}: {a} ({fa}, rank {RANKS[fa]}) -> {b} ({fb}, rank "
                   f"{RANKS[fb]}){detail}")

    for a in sorted(includes):
        for b in sorted(includes[a]):
            check("include", a, b)
    for a in sorted(calls):
        for b in sorted(calls[a]):
            check("call", a, b, ": " + ", ".join(sorted(symbols[a, b])))
    for edge in sorted(set(ALLOWED) - seen):
        bad.append(f"layer: ALLOWED lists {edge[0]} -> {edge[1]}, which no longer exists: "
                   "remove it")
    return bad


# The prefixes of the global symbols each library folder defines: a name says where it lives.
SYMBOL_PREFIXES = {"train": ("train_", "trainer_", "TRAIN_")}


def symbol_violations(defined):
    """Global symbols of a folder in SYMBOL_PREFIXES that carry none of its prefixes."""
    bad = []
    for sym, objs in sorted(defined.items()):
        for obj in sorted(objs):
            prefixes = SYMBOL_PREFIXES.get(folder(obj))
            if prefixes and not sym.startswith(prefixes):
                bad.append(f"name: {obj} defines {sym}, without its folder's prefix "
                           f"({' or '.join(prefixes)}): rename it, or make it static")
    return bad


def name_violations(root):
    """Names that do not lead to files: two files of src/ with one name, and a header of
    include/sdp/ named after no source file (src/**/X.c or X.cu) and no folder (src/X/)."""
    bad, where = [], collections.defaultdict(list)
    sources = set()
    for dirpath, _, files in os.walk(os.path.join(root, "src")):
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            where[f].append(rel)
            if f.endswith((".c", ".cu")):
                sources.add(os.path.splitext(f)[0])
    for f, paths in sorted(where.items()):
        if len(paths) > 1:
            bad.append(f"name: {f} is the name of {len(paths)} files ({', '.join(sorted(paths))}): "
                       "rename all but one after what each holds")
    folders = set(os.listdir(os.path.join(root, "src")))
    for h in sorted(os.listdir(os.path.join(root, "include", "sdp"))):
        stem = os.path.splitext(h)[0]
        if stem not in sources and stem not in folders and h not in HEADER_ONLY:
            bad.append(f"name: include/sdp/{h} is named after no source file and no folder of "
                       "src/: name it after the source that implements it")
    return bad


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: src_cycles.py SOURCE_DIR BUILD_DIR")
    root, build = sys.argv[1], sys.argv[2]
    includes = include_graph(root)
    calls, symbols, defined, nobj = call_graph(root, build)
    if nobj == 0:
        sys.exit(f"src_cycles: no object files of src/ under {build}/CMakeFiles: build first")
    bad = (layer_violations(root, includes, calls, symbols, defined) + name_violations(root) +
           symbol_violations(defined))
    for comp in strongly_connected(includes):
        bad.append("include cycle: " + " ".join(comp))
    for comp in strongly_connected(calls):
        bad.append("call cycle: " + " ".join(comp))
    for line in bad:
        print(line)
    print(f"src_cycles: {len(includes)} files, {nobj} objects, {len(RANKS)} layered folders, "
          f"{len(bad)} violation(s)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
