# reduce_probe_ab: alternates two builds of benchmarks/tools/reduce_probe.cpp (BEFORE and AFTER
# linked against two libprecis.a) in ABBA / BAAB order for `rounds` rounds, under nice -n 19, and
# prints JSON: per case the median CPU and wall ms of each side and the after/before ratio of each
# adjacent pair (median, min, max), so a loaded machine disturbs both sides alike.
# Usage: python3 reduce_probe_ab.py BEFORE AFTER sums|ce THREADS ROUNDS REPS > out.json
import subprocess, sys, json, statistics, re
before, after, what, threads, rounds, reps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
pat = re.compile(r'^(.*?)\s+([\d.]+) ms cpu\s+([\d.]+) ms wall')
res = {}
def run(binary, tag):
    out = subprocess.run(['nice','-n','19',binary,what,threads,reps],capture_output=True,text=True).stdout
    for line in out.splitlines():
        m = pat.match(line)
        if m:
            res.setdefault(m.group(1).strip(), {'before':[], 'after':[], 'before_wall':[], 'after_wall':[]})
            res[m.group(1).strip()][tag].append(float(m.group(2)))
            res[m.group(1).strip()][tag+'_wall'].append(float(m.group(3)))
for r in range(rounds):
    for tag in (['before','after','after','before'] if r%2==0 else ['after','before','before','after']):
        run(before if tag=='before' else after, tag)
out = {'what':what,'threads':int(threads),'rounds':rounds,'reps_per_run':int(reps),'cases':{}}
for k,v in res.items():
    # ratios of after/before, paired by position in the alternation
    ratios = [a/b for a,b in zip(v['after'], v['before'])]
    out['cases'][k] = {'before_cpu_ms_median': statistics.median(v['before']), 'after_cpu_ms_median': statistics.median(v['after']),
        'before_wall_ms_median': statistics.median(v['before_wall']), 'after_wall_ms_median': statistics.median(v['after_wall']),
        'ratio_after_over_before_median': statistics.median(ratios), 'ratio_min': min(ratios), 'ratio_max': max(ratios), 'samples': len(ratios)}
print(json.dumps(out, indent=1))
