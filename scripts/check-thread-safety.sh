#!/usr/bin/env bash
# Clang's thread-safety analysis over every C++ translation unit of the project: configures a
# clang build tree with compile_commands.json (nothing is built in it) and runs each .cc file's
# compile command with -fsyntax-only -Wthread-safety -Werror=thread-safety, JOBS at a time
# (default: the number of cores); ONLY=REGEX checks just the files whose path matches. The
# build's own warning flags are left out, so it fails on thread-safety errors alone, naming the
# files. Only the units that include runtime/core/thread_annotations.h, directly or through the
# project's headers, are compiled (a unit without it holds no annotation for the analysis to
# check; the #include graph is read from the sources, every #include counted, so conditional ones
# only add units); a source compiled into several targets is checked once.
# The attributes are runtime/core/thread_annotations.h; sy::Mutex (runtime/core/mutex.h) carries
# them. CUDA .cu files are compiled by nvcc and are not checked; the .cc files of the CUDA
# backend are, when nvcc is present (as in scripts/build.sh). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${TSA_BUILD_DIR:-build-tsa}
jobs=${JOBS:-$(nproc)}
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DSY_BUILD_FUZZERS=ON -DSY_NATIVE=OFF "$@" >/dev/null
python3 - "$build_dir/compile_commands.json" "$jobs" "${ONLY:-}" <<'EOF'
import json, os, re, shlex, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

commands_file, jobs, only = sys.argv[1], int(sys.argv[2]), sys.argv[3]
root = os.path.realpath(os.getcwd())
ANNOTATIONS = os.path.join(root, "runtime", "core", "thread_annotations.h")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
included_by = {}  # header -> the project files that #include it ("..." includes)
read = set()


def read_includes(path):
    """Records the project headers `path` includes (resolved against its folder, then the
    repository root), and theirs, once each."""
    pending = [path]
    while pending:
        f = pending.pop()
        if f in read:
            continue
        read.add(f)
        try:
            text = open(f, encoding="utf-8", errors="replace").read()
        except OSError:
            continue
        for name in INCLUDE.findall(text):
            for base in (os.path.dirname(f), root):
                header = os.path.realpath(os.path.join(base, name))
                if os.path.isfile(header):
                    included_by.setdefault(header, set()).add(f)
                    pending.append(header)
                    break


def reaching_annotations():
    """Every file that includes ANNOTATIONS, directly or through other headers."""
    reached, pending = set(), [ANNOTATIONS]
    while pending:
        for f in included_by.get(pending.pop(), ()):
            if f not in reached:
                reached.add(f)
                pending.append(f)
    return reached


units = []
seen = set()
for entry in json.load(open(commands_file)):
    path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
    if not path.endswith((".cc", ".cpp")) or not path.startswith(root + os.sep):
        continue
    if only and not re.search(only, os.path.relpath(path, root)):
        continue
    if path in seen:
        continue
    seen.add(path)
    read_includes(path)
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    if "clang" not in os.path.basename(args[0]):
        continue  # nvcc and the like
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True  # the object and dependency-file outputs: nothing is written
        elif a in ("-c", "-MD", "-MMD"):
            pass
        elif a.startswith("-W") and not a.startswith(("-Wl,", "-Wp,", "-Wa,")):
            pass  # the build's warning set is GCC's business; this checks thread safety only
        else:
            kept.append(a)
    units.append((os.path.relpath(path, root), entry["directory"],
                  kept + ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety"]))
if not units:
    sys.exit("check-thread-safety: no clang compile commands in " + commands_file)
total = len(units)
annotated = reaching_annotations()
units = [u for u in units if os.path.join(root, u[0]) in annotated]
if not units and not only:
    sys.exit("check-thread-safety: no unit includes " + ANNOTATIONS + " (moved?)")

def check(unit):
    name, directory, args = unit
    run = subprocess.run(args, cwd=directory, capture_output=True, text=True)
    return name, run.returncode, run.stdout + run.stderr

failed = []
with ThreadPoolExecutor(max_workers=jobs) as pool:
    for name, rc, output in pool.map(check, units):
        if output.strip():
            sys.stdout.write(output)
        if rc != 0:
            failed.append(name)
if failed:
    print("check-thread-safety: %d of %d translation units failed:" % (len(failed), len(units)))
    for name in failed:
        print("  " + name)
    sys.exit(1)
print("check-thread-safety: %d translation units clean (of %d; the others include no thread "
      "annotations)" % (len(units), total))
EOF
