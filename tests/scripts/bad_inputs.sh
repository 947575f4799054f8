#!/usr/bin/env bash
# shellcheck disable=SC2059,SC2046,SC2178,SC2128,SC2086  # printf formats of bytes on purpose; one word per value (numbers, names, pid lists)
# bad_inputs.sh — a campaign of bad inputs and faults against build/train.
#
#   tests/scripts/bad_inputs.sh build/train [outdir]        (outdir default: /tmp/bad_inputs)
#
# Builds a table of several hundred cases, generated in loops: every numeric flag of
# --help x odd values, every string/enum flag x odd strings, mesh arithmetic (some under
# mpirun -np 2), broken --data files, unwritable outputs (incl. a full tmpfs when root),
# damaged checkpoints and --init-from folders, SIGTERM/SIGINT mid-run, careless usage.
# Each case is: a name, an expectation, a "needle" (an ERE the error must contain: the
# offending flag or path) and a command. Expectations:
#   fail    must exit non-zero with exactly one distinct "error:" line naming the needle
#   ok      must exit 0
#   either  legal or not; only a crash, hang or unclear message is a finding
#   sig     a signal case: must exit non-zero (not hang) and leave no partial output
# Cases run ONE AT A TIME (a shared machine), each under `timeout 60` and `ulimit -v 8G`,
# in OUTDIR/work. Categories: correct, clear, unclear, crash, hang, silent (a `fail` case
# that exited 0), refused (an `ok` case rejected with a clear error), partial (an output
# left under its final name after a kill/full disk). Writes OUTDIR/results.txt (one line a
# case), OUTDIR/findings.txt (command + stderr of every case not clear/correct), logs/.
# Env: ONLY=REGEX runs the cases whose name matches; LIST=1 prints the table, runs nothing.
# Needs mpirun, python3 (manifest edits); root for the full-tmpfs cases (skipped otherwise).
set -u
[ $# -ge 1 ] || { echo "usage: $0 build/train [outdir]" >&2; exit 2; }
SRC=$(realpath "$1"); OUT=$(realpath -m "${2:-/tmp/bad_inputs}")
W=$OUT/work; L=$OUT/logs; T=$OUT/train   # a copy: a rebuild during the campaign changes nothing
mkdir -p "$OUT" && cp "$SRC" "$T" || exit 2
echo "binary: $SRC ($(stat -c %y "$SRC"), sha256 $(sha256sum <"$T" | cut -c1-16)), run as $T"
for d in "$W/full" "$W/small"; do mountpoint -q "$d" && umount "$d"; done
rm -rf "$W" "$L"; mkdir -p "$W" "$L"
MEMKB=8388608                       # per-process address-space guard (8 GiB)
TAG=bad_inputs_$$                    # marks the processes of the cases (orphan check)
MPI="env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none mpirun --oversubscribe -np 2"
BASE=(--device cpu --model tiny --steps 3 --seq-len 32 --micro-batch-size 2 --generate 0 --threads 1)
LONG=$(printf 'x%.0s' {1..5000})
q() { [ $# -gt 0 ] && printf '%q ' "$@"; }
base_without() {  # the base flags minus those that "$@" sets itself (a flag given once)
  local out=() i a skip
  for ((i = 0; i < ${#BASE[@]}; i += 2)); do
    skip=0; for a in "$@"; do [[ ${a%%=*} == "${BASE[i]}" ]] && skip=1
      [[ $a == --init-from && ${BASE[i]} == --model ]] && skip=1; done   # the folder gives the shape
    ((skip)) || out+=("${BASE[i]}" "${BASE[i + 1]}")
  done
  q "${out[@]}"
}
NAMES=() EXPECTS=() NEEDLES=() CMDS=() CHECKS=()
addsh() { NAMES+=("$1"); EXPECTS+=("$2"); NEEDLES+=("$3"); CMDS+=("$4"); CHECKS+=("${5:-}"); }
add() { local n=$1 e=$2 k=$3; shift 3; addsh "$n" "$e" "$k" "$(q "$T")$(base_without "$@")$(q "$@")"; }
addmpi() { local n=$1 e=$2 k=$3; shift 3; addsh "$n" "$e" "$k" "$MPI $(q "$T")$(base_without "$@")$(q "$@")"; }

# ---- fixtures ------------------------------------------------------------------------
D=$W/data; mkdir -p "$D/nobins" "$D/subdir/inner.bin" "$D/mixed" "$W/adir" "$W/emptydir"
for i in $(seq 200); do echo "line $i of some text for training"; done >"$D/ok.txt"
: >"$D/empty.txt"; echo "too short" >"$D/short.txt"; echo "notes" >"$D/nobins/readme.txt"
head -c 4000 /dev/urandom >"$D/random.bin"; head -c 4001 /dev/urandom >"$D/random_odd.bin"
head -c 4000 /dev/urandom >"$D/random.dat"
{ printf 'caf\xe9 \xff\xfe broken \xc3\x28 utf8 '; cat "$D/ok.txt"; } >"$D/bad_utf8.txt"
hdr() { printf 'PICOTOK1'; printf "$1"; printf '\x00\x00\x00\x00'; printf "$2"; }  # width, count (LE)
{ hdr '\x02\x00\x00\x00' '\xe8\x03\x00\x00\x00\x00\x00\x00'; head -c 100 /dev/zero; } >"$D/trunc_body.bin"
{ hdr '\x02\x00\x00\x00' '\xff\xff\xff\xff\xff\xff\xff\xff'; head -c 100 /dev/zero; } >"$D/huge_count.bin"
{ hdr '\x02\x00\x00\x00' '\x00\x00\x00\x00\x00\x00\x00\x80'; head -c 100 /dev/zero; } >"$D/count_2p63.bin"
{ hdr '\x03\x00\x00\x00' '\x0a\x00\x00\x00\x00\x00\x00\x00'; head -c 30 /dev/zero; } >"$D/width3.bin"
hdr '\x02\x00\x00\x00' '\x00\x00\x00\x00\x00\x00\x00\x00' >"$D/zero_count.bin"
printf 'PICOTOK1\x02\x00\x00\x00' >"$D/trunc_header.bin"
{ hdr '\x02\x00\x00\x00' '\x0a\x00\x00\x00\x00\x00\x00\x00'; head -c 20 /dev/zero; } >"$D/ten_tokens.bin"
{ hdr '\x02\x00\x00\x00' '\x64\x00\x00\x00\x00\x00\x00\x00'; for i in $(seq 100); do printf '\xff\x7f'; done; } >"$D/big_ids.bin"
{ hdr '\x02\x00\x00\x00' '\xc8\x00\x00\x00\x00\x00\x00\x00'; for i in $(seq 200); do printf '\x01\x00'; done; } >"$D/good.bin"
cp "$D/good.bin" "$D/mixed/a.bin"; cp "$D/trunc_body.bin" "$D/mixed/b.bin"
ln -s loop2 "$D/loop1"; ln -s loop1 "$D/loop2"; ln -s /dev/zero "$D/zero.bin"
mkfifo "$D/fifo"; ln -s /nonexistent/target "$D/dangling"
echo '{"input_ids": [[1,2,3,4,5,6],[7,8,9,10,11,12]]}' >"$W/eval.json"
run_fixture() { "$T" "${BASE[@]}" "$@" >"$L/fixture.log" 2>&1 || { echo "fixture failed: $*"; cat "$L/fixture.log"; exit 1; }; }
run_fixture --steps 2 --save-dir "$W/ck"
run_fixture --steps 1 --export-hf "$W/hf"
CK=$W/ck/step-000002; RF=rank-00000.safetensors

# ---- 1. numeric flags x odd values ----------------------------------------------------
INTS="hidden-size intermediate-size num-hidden-layers num-attention-heads num-key-value-heads vocab-size
  max-position-embeddings threads seq-len micro-batch-size grad-acc-steps steps warmup-steps max-bad-steps seed
  dp tp pp pp-virtual-stages cp zero timeout-s save-every keep-checkpoints stop-at-step log-every generate"
DBLS="rope-theta rms-norm-eps lr min-lr weight-decay beta1 beta2 adam-eps grad-clip init-std dp-bucket-mb"
ZERO_OK=" steps warmup-steps threads seed zero save-every stop-at-step log-every generate min-lr weight-decay beta1 beta2 grad-clip "
num_expect() {  # flag value -> ok | fail | either (from --help and config_validate.cpp)
  local f=$1 v=$2
  case "$v" in
    '' | abc) echo fail; return ;;
    0) [[ $ZERO_OK == *" $f "* ]] && echo ok || echo fail; return ;;
    -1) [[ $f == seed ]] && echo either || echo fail; return ;;
  esac
  [[ " $DBLS " == *" $f "* ]] || { echo fail; return; }        # ints: every other value fails
  case "$f:$v" in
    *:nan | *:inf | *:-9223372036854775808 | min-lr:* | beta1:* | beta2:* | dp-bucket-mb:99999999999999999999) echo fail ;;
    rope-theta:1.5 | rope-theta:1e3 | adam-eps:1.5 | adam-eps:1e3 | grad-clip:* | dp-bucket-mb:* | weight-decay:1.5) echo ok ;;
    *) echo either ;;   # e.g. --lr 1e3: legal, may diverge (exit 3 after --max-bad-steps)
  esac
}
for f in $INTS $DBLS; do
  for v in '' -1 0 1.5 abc 1e3 99999999999999999999 -9223372036854775808 nan inf; do
    add "num --$f '$v'" "$(num_expect "$f" "$v")" "--$f" "--$f" "$v"
  done
