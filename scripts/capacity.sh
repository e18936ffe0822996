#!/usr/bin/env bash
# The largest model one device trains, without GPipe and with it (GPipe Table 1's "naive-1"
# vs "pipeline-1"): AmoebaNet-D of a fixed width D, made deeper (N normal cells per group,
# L = 3N layers) until two training steps no longer fit, by doubling then bisecting N, for
#   naive    K = 1, M = 1, re-materialization never          (no GPipe)
#   gpipe    K = 1, M micro-batches, re-materialization always (GPipe on one device)
#   gpipe-K  K stages on the same device, M micro-batches, always
# Each trial is one bench-capacity process (bench/capacity.c). Writes DIR/results.md (the
# table, the ratios), DIR/trials.tsv (every trial) and DIR/logs/ (every trial's output).
#
#   CPU: scripts/capacity.sh --out DIR --capacity 512MiB       (the cap stands in for a device)
#   GPU: scripts/capacity.sh --out DIR --device cuda:0         (the device's own memory)
#        scripts/capacity.sh --out DIR --device cuda:0 --capacity 8GiB   (the paper's 8 GB)
# docs/memory.md explains the numbers.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

usage() {
  cat <<EOF
usage: scripts/capacity.sh --out DIR [--device cpu|cuda:N] [--capacity SIZE] [--build DIR | --bin DIR]
         [--width D] [--image S] [--classes C] [--batch B] [--micro-batches M] [--stages K]
         [--configs naive,gpipe,gpipe-K] [--start N] [--max-cells N] [--threads T]
         [--trial-timeout SECONDS] [--budget SECONDS] [--model FILE]
  --capacity   memory of the device (512MiB, 8GiB, 1.5GB, bytes): each stage is capped at it
               and the stages' peaks must add up to at most it. Required on cpu; on cuda:N
               without it the device's own memory is the limit.
  defaults     cpu:    D 16, image 64, 10 classes, batch 32, M 8, K 4
               cuda:N: D 208, image 224, 1000 classes, batch 128, M 8, K 4 (GPipe's Table 1)
  --start, --max-cells   normal cells per group N to start the search at (2) and to stop at (512)
  --trial-timeout  a trial running longer does not fit (default 600 s)
  --budget     seconds for the whole search, shared evenly by the configurations: one that has
               used its share stops with the bounds found so far (default 0: no limit)
EOF
  exit 2
}

die() {
  echo "capacity.sh: $*" >&2
  exit 2
}

out="" device=cpu capacity="" build="$root/build" bin="" width="" image="" classes="" batch=""
micro=8 kstages=4 configs="" start=2 max_cells=512 threads="" trial_timeout=600 budget=0
model="$root/models/amoebanet-d.yaml"
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { [ "$1" = -h ] || [ "$1" = --help ]; } || die "$1 needs a value"
  case $1 in
    --out) out=$2 ;;
    --device) device=$2 ;;
    --capacity) capacity=$2 ;;
    --build) build=$2 ;;
    --bin) bin=$2 ;;
    --width) width=$2 ;;
    --image) image=$2 ;;
    --classes) classes=$2 ;;
    --batch) batch=$2 ;;
    --micro-batches) micro=$2 ;;
    --stages) kstages=$2 ;;
    --configs) configs=$2 ;;
    --start) start=$2 ;;
    --max-cells) max_cells=$2 ;;
    --threads) threads=$2 ;;
    --trial-timeout) trial_timeout=$2 ;;
    --budget) budget=$2 ;;
    --model) model=$2 ;;
    -h | --help) usage ;;
    *) die "unknown option '$1' (--help)" ;;
  esac
  shift 2
done
[ -n "$out" ] || die "--out DIR is required (--help)"
case $device in
  cpu) gpu=0 ;;
  cuda:[0-9]*) gpu=1 ;;
  *) die "--device: expected cpu or cuda:N, got '$device'" ;;
esac
if [ $gpu = 1 ]; then
  : "${width:=208}" "${image:=224}" "${classes:=1000}" "${batch:=128}"
