"""The reporting half of tools/bench/varlen.py: per-length medians, compiles
per cluster, issue 32's targets, the text tables and the docs section."""

import os
import re
import shlex
import sys

SECTION = "## Variable sequence length (varlen)"
SIDE_NAMES = {"jit": "kiln JIT on", "nojit": "kiln JIT off", "torch": "PyTorch eager",
              "jit_all": "kiln JIT on, every length compiled"}
TOTAL_TARGET = 0.8  # JIT total at most this fraction of JIT off's
COMPILES_TARGET = 2  # compiles per cluster over the run
SPECIAL_TARGET = 1.10  # each length's JIT step time against its specialised compile

RECOMPILE = re.compile(r"^kiln jit: cluster (\S+) recompiles")
LIMIT = re.compile(r"^kiln jit: cluster (\S+) .*reached its limit")


def median(values):
    v = sorted(values)
    n = len(v)
    if n == 0:
        return None
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def per_length(run, lengths):
    """length -> (first occurrence ms, median ms of the later ones)."""
    out = {}
    for length in lengths:
        times = [t for l, t in zip(run["schedule"], run["times_ms"]) if l == length]
        out[length] = (times[0] if times else None, median(times[1:]))
    return out


def jit_counts(run):
    """Compiles over the timed run, per cluster (from the --jit_verbose lines)."""
    before, after = run["jit_after_warmup"], run["jit_after_run"]
    per_cluster = {}
    for line in run["jit_lines"]:
        m = RECOMPILE.match(line)
        if m:
            per_cluster[m.group(1)] = per_cluster.get(m.group(1), 0) + 1
    return {"clusters": before["compiles"], "compiles": after["compiles"] - before["compiles"],
            "per_cluster": per_cluster, "limit_hit": sorted({m.group(1) for m in map(LIMIT.match, run["jit_lines"]) if m}),
            "fallback_calls": after["fallback_calls"] - before["fallback_calls"],
            "compile_ms": after["compile_ms"] - before["compile_ms"], "limit": run["recompile_limit"]}


def summarise(result, lengths):
    """Per side: the lowest total over rounds, per length the lowest of the
    rounds' medians; JIT counts from the first round (they repeat)."""
    s = {"sides": {}, "special": {}, "problems": []}
    for side, rounds in result["runs"].items():
        per = [per_length(run, lengths) for run in rounds]
        entry = {"total_s": min(r["total_s"] for r in rounds), "totals_s": [r["total_s"] for r in rounds],
                 "per_length": {l: (min(p[l][0] for p in per), best(p[l][1] for p in per)) for l in lengths}}
        if side.startswith("jit"):
            entry["jit"] = jit_counts(rounds[0])
            for run in rounds:
                counts = jit_counts(run)
                if sum(counts["per_cluster"].values()) != counts["compiles"]:
                    s["problems"].append("%s: the recompile lines count %d compiles, jit_stats %d" %
                                         (side, sum(counts["per_cluster"].values()), counts["compiles"]))
        s["sides"][side] = entry
    for length, rounds in result["special"].items():
        s["special"][length] = best(median(run["times_ms"]) for run in rounds)
    s["data"] = next(iter(result["runs"].values()))[0]["data"]
    return s


def best(values):
    values = [v for v in values if v is not None]
    return min(values) if values else None


def fmt(v, spec="%.1f"):
    return "-" if v is None else spec % v


def tables(s, lengths):
    """[(header, rows)]: the totals, then the per-length step times."""
    sides = [side for side in ("jit", "nojit", "torch", "jit_all") if side in s["sides"]]
    nojit = s["sides"]["nojit"]["total_s"]
    head = ["side", "total s (compiles included)", "vs JIT off", "compiles in run", "clusters",
            "max compiles/cluster", "clusters at limit", "framework-op calls past limit"]
    rows = []
    for side in sides:
        e = s["sides"][side]
        j = e.get("jit")
        rows.append([SIDE_NAMES[side], "%.2f" % e["total_s"], "%.2fx" % (e["total_s"] / nojit),
                     str(j["compiles"]) if j else "-", str(j["clusters"]) if j else "-",
                     str(max(j["per_cluster"].values(), default=0)) if j else "-",
                     ("%d of %d (limit %d)" % (len(j["limit_hit"]), j["clusters"], j["limit"])) if j else "-",
                     str(j["fallback_calls"]) if j else "-"])
    per = ["length"] + ["%s ms" % SIDE_NAMES[side] for side in sides] + ["specialised JIT ms", "JIT on / specialised",
                                                                         "JIT on 1st step ms"]
    prow = []
    for length in lengths:
        jit = s["sides"]["jit"]["per_length"][length][1]
        sp = s["special"].get(length)
        prow.append([str(length)] + [fmt(s["sides"][side]["per_length"][length][1]) for side in sides] +
                    [fmt(sp), fmt(jit / sp if jit and sp else None, "%.2fx"),
                     fmt(s["sides"]["jit"]["per_length"][length][0])])
    return [(head, rows), (per, prow)]