done

# ---- 2. string / enum / bool flags x odd strings --------------------------------------
for f in model dtype device pp-schedule recompute cp-layout dp-mode data init-from resume eval prompt-ids; do
  for v in '' bogus "$LONG" 'a value with spaces'; do add "str --$f '${v:0:20}'" fail "--$f" "--$f" "$v"; done
done
for f in metrics-file memory-trace save-params save-dir export-hf eval-logits; do
  extra=(); [ $f = eval-logits ] && extra=(--eval "$W/eval.json")
  add "out --$f ''" fail "--$f" "${extra[@]}" "--$f" ""
  add "out --$f bogus" ok "--$f" "${extra[@]}" "--$f" "bogus_$f"
  add "out --$f long" fail "--$f" "${extra[@]}" "--$f" "$LONG"
  add "out --$f spaces" ok "--$f" "${extra[@]}" "--$f" "with spaces $f"
done
addmpi "out --pp-trace ''" fail "--pp-trace" --pp 2 --pp-trace ""
addmpi "out --pp-trace bogus" ok "--pp-trace" --pp 2 --pp-trace bogus_trace
addmpi "out --pp-trace long" fail "--pp-trace" --pp 2 --pp-trace "$LONG"
addmpi "out --pp-trace spaces" ok "--pp-trace" --pp 2 --pp-trace "with spaces trace"
for f in tie-word-embeddings dry-run sp zero-offload comm-report; do
  for v in '' bogus "$LONG" 'a b'; do add "bool --$f='${v:0:20}'" fail "--$f" "--$f=$v"; done