else
  [ -n "$capacity" ] || die "--capacity SIZE is required on the cpu (the memory of the device it stands for)"
  : "${width:=16}" "${image:=64}" "${classes:=10}" "${batch:=32}"
fi
: "${configs:=naive,gpipe,gpipe-$kstages}"
[[ $budget =~ ^[0-9]+$ ]] || die "--budget: expected seconds, got '$budget'"
for v in width image classes batch micro kstages start max_cells trial_timeout; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v//_/-}: expected a positive integer, got '${!v}'"
done
[ "$start" -ge 2 ] || die "--start: N is at least 2 (L = 3N >= 6)"
exe="$build/bench/bench-capacity"
[ -z "$bin" ] || exe="$bin/bench-capacity" # prebuilt programs (scripts/gpu-pack.sh)
[ -x "$exe" ] || die "$exe is missing: build first (meson setup $build && ninja -C $build)"

# The capacity in bytes (the units of --memory-limit), for the sum over stages.
cap_bytes=0
if [ -n "$capacity" ]; then
  cap_bytes=$(awk -v s="$capacity" 'BEGIN {
    if (!match(s, /^[0-9]*\.?[0-9]+/)) exit 1
    v = substr(s, 1, RLENGTH); u = tolower(substr(s, RLENGTH + 1))
    m["" ] = 1; m["b"] = 1; m["k"] = m["kib"] = 1024; m["kb"] = 1e3
    m["m"] = m["mib"] = 1048576; m["mb"] = 1e6; m["g"] = m["gib"] = 1073741824; m["gb"] = 1e9
    m["t"] = m["tib"] = 1099511627776; m["tb"] = 1e12
    if (!(u in m) || v * m[u] < 1) exit 1
    printf "%.0f", v * m[u] }') || die "--capacity: cannot read '$capacity' as a size (like 512MiB, 8GiB, 1.5GB)"
fi

mkdir -p "$out/logs"
tsv="$out/trials.tsv"
printf 'config\tstages\tmicro_batches\tcheckpoint\tN\tL\tstatus\tparams\tmem_sum\tmem_peak\tact_peak\tseconds\tnote\n' >"$tsv"

common=(--set "blocks.cell.params.D=$width" --set "blocks.cell.params.classes=$classes"
  --set "inputs.image.1=$image" --set "inputs.image.2=$image" --batch-size "$batch"
  --devices "$device" --steps 2)
[ -n "$threads" ] && common+=(--threads "$threads")
[ -n "$capacity" ] && common+=(--memory-limit "$capacity")

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# trial CONFIG K M MODE N: runs one trial, appends it to trials.tsv, sets t_status
# (fits / oom / over / error / timeout), t_params, t_sum, t_peak, t_act, t_note.
trial() {
  local cfg=$1 k=$2 m=$3 mode=$4 n=$5 r log rc line
  r=$((n - 1))
  log="$out/logs/$cfg-N$n.log"
  t_status=error t_params="" t_sum="" t_peak="" t_act="" t_note="" t_secs=""
  rc=0
  timeout "$trial_timeout" "$exe" "$model" "${common[@]}" --stages "$k" --micro-batches "$m" \
    --remat "$mode" --set "layers.4.repeat=$r" --set "layers.7.repeat=$r" \
    --set "layers.10.repeat=$r" >"$log" 2>&1 || rc=$?
  line=$(grep -E '^(ok|oom) ' "$log" | tail -n 1 || true)
  t_params=$(sed -n 's/.* params=\([0-9]*\).*/\1/p' <<<"$line")
  case $rc in
    0)
      t_sum=$(sed -n 's/.* mem_sum=\([0-9]*\).*/\1/p' <<<"$line")
      t_peak=$(sed -n 's/.* mem_peak=\([0-9,]*\).*/\1/p' <<<"$line")
      t_act=$(sed -n 's/.* act_peak=\([0-9,]*\).*/\1/p' <<<"$line")
      t_secs=$(sed -n 's/.* seconds=\([0-9.]*\).*/\1/p' <<<"$line")
      if [ "$cap_bytes" != 0 ] && [ "$t_sum" -gt "$cap_bytes" ]; then
        t_status=over t_note="the stages' peaks add up to $(mib "$t_sum") MiB"
      else
        t_status=fits
      fi
      ;;
    3) t_status=oom t_note=$(sed -n 's/^oom .* error=//p' <<<"$line") ;;
    124) t_status=timeout t_note="over --trial-timeout $trial_timeout s" ;;
    2) echo "capacity.sh: the trial was refused: $(tail -n 1 "$log")" >&2; exit 2 ;;
    *) t_note=$(tail -n 1 "$log") ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$k" "$m" "$mode" "$n" \
    $((3 * n)) "$t_status" "$t_params" "$t_sum" "$t_peak" "$t_act" "$t_secs" "$t_note" >>"$tsv"
  printf '  %-9s N=%-4s L=%-5s %-7s %s%s\n' "$cfg" "$n" $((3 * n)) "$t_status" \
    "${t_sum:+$(mib "$t_sum") MiB }" "${t_params:+($t_params parameters)}" >&2
}

