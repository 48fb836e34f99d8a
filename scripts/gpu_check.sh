#!/usr/bin/env bash
# Every GPU check of docs/cuda.md in one command, for a machine with an NVIDIA GPU: builds sdp-cuda
# and the GPU tests with nvcc, runs the parity and training tests, compute-sanitizer, the GPT-2
# benchmark (DDP and SDP worker, fp32 and bf16), the 1B LLaMA memory comparison, two ranks training
# on the one GPU, and ctest; and writes one summary file plus a tarball of the logs.
#
#   bash scripts/gpu_check.sh stage    HERE (Debian 12, with apt): fills .device/ with what a bare
#                                      GPU machine lacks: sdp's Debian packages unpacked into one
#                                      tarball (OpenMPI, OpenBLAS, oneDNN, cJSON, cmocka, zlib,
#                                      pkg-config, make) and a copy of Fashion-MNIST
#   bash scripts/gpu_check.sh [all]    ON THE GPU MACHINE (root, no network, .device/ carried):
#                                      everything, in order of importance, within one call's budget;
#                                      what does not fit is listed as SKIP with the part to run
#   bash scripts/gpu_check.sh test     the parity and training tests and compute-sanitizer
#   bash scripts/gpu_check.sh bench    bench_cuda_train, bench/cuda_memory.sh, two ranks on one GPU
#   bash scripts/gpu_check.sh profile  ncu over the bf16 GPT-2 step: device time per kernel
#   bash scripts/gpu_check.sh ctest    the whole ctest suite (CPU tests too) against the GPU build
#   bash scripts/gpu_check.sh build    configure and build only
#
# Each part builds first (incrementally when build-gpu/ is already there): a device machine does
# not stay warm between calls. Without a GPU (no nvidia-smi, or it lists none) every part but stage
# prints one line and exits 77 at once, building nothing.
#
# Results: summary.txt (every step's PASS/FAIL/SKIP/TIMEOUT with its time, what the machine has,
# and every figure the steps print) and logs.tar.gz (each step's full log), in $OUT when it is set,
# else in build-gpu/gpu-check/. The exit status is 1 if any step failed or timed out, else 0.
#
# Environment:
#   SDP_GPU_CHECK_BUDGET      seconds for the whole call (default 570: the device tool allows 600)
#   SDP_GPU_CHECK_BUILD       build directory (default build-gpu)
#   SDP_GPU_CHECK_RESULTS     results directory (default $OUT, else <build>/gpu-check)
#   SDP_GPU_CHECK_DEPS        staged, system or auto (default: staged when .device/deps.tar.xz
#                             is there, else the system's packages)
#   SDP_GPU_CHECK_PREFIX      where the staged packages are unpacked (default /tmp/sdp-gpu-deps)
#   SDP_GPU_CHECK_ARCHS       CUDA architectures (default: the GPU's own, e.g. 90; 80;90 without one)
#   SDP_GPU_CHECK_CTEST_JOBS  ctest -j (default 4)
#   SDP_GPU_CHECK_CTEST_ARGS  more ctest arguments, e.g. "-R mpi"
#   SDP_GPU_CHECK_FORCE=1     skip the GPU detection and run the part anyway (to test this script
#                             where there is no GPU: the GPU tests then skip themselves)
#   SDP_GPU_CHECK_BUILD_ONLY=1  the same, for the build part only
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
STAGE_DIR=$REPO/.device
ARCH_TRIPLET=x86_64-linux-gnu

die() {
    echo "gpu_check: $*" >&2
    exit 1
}

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

# ==== stage: here, with apt and the network ====================================================

# What the GPU side needs from Debian: the build and run-time packages of scripts/setup.sh (less
# the compiler, CMake, git and python3, which the CUDA image has; less the dataset, copied apart),
# plus pkg-config's and make's own packages, which a CUDA image may lack.
STAGE_PACKAGES=(
    libopenmpi-dev openmpi-bin libopenblas-openmp-dev libdnnl-dev ocl-icd-opencl-dev
    zlib1g-dev zlib1g libcjson-dev libcmocka-dev pkgconf make
)
# Dependencies that the closure drags in but nothing here runs: compilers and autotools (the
# -dev packages' own needs), Fortran, documentation, hwloc's X11/ICU plugins, ssh (OpenMPI needs
# it only to start ranks on other hosts), and the -dev packages of OpenMPI's own libraries
# (mpicc links only -lmpi).
STAGE_DROP=(
    gfortran-12 libgfortran-12-dev autoconf automake autotools-dev m4 libltdl-dev
    libjs-jquery libjs-jquery-ui openssh-client libfido2-1 libcbor0.8 libedit2
    libhwloc-plugins libpciaccess0 libxnvctrl0 libx11-6 libx11-data libxau6 libxcb1 libxdmcp6
    libxext6 libxml2 libicu72 opencl-clhpp-headers
    libevent-dev libhwloc-dev libibverbs-dev libnl-3-dev libnl-route-3-dev libnuma-dev
    libpmix-dev
)

