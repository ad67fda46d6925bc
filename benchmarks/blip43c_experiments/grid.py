"""Issue 43 (blip), experiments of 2026-12-07, reverted after this commit. Grid driver: python grid.py OUT.jsonl POLICY [POLICY...] [--seeds ...] [--procs 4 16] [--arr poisson batches] [--models ...]"""
import argparse, json, sys, os, math
from concurrent.futures import ProcessPoolExecutor
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

def job(args):
    policy, model, seed, procs, arr = args
    import retry_budget as rb
    import variants  # registers policies
    variants.register(rb); variants.register2(rb); variants.register3(rb); variants.register4(rb); variants.register5(rb); variants.register6(rb)
    f = rb.measure(model, policy, seed, procs, arrivals=arr)
    return dict(policy=policy, model=model, seed=seed, procs=procs, arr=arr,
                apc=f.attempts_per_call, rpa=f.refusals_per_accepted, good=f.goodput,
                blip=f.blip_success, recov=f.recovery_goodput, early=f.earliest_retry)

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("out"); p.add_argument("policies", nargs="+")
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(1, 11)))
    p.add_argument("--procs", type=int, nargs="+", default=[4, 16])
    p.add_argument("--arr", nargs="+", default=["poisson", "batches"])
    p.add_argument("--models", nargs="+", default=["busy", "busy-exp", "busy-lognormal", "rate", "rate-anon"])
    p.add_argument("-j", type=int, default=2)
    a = p.parse_args()
    done = set()
    if os.path.exists(a.out):
        for line in open(a.out):
            r = json.loads(line); done.add((r["policy"], r["model"], r["seed"], r["procs"], r["arr"]))
    jobs = [(pol, m, s, pr, ar) for pol in a.policies for pr in a.procs for ar in a.arr for m in a.models for s in a.seeds
            if (pol, m, s, pr, ar) not in done]
    with ProcessPoolExecutor(a.j) as ex, open(a.out, "a") as out:
        for r in ex.map(job, jobs):
            out.write(json.dumps(r) + "\n"); out.flush()
