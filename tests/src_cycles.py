"""Finds cycles among the files of src/: include cycles among its headers and sources, and call
cycles among its object files (a.c calls a function that b.c defines, and b.c, directly or
through other files, calls back into a.c). Either kind means two files that cannot be read, tested
or replaced apart. Prints every cycle and exits 1 if there is one.

Usage: python3 tests/src_cycles.py SOURCE_DIR BUILD_DIR
The call graph comes from `nm` on the object files CMake built for src/ (every library and the
sdp program), so it sees exactly what the compiler emitted, static functions excluded."""
import collections
import os
import re
import subprocess
import sys


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


def include_graph(src):
    graph = collections.defaultdict(set)
    roots = [src, os.path.join(src, "..", "include"), src]
    for d, _, files in os.walk(src):
        for f in files:
            if not f.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            path = os.path.normpath(os.path.join(d, f))
            graph[path]
            with open(path, errors="replace") as fh:
                for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', fh.read(), re.M):
                    for base in [d] + roots:
                        cand = os.path.normpath(os.path.join(base, inc))
                        if os.path.exists(cand):
                            graph[path].add(cand)
                            break
    return graph


def call_graph(root, build):
    objects = []
    for d, _, files in os.walk(os.path.join(build, "CMakeFiles")):
        objects += [os.path.join(d, f) for f in files if f.endswith(".o") and "/src/" in d + "/"]
    defined, used = {}, collections.defaultdict(set)
    # An object whose source is gone (a file deleted since this build dir last built) is stale.
    objects = [o for o in objects
               if os.path.exists(os.path.join(root, re.sub(r".*?\.dir/", "", o)[: -len(".o")]))]
    for obj in objects:
        name = re.sub(r".*?\.dir/", "", obj)[: -len(".o")]
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBR":
                defined[parts[2]] = name
            elif len(parts) == 2 and parts[0] == "U":
                used[name].add(parts[1])
    graph = collections.defaultdict(set)
    for name, symbols in used.items():
        graph[name]
        for sym in symbols:
            owner = defined.get(sym)
            if owner and owner != name:
                graph[name].add(owner)
    return graph, len(objects)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: src_cycles.py SOURCE_DIR BUILD_DIR")
    src, build = os.path.join(sys.argv[1], "src"), sys.argv[2]
    includes = include_graph(src)
    calls, nobj = call_graph(sys.argv[1], build)
    if nobj == 0:
        sys.exit(f"src_cycles: no object files of src/ under {build}/CMakeFiles: build first")
    bad = 0
    for comp in strongly_connected(includes):
        print("include cycle: " + " ".join(comp))
        bad += 1
    for comp in strongly_connected(calls):
        print("call cycle: " + " ".join(comp))
        bad += 1
    print(f"src_cycles: {len(includes)} files, {nobj} objects, {bad} cycle(s)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
