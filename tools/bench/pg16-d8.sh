#!/usr/bin/env bash
# D8 on the 16-core benchmark machine, with what explains its curve beside it: packed by
# `bash ../shared/tools/pg16/pack.sh` (here), run there as `bash tools/bench/pg16-d8.sh [bench args]`
# from a checkout carrying `.devcarry/`. Writes bench.txt (the floor and the D8 rows), waits.txt
# (what PostgreSQL's client backends were doing, sampled every 100 ms: wait event and query)
# and cpu.txt (the machine's busy share per second) under $OUT.
set -u
OUT=${OUT:-/tmp/pg16-out}; mkdir -p "$OUT"
args=("$@"); [ ${#args[@]} -gt 0 ] || args=(--only d8 --workers 1,2,4,8 --runs 20000 --floor-clients 1,16,64)
psql() { LD_LIBRARY_PATH=/pgsys /usr/lib/postgresql/15/bin/psql -h 127.0.0.1 -U postgres -d postgres -Atq "$@"; }
( # busy share of all cores, once a second, from /proc/stat
  read -r _ u n s i w x y z _ < /proc/stat; pb=$((u+n+s+x+y+z)); pt=$((pb+i+w))
  while sleep 1; do read -r _ u n s i w x y z _ < /proc/stat; b=$((u+n+s+x+y+z)); t=$((b+i+w))
    echo "$(date +%s) busy $(( 100*(b-pb)/(t-pt) ))%"; pb=$b; pt=$t; done ) > "$OUT/cpu.txt" &
cpu=$!
( # PostgreSQL's active client backends, every 100 ms, once it accepts connections
  until psql -c 'select 1' >/dev/null 2>&1; do sleep 0.2; done
  while psql -c "select extract(epoch from now())::bigint, coalesce(wait_event_type,'CPU'), coalesce(wait_event,'-'), left(regexp_replace(query, '\s+', ' ', 'g'), 70) from pg_stat_activity where backend_type = 'client backend' and state = 'active' and pid <> pg_backend_pid()" 2>/dev/null; do
    sleep 0.1; done ) > "$OUT/waits.txt" &
sampler=$!
# The pack's archive carries its root folder's mode (0700): extracted over / it would shut the
# PostgreSQL user out of everything; the copy run here puts / back to 0755 after extracting.
sed 's#^tar xJf pgroot.tar.xz -C / 2>/dev/null$#&; chmod 755 /#' .devcarry/run.sh > .devcarry/run-here.sh
bash .devcarry/run-here.sh "${args[@]}"
kill $cpu $sampler 2>/dev/null
echo "== what the client backends waited on (samples, all phases)"
cut -d'|' -f2- "$OUT/waits.txt" | sort | uniq -c | sort -rn | head -25
echo "== busy share (per second)"; tr '\n' ' ' < "$OUT/cpu.txt" | sed 's/[0-9]\{10\} busy //g'; echo