declare -A best_n best_params best_sum best_peak best_act fail_n fail_why stopped
# over_budget CONFIG: true (and noted) once this configuration has used its share of --budget.
over_budget() {
  [ "$budget" = 0 ] && return 1
  [ $(($(date +%s) - cfg_t0)) -lt $((budget / ${#cfgs[@]})) ] && return 1
  stopped[$1]="stopped by --budget after $(($(date +%s) - cfg_t0)) s"
  echo "  $1: ${stopped[$1]}" >&2
}

# search CONFIG K M MODE: doubles N from --start until a trial does not fit (or --max-cells),
# then bisects; the largest N that fits is best_n[CONFIG] (0: not even --start).
search() {
  local cfg=$1 k=$2 m=$3 mode=$4 lo=0 hi=0 n=$start
  cfg_t0=$(date +%s)
  best_n[$cfg]=0
  echo "$cfg: K=$k M=$m re-materialization $mode" >&2
  while [ "$hi" = 0 ]; do
    { [ "$lo" = 0 ] || ! over_budget "$cfg"; } || break
    trial "$cfg" "$k" "$m" "$mode" "$n"
    if [ "$t_status" = fits ]; then
      lo=$n best_n[$cfg]=$n best_params[$cfg]=$t_params best_sum[$cfg]=$t_sum
      best_peak[$cfg]=$t_peak best_act[$cfg]=$t_act
      [ "$n" -ge "$max_cells" ] && break
      n=$((2 * n > max_cells ? max_cells : 2 * n))
    else
      hi=$n fail_n[$cfg]=$n fail_why[$cfg]="$t_status${t_note:+: $t_note}"
    fi
  done
  while [ "$hi" != 0 ] && [ "$lo" != 0 ] && [ $((hi - lo)) -gt 1 ] && ! over_budget "$cfg"; do
    n=$(((lo + hi) / 2))
    trial "$cfg" "$k" "$m" "$mode" "$n"
    if [ "$t_status" = fits ]; then
      lo=$n best_n[$cfg]=$n best_params[$cfg]=$t_params best_sum[$cfg]=$t_sum
      best_peak[$cfg]=$t_peak best_act[$cfg]=$t_act
    else
      hi=$n fail_n[$cfg]=$n fail_why[$cfg]="$t_status${t_note:+: $t_note}"
    fi
  done
}

human() { # bytes -> "1.23 GiB" / "45.6 MiB"
  awk -v b="$1" 'BEGIN { if (b >= 1073741824) printf "%.2f GiB", b / 1073741824;
    else printf "%.1f MiB", b / 1048576 }'
}
list_mib() { tr , '\n' <<<"$1" | awk '{ printf "%s%.1f", (NR > 1 ? " / " : ""), $1 / 1048576 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# DIR/results.md from what has been searched so far (rewritten after each configuration, so
# a run cut short still leaves its table).
report() {
  local c n largest params peak per act nf why
  {
    echo "# Largest AmoebaNet-D that trains on one device"
    echo
    if [ -n "$capacity" ]; then
      echo "Device: \`$device\`, capacity $capacity ($cap_bytes bytes): each stage is capped at it"
      echo "(\`--memory-limit\`) and the stages' peaks must add up to at most it."
    else
      echo "Device: \`$device\`, with its own memory as the limit."
    fi
    echo "Model: \`$(basename "$model")\`, width D = $width, $classes classes, ${image}x$image images,"
    echo "batch $batch, 2 training steps on random data, RMSProp (weights, gradients and two optimizer"
    echo "slots: 16 bytes per parameter). Depth: N normal cells per group, L = 3N."
    echo "Searched from N = $start up to $max_cells by doubling, then bisection; $(($(date +%s) - t0)) s so far."
    echo "$(date -u +%Y-%m-%dT%H:%MZ), $(uname -n), bench-capacity from \`$build\`."
    echo
    echo "| configuration | K | M | re-materialization | largest (L, D) | parameters | peak memory (sum over stages) | per stage MiB | activations per stage MiB | first depth that does not fit |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    for c in "${cfgs[@]}"; do
      [ -n "${best_n[$c]:-}" ] || continue
      n=${best_n[$c]}
      if [ "$n" = 0 ]; then
        largest="none from N = $start" params="-" peak="-" per="-" act="-"
      else
        largest="($((3 * n)), $width)"
        params=$(awk -v p="${best_params[$c]}" 'BEGIN { printf "%.3fM (%d)", p / 1e6, p }')
        peak=$(human "${best_sum[$c]}") per=$(list_mib "${best_peak[$c]}")
        act=$(list_mib "${best_act[$c]}")
      fi
      nf=${fail_n[$c]:-}
      why=${nf:+L = $((3 * nf)): ${fail_why[$c]}}
      [ -n "${stopped[$c]:-}" ] && why="${why:+$why; }${stopped[$c]}"
      echo "| $c | ${cfg_k[$c]} | ${cfg_m[$c]} | ${cfg_mode[$c]} | $largest | $params | $peak | $per | $act | ${why:-none up to N = $max_cells} |"
    done
    echo
    if [ "${best_n[naive]:-0}" != 0 ]; then
      for c in "${cfgs[@]}"; do
        [ "$c" != naive ] && [ "${best_n[$c]:-0}" != 0 ] || continue
        echo "- $c / naive: $(ratio "${best_params[$c]}" "${best_params[naive]}")x the parameters ($(ratio "${best_n[$c]}" "${best_n[naive]}")x the depth)."
      done
      echo "- GPipe (Table 1, 8 GB per accelerator, widening D instead): 82M -> 318M parameters, 3.9x."
      echo
    elif [ -n "${cfg_k[naive]:-}" ] && [ -n "${fail_n[naive]:-}" ]; then
      echo "- No ratio: naive fits no depth from N = $start (L = $((3 * start))). A smaller \`--batch\` or"
      echo "  \`--image\`, or a larger capacity, lets it fit one."
      echo
    fi
    echo "Every trial is in \`trials.tsv\`, its output in \`logs/\`. In the last column *oom* is an"
    echo "allocation the device or the cap refused; *over* ran, but the stages' peaks add up to more"
    echo "than the capacity (stages on one device share it); *error* and *timeout* say what happened."
  } >"$out/results.md"
}

t0=$(date +%s)
IFS=, read -ra cfgs <<<"$configs"
declare -A cfg_k cfg_m cfg_mode
for c in "${cfgs[@]}"; do
  case $c in
    naive) cfg_k[$c]=1 cfg_m[$c]=1 cfg_mode[$c]=never ;;
    gpipe) cfg_k[$c]=1 cfg_m[$c]=$micro cfg_mode[$c]=always ;;
    gpipe-[1-9]*)
      cfg_k[$c]=${c#gpipe-} cfg_m[$c]=$micro cfg_mode[$c]=always
      [[ ${cfg_k[$c]} =~ ^[1-9][0-9]*$ ]] || die "--configs: bad '$c'"
      ;;
    *) die "--configs: unknown '$c' (naive, gpipe, gpipe-K)" ;;
  esac
done
for c in "${cfgs[@]}"; do
  search "$c" "${cfg_k[$c]}" "${cfg_m[$c]}" "${cfg_mode[$c]}"
  report
done
cat "$out/results.md"
