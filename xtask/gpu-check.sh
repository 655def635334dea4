#!/usr/bin/env bash
# div on a real NVIDIA GPU, end to end (docs/gpus.md, "The check on a real GPU").
#
#   xtask/gpu-check.sh              # on any machine with an NVIDIA GPU div offers (H100, H200, B300)
#   xtask/gpu-check.sh --self-test  # the transcript checks alone, against recorded transcripts
#
# It takes the release `div` ($DIV, else target/release/div, else built with cargo) and
# Debian's bubblewrap (installed; else installed with apt-get; else unpacked with `dpkg-deb -x`
# from $BWRAP_DEB or a .deb `apt-get download` fetches, and put at /usr/local/bin/bwrap, where
# div looks for it). On a local control plane of its own (a fresh DIVERGENT_HOME, this
# machine's system standing in for the default image: DIVERGENT_DEFAULT_IMAGE=host) it runs
#
#   div run --gpu <sku> --no-upload -- '<python3 -c …; nvidia-smi …; ls /proc/driver/nvidia/gpus>'
#
# and checks what the run printed: torch.cuda.is_available(), one device and its name, a 4×4
# matrix product on the GPU, CUDA_VISIBLE_DEVICES=0 and CUDA_DEVICE_ORDER=PCI_BUS_ID, and
# nvidia-smi and /proc/driver/nvidia/gpus listing exactly the run's GPU: the machine's first GPU
# of that SKU (an idle control plane gives the first free one). Where the machine has two of
# that SKU, a second run is placed while a first holds GPU 0, and must see exactly the second
# GPU, as 0. $GPU_CHECK_IMAGE names an image to run the same check in, too (the driver given
# to an image: libraries, loader cache). Exits non-zero when any check fails.
#
# The host needs python3 with torch (CUDA build) for the host run. Nothing is sent anywhere.

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
failures=0

say() { printf 'gpu-check: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
ok() { printf '  ok      %s\n' "$*"; }
bad() { printf '  FAILED  %s\n' "$*"; failures=$((failures + 1)); }
# ok $3 when $1 is $2, else bad $4.
expect() { if [[ $1 == "$2" && -n $1 ]]; then ok "$3"; else bad "$4"; fi; }

# The SKU div gives a GPU of this name (as the control plane reads nvidia-smi), or nothing.
sku_of() {
    local name=${1^^}
    case $name in
        *B300*) echo b300 ;;
        *H200*) echo h200 ;;
        *H100*) echo h100 ;;
        *) echo "" ;;
    esac
}

