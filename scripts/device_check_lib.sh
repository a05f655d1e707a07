# Sourced by scripts/device_check.sh (not run on its own): its helpers for results, time limits and
# the two verdicts. They use device_check.sh's globals: R, UNVERIFIED, UNCOMPARED, LOG, RES, T0,
# TOTAL_LIMIT, CPU_ONLY.
status() { R[$1]=$2; echo "device_check: $1 = $2" | tee -a "$LOG"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
# limit_for WANT: the limit of a phase that wants WANT s: WANT, or the time left before the deadline.
# 0 when the deadline has passed.
limit_for() { local left=$(( TOTAL_LIMIT - $(elapsed) )); (( left < 0 )) && left=0; (( left < $1 )) && echo "$left" || echo "$1"; }
# KILL_AFTER: seconds between timeout's TERM and its KILL. hpctrain stops on TERM only at a step
# boundary, so a call stuck in CUDA or cuDNN would otherwise run on into the device tool's 600 s limit
# and the final table would never be printed.
KILL_AFTER=5
# limited LIMIT CMD...: CMD under `timeout -k KILL_AFTER LIMIT`; with LIMIT 0 (deadline passed) CMD is
# not run and the status is 199 (timeout 0 would mean no limit at all).
limited() { local lim=$1; shift; (( lim > 0 )) || return 199; timeout -k "$KILL_AFTER" "$lim" "$@"; }
# why RC: the meaning of a phase's exit status, for the NOT VERIFIED lines.
why() { case $1 in 199) echo "not run: the $TOTAL_LIMIT s deadline had passed" ;; 124) echo "stopped at its time limit" ;;
        137) echo "killed $KILL_AFTER s after its time limit (it did not stop on TERM)" ;;
        *) echo "exit $1" ;; esac; }
# unverified ITEM REASON: records an item this run did not verify (and says so at once).
unverified() { UNVERIFIED+=("$1: $2"); echo "device_check: NOT VERIFIED: $1: $2" | tee -a "$LOG"; write_json; }
# uncompared ITEM REASON: a throughput figure the comparison with PyTorch lacks (a benchmark cut off by
# the time limit, PyTorch's side failing). The comparison has its own verdict: it never makes the
# correctness verdict "not verified", and an hpctrain benchmark that fails on its own is unverified.
uncompared() { UNCOMPARED+=("$1: $2"); echo "device_check: NOT COMPARED: $1: $2" | tee -a "$LOG"; write_json; }
# JSON by hand (no jq there); values are strings: backslash, quote and control characters escaped.
jstr() { local v=$1; v=${v//\\/\\\\}; v=${v//\"/\\\"}; v=${v//$'\n'/\\n}; v=${v//$'\t'/\\t}; v=${v//$'\r'/\\r}
         printf '"%s"' "$(tr -d '\000-\010\013\014\016-\037' <<<"$v")"; }
# write_json [final]: rewrites device_check.json (atomically) with every result so far, the list of
# unverified items and the verdict ("incomplete" until the end).
write_json() {
  local k first=1 tmp="$RES/.device_check.json.tmp" verdict=incomplete comparison=incomplete u
  if [[ "${1:-}" == final ]]; then
    if (( ${#UNVERIFIED[@]} )); then verdict=not_verified
    elif [[ "$CPU_ONLY" == 1 ]]; then verdict=cpu_path_ok_gpu_not_checked
    else verdict=verified; fi
    if [[ "$CPU_ONLY" == 1 ]]; then comparison=not_run
    elif (( ${#UNCOMPARED[@]} )); then comparison=incomplete
    else comparison=complete; fi
  fi
  {
    echo "{"
    for k in $(printf '%s\n' "${!R[@]}" | sort); do
      (( first )) || echo ","
      printf '  %s: %s' "$(jstr "$k")" "$(jstr "${R[$k]}")"
      first=0
    done
    (( first )) || echo ","
    printf '  "unverified": ['
    first=1
    for u in "${UNVERIFIED[@]}"; do (( first )) || printf ', '; printf '%s' "$(jstr "$u")"; first=0; done
    printf '],\n  "uncompared": ['
    first=1
    for u in "${UNCOMPARED[@]}"; do (( first )) || printf ', '; printf '%s' "$(jstr "$u")"; first=0; done
    printf '],\n  "verdict": %s,\n  "comparison_verdict": %s,\n  "elapsed_s": "%s"\n}\n' "$(jstr "$verdict")" \
      "$(jstr "$comparison")" "$(elapsed)"
  } > "$tmp" && mv -f "$tmp" "$RES/device_check.json"
}
# finish: final JSON, the short table last, every unverified item named; exit 0 only if none.
finish() {
  status total_s "$(elapsed)"
  local gpu u
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  status gpu "${gpu:-none seen by nvidia-smi}"
  write_json final
  if python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$RES/device_check.json" 2>>"$LOG"; then
    echo "device_check: $RES/device_check.json is valid JSON" >> "$LOG"
  else
    echo "device_check: $RES/device_check.json is NOT valid JSON (see $LOG)"
  fi
  echo
  echo "==== hpctrain device check ($(date -u +%FT%TZ)) ===="
  for u in "${UNVERIFIED[@]}"; do echo "NOT VERIFIED: $u"; done
  for u in "${UNCOMPARED[@]}"; do echo "NOT COMPARED: $u"; done
  for k in gpu configure_rc build_rc build_done_at_s ctest_gpu_summary doctor_rc train_rc train_summary bench_summary; do
    printf '%-18s %s\n' "$k" "${R[$k]:-n/a}"
  done
  [[ -f "$RES/bench_train_gpu.txt" ]] && cat "$RES/bench_train_gpu.txt"
  if [[ "$CPU_ONLY" == 1 ]]; then printf '%-18s %s\n' comparison "not run (HT_DEVICE_CPU_ONLY=1)"
  elif (( ${#UNCOMPARED[@]} )); then printf '%-18s %s\n' comparison "incomplete (${#UNCOMPARED[@]} item(s) NOT COMPARED above)"
  else printf '%-18s %s\n' comparison complete; fi
  if (( ${#UNVERIFIED[@]} )); then
    printf '%-18s %s\n' verdict "NOT VERIFIED (${#UNVERIFIED[@]} item(s) above)"
    printf '%-18s %s\n' total_s "${R[total_s]}"
    exit 1
  fi
  printf '%-18s %s\n' verdict "$([[ "$CPU_ONLY" == 1 ]] && echo 'CPU path ok (GPU phases not run: HT_DEVICE_CPU_ONLY=1)' || echo 'verified')"
  printf '%-18s %s\n' total_s "${R[total_s]}"
  exit 0
}
