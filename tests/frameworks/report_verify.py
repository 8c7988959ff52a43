"""report_verify.py REPORT PLAN.json [--ok] [--only-file] [--fail R:STATUS]... [--kill R:SIG]...
                    [--not-started PROGRAM]

Checks the job report srun --dpt wrote for a program that is not dpt's
(spank/dpt_spank_report.h): one part per plan rank, each on the plan's node for
that rank, supervised by the plugin ("by": "spank"), handed RANK = its rank and
WORLD_SIZE, MASTER_ADDR/MASTER_PORT; job.launcher "spank" with the Slurm ids.
  --ok            every rank exited 0, peak RSS > 1 MiB, no errors, exit_status 0
  --only-file     nothing else next to the report (the parts and the announcement removed)
  --fail R:S      rank R exited with status S, named (with its node) in errors[]
  --kill R:SIG    rank R was killed by signal SIG, named in errors[]
  --not-started P every rank: not started, "cannot run P", named in errors[]
"""
import json
import os
import sys


def main(argv):
    rep, plan_file = argv[0], argv[1]
    opts = argv[2:]
    doc = json.load(open(rep))
    plan = json.load(open(plan_file))
    host = {r: plan["nodes"][plan["ranks"][r]["node"]]["host"] for r in range(plan["n_ranks"])}
    bad = []

    def want(cond, what):
        if not cond:
            bad.append(what)

    job = doc["job"]
    want(job["launcher"] == "spank" and job["slurm_job_id"] and job["slurm_step_id"], "job %r" % job)
    want(job["command"] and os.path.basename(job["command"][0]) == doc["program"]
         and doc["program"] not in ("program", "srun"), "command %r program %r" % (job["command"], doc["program"]))
    want(os.path.basename(rep) == "dpt-report-%s.%s.json" % (job["slurm_job_id"], job["slurm_step_id"]),
         "name %s" % rep)
    ranks = {r["rank"]: r for r in doc["ranks"]}
    want(sorted(ranks) == list(range(plan["n_ranks"])), "ranks %r" % sorted(ranks))
    for r, part in ranks.items():
        end, env = part.get("end", {}), part.get("env", {})
        want(part["host"] == host.get(r) and end.get("by") == "spank",
             "rank %d on %s by %s (plan: %s)" % (r, part["host"], end.get("by"), host.get(r)))
        want(env.get("RANK") == str(r) and env.get("WORLD_SIZE") == str(plan["n_ranks"])
             and env.get("MASTER_ADDR") and env.get("MASTER_PORT"), "rank %d env %r" % (r, env))
    messages = [e["message"] for e in doc["errors"]]
    i = 0
    while i < len(opts):
        o = opts[i]
        if o == "--ok":
            want(job["exit_status"] == 0 and not messages, "exit %r errors %r" % (job["exit_status"], messages))
            for r, part in ranks.items():
                want(part["end"]["status"] == 0 and part["peak_rss_bytes"] > 1 << 20,
                     "rank %d end %r rss %d" % (r, part["end"], part["peak_rss_bytes"]))
        elif o == "--only-file":
            left = sorted(os.listdir(os.path.dirname(os.path.abspath(rep))))
            want(left == [os.path.basename(rep)], "left next to the report: %r" % left)
        elif o in ("--fail", "--kill"):
            i += 1
            r, v = (int(x) for x in opts[i].split(":"))
            end = ranks[r]["end"]
            if o == "--fail":
                want(end["status"] == v and end["signal"] is None, "rank %d end %r" % (r, end))
                how = "exited with status %d" % v
            else:
                want(end["signal"] == v and end["status"] is None, "rank %d end %r" % (r, end))
                how = "killed by signal %d" % v
            want(any(m.startswith("rank %d on %s (pid " % (r, host[r])) and how in m for m in messages),
                 "no error names rank %d on %s %s: %r" % (r, host[r], how, messages))
        elif o == "--not-started":
            i += 1
            for r, part in ranks.items():
                end = part["end"]
                want(not end["started"] and ("cannot run %s" % opts[i]) in end["how"], "rank %d end %r" % (r, end))
            want(len(messages) == plan["n_ranks"], "errors %r" % messages)
        else:
            raise SystemExit("unknown option " + o)
        i += 1
    if bad:
        print("report %s:\n  " % rep + "\n  ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