done

# ---- 3. mesh arithmetic ---------------------------------------------------------------
add "mesh single --dp 2" fail "--dp" --dp 2
add "mesh single --tp 2" fail "--tp" --tp 2
addmpi "mesh np2 no flags" fail "--dp"
addmpi "mesh np2 --dp 3" fail "--dp" --dp 3
addmpi "mesh np2 --dp 2 --tp 2" fail "--dp|--tp" --dp 2 --tp 2
addmpi "mesh np2 --dp 2 ok" ok "" --dp 2
addmpi "mesh --tp 2 kv-heads 1" fail "--num-key-value-heads" --tp 2 --num-key-value-heads 1
addmpi "mesh --tp 2 heads 3" fail "--num-attention-heads" --tp 2 --hidden-size 96 --num-attention-heads 3 --num-key-value-heads 3
addmpi "mesh --tp 2 intermediate 383" fail "--intermediate-size" --tp 2 --intermediate-size 383
addmpi "mesh --tp 2 vocab 257" fail "--vocab-size" --tp 2 --vocab-size 257
addmpi "mesh --tp 2 --sp seq 31" fail "--seq-len" --tp 2 --sp --seq-len 31
addmpi "mesh --pp 2 layers 3" either "--num-hidden-layers|--pp" --pp 2 --num-hidden-layers 3
addmpi "mesh --pp 2 layers 1" fail "--num-hidden-layers|--pp" --pp 2 --num-hidden-layers 1
addmpi "mesh --pp 2 interleaved v1" fail "--pp-virtual-stages|--pp-schedule" --pp 2 --pp-schedule interleaved --grad-acc-steps 2
addmpi "mesh --pp 2 interleaved v3" fail "--pp-virtual-stages|--num-hidden-layers" --pp 2 --pp-schedule interleaved --pp-virtual-stages 3 --grad-acc-steps 2
addmpi "mesh --pp 2 interleaved v2" ok "" --pp 2 --pp-schedule interleaved --pp-virtual-stages 2 --grad-acc-steps 2
addmpi "mesh --pp 2 interleaved acc 1" fail "--grad-acc-steps" --pp 2 --pp-schedule interleaved --pp-virtual-stages 2
addmpi "mesh --pp 2 zb-h1 acc 1" fail "--grad-acc-steps" --pp 2 --pp-schedule zb-h1
for s in afab 1f1b zb-h1; do addmpi "mesh --pp 2 $s" ok "" --pp 2 --pp-schedule $s --grad-acc-steps 2; done
addmpi "mesh --cp 2 seq 31" fail "--seq-len|--cp" --cp 2 --seq-len 31
addmpi "mesh --cp 2 zigzag seq 34" fail "--seq-len|--cp" --cp 2 --seq-len 34
addmpi "mesh --cp 2 contiguous seq 34" ok "" --cp 2 --seq-len 34 --cp-layout contiguous
addmpi "mesh --zero 2 --pp 2" fail "--zero" --zero 2 --pp 2
addmpi "mesh --zero 3 --tp 2 --sp" fail "--zero" --zero 3 --tp 2 --sp
addmpi "mesh --zero 3 --dp 2" ok "" --zero 3 --dp 2
addmpi "mesh --pp 2 --device cuda" fail "--pp|--device" --pp 2 --device cuda
add "mesh --zero 4" fail "--zero" --zero 4
add "mesh --zero-offload --zero 0" fail "--zero-offload" --zero-offload
add "mesh --zero-offload --zero 1 cpu" fail "--zero-offload" --zero-offload --zero 1
add "mesh --sp without tp" fail "--sp" --sp
add "mesh --pp-schedule with pp 1" fail "--pp-schedule" --pp-schedule afab
addsh "mesh ranks given different --seq-len" fail "--seq-len" \
  "$MPI -np 1 $(q "$T" "${BASE[@]}") --dp 2 : -np 1 $(q "$T" "${BASE[@]}") --dp 2 --seq-len 16"
