"""Scenario 7's shortfall over 20 seeds, split by what was going on.

Run from a directory holding each seed's CSV and mishap log:

    for s in $(seq 1 20); do
      RUST_LOG=tollgate_simulate=info tollgate simulate --scenario 7 \
        --seed $s --out . 2>&1 >/dev/null | sed 's/\x1b\[[0-9;]*m//g' > log-$s.txt
    done
    python3 scenario7-shortfall.py
"""
import re, csv
tot = {"masterless": [0,0.0], "learning": [0,0.0], "wants_up": [0,0.0], "steady": [0,0.0]}
allshort=0.0; allcap=0.0; n=0
for s in range(1,21):
    rows = list(csv.DictReader(open(f"scenario-7-seed-{s}.csv")))
    lines = open(f"log-{s}.txt").read().splitlines()
    masterless=[]; learning=[]; wantsup=[]
    for i,l in enumerate(lines):
        m = re.search(r"mishap: (\S+) lost its master until (\d+) s t=(\d+)", l)
        if m:
            t=int(m.group(3)); b=int(m.group(2)); masterless.append((t,b)); learning.append((b,b+60)); continue
        m = re.search(r"mishap: (\S+) held an election t=(\d+)", l)
        if m:
            t=int(m.group(2))
            # an 'elected' line just before it means the master changed
            if i>0 and "elected" in lines[i-1]:
                learning.append((t,t+60))
            continue
        m = re.search(r"mishap: client\d+ wants [\d.]+ t=(\d+)", l)
        if m:
            t=int(m.group(1)); wantsup.append((t,t+20))
    inw=lambda t,ws: any(a<=t<b for a,b in ws)
    for r in rows:
        t=int(r["t"]); cap=float(r["capacity"])
        if t<60 or cap<=0: continue
        has=float(r["total_has"]); short=cap-has
        n+=1; allshort+=short; allcap+=cap
        k = "masterless" if inw(t,masterless) else "learning" if inw(t,learning) else "wants_up" if inw(t,wantsup) else "steady"
        tot[k][0]+=1; tot[k][1]+=short
print(f"samples {n}; handed out {100*(1-allshort/allcap):.2f}%; shortfall {100*allshort/allcap:.2f}% of capacity")
for k,(c,sh) in tot.items():
    print(f"{k:10s} {c:6d} samples ({100*c/n:5.1f}%), shortfall {100*sh/allcap:.2f} points of capacity, {sh/max(c,1):.2f} units per sample")