def target_lines(s):
    jit, nojit = s["sides"]["jit"], s["sides"]["nojit"]
    ratio = jit["total_s"] / nojit["total_s"]
    most = max(jit["jit"]["per_cluster"].values(), default=0)
    within, worst = 0, (0.0, None)
    for length, sp in s["special"].items():
        r = jit["per_length"][length][1] / sp if sp and jit["per_length"][length][1] else None
        if r is None:
            continue
        within += r <= SPECIAL_TARGET
        worst = max(worst, (r, length))
    met = {True: "met", False: "not met"}
    return ["target: JIT total <= %.1fx JIT off: %.2fx, %s" % (TOTAL_TARGET, ratio, met[ratio <= TOTAL_TARGET]),
            "target: at most %d compiles per cluster over the run: at most %d, %s%s" %
            (COMPILES_TARGET, most, met[most <= COMPILES_TARGET],
             "; --jit_recompile_limit (%d) reached by %d of %d clusters" %
             (jit["jit"]["limit"], len(jit["jit"]["limit_hit"]), jit["jit"]["clusters"]) if jit["jit"]["limit_hit"]
             else ""),
            "target: each length within %d%% of its specialised compile: %d of %d lengths, worst %.2fx (length %s), %s"
            % (round(100 * (SPECIAL_TARGET - 1)), within, len(s["special"]), worst[0], worst[1],
               met[within == len(s["special"])])]


def environment(args, bvp, tinfo):
    cpu = bvp.cpu_info()
    lines = ["CPU: %s (%s, %d logical CPUs)" % (cpu["model"], cpu["isa"], cpu["cpus"])]
    if tinfo:
        lines.append("PyTorch %s, BLAS_INFO=%s; its process runs without %s%s: OpenBLAS core %s, ATen CPU "
                     "capability %s" % (tinfo["version"], tinfo["blas_name"], ", ".join(bvp.PEER_UNSET),
                                        " and with ATEN_CPU_CAPABILITY=avx512" if bvp.cpu_has_avx512() else "",
                                        tinfo["openblas_core"], tinfo["aten_capability"]))
    else:
        lines.append("PyTorch is not installed: kiln only")
    lines.append("OMP_WAIT_POLICY for every side: %s" % (os.environ.get("OMP_WAIT_POLICY") or "not set (OpenMP's default)"))
    lines.append("LM: %d layers, d %d, %d heads, batch %d, lengths %s cycling over %d steps; warm-up %d steps at "
                 "length %d (not timed)" % (args.layers, args.d, args.heads, args.batch, args.lengths, args.steps,
                                            args.warmup_steps, args.warmup_length))
    return {"cpu": cpu, "tinfo": tinfo, "lines": lines}


def command_line():
    argv, out, skip = sys.argv[1:], [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--note":
            skip = True
            continue
        if a.startswith("--note="):
            continue
        out.append(shlex.quote(a))
    env = ["OMP_WAIT_POLICY=" + os.environ["OMP_WAIT_POLICY"]] if os.environ.get("OMP_WAIT_POLICY") else []
    return " ".join(env + ["PYTHONPATH=build/python", "/usr/bin/python3", "tools/bench/varlen.py"] + out)


def markdown(args, env, tables_by_threads, lengths, md_table, revision):
    cpu, tinfo = env["cpu"], env["tinfo"]
    out = [SECTION, "",
           "`tools/bench/varlen.py` trains a %d-layer causal LM (d %d, %d heads, batch %d, byte vocabulary, Adam; "
           "examples/char_lm.py's model without dropout) whose sequence length cycles over %d values (%s) as "
           "bucketed text batches do, for %d steps: kiln with the JIT on, kiln with the JIT off and PyTorch eager, "
           "each in its own process at the same thread count. kiln feeds position ids ([-1, -1, 1] data vars, one "
           "program for every length); PyTorch slices the same [%d, d] position table. Data: %s." %
           (args.layers, args.d, args.heads, args.batch, len(lengths), ", ".join(map(str, lengths)), args.steps,
            max(lengths + [args.warmup_length]), tables_by_threads[0][1]["data"]), "",
           "**What the total includes**: the wall time of the %d steps after a warm-up of %d steps at length %d "
           "(not one of the %d), so every compile a new length causes is in it, as a user sees it; data "
           "preparation is not. A length's step time is the median of its occurrences after the first (the "
           "first compiles; its time is the last column). Each run is repeated %d times, interleaved: a total is "
           "the lowest over the rounds, a step time the lowest of the rounds' medians (load only slows a run). "
           "*Specialised* is kiln with the JIT on in a process "
           "that trains only that length (%d warm-up steps, median of %d). *Every length compiled* raises "
           "`--jit_recompile_limit` to %d: a reference for what one compile per length costs in total, not a "
           "recommendation. Compiles per cluster count the JIT's `--jit_verbose` recompile lines over the %d "
           "steps; past the limit a cluster compiles no more and runs a new length through the framework ops." %
           (args.steps, args.warmup_steps, args.warmup_length, len(lengths), args.rounds, args.spec_warmup,
            args.spec_steps, args.high_limit, args.steps), ""]
    if args.note:
        out += [args.note, ""]
    out += ["Command: `%s`. kiln %s; CPU: %s (%s, %d logical CPUs), thread counts %s. %s" %
            (command_line(), revision, cpu["model"], cpu["isa"], cpu["cpus"],
             ", ".join(str(t) for t, _ in tables_by_threads),
             env["lines"][1] + "." if tinfo else "PyTorch was not installed."),
            env["lines"][2] + ". The machine was shared: 1-minute load average %.2f at the start, %.2f at the end (%.0f s in all)." %
            (env["load"][0], env["load"][1], env["seconds"]), ""]
    for threads, s in tables_by_threads:
        out += ["### %d thread%s" % (threads, "" if threads == 1 else "s"), ""]
        for header, rows in tables(s, lengths):
            out += [md_table(header, rows), ""]
        out += ["- " + l for l in target_lines(s)] + [""]
    return "\n".join(out)