addsh "mesh ranks given different --data" fail "--data" \
  "$MPI -np 1 $(q "$T" "${BASE[@]}") --dp 2 : -np 1 $(q "$T" "${BASE[@]}") --dp 2 --data $W/missing.txt"

# ---- 4. --data ------------------------------------------------------------------------
for p in missing.txt empty.txt nobins subdir zero.bin fifo random.bin random_odd.bin trunc_body.bin huge_count.bin \
    count_2p63.bin width3.bin zero_count.bin trunc_header.bin ten_tokens.bin big_ids.bin short.txt loop1 dangling mixed; do
  add "data $p" fail "$D/$p" --data "$D/$p"
done
add "data /dev/zero" fail "/dev/zero" --data /dev/zero
add "data /dev/null" fail "/dev/null" --data /dev/null
add "data /proc/version" either "/proc/version" --data /proc/version
add "data . (cwd, no bins)" fail "--data" --data .
for p in random.dat bad_utf8.txt ok.txt good.bin; do add "data $p" ok "" --data "$D/$p"; done
add "data good.bin + vocab 1" fail "--vocab-size|$D/good.bin" --data "$D/good.bin" --vocab-size 1
add "data arithmetic + vocab 50" fail "--vocab-size|--data" --vocab-size 50
add "data synthetic" ok "" --data synthetic
add "data Arithmetic (case)" fail "--data" --data Arithmetic

# ---- 5. output flags x unwritable paths -----------------------------------------------
for f in metrics-file memory-trace save-params pp-trace eval-logits save-dir export-hf; do
  isdir=0; [[ $f == save-dir || $f == export-hf ]] && isdir=1
  a=(); [ $f = eval-logits ] && a=(--eval "$W/eval.json"); [ $f = pp-trace ] && a=(--pp 2)
  A=add; [ $f = pp-trace ] && A=addmpi
  $A "out --$f /dev/full" fail "--$f" "${a[@]}" --$f /dev/full
  $A "out --$f a directory" $([ $isdir = 1 ] && echo ok || echo fail) "--$f" "${a[@]}" --$f "$W/adir"
  $A "out --$f missing parent" $([ $isdir = 1 ] && echo ok || echo fail) "--$f" "${a[@]}" --$f "$W/no/such/parent/$f"
  $A "out --$f same as --data" fail "--$f" "${a[@]}" --data "$D/ok.txt" --$f "$D/ok.txt"
  $A "out --$f /proc/version" fail "--$f" "${a[@]}" --$f /proc/version
  $A "out --$f under a file" fail "--$f" "${a[@]}" --$f "$D/ok.txt/sub"
  $A "out --$f read-only /proc/x" fail "--$f" "${a[@]}" --$f /proc/new_file