stage() {
    if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
        die "stage needs apt-get and dpkg-deb (a Debian 12 machine such as this project's)"
    fi
    local tmp
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/sdp-gpu-stage.XXXXXX")
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf '$tmp'" EXIT
    if ! apt-cache show --no-all-versions libopenmpi-dev >/dev/null 2>&1; then
        [ "$(id -u)" -eq 0 ] || die "apt knows no libopenmpi-dev: run apt-get update (as root) first"
        echo "gpu_check: stage: apt-get update"
        apt-get update -q >/dev/null
    fi

    # The dependency closure, resolved by apt against an empty system: 'base' is what a CUDA
    # image has anyway (Debian's required and important packages and g++, with everything they
    # need), 'all' is base plus our packages; we fetch the difference, less STAGE_DROP.
    : >"$tmp/empty-status"
    closure() {
        apt-get -s -o Dir::State::status="$tmp/empty-status" -o APT::Install-Recommends=false \
            -o APT::Install-Suggests=false install "$@" 2>/dev/null | awk '/^Inst /{print $2}' | sort -u
    }
    local base_names
    base_names=$(dpkg-query -W -f='${Package}\t${Priority}\t${Essential}\n' |
        awk -F'\t' '$2 == "required" || $2 == "important" || $3 == "yes" {print $1}')
    # shellcheck disable=SC2086 # one word per package
    closure $base_names g++ >"$tmp/base"
    # shellcheck disable=SC2086
    closure $base_names g++ "${STAGE_PACKAGES[@]}" >"$tmp/all"
    [ -s "$tmp/base" ] || die "stage: apt could not resolve the packages"
    printf '%s\n' "${STAGE_DROP[@]}" | sort -u >"$tmp/drop"
    { comm -13 "$tmp/base" "$tmp/all" | comm -23 - "$tmp/drop"; printf '%s\n' "${STAGE_PACKAGES[@]}"; } |
        sort -u >"$tmp/fetch"
    echo "gpu_check: stage: fetching $(wc -l <"$tmp/fetch") packages"
    mkdir -p "$tmp/debs" "$tmp/root"
    local sandbox=()
    [ "$(id -u)" -eq 0 ] && sandbox=(-o APT::Sandbox::User=root) # _apt cannot write into $tmp
    # shellcheck disable=SC2046
    (cd "$tmp/debs" && apt-get -q "${sandbox[@]}" download $(cat "$tmp/fetch") >/dev/null) ||
        die "stage: apt-get download failed"

    local deb
    for deb in "$tmp"/debs/*.deb; do
        dpkg-deb -x "$deb" "$tmp/root"
        dpkg-deb -f "$deb" Package Version | paste -sd' ' | awk '{print $2, $4}'
    done | sort >"$tmp/packages.txt"

    # Prune what neither the build nor the runs read: static libraries, documentation, Fortran
    # and Java bindings, and OpenBLAS's BLAS/LAPACK compatibility copies (sdp links -lopenblas).
    local r=$tmp/root L=$tmp/root/usr/lib/$ARCH_TRIPLET
    rm -rf "$r"/usr/share/{doc,man,info,locale,lintian,bug,doc-base} "$L/fortran" \
        "$L"/openblas-openmp/{libblas,liblapack}.so* "$L"/libmpi_java* "$L"/openmpi/lib/*.mod
    find "$r" \( -name '*.a' -o -name '*.la' \) -delete
    # Absolute symbolic links (libz.so -> /lib/...) would point into the GPU machine's own /:
    # make them relative so that the tree works wherever it is unpacked.
    local link target rel p
    while IFS= read -r link; do
        target=$(readlink "$link")
        rel=$(realpath -m --relative-to="$(dirname "$link")" "$r$target")
        ln -sfn "$rel" "$link"
    done < <(find "$r" -type l -lname '/*')
    # The links that the packages' maintainer scripts make through update-alternatives
    # (libopenblas.so.0, libpsm_infinipath.so.1, ...): read off their postinst, made when the
    # target survived the pruning. OpenMPI's scripts name theirs through variables: made by hand.
    while read -r link target; do
        case "$link$target" in *'$'*) continue ;; esac
        if [ ! -e "$r$target" ] || [ -e "$r$link" ]; then continue; fi
        mkdir -p "$(dirname "$r$link")"
        ln -s "$(realpath -m --relative-to="$(dirname "$r$link")" "$r$target")" "$r$link"
    done < <(for deb in "$tmp"/debs/*.deb; do
        dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./postinst 2>/dev/null || true
    done | sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' | awk '/update-alternatives --install/ {
        n = split($0, w, " ")
        for (i = 1; i <= n; i++)
            if (w[i] == "--install") { print w[i + 1], w[i + 3]; i += 4 }
            else if (w[i] == "--slave") { print w[i + 1], w[i + 3]; i += 3 }
    }')
    for p in mpicc mpiexec mpirun; do [ -e "$r/usr/bin/$p" ] || ln -s "$p.openmpi" "$r/usr/bin/$p"; done
    [ -e "$L/pkgconfig/openblas.pc" ] || ln -s ../openblas-openmp/pkgconfig/openblas.pc "$L/pkgconfig/openblas.pc"
    # Dangling links left by the pruning are harmless but confusing: drop them.
    find "$r" -xtype l -delete
    cp "$tmp/packages.txt" "$r/packages.txt"

    rm -rf "$STAGE_DIR"
    mkdir -p "$STAGE_DIR"
    echo "gpu_check: stage: packing $(du -sh "$r" | cut -f1) of unpacked packages"
    tar -C "$r" --owner=0 --group=0 --numeric-owner -cf - . | xz -T0 -6 >"$STAGE_DIR/deps.tar.xz"
    cp "$tmp/packages.txt" "$STAGE_DIR/packages.txt"
    local fm=/usr/share/datasets/fashion-mnist
    if [ -f "$fm/train-images-idx3-ubyte.gz" ]; then
        mkdir -p "$STAGE_DIR/fashion-mnist"
        cp "$fm"/*-ubyte.gz "$STAGE_DIR/fashion-mnist/"
    else
        echo "gpu_check: stage: no Fashion-MNIST in $fm (apt-get install dataset-fashion-mnist):" \
            "the ResNet and ViT cases will skip on the GPU"
    fi
    local tree_kib
    tree_kib=$(git ls-files -z | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    echo "gpu_check: stage: .device/ holds $(du -sh "$STAGE_DIR" | cut -f1):" \
        "deps.tar.xz $(du -sh "$STAGE_DIR/deps.tar.xz" | cut -f1) ($(wc -l <"$tmp/packages.txt") packages)," \
        "fashion-mnist $(du -sh "$STAGE_DIR/fashion-mnist" 2>/dev/null | cut -f1 || echo none);" \
        "with the tracked files ($((tree_kib / 1024)) MiB) $(($(du -sk "$STAGE_DIR" | cut -f1) / 1024 + tree_kib / 1024)) MiB travel (limit 64)"
    echo "gpu_check: stage: on the GPU machine run: bash scripts/gpu_check.sh   (carrying .device)"
}

# ==== the GPU side ================================================================================

MODE=${1:-all}
case "$MODE" in
stage)
    stage
    exit 0
    ;;
help | -h | --help)
    usage
    exit 0
    ;;
all | test | bench | profile | ctest | build) ;;
*) die "unknown part '$MODE': stage, all, test, bench, profile, ctest or build (see --help)" ;;
esac
[ "${SDP_GPU_CHECK_BUILD_ONLY:-0}" = 1 ] && MODE=build && SDP_GPU_CHECK_FORCE=1

# The driver's tools live here on some machines without being on PATH.
[ -d /usr/local/nvidia/bin ] && PATH=$PATH:/usr/local/nvidia/bin
[ -d /usr/local/cuda/bin ] && PATH=/usr/local/cuda/bin:$PATH
export PATH
gpu_present() { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }
if [ "${SDP_GPU_CHECK_FORCE:-0}" != 1 ] && ! gpu_present; then
    echo "gpu_check: no NVIDIA GPU here (nvidia-smi is missing or lists none): nothing built or run"
    exit 77
fi

BUDGET=${SDP_GPU_CHECK_BUDGET:-570}
BUILD=${SDP_GPU_CHECK_BUILD:-build-gpu}
case "$BUILD" in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
RESULTS=${SDP_GPU_CHECK_RESULTS:-${OUT:-$BUILD/gpu-check}}
PREFIX=${SDP_GPU_CHECK_PREFIX:-/tmp/sdp-gpu-deps}
RESERVE=15   # seconds kept for the summary and the tarball
MIN_STEP=20  # a step that would get less than this is skipped, not started
mkdir -p "$RESULTS" "$BUILD"
RESULTS=$(cd "$RESULTS" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sdp-gpu-check.XXXXXX")
LOGS=$WORK/logs
mkdir -p "$LOGS"
SUMMARY=$RESULTS/summary.txt
STEPS=$WORK/steps.tsv # name, status, seconds, note
: >"$STEPS"
DEADLINE=$((SECONDS + BUDGET))
STARTED=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && COMMIT="$COMMIT (with uncommitted changes)"

# The environment every step runs in (ctest gives its own tests the same).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mtl='^ofi,psm,psm2' OMPI_MCA_ess_singleton_isolated=1 # tests/tests.cmake says why
export SDP_BIN=$BUILD/sdp SDP_CUDA_BIN=$BUILD/sdp-cuda
export SDP_TEST_TMP=$BUILD/test_tmp
[ -d "$STAGE_DIR/fashion-mnist" ] && export SDP_FASHION_MNIST=$STAGE_DIR/fashion-mnist

record() { # record NAME STATUS SECONDS NOTE
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$STEPS"
    printf 'gpu_check: %-24s %-7s %4ss  %s\n' "$1" "$2" "$3" "$4"
    [ "$1" = script ] || write_summary
}

# step NAME LIMIT COMMAND...: runs COMMAND (a program or an exported function) under its own
# timeout, cut to what is left of the budget, with stdout and stderr in logs/NAME.log. Exit 0 is
# PASS, 77 SKIP (the program found nothing to test), 124/137 TIMEOUT, anything else FAIL. A
# failure never stops the steps after it.
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE - SECONDS - RESERVE))
    if [ "$left" -lt "$MIN_STEP" ]; then
        record "$name" SKIP 0 "no time left in this call (run: bash scripts/gpu_check.sh $(part_of "$name"))"
        return 0
    fi
    local note="" cut=""
    [ "$limit" -gt "$left" ] && limit=$left && cut=", cut to that by the budget"
    local t0=$SECONDS rc=0
    printf 'gpu_check: %-24s ...\n' "$name"
    { echo "\$ $*"; echo; } >"$LOGS/$name.log"
    # timeout execs its command: a function of this script runs in a bash that imports it.
    local run=("$@")
    [ "$(type -t "$1")" = function ] && run=(bash -c '"$@"' "$1" "$@")
    timeout --kill-after=10 "$limit" "${run[@]}" >>"$LOGS/$name.log" 2>&1 </dev/null || rc=$?
    local took=$((SECONDS - t0)) status why
    case "$rc" in
    0) status=PASS ;;
    77)
        status=SKIP
        why=$(grep -i -m1 -E 'skip|no CUDA device' "$LOGS/$name.log" || true)
        note="skipped itself: ${why:0:140}"
        # nvidia-smi lists a GPU, so a program that finds none (an old driver, say) has failed.
        if [ "${SDP_GPU_CHECK_FORCE:-0}" != 1 ] && grep -q -i -E 'no (usable )?CUDA device|driver' "$LOGS/$name.log"; then
            status=FAIL note="found no device although nvidia-smi lists one: ${why:0:110}"
        fi
        ;;
    124 | 137) status=TIMEOUT note="killed after ${limit}s (its limit$cut)" ;;
    *)
        status=FAIL
        why=$(grep -m1 -E 'sdp: error|FAIL|Error|error:' "$LOGS/$name.log" || grep -m1 -i -E 'error|fatal' "$LOGS/$name.log" || true)
        note="exit $rc: ${why:0:140}"
        ;;
    esac
    record "$name" "$status" "$took" "$note"
}

needs_build() { # needs_build NAME: records a SKIP and returns 1 when the build failed
    [ "$BUILT" = 1 ] && return 0
    record "$1" SKIP 0 "the build failed"
    return 1
}

part_of() {
    case "$1" in
    bench-* | breakdown-* | cuda-memory | train-2ranks*) echo bench ;;
    ctest) echo ctest ;;
    profile-*) echo profile ;;
    *) echo test ;;
    esac
}

# ---- what the machine has ----------------------------------------------------------------------

env_report() {
    echo "machine: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
    # shellcheck disable=SC1091 # the machine's own file
    echo "os: $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" || echo unknown)"
    echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown)"
    echo "user: $(id -un) (uid $(id -u))"
    if command -v nvidia-smi >/dev/null; then
        echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -n 4 | paste -sd';')"
    else
        echo "gpu: no nvidia-smi"
    fi
    local t
    for t in nvcc gcc g++ cmake ninja make pkg-config mpicc mpiexec python3 compute-sanitizer nsys ncu; do
        if command -v "$t" >/dev/null; then
            printf '%-18s %s: %s\n' "$t:" "$(command -v "$t")" "$("$t" --version 2>&1 | grep -m1 -E '[0-9]+\.[0-9]+' | cut -c1-90)"
        else
            printf '%-18s missing\n' "$t:"
        fi
    done
    echo "cudnn: $(find_cuda_lib cudnn.h 'libcudnn.so*' || echo 'not found')"
    echo "nccl:  $(find_cuda_lib nccl.h 'libnccl.so*' || echo 'not found')"
    echo "staged: $(if [ -f "$STAGE_DIR/deps.tar.xz" ]; then echo ".device/deps.tar.xz ($(du -h "$STAGE_DIR/deps.tar.xz" | cut -f1), $(wc -l <"$STAGE_DIR/packages.txt") packages)"; else echo none; fi)"
    echo "fashion-mnist: ${SDP_FASHION_MNIST:-not carried (.device/fashion-mnist missing)}"
}

# find_cuda_lib HEADER LIBGLOB: prints "INCLUDE_DIR LIBRARY" for cuDNN or NCCL: beside the toolkit
# or in the system first (where CMake finds them itself), else in the pip wheels a PyTorch image
# carries (nvidia/cudnn, nvidia/nccl: a .so.N with no .so link, so the library is named in full).
find_cuda_lib() {
    local header=$1 glob=$2 d lib
    for d in /usr/local/cuda/include /usr/local/cuda/targets/x86_64-linux/include /usr/include \
        /usr/include/$ARCH_TRIPLET; do
        [ -f "$d/$header" ] || continue
        for lib in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
            /usr/lib/$ARCH_TRIPLET /usr/lib64; do
            # shellcheck disable=SC2086,SC2012 # the glob is wanted; plain library names
            lib=$(ls $lib/$glob 2>/dev/null | head -n 1) && [ -n "$lib" ] && echo "$d $lib" && return 0
        done
    done
    local pkg=${header%.h}
    command -v python3 >/dev/null || return 1
    python3 - "$pkg" "$header" <<'PY' 2>/dev/null
import glob, os, sys
pkg, header = sys.argv[1], sys.argv[2]
for p in sys.path:
    inc = os.path.join(p, "nvidia", pkg, "include")
    libs = sorted(glob.glob(os.path.join(p, "nvidia", pkg, "lib", "lib%s.so*" % pkg)))
    if os.path.isfile(os.path.join(inc, header)) and libs:
        print(inc, libs[0]); sys.exit(0)
sys.exit(1)
PY
}

# ---- dependencies: the staged Debian packages, or the system's ---------------------------------

CMAKE_DEP_ARGS=()

# untar_xz TARBALL DIR: a bare image may have no xz program; Python's tarfile reads xz itself.
untar_xz() {
    if command -v xz >/dev/null; then
        tar -C "$2" -xJf "$1"
    else
        echo "no xz here: unpacking with python3's tarfile"
        python3 -c '
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    if hasattr(tarfile, "fully_trusted_filter"): t.extraction_filter = tarfile.fully_trusted_filter
    t.extractall(sys.argv[2])' "$1" "$2"
    fi
}

# set -e does not reach into a function called under ||: each of these checks its own steps.
deps_staged() {
    echo "unpacking $STAGE_DIR/deps.tar.xz into $PREFIX"
    if ! { rm -rf "$PREFIX" && mkdir -p "$PREFIX" && untar_xz "$STAGE_DIR/deps.tar.xz" "$PREFIX"; }; then
        echo "could not unpack $STAGE_DIR/deps.tar.xz into $PREFIX"
        return 1
    fi
    local U=$PREFIX/usr L=$PREFIX/usr/lib/$ARCH_TRIPLET
    # pkg-config files name /usr: point them at the prefix.
    find "$PREFIX" -name '*.pc' -exec sed -i -E \
        "s#(^|[=[:space:]]|-I|-L)/usr(/|[[:space:]]|\$)#\1$U\2#g" {} + || return 1
    # zlib: the system's own library when it has one (every program here loads it; an older copy
    # first on LD_LIBRARY_PATH could lack symbols they need); the staged one otherwise.
    local sysz
    # shellcheck disable=SC2012 # plain library names
    sysz=$(ls /lib/$ARCH_TRIPLET/libz.so.1 /usr/lib/$ARCH_TRIPLET/libz.so.1 /usr/lib64/libz.so.1 \
        /lib64/libz.so.1 2>/dev/null | head -n 1)
    if [ -n "$sysz" ]; then
        rm -f "$PREFIX"/lib/$ARCH_TRIPLET/libz.so.1*
        ln -sfn "$sysz" "$L/libz.so"
        echo "zlib: the system's $sysz"
    fi
    export PATH=$U/bin:$PATH
    export LD_LIBRARY_PATH=$L:$L/openblas-openmp:$L/openmpi/lib:$PREFIX/lib/$ARCH_TRIPLET${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PKG_CONFIG_PATH=$L/pkgconfig:$U/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    # OpenMPI was configured for /usr: these relocate it (its plugins, help texts, wrapper data and
    # Debian's openmpi-mca-params.conf, which turns off the network transports); PMIx likewise.
    export OPAL_PREFIX=$U OPAL_EXEC_PREFIX=$U OPAL_BINDIR=$U/bin OPAL_DATAROOTDIR=$U/share \
        OPAL_DATADIR=$U/share OPAL_LIBDIR=$L/openmpi/lib OPAL_INCLUDEDIR=$L/openmpi/include \
        OPAL_PKGDATADIR=$U/share/openmpi OPAL_PKGLIBDIR=$L/openmpi/lib/openmpi3 \
        OPAL_SYSCONFDIR=$PREFIX/etc/openmpi
    export PMIX_INSTALL_PREFIX=$U PMIX_MCA_mca_base_component_path=$L/pmix2/lib/pmix
    # mpiexec refuses to start even local ranks when its remote agent (ssh or rsh) is missing;
    # it never runs it for ranks on this machine.
    if ! command -v ssh >/dev/null && ! command -v rsh >/dev/null; then
        export OMPI_MCA_plm_rsh_agent=false
    fi
    # Needs that neither the prefix nor the system meets: expected only for plugins of hardware
    # this machine lacks (UCX's InfiniBand transports); anything else is a staging fault.
    # shellcheck disable=SC2016 # the inner script expands its own variables
    find "$PREFIX" -name '*.so*' -type f -print0 | xargs -0 -r -n 16 -P "$(nproc)" sh -c 'for f; do
        ldd "$f" 2>/dev/null | sed -n "s|^[[:space:]]*\([^ ]*\) => not found|unresolved: $f needs \1|p"
    done' sh
    CMAKE_DEP_ARGS=(-DCMAKE_PREFIX_PATH="$U" -DCMAKE_LIBRARY_PATH="$L" -DCMAKE_INCLUDE_PATH="$U/include"
        -DMPI_C_COMPILER="$U/bin/mpicc" -DMPIEXEC_EXECUTABLE="$U/bin/mpiexec"
        -DPKG_CONFIG_EXECUTABLE="$U/bin/pkgconf")
    deps_check
}

deps_system() {
    deps_check || {
        echo "no .device/deps.tar.xz was carried: run 'bash scripts/gpu_check.sh stage' on the" \
            "development machine and carry .device"
        return 1
    }
}

# deps_check: are mpicc, mpiexec, pkg-config and the .pc files there, and does MPI start 2 ranks?
deps_check() {
    local missing=() m
    for m in mpicc mpiexec pkg-config; do command -v "$m" >/dev/null || missing+=("$m"); done
    for m in openblas libcjson cmocka; do pkg-config --exists "$m" 2>/dev/null || missing+=("$m.pc"); done
    echo "mpicc: $(command -v mpicc) --showme: $(mpicc --showme 2>&1)"
    echo "pkg-config openblas libcjson cmocka: $(pkg-config --modversion openblas libcjson cmocka 2>&1 | paste -sd' ')"
    echo "ompi_info: $(ompi_info --parsable 2>&1 | grep -m1 'ompi:version:full')"
    local two
    two=$(timeout 60 mpiexec --oversubscribe -n 2 echo rank-ok 2>&1)
    echo "mpiexec -n 2: $(echo "$two" | paste -sd' ')"
    [ "$(echo "$two" | grep -c rank-ok)" = 2 ] || missing+=("a working mpiexec")
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "missing: ${missing[*]}"
    return 1
}

# cuDNN and NCCL: CMake finds them beside the toolkit; from pip wheels they are named explicitly.
cuda_libs() {
    local what found inc lib name incvar libvar
    for what in cudnn:SDP_CUDNN_INCLUDE_DIR:SDP_CUDNN_LIBRARY nccl:SDP_NCCL_INCLUDE:SDP_NCCL_LIBRARY; do
        IFS=: read -r name incvar libvar <<<"$what"
        found=$(find_cuda_lib "$name.h" "lib$name.so*") || {
            echo "$name: not found (beside CUDA, in the system, or in a pip wheel nvidia/$name)"
            return 1
        }
        read -r inc lib <<<"$found"
        echo "$name: $inc $lib"
        CMAKE_DEP_ARGS+=("-D$incvar=$inc" "-D$libvar=$lib")
        LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export LD_LIBRARY_PATH
    done
}

# ---- configure and build --------------------------------------------------------------------------

build() {
    local dep_args=()
    mapfile -t dep_args < <(grep . "$WORK/cmake-dep-args") # from the main shell: arrays do not export
    local archs=${SDP_GPU_CHECK_ARCHS:-}
    if [ -z "$archs" ]; then # the GPU's own: half the nvcc time of 80;90
        archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ' || true)
        [[ "$archs" =~ ^[0-9]+$ ]] || archs="80;90"
    fi
    local gen=() extra=()
    command -v ninja >/dev/null && [ ! -f "$BUILD/Makefile" ] && gen=(-G Ninja)
    # CMake 4 (PyTorch images carry it from pip) refuses any package config file that asks for a
    # policy version below 3.5 without a range; a system's oneDNN or cJSON may.
    [[ "$(cmake --version | head -n 1)" =~ version\ ([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 4 ] &&
        extra=(-DCMAKE_POLICY_VERSION_MINIMUM=3.5)
    cmake -S "$REPO" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSDP_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$archs" "${extra[@]}" "${dep_args[@]}" &&
        cmake --build "$BUILD" -j"$(nproc)"
}

# ---- the GPU steps --------------------------------------------------------------------------------

sanitize() { # sanitize TOOL PROGRAM [ARGS...]: compute-sanitizer, exit 1 on any error it reports
    local cs
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null) || {
        echo "skip: compute-sanitizer is not installed (it ships with the CUDA toolkit)"
        return 77
    }
    "$cs" --tool "$1" --error-exitcode 1 --print-limit 50 "$BUILD/$2" "${@:3}"
}

# no_device_skip COMMAND...: the benchmarks exit 0 saying "no CUDA device": make that a SKIP.
no_device_skip() {
    local rc
    "$@" 2>&1 | tee "$WORK/last.out"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] && grep -q -i 'no CUDA device' "$WORK/last.out" && return 77
    return "$rc"
}

bench() { # bench PRECISION [--sim-world 8 --sim-rank 0]: GPT-2 124M, T = 1024, B = 8
    local prec=$1 steps=20
    shift
    [ "$prec" = fp32 ] && steps=10
    no_device_skip "$BUILD/bench_cuda_train" --precision "$prec" --batch 8 --steps "$steps" "$@"
}

cuda_memory() { no_device_skip bash bench/cuda_memory.sh "$BUILD"; }

# Where the bf16 step's time goes: ncu times every kernel of the bench's timed steps (it brackets
# them with cudaProfilerStart/Stop), one after another at the card's own clocks; the kernels are
# summed per step by name, and cuBLAS's GEMMs apart from sdp's own kernels.
profile() { # profile NAME [BENCH ARGS...]
    local ncu steps=2 csv=$WORK/logs/profile-$1.csv # in logs.tar.gz, whole
    shift
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null) || {
        echo "skip: ncu is not installed (Nsight Compute ships with the CUDA toolkit)"
        return 77
    }
    "$ncu" --profile-from-start off --clock-control none --replay-mode application \
        --cache-control none --metrics gpu__time_duration.sum \
        --csv --page raw --print-units base "$BUILD/bench_cuda_train" --precision bf16 --batch 8 \
        --steps "$steps" "$@" >"$csv" || return 1
    grep -v '^"' "$csv" # the bench's own lines: its step times are the profiler's
    python3 - "$csv" "$steps" <<'PY'
import csv, re, sys
from collections import defaultdict
rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
steps = int(sys.argv[2])
head, units = rows[0], rows[1]
k = next(i for i, h in enumerate(head) if h in ("Kernel Name", "Function Name", "Name"))
t = next(i for i, h in enumerate(head) if h.startswith("gpu__time_duration"))
scales = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}
if units[t] not in scales:
    print("ncu: unit %r of %s not known: taken as ns" % (units[t], head[t]))
scale = scales.get(units[t], 1e-6)
ms, calls = defaultdict(float), defaultdict(int)
for r in rows[2:]:
    name = re.sub(r"^void |[(<].*", "", r[k]).strip() or r[k]
    ms[name] += float(r[t].replace(",", "")) * scale / steps
    calls[name] += 1
total = sum(ms.values())
gemm = re.compile(r"gemm|nvjet|cutlass|xmma|gemv", re.I)
g = sum(v for n, v in ms.items() if gemm.search(n))
print("ncu: %d kernel launches per step; device time per step %.2f ms (the kernels alone, run one "
      "after another)" % (sum(calls.values()) // steps, total))
print("  cuBLAS GEMMs %.2f ms (%.1f%%), sdp's own kernels %.2f ms (%.1f%%)"
      % (g, 100 * g / total, total - g, 100 * (total - g) / total))
print("  %-58s %7s %9s %6s" % ("kernel", "calls", "ms/step", "share"))
for n, v in sorted(ms.items(), key=lambda x: -x[1])[:20]:
    print("  %-58s %7d %9.3f %5.1f%%" % (n[:58], calls[n] // steps, v, 100 * v / total))
PY
}

# Two ranks on the one GPU (the staged reduction through host memory): a 4-layer GPT of width
# 256, data parallel and SDP with forward masking, owners compared every 20 steps.
train_2ranks() {
    local text=$WORK/text.txt mode
    for i in $(seq 1 20000); do echo "the quick brown fox $i jumps over the lazy dog"; done >"$text"
    for mode in none forward backward; do
        local sdp=(--sdp-mask "$mode")
        [ "$mode" != none ] && sdp+=(--sdp-unit block --sdp-owners 1 --check-replicas 20)
        echo "==== 2 ranks, one GPU, --sdp-mask $mode"
        mpiexec --oversubscribe -n 2 "$SDP_CUDA_BIN" train --data "$text" --layers 4 --heads 4 \
            --width 256 --seq-len 128 --batch 8 --steps 60 --log-every 10 --val-every 30 \
            --val-batches 4 --threads 2 --seed 7 --device cuda "${sdp[@]}" \
            --out "$WORK/train-2ranks-$mode" || return 1
        grep -q '"device_peak_in_use"' "$WORK/train-2ranks-$mode/memory.json" || {
            echo "FAIL: memory.json lacks device_peak_in_use"
            return 1
        }
    done
}

run_ctest() {
    cd "$BUILD"
    # shellcheck disable=SC2086 # the extra arguments are words
    ctest --output-on-failure --timeout 300 -j "${SDP_GPU_CHECK_CTEST_JOBS:-4}" ${SDP_GPU_CHECK_CTEST_ARGS:-}
}

export -f build sanitize no_device_skip bench cuda_memory profile train_2ranks run_ctest
export REPO BUILD WORK

part_test() {
    needs_build backend-ops-cuda && step backend-ops-cuda 150 "$BUILD/test_backend_ops" cuda
    needs_build backend-ops-bf16 && step backend-ops-bf16 150 "$BUILD/test_backend_ops" cuda-bf16
    needs_build test_cuda_model && step test_cuda_model 240 "$BUILD/test_cuda_model"
    needs_build test_cuda_reduce && step test_cuda_reduce 90 "$BUILD/test_cuda_reduce"
    needs_build test_cuda_train.sh && step test_cuda_train.sh 300 bash tests/gpu/test_cuda_train.sh
    return 0 # a step skipped for a failed build is recorded, not a failure of the script
}
# The bf16 ops run every kernel of ours, the fused attention's too: racecheck first.
sanitize_ops() {
    needs_build racecheck-ops && step racecheck-ops 240 sanitize racecheck test_backend_ops cuda-bf16
    needs_build memcheck-ops && step memcheck-ops 240 sanitize memcheck test_backend_ops cuda-bf16
    return 0
}
sanitize_model_and_memplan() {
    needs_build memcheck-model && step memcheck-model 240 sanitize memcheck test_cuda_model
    needs_build test_cuda_memplan.sh && step test_cuda_memplan.sh 240 bash tests/gpu/test_cuda_memplan.sh
    return 0
}
part_sanitize() {
    sanitize_ops
    sanitize_model_and_memplan
}
part_profile() {
    needs_build profile-ddp-bf16 && step profile-ddp-bf16 150 profile ddp
    needs_build profile-sdp-bf16 && step profile-sdp-bf16 150 profile sdp --sim-world 8 --sim-rank 0
    needs_build profile-ddp-bf16-gemm && step profile-ddp-bf16-gemm 150 profile ddp-gemm --attention gemm
    needs_build profile-ddp-bf16-operands && step profile-ddp-bf16-operands 150 profile ddp-operands --operands bf16
    return 0
}
part_bench() {
    needs_build bench-ddp-bf16 && step bench-ddp-bf16 120 bench bf16
    needs_build bench-ddp-bf16-gemm && step bench-ddp-bf16-gemm 120 bench bf16 --attention gemm
    needs_build bench-ddp-bf16-operands && step bench-ddp-bf16-operands 120 bench bf16 --operands bf16
    needs_build bench-sdp-bf16 && step bench-sdp-bf16 120 bench bf16 --sim-world 8 --sim-rank 0
    needs_build breakdown-ddp-bf16 && step breakdown-ddp-bf16 120 bench bf16 --breakdown 1
    needs_build bench-ddp-fp32 && step bench-ddp-fp32 120 bench fp32
    needs_build bench-sdp-fp32 && step bench-sdp-fp32 120 bench fp32 --sim-world 8 --sim-rank 0
    needs_build cuda-memory && step cuda-memory 300 cuda_memory
    needs_build train-2ranks && step train-2ranks 180 train_2ranks
    return 0
}

# ---- the summary ----------------------------------------------------------------------------------

# excerpt FILE MAX: the file, or its first and last lines when it is longer than MAX lines.
excerpt() {
    local n
    n=$(wc -l <"$1")
    if [ "$n" -le "$2" ]; then
        cat "$1"
    else
        head -n $(($2 / 3)) "$1"
        echo "    [... $((n - $2)) lines: see logs.tar.gz ...]"
        tail -n $(($2 - $2 / 3)) "$1"
    fi
}

counts() { # counts: "P passed, F failed, S skipped" over the steps so far (TIMEOUT is a failure)
    awk -F'\t' '{ p += $2 == "PASS"; f += $2 == "FAIL" || $2 == "TIMEOUT"; s += $2 == "SKIP" }
        END { printf "%d passed, %d failed, %d skipped\n", p, f, s }' "$STEPS"
}

# write_summary: summary.txt from the steps so far. It is rewritten after every step, so that a
# call cut off from outside still leaves the steps it finished.
write_summary() {
    local f name status max
    {
        echo "sdp gpu_check, part '$MODE', commit $COMMIT"
        echo "started $STARTED, ${1:-$SECONDS s so far} of a budget of $BUDGET s"
        echo
        echo "== steps"
        awk -F'\t' '{printf "%-24s %-7s %5ss  %s\n", $1, $2, $3, $4}' "$STEPS"
        echo
        echo "gpu_check: $(counts)"
        while IFS=$'\t' read -r name status _; do
            f=$LOGS/$name.log
            [ -f "$f" ] || continue
            case "$name" in
            build | ctest) max=80 ;;
            backend-ops-* | test_cuda_model) max=3000 ;;
            *) max=400 ;;
            esac
            echo
            echo "== $name ($status)"
            if [ "$name" = build ]; then # the backend's line, warnings and errors, then the end
                grep -E 'sdp: CUDA backend|warning|error' "$f" | head -n 40
                echo "    ..."
            fi
            excerpt "$f" "$max"
        done <"$STEPS"
    } >"$SUMMARY.tmp" && mv "$SUMMARY.tmp" "$SUMMARY"
}

finish() {
    local rc=$? failed
    set +e
    [ "$rc" -ne 0 ] && record script FAIL 0 "gpu_check.sh itself stopped with status $rc"
    write_summary "took $SECONDS s"
    [ -d "$BUILD/Testing/Temporary" ] && cp "$BUILD"/Testing/Temporary/LastTest*.log "$LOGS/" 2>/dev/null
    cp "$SUMMARY" "$LOGS/summary.txt"
    tar -C "$WORK" -czf "$RESULTS/logs.tar.gz" logs
    echo "gpu_check: $(counts); summary: $SUMMARY, logs: $RESULTS/logs.tar.gz"
    failed=$(awk -F'\t' '$2 == "FAIL" || $2 == "TIMEOUT"' "$STEPS" | wc -l)
    rm -rf "$WORK"
    [ "$failed" -eq 0 ] && exit 0
    exit 1
}
trap finish EXIT

# ---- the run --------------------------------------------------------------------------------------

echo "gpu_check: part '$MODE', commit $COMMIT, budget $BUDGET s, results in $RESULTS"
t0=$SECONDS
env_report >"$LOGS/env.log" 2>&1 || true
record env PASS $((SECONDS - t0)) "$(grep -m1 '^gpu:' "$LOGS/env.log" | cut -c6-120)"

t0=$SECONDS
DEPS=${SDP_GPU_CHECK_DEPS:-auto}
[ "$DEPS" = auto ] && { [ -f "$STAGE_DIR/deps.tar.xz" ] && DEPS=staged || DEPS=system; }
deps_rc=0
case "$DEPS" in
staged) deps_staged >"$LOGS/deps.log" 2>&1 || deps_rc=$? ;;
system) deps_system >"$LOGS/deps.log" 2>&1 || deps_rc=$? ;;
*) echo "SDP_GPU_CHECK_DEPS=$DEPS: staged, system or auto" >"$LOGS/deps.log"; deps_rc=1 ;;
esac
cuda_libs >>"$LOGS/deps.log" 2>&1 || deps_rc=$?
if [ "$deps_rc" -eq 0 ]; then
    record deps PASS $((SECONDS - t0)) "$DEPS packages; $(grep -E '^(cudnn|nccl):' "$LOGS/deps.log" | awk '{print $NF}' | paste -sd' ')"
else
    record deps FAIL $((SECONDS - t0)) "$({ grep -m1 -E '^missing|could not|not found|no \.device' "$LOGS/deps.log" || head -n 1 "$LOGS/deps.log"; } | cut -c1-150)"
fi
# The CPU tests read Fashion-MNIST from its Debian path only: lend them the carried copy.
if [ -n "${SDP_FASHION_MNIST:-}" ] && [ ! -e /usr/share/datasets/fashion-mnist ] && [ -w /usr/share ]; then
    mkdir -p /usr/share/datasets && ln -s "$SDP_FASHION_MNIST" /usr/share/datasets/fashion-mnist &&
        echo "linked /usr/share/datasets/fashion-mnist -> $SDP_FASHION_MNIST" >>"$LOGS/deps.log"
fi

BUILT=0
if [ "$deps_rc" -eq 0 ]; then
    printf '%s\n' "${CMAKE_DEP_ARGS[@]}" >"$WORK/cmake-dep-args"
    step build 360 build
    [ "$(tail -n 1 "$STEPS" | cut -f2)" = PASS ] && BUILT=1
else
    record build SKIP 0 "the dependencies are missing"
fi

case "$MODE" in
build) ;;
test)
    part_test
    part_sanitize
    ;;
bench) part_bench ;;
profile) part_profile ;;
ctest) needs_build ctest && step ctest "$BUDGET" run_ctest ;;
all) # the most telling first: parity, speed, then what is slow or repeats
    needs_build backend-ops-cuda && step backend-ops-cuda 150 "$BUILD/test_backend_ops" cuda
    needs_build backend-ops-bf16 && step backend-ops-bf16 150 "$BUILD/test_backend_ops" cuda-bf16
    needs_build test_cuda_model && step test_cuda_model 240 "$BUILD/test_cuda_model"
    needs_build bench-ddp-bf16 && step bench-ddp-bf16 120 bench bf16
    needs_build bench-ddp-bf16-gemm && step bench-ddp-bf16-gemm 120 bench bf16 --attention gemm
    needs_build bench-ddp-bf16-operands && step bench-ddp-bf16-operands 120 bench bf16 --operands bf16
    needs_build bench-sdp-bf16 && step bench-sdp-bf16 120 bench bf16 --sim-world 8 --sim-rank 0
    needs_build breakdown-ddp-bf16 && step breakdown-ddp-bf16 120 bench bf16 --breakdown 1
    sanitize_ops # the newest kernels (the fused attention) before the repeats
    needs_build test_cuda_reduce && step test_cuda_reduce 90 "$BUILD/test_cuda_reduce"
    needs_build test_cuda_train.sh && step test_cuda_train.sh 300 bash tests/gpu/test_cuda_train.sh
    needs_build bench-ddp-fp32 && step bench-ddp-fp32 120 bench fp32
    needs_build bench-sdp-fp32 && step bench-sdp-fp32 120 bench fp32 --sim-world 8 --sim-rank 0
    needs_build train-2ranks && step train-2ranks 180 train_2ranks
    needs_build cuda-memory && step cuda-memory 300 cuda_memory
    sanitize_model_and_memplan
    needs_build ctest && step ctest "$BUDGET" run_ctest
    ;;
esac
exit 0 # each step's outcome is in the summary: finish (the EXIT trap) sets the status from them
