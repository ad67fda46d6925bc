import json, sys, collections, math
rows = [json.loads(l) for f in sys.argv[1:] for l in open(f)]
base = {(r["model"], r["seed"], r["procs"], r["arr"]): r for r in rows if r["policy"] == "no retry"}
by = collections.defaultdict(list)
for r in rows:
    if r["policy"] != "no retry": by[r["policy"]].append(r)
for pol, rs in by.items():
    print("==", pol)
    for half, seeds in (("1-5", range(1, 6)), ("6-10", range(6, 11))):
        for procs in (4, 16):
            sub = [r for r in rs if r["seed"] in seeds and r["procs"] == procs]
            if not sub: continue
            worst = max(sub, key=lambda r: r["rpa"])
            apc = max(r["apc"] for r in sub)
            blips = [f'{r["arr"][0]}:{r["model"]}s{r["seed"]} {r["blip"]:.1%}' for r in sub
                     if not math.isnan(r["blip"]) and r["blip"] < 0.99]
            rec = []
            gd = []
            for r in sub:
                b = base.get((r["model"], r["seed"], r["procs"], r["arr"]))
                if not math.isnan(r["recov"]) and r["recov"] < 45:
                    rec.append(f'{r["arr"][0]}:{r["model"]}s{r["seed"]} {r["recov"]:.0f}' + (f'({b["recov"]:.0f})' if b else ""))
                if b and r["good"] < b["good"] - 0.05:
                    gd.append(f'{r["arr"][0]}:{r["model"]}s{r["seed"]} {r["good"]:.1f}<{b["good"]:.1f}')
            early = min(r["early"] for r in sub)
            print(f' seeds {half} p{procs} n={len(sub)}: rpa max {worst["rpa"]:.3f} ({worst["arr"][0]}:{worst["model"]}s{worst["seed"]}) apc max {apc:.2f} early {early*1000:.0f}ms')
            print(f'   blip<99: {", ".join(blips) or "none"}')
            print(f'   recov<45: {", ".join(rec) or "none"}')
            if gd: print(f'   goodput<base: {", ".join(gd)}')