done
add "out metrics == memory-trace" fail "--metrics-file|--memory-trace" --metrics-file "$W/same.out" --memory-trace "$W/same.out"
add "out save-params == metrics" fail "--metrics-file|--save-params" --metrics-file "$W/same2.out" --save-params "$W/same2.out"
add "out eval-logits == eval" either "--eval" --eval "$W/eval_copy.json" --eval-logits "$W/eval_copy.json"
CHECKS[${#CHECKS[@]} - 1]="grep -q input_ids $W/eval_copy.json || echo 'info: --eval input overwritten by --eval-logits'"
cp "$W/eval.json" "$W/eval_copy.json"
add "out save-dir == export-hf" either "--save-dir|--export-hf" --save-dir "$W/both" --export-hf "$W/both"
rm -rf "$W/ck_same"; cp -r "$W/ck" "$W/ck_same"
add "out --save-dir is the --resume ckpt" either "--save-dir" --save-dir "$W/ck_same" --steps 4 --resume "$W/ck_same"
final_check() {  # an output under its final name: a file, a finished step dir, an HF file
  echo "{ [ -f $1 ] || ls -d $1/step-?????? $1/config.json $1/model.safetensors; } >/dev/null 2>&1 && echo 'PARTIAL: $1'"
}
if mkdir -p "$W/full" "$W/small" && mount -t tmpfs -o size=256k tmpfs "$W/full" 2>/dev/null &&
   mount -t tmpfs -o size=256k tmpfs "$W/small"; then
  trap 'umount "$W/full" "$W/small" 2>/dev/null' EXIT
  dd if=/dev/zero of="$W/full/filler" bs=4k 2>/dev/null
  for f in metrics-file memory-trace save-params eval-logits save-dir export-hf; do
    a=(); [ $f = eval-logits ] && a=(--eval "$W/eval.json")
    add "fulldisk --$f" fail "--$f" "${a[@]}" --$f "$W/full/$f.out"
    CHECKS[${#CHECKS[@]} - 1]="$(final_check "$W/full/$f.out")"
  done
  for f in save-params save-dir export-hf; do
    add "smalldisk --$f" fail "--$f" --$f "$W/small/$f.out"
    CHECKS[${#CHECKS[@]} - 1]="$(final_check "$W/small/$f.out"); rm -rf $W/small/*"
  done
fi
# A file-size limit: write(2) gets EFBIG only where SIGXFSZ is ignored. (PMIX_MCA_gds=hash:
# Open MPI's shared-memory store would itself die of the limit in MPI_Init; one case shows it.)
addsh "ulimit -f 256 (MPI default gds)" fail "--save-params" "ulimit -f 256; exec $(q "$T" "${BASE[@]}") --save-params $W/ulimit_plain"
for f in save-params metrics-file memory-trace save-dir export-hf; do
  addsh "ulimit -f 1 --$f" fail "--$f" "ulimit -f 1; export PMIX_MCA_gds=hash; exec $(q "$T" "${BASE[@]}") --$f $W/ulimit_$f" \
    "$(final_check "$W/ulimit_$f")"
done

# ---- 6. checkpoints -------------------------------------------------------------------
dmg() { rm -rf "${W:?}/$1"; cp -r "$W/ck" "$W/$1"; }   # a copy of the good checkpoint to damage
dmg ck_badjson; head -c 500 "$W/ck_badjson/step-000002/manifest.json" >"$W/x" && mv "$W/x" "$W/ck_badjson/step-000002/manifest.json"
dmg ck_emptyjson; : >"$W/ck_emptyjson/step-000002/manifest.json"
dmg ck_objjson; echo '{}' >"$W/ck_objjson/step-000002/manifest.json"
dmg ck_trunc; truncate -s 4000000 "$W/ck_trunc/step-000002/$RF"
dmg ck_trunc4; truncate -s 4 "$W/ck_trunc4/step-000002/$RF"
dmg ck_norank; rm "$W/ck_norank/step-000002/$RF"
dmg ck_flip; s=$(stat -c %s "$W/ck_flip/step-000002/$RF")
printf '\x5a' | dd of="$W/ck_flip/step-000002/$RF" bs=1 seek=$((s - 1000)) conv=notrunc 2>/dev/null
dmg ck_hdrlen; printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$W/ck_hdrlen/step-000002/$RF" bs=1 conv=notrunc 2>/dev/null
dmg ck_hdrjson; printf '\x01\x02' | dd of="$W/ck_hdrjson/step-000002/$RF" bs=1 seek=12 conv=notrunc 2>/dev/null
dmg ck_rankdir; rm "$W/ck_rankdir/step-000002/$RF"; mkdir "$W/ck_rankdir/step-000002/$RF"
dmg ck_rankzero; rm "$W/ck_rankzero/step-000002/$RF"; ln -s /dev/zero "$W/ck_rankzero/step-000002/$RF"
mjson() { dmg "$1"; python3 - "$W/$1/step-000002/manifest.json" "$2" <<'EOF'
import json, sys
p, edit = sys.argv[1], sys.argv[2]
m = json.load(open(p)); t = m["tensors"]; k = sorted(t)[0]
exec(edit)
json.dump(m, open(p, "w"))
EOF
}
mjson ck_m_step_str 'm["step"] = "abc"'
mjson ck_m_step_neg 'm["step"] = -5'
mjson ck_m_format 'm["format"] = "other/9"'
mjson ck_m_shape_neg 't[k]["full_shape"] = [-1, 128]'
mjson ck_m_flatlen 't[k]["pieces"][0]["flat_length"] = 10**15'
mjson ck_m_badfile 't[k]["pieces"][0]["file"] = "rank-00009.safetensors"'
mjson ck_m_traversal 't[k]["pieces"][0]["file"] = "../../../../../../etc/passwd"'
mjson ck_m_notensors 'del m["tensors"]'
mjson ck_m_dropkey 'del t[k]'
mjson ck_m_checksum 't[k]["pieces"][0]["fnv1a64"] = "0000000000000000"'
mjson ck_m_cfg_hidden 'm["config"]["hidden_size"] = "big"'
add "resume missing dir" fail "--resume" --steps 4 --resume "$W/no_ckpt"
add "resume empty dir" fail "--resume" --steps 4 --resume "$W/emptydir"
add "resume a file" fail "--resume" --steps 4 --resume "$D/ok.txt"
for c in ck_badjson ck_emptyjson ck_objjson ck_trunc ck_trunc4 ck_norank ck_flip ck_hdrlen ck_hdrjson ck_rankdir \
    ck_rankzero ck_m_step_str ck_m_step_neg ck_m_format ck_m_shape_neg ck_m_flatlen ck_m_badfile ck_m_traversal \
    ck_m_notensors ck_m_dropkey ck_m_checksum ck_m_cfg_hidden; do
  add "resume $c" fail "--resume|$W/$c" --steps 4 --resume "$W/$c"
done
add "resume ok (save-dir)" ok "" --steps 4 --resume "$W/ck"
add "resume ok (step dir)" ok "" --steps 4 --resume "$CK"
addmpi "resume ok on --dp 2" ok "" --steps 4 --dp 2 --resume "$CK"
add "resume --hidden-size 64" fail "--hidden-size|hidden_size" --steps 4 --resume "$CK" --hidden-size 64
add "resume --num-hidden-layers 2" fail "--num-hidden-layers|num_hidden_layers" --steps 4 --resume "$CK" --num-hidden-layers 2
add "resume --steps 2 (nothing left)" fail "--steps|--resume" --steps 2 --resume "$CK"
add "resume --steps 1 (past end)" fail "--steps|--resume" --steps 1 --resume "$CK"
add "resume --dtype fp64" either "--dtype" --steps 4 --resume "$CK" --dtype fp64
add "resume --lr 0.01 (warning only)" ok "" --steps 4 --resume "$CK" --lr 0.01

# ---- 7. --init-from -------------------------------------------------------------------
hfc() { rm -rf "${W:?}/$1"; cp -r "$W/hf" "$W/$1"; }
hfc hf_notjson; echo 'this is { not json' >"$W/hf_notjson/config.json"
hfc hf_neg; sed -i 's/"hidden_size": 128/"hidden_size": -128/' "$W/hf_neg/config.json"
hfc hf_zero_layers; sed -i 's/"num_hidden_layers": 4/"num_hidden_layers": 0/' "$W/hf_zero_layers/config.json"
hfc hf_strsize; sed -i 's/"hidden_size": 128/"hidden_size": "128"/' "$W/hf_strsize/config.json"
hfc hf_float; sed -i 's/"vocab_size": 256/"vocab_size": 1e30/' "$W/hf_float/config.json"
hfc hf_array; echo '[]' >"$W/hf_array/config.json"
hfc hf_shape; sed -i 's/"intermediate_size": 384/"intermediate_size": 256/' "$W/hf_shape/config.json"
hfc hf_trunc; truncate -s 1000000 "$W/hf_trunc/model.safetensors"
hfc hf_empty_st; : >"$W/hf_empty_st/model.safetensors"
hfc hf_no_st; rm "$W/hf_no_st/model.safetensors"
hfc hf_hdrlen; printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$W/hf_hdrlen/model.safetensors" bs=1 conv=notrunc 2>/dev/null
hfc hf_index; rm "$W/hf_index/model.safetensors"
echo '{"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}' >"$W/hf_index/model.safetensors.index.json"
mkdir -p "$W/hf_noconfig"; cp "$W/hf/model.safetensors" "$W/hf_noconfig/"
add "init-from missing dir" fail "--init-from" --init-from "$W/no_hf"
add "init-from empty dir" fail "--init-from|config.json" --init-from "$W/emptydir"
add "init-from a file" fail "--init-from" --init-from "$W/hf/config.json"
for h in hf_noconfig hf_notjson hf_neg hf_zero_layers hf_strsize hf_float hf_array hf_shape hf_trunc hf_empty_st hf_no_st \
    hf_hdrlen hf_index; do
  add "init-from $h" fail "--init-from|$W/$h" --init-from "$W/$h"
done
add "init-from ok" ok "" --init-from "$W/hf"
add "init-from + --hidden-size 64" fail "--hidden-size|--init-from" --init-from "$W/hf" --hidden-size 64
add "init-from + --model smollm-135m" either "--model|--init-from" --init-from "$W/hf" --model smollm-135m

# ---- 8. signals -----------------------------------------------------------------------
left_check() {  # prints PARTIAL: for an output under its final name, info: for a .tmp
  echo "for f in $1/m.jsonl $1/mem.jsonl $1/p.safetensors $1/hf; do [ -e \$f ] && echo \"PARTIAL: \$f\"; done;
    for s in $1/ck/step-*; do [ -d \"\$s\" ] || continue; case \$s in *.tmp) echo \"info: left \$s\";;
    *) [ -e \$s/manifest.json ] || echo \"PARTIAL: \$s without manifest\";; esac; done;
    ls $1 | grep -q '\.tmp$' && echo \"info: left $(basename "$1")/*.tmp\"; true"
}
SIGOUT="--steps 200 --save-every 10 --keep-checkpoints 1"
for s in TERM INT; do
  o=$W/sig_$s; mkdir -p "$o"
  outs="--save-dir $o/ck --metrics-file $o/m.jsonl --memory-trace $o/mem.jsonl --save-params $o/p.safetensors --export-hf $o/hf"
  addsh "signal SIG$s at 1s" sig "" "timeout --foreground --preserve-status -s $s 1 env --default-signal=INT,TERM \
$(q "$T")$(base_without --steps) $SIGOUT $outs" "$(left_check "$o")"
  o=$W/sigmpi_$s; mkdir -p "$o"
  outs="--save-dir $o/ck --metrics-file $o/m.jsonl --save-params $o/p.safetensors"
  addsh "signal SIG$s to mpirun at 1.5s" sig "" "timeout --foreground --preserve-status -s $s 1.5 $MPI \
$(q "$T")$(base_without --steps) --dp 2 $SIGOUT $outs" "$(left_check "$o")"
done
for s in TERM KILL; do
  addsh "signal SIG$s to one rank" sig "" "$MPI $(q "$T")$(base_without --steps) --dp 2 --steps 3000 & m=\$!; sleep 2;
r=\$(pgrep -P \$m | tail -1); [ -n \"\$r\" ] && kill -$s \$r; wait \$m"
done
addsh "signal SIGPIPE (| head -1)" sig "" "set -o pipefail; $(q "$T" "${BASE[@]}") | head -1"
addsh "stdout to /dev/full" either "" "$(q "$T" "${BASE[@]}") >/dev/full"
addsh "stdout closed" either "" "$(q "$T" "${BASE[@]}") >&-"

# ---- 9. careless usage ----------------------------------------------------------------
add "unknown flag --stesp" fail "--stesp|stesp" --stesp 3
add "unknown short -x" fail "-x|'x'|‘x’" -x
add "single-dash -steps 3" fail "-steps|steps" -steps 3
add "positional extra" fail "extra" extra
add "missing value at end --steps" fail "--steps|‘steps’" --steps
add "--steps=" fail "--steps" --steps=
add "flag twice --steps 3 --steps 5" either "--steps" --steps 3 --steps 5
add "--tie-word-embeddings false (space)" either "false|--tie-word-embeddings" --tie-word-embeddings false
for v in ' 3' '3 ' +3 0x10 3.0 3abc 1,5 '３'; do add "steps '$v'" either "--steps" --steps "$v"; done
add "--lr 1e-3x" fail "--lr" --lr 1e-3x
add "--help" ok "" --help
add "-h" ok "" -h
add "--help --steps abc" ok "" --help --steps abc
add "--steps abc --help" ok "" --steps abc --help
add "--foo --help" ok "" --foo --help
add "--help extra" ok "" --help extra
add "--help --device gpu" ok "" --help --device gpu
add "--help=false" either "--help" --help=false
add "--dry-run llama3-8b" ok "" --dry-run --model llama3-8b
add "--dry-run --tp 0" fail "--tp" --dry-run --tp 0
add "--dry-run --dp 2" ok "" --dry-run --dp 2
add "--device cuda (no GPU)" either "--device" --device cuda
add "--device auto" ok "" --device auto
add "--device CPU" fail "--device" --device CPU
for t in fp64 fp16 bf16; do add "--dtype $t on cpu" either "--dtype" --dtype $t; done
add "--warmup-steps == steps" fail "--warmup-steps" --warmup-steps 3
add "--stop-at-step 4 > steps" fail "--stop-at-step" --stop-at-step 4
add "--stop-at-step 2" ok "" --stop-at-step 2
add "--save-every without --save-dir" fail "--save-every|--save-dir" --save-every 1
add "--eval-logits without --eval" fail "--eval-logits|--eval" --eval-logits "$W/l.json"
add "--prompt-ids 300 >= vocab" fail "--prompt-ids" --prompt-ids 300
for v in '1,,2' '1 2' '-1' '1,' 99999999999999999999; do add "--prompt-ids '$v'" fail "--prompt-ids" --prompt-ids "$v"; done
add "--prompt-ids ok" ok "" --prompt-ids 1,2,3 --generate 2
add "--hidden-size 130 (heads 4)" fail "--hidden-size" --hidden-size 130
add "--hidden-size 132 (odd head dim)" fail "--hidden-size|--num-attention-heads" --hidden-size 132
add "--num-key-value-heads 3" fail "--num-key-value-heads" --num-key-value-heads 3
add "--num-key-value-heads 8 > heads" fail "--num-key-value-heads|--num-attention-heads" --num-key-value-heads 8
add "--seq-len 4096 > max-pos" fail "--seq-len|--max-position-embeddings" --seq-len 4096
add "--seq-len 100000 on small text" fail "--seq-len|--data" --seq-len 100000 --max-position-embeddings 200000 --data "$D/ok.txt"
add "huge model (memory)" fail "--micro-batch-size|--model|memory" --hidden-size 65536 --num-attention-heads 512 --num-key-value-heads 512
add "huge micro-batch (memory)" fail "--micro-batch-size" --micro-batch-size 1048576
add "huge vocab x seq (memory)" fail "--micro-batch-size|--seq-len|--vocab-size" --vocab-size 16777216 --seq-len 65536 --max-position-embeddings 65536
add "--threads 64" either "--threads" --threads 64
add "--lr 1e30 --max-bad-steps 1" either "--lr|--max-bad-steps|loss" --lr 1e30 --max-bad-steps 1
add "--init-std 1e30" either "--init-std|loss" --init-std 1e30
for e in '{"input_ids": []}' '{"input_ids": [[]]}' '{"input_ids": [[1,2],[3]]}' '{"input_ids": [[5]]}' \
    '{"input_ids": [[1,300,2]]}' '{"input_ids": [[1,-2,3]]}' '{"input_ids": [["a","b"]]}' '{"ids": [[1,2]]}' \
    'not json' '[1,2,3]' '{"input_ids": [[1,2.5,3]]}'; do
  i=${#NAMES[@]}; echo "$e" >"$W/eval_$i.json"
  add "--eval '${e:0:28}'" fail "--eval|$W/eval_$i.json" --eval "$W/eval_$i.json"
done
add "--eval missing" fail "--eval" --eval "$W/no_eval.json"
add "--eval a directory" fail "--eval" --eval "$W/adir"
add "--eval /dev/zero" fail "--eval" --eval /dev/zero
add "--eval ok" ok "" --eval "$W/eval.json"
add "--eval + --steps 0" ok "" --eval "$W/eval.json" --steps 0

# ---- run ------------------------------------------------------------------------------
CATS=(correct clear unclear crash hang silent refused partial); declare -A COUNT; for c in "${CATS[@]}"; do COUNT[$c]=0; done
RES=$OUT/results.txt; FIND=$OUT/findings.txt
printf '%-4s %-42s %-7s %-8s %-4s %-5s %s\n' '#' name expect category rc secs 'first error line' >"$RES"; : >"$FIND"
ERR_RE='^(\[rank [0-9]+\] )?error:'
CRASH_RE='terminate called|Aborted|Segmentation fault|core dumped|what\(\):|Exception raised from|frame #[0-9]+:|Backtrace|^#[0-9]+ +0x'
n=${#NAMES[@]}
if [ -n "${LIST:-}" ]; then
  for ((i = 0; i < n; i++)); do printf '%s\t%s\t%s\t%s\n' "${NAMES[i]}" "${EXPECTS[i]}" "${NEEDLES[i]}" "${CMDS[i]:0:200}"; done
  exit 0
fi
tried=0
echo "running $n cases, one at a time (logs: $L)"
for ((i = 0; i < n; i++)); do
  [ -n "${ONLY:-}" ] && ! [[ ${NAMES[i]} =~ $ONLY ]] && continue
  tried=$((tried + 1))
  name=${NAMES[i]} exp=${EXPECTS[i]} needle=${NEEDLES[i]} cmd=${CMDS[i]} err=$L/$i.err out=$L/$i.out
  t0=$(date +%s.%N)
  (cd "$W" && ulimit -v $MEMKB && env BAD_INPUTS_TAG=$TAG timeout -k 5 60 bash -c "$cmd") >"$out" 2>"$err" </dev/null
  rc=$?
  secs=$(echo "$(date +%s.%N) - $t0" | bc | xargs printf '%.1f')
  orphans=$(for p in /proc/[0-9]*; do tr '\0' '\n' 2>/dev/null <$p/environ | grep -qx "BAD_INPUTS_TAG=$TAG" && echo ${p#/proc/}; done)
  [ -n "$orphans" ] && kill -9 $orphans 2>/dev/null
  note=""; [ -n "${CHECKS[i]}" ] && note=$(bash -c "${CHECKS[i]}" 2>&1)
  msgs=$(grep -E "$ERR_RE" "$err" | sed -E 's/^\[rank [0-9]+\] //' | sort -u)
  nmsg=$(grep -c . <<<"$msgs")
  first=$(grep -m1 -E "$ERR_RE" "$err"); [ -z "$first" ] && first="(no error line) $(grep -m1 . "$err")"
  crash=$(grep -m1 -hE "$CRASH_RE" "$err" "$out")
  named=0; [ "$nmsg" -eq 1 ] && { [ -z "$needle" ] || grep -qE -- "$needle" <<<"$msgs"; } && named=1
  if [ $rc -eq 124 ] || [ $rc -eq 137 ] && (( $(echo "$secs >= 59" | bc) )); then cat=hang
  elif [ -n "$crash" ]; then cat=crash; first="$first | crash marker: $crash"
  elif [ $exp = sig ]; then if [ $rc -ne 0 ]; then cat=correct; else cat=unclear; first="exit 0: not interrupted"; fi
  elif [ $rc -ge 128 ]; then cat=crash
  elif [ $rc -eq 0 ]; then [ $exp = fail ] && cat=silent || cat=correct
  elif [ $named = 1 ]; then [ $exp = ok ] && cat=refused || cat=clear
  else cat=unclear
  fi
  grep -q '^PARTIAL' <<<"$note" && [[ $cat == correct || $cat == clear ]] && cat=partial
  [ -n "$orphans" ] && note="$note orphans killed: $orphans"
  [ -n "$note" ] && first="$first [$(tr '\n' ';' <<<"$note")]"
  COUNT[$cat]=$((COUNT[$cat] + 1))
  line=$(printf '%-4s %-42s %-7s %-8s %-4s %-5s %s' $i "${name:0:42}" $exp $cat $rc $secs "${first:0:300}")
  echo "$line"; echo "$line" >>"$RES"
  if [[ $cat != correct && $cat != clear ]]; then
    { echo "=== #$i $name  (expect $exp, got $cat, exit $rc, ${secs}s)"; echo "\$ ${cmd:0:600}"
      [ -n "$note" ] && echo "note: $note"
      grep -v '^\s*$' "$err" | cut -c1-400 | head -25; echo; } >>"$FIND"
  fi
done
summary="cases tried: $tried | clear or correct: $((COUNT[clear] + COUNT[correct])) (clear ${COUNT[clear]}, correct ${COUNT[correct]}) | unclear: ${COUNT[unclear]} | crashes: ${COUNT[crash]} | hangs: ${COUNT[hang]} | silently wrong: ${COUNT[silent]} | refused ok-cases: ${COUNT[refused]} | partial outputs: ${COUNT[partial]}"
echo "$summary"; echo "$summary" >>"$RES"