# A PCI bus id as one text: `00000000:3B:00.0` and `0000:3b:00.0` are both `0000:3b:00.0`.
norm_bus() {
    local id=${1,,}
    id=${id//[[:space:]]/}
    local domain=${id%%:*} rest=${id#*:}
    [[ $domain =~ ^[0-9a-f]+$ ]] || { echo "$id"; return; }
    printf '%04x:%s\n' "$((16#$domain))" "$rest"
}

# The lines of a transcript's section (`== name` up to the next `== `).
section() {
    awk -v want="== $2" '
        /^== / { inside = ($0 == want); next }
        inside && NF { print }
    ' "$1"
}

# The value after `key ` on the transcript's line that starts so.
field() {
    awk -v key="$2" '$1 == key { $1 = ""; sub(/^ /, ""); print; exit }' "$1"
}

# Judges a run's transcript: $1 the file, $2 the bus id the run must have been given, $3 the
# GPU name the host gives it. Prints a line per check; returns how many failed.
judge() {
    local file=$1 want_bus=$2 want_name=$3 before=$failures
    local smi proc got_bus
    expect "$(field "$file" cuda_available)" True "torch.cuda.is_available() is True" \
        "torch.cuda.is_available() is '$(field "$file" cuda_available)', not True"
    expect "$(field "$file" device_count)" 1 "torch sees 1 device" \
        "torch sees '$(field "$file" device_count)' devices, not 1"
    expect "$(field "$file" device_name)" "$want_name" "device 0 is $want_name" \
        "device 0 is '$(field "$file" device_name)', not '$want_name'"
    expect "$(field "$file" matmul)" 3680.0 "a 4x4 matrix product on the GPU: 3680.0" \
        "the matrix product on the GPU gave '$(field "$file" matmul)', not 3680.0"
    expect "$(field "$file" visible)" "0 PCI_BUS_ID" "CUDA_VISIBLE_DEVICES=0 CUDA_DEVICE_ORDER=PCI_BUS_ID" \
        "CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER are '$(field "$file" visible)', not '0 PCI_BUS_ID'"
    smi=$(section "$file" nvidia-smi)
    proc=$(section "$file" proc)
    if [[ $(grep -c . <<<"$smi") == 1 ]]; then
        got_bus=$(norm_bus "$(awk -F', ' '{print $3}' <<<"$smi")")
        expect "$got_bus" "$(norm_bus "$want_bus")" "nvidia-smi in the run lists exactly its GPU ($got_bus)" \
            "nvidia-smi in the run lists $got_bus, not the run's GPU $(norm_bus "$want_bus")"
    else
        bad "nvidia-smi in the run lists $(grep -c . <<<"$smi") GPUs, not exactly the run's: ${smi//$'\n'/; }"
    fi
    if [[ $(grep -c . <<<"$proc") == 1 && $(norm_bus "$proc") == "$(norm_bus "$want_bus")" ]]; then
        ok "/proc/driver/nvidia/gpus in the run holds its GPU alone"
    else
        bad "/proc/driver/nvidia/gpus in the run holds '${proc//$'\n'/ }', not $(norm_bus "$want_bus") alone"
    fi
    return $((failures - before))
}

# What the run runs: its transcript, in sections.
inner_command() {
    local py='
import os, torch
print("cuda_available", torch.cuda.is_available())
print("device_count", torch.cuda.device_count())
print("device_name", torch.cuda.get_device_name(0))
a = torch.arange(16, dtype=torch.float32, device="cuda").reshape(4, 4)
print("matmul", float((a @ a.T).sum().item()))
print("visible", os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER"))
'
    printf '%s' "echo '== python'; python3 -c '$py'; echo '== nvidia-smi'; nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader; echo '== proc'; ls /proc/driver/nvidia/gpus"
}

self_test() {
    local tmp good
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    good="== python
cuda_available True
device_count 1
device_name NVIDIA H100 80GB HBM3
matmul 3680.0
visible 0 PCI_BUS_ID
== nvidia-smi
0, NVIDIA H100 80GB HBM3, 00000000:3B:00.0
== proc
0000:3b:00.0"
    printf '%s\n' "$good" >"$tmp/good"
    judge "$tmp/good" 00000000:3B:00.0 "NVIDIA H100 80GB HBM3" >"$tmp/out" \
        || die "self-test: a good transcript was judged failed: $(cat "$tmp/out")"
    # Each of these must fail: every GPU listed, another GPU, no CUDA, a wrong product,
    # the host's numbering, /proc unmasked.
    local -a cases=(
        "s/^0, NVIDIA H100 80GB HBM3, 00000000:3B:00.0$/&\n1, NVIDIA H100 80GB HBM3, 00000000:5D:00.0/"
        "s/3B:00.0$/5D:00.0/"
        "s/cuda_available True/cuda_available False/"
        "s/matmul 3680.0/matmul 3681.0/"
        "s/visible 0 PCI_BUS_ID/visible 3 PCI_BUS_ID/"
        "s/^0000:3b:00.0$/&\n0000:5d:00.0/"
        "s/device_count 1/device_count 8/"
    )
    local c
    for c in "${cases[@]}"; do
        sed -e "$c" "$tmp/good" >"$tmp/bad"
        cmp -s "$tmp/good" "$tmp/bad" && die "self-test: '$c' changed nothing"
        if judge "$tmp/bad" 00000000:3B:00.0 "NVIDIA H100 80GB HBM3" >"$tmp/out"; then
            die "self-test: a bad transcript ($c) was judged good"
        fi
    done
    failures=0
    [[ $(sku_of "NVIDIA H200") == h200 && $(sku_of "NVIDIA B300 SXM6") == b300 && -z $(sku_of "Tesla T4") ]] \
        || die "self-test: sku_of"
    [[ $(norm_bus "00000000:3B:00.0") == 0000:3b:00.0 ]] || die "self-test: norm_bus"
    # The command the run is given, run by sh as a run's is, with stand-ins for python3 (which
    # checks that its program reaches it whole), nvidia-smi and ls: judged good.
    mkdir -p "$tmp/bin"
    # shellcheck disable=SC2016 # the stand-in's own variables, expanded when it runs
    printf '%s\n' '#!/bin/sh' '[ "$1" = -c ] || exit 2' \
        'if [ -n "$REAL_PYTHON" ]; then "$REAL_PYTHON" -c "import ast, sys; ast.parse(sys.argv[1])" "$2" || exit 3; fi' \
        "sed -n '2,6p' '$tmp/good'" >"$tmp/bin/python3"
    printf '%s\n' '#!/bin/sh' "echo '0, NVIDIA H100 80GB HBM3, 00000000:3B:00.0'" >"$tmp/bin/nvidia-smi"
    printf '%s\n' '#!/bin/sh' 'echo 0000:3b:00.0' >"$tmp/bin/ls"
    chmod +x "$tmp/bin/python3" "$tmp/bin/nvidia-smi" "$tmp/bin/ls"
    REAL_PYTHON=$(command -v python3 || true) PATH="$tmp/bin:$PATH" sh -c "$(inner_command)" >"$tmp/ran" \
        || die "self-test: the run's command failed under sh: $(cat "$tmp/ran")"
    judge "$tmp/ran" 00000000:3B:00.0 "NVIDIA H100 80GB HBM3" >"$tmp/out" \
        || die "self-test: the run's command, run, was judged failed: $(cat "$tmp/out")"
    echo "gpu-check: self-test passed"
}

# div's release binary.
find_div() {
    if [[ -n ${DIV:-} ]]; then
        [[ -x $DIV ]] || die "DIV=$DIV is not an executable"
        echo "$DIV"
    elif [[ -x $repo/target/release/div ]]; then
        echo "$repo/target/release/div"
    elif command -v cargo >/dev/null; then
        say "building the release div (cargo build --release -p div-cli)"
        (cd "$repo" && cargo build --release -p div-cli >&2)
        echo "$repo/target/release/div"
    else
        die "no div: set DIV, put one at target/release/div, or install cargo to build it"
    fi
}

# Debian's bubblewrap where div looks for it (/usr/bin, /bin, /usr/local/bin, /usr/sbin).
ensure_bwrap() {
    local d
    for d in /usr/bin /bin /usr/local/bin /usr/sbin; do
        [[ -x $d/bwrap ]] && { say "bubblewrap: $d/bwrap ($("$d/bwrap" --version))"; return; }
    done
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null \
        && apt-get install -y bubblewrap >&2 && [[ -x /usr/bin/bwrap ]]; then
        say "bubblewrap: installed with apt-get"
        return
    fi
    local deb=${BWRAP_DEB:-} unpacked
    unpacked=$(mktemp -d)
    if [[ -z $deb ]] && command -v apt-get >/dev/null; then
        (cd "$unpacked" && apt-get download bubblewrap >&2) || true
        local f
        for f in "$unpacked"/bubblewrap_*.deb; do [[ -f $f ]] && deb=$f; done
    fi
    [[ -n $deb && -f $deb ]] \
        || die "no bubblewrap, and none could be installed: give its .deb (Debian's bubblewrap) as BWRAP_DEB"
    if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$deb" "$unpacked/root"
    else
        (cd "$unpacked" && ar x "$deb" && mkdir -p root && tar -xf data.tar.* -C root)
    fi
    install -m 0755 "$unpacked/root/usr/bin/bwrap" /usr/local/bin/bwrap \
        || die "bubblewrap unpacked from $deb, but /usr/local/bin is not writable: run as root"
    say "bubblewrap: unpacked from $deb to /usr/local/bin/bwrap ($(/usr/local/bin/bwrap --version))"
}

# Runs the check command as a run on `--gpu $sku` (extra flags after), transcript in $1.
run_check() {
    local out=$1
    shift
    say "div run --gpu $sku --no-upload $* -- <check>"
    if ! "$div" run --gpu "$sku" --project gpu-check --no-upload "$@" -- "$(inner_command)" >"$out" 2>&1; then
        say "the run failed; its output:"
        cat "$out" >&2
        return 1
    fi
    sed 's/^/    | /' "$out"
}

main() {
    command -v nvidia-smi >/dev/null || die "no nvidia-smi: this is not a machine with an NVIDIA GPU"
    local gpus
    gpus=$(nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader)
    say "this machine's GPUs:"$'\n'"$gpus"
    local first_name
    first_name=$(awk -F', ' 'NR == 1 {print $2}' <<<"$gpus")
    sku=${GPU_CHECK_SKU:-$(sku_of "$first_name")}
    [[ -n $sku ]] || die "its first GPU ($first_name) is none of div's SKUs (H100, H200, B300)"
    local -a buses names
    while IFS=, read -r _ name bus; do
        [[ $(sku_of "$name") == "$sku" ]] || continue
        names+=("${name# }")
        buses+=("${bus# }")
    done <<<"$gpus"
    python3 -c 'import torch' 2>/dev/null || die "this machine's python3 has no torch: install a CUDA build of torch"
    div=$(find_div)
    ensure_bwrap
    local home
    home=$(mktemp -d)
    export DIVERGENT_HOME=$home DIVERGENT_DEFAULT_IMAGE=host
    unset DIVERGENT_EMULATE_GPUS DIVERGENT_API_URL DIVERGENT_TOKEN
    trap '"$div" server stop >/dev/null 2>&1 || true' EXIT
    cd "$home"
    echo "gpu-check: $sku on $(hostname), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1), $("$div" --version)"
    echo "run 1: the first $sku"
    if run_check "$home/one.txt"; then judge "$home/one.txt" "${buses[0]}" "${names[0]}" || true; else bad "run 1 did not end well"; fi
    if ((${#buses[@]} >= 2)); then
        echo "run 2: the second $sku, while a run holds the first"
        "$div" run --gpu "$sku" --project gpu-check --no-upload --detach --name gpu-check-hold -- sleep 900 >/dev/null
        if run_check "$home/two.txt"; then judge "$home/two.txt" "${buses[1]}" "${names[1]}" || true; else bad "run 2 did not end well"; fi
        "$div" stop gpu-check-hold >/dev/null 2>&1 || true
    fi
    if [[ -n ${GPU_CHECK_IMAGE:-} ]]; then
        echo "run 3: in the image $GPU_CHECK_IMAGE"
        if run_check "$home/image.txt" --image "$GPU_CHECK_IMAGE"; then judge "$home/image.txt" "${buses[0]}" "${names[0]}" || true; else bad "run 3 did not end well"; fi
    fi
    if ((failures > 0)); then
        echo "gpu-check: $failures check(s) FAILED"
        exit 1
    fi
    echo "gpu-check: every check passed"
}

case ${1:-} in
    --self-test) self_test ;;
    "") main ;;
    *) die "usage: xtask/gpu-check.sh [--self-test]" ;;
esac
